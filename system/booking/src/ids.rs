//! Identifiers, parsed not validated: once you hold one, it is valid.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Why an identifier was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what}: {why}")]
pub struct InvalidId {
    /// Which kind of identifier.
    pub what: &'static str,
    /// What is wrong with it.
    pub why: String,
}

fn invalid(what: &'static str, why: impl Into<String>) -> InvalidId {
    InvalidId {
        what,
        why: why.into(),
    }
}

/// A candidate, as the system knows them: the SHA-256 of their identifier, in
/// 64 lower-case hex digits. The raw identifier never leaves the edge.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct CandidateHash(String);

impl CandidateHash {
    /// Parses 64 hex digits (either case; stored lower-case).
    pub fn parse(s: &str) -> Result<CandidateHash, InvalidId> {
        if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(invalid("candidate hash", "expected 64 hex digits"));
        }
        Ok(CandidateHash(s.to_ascii_lowercase()))
    }

    /// The hash of a raw candidate identifier (what the edge computes).
    pub fn of(candidate: &str) -> CandidateHash {
        let digest = Sha256::digest(candidate.as_bytes());
        CandidateHash(digest.iter().map(|b| format!("{b:02x}")).collect())
    }

    /// The hex digits.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The SQS FIFO message group: the first 4 hex digits (65,536 groups), so
    /// one candidate's messages stay in order while the load spreads.
    pub fn message_group(&self) -> &str {
        &self.0[..4]
    }
}

impl TryFrom<String> for CandidateHash {
    type Error = InvalidId;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        CandidateHash::parse(&s)
    }
}

impl From<CandidateHash> for String {
    fn from(c: CandidateHash) -> String {
        c.0
    }
}

impl std::fmt::Display for CandidateHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Defines a string identifier with a character rule and a length bound.
macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident, $what:literal, $max:expr, $ok:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// Parses and checks the identifier.
            pub fn parse(s: &str) -> Result<$name, InvalidId> {
                if s.is_empty() || s.len() > $max {
                    return Err(invalid($what, format!("length must be 1..={}", $max)));
                }
                let ok: fn(u8) -> bool = $ok;
                if !s.bytes().all(ok) {
                    return Err(invalid($what, "unexpected character"));
                }
                Ok($name(s.to_owned()))
            }

            /// The identifier.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = InvalidId;
            fn try_from(s: String) -> Result<Self, Self::Error> {
                $name::parse(&s)
            }
        }

        impl From<$name> for String {
            fn from(v: $name) -> String {
                v.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

string_id!(
    /// A sale (one launch). Every Redis key of a sale carries it as a hash tag.
    SaleId, "sale id", 40, |b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'
);
string_id!(
    /// A seat level (a price band with its own cap).
    Level, "level", 32, |b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
);
string_id!(
    /// A payment ID issued by the gateway.
    PaymentId, "payment id", 64, |b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
);
string_id!(
    /// The token of one admission request: every undo of that admission is
    /// guarded by it, so a second undo, or one for another request, does nothing.
    RequestToken, "request token", 64, |b| b.is_ascii_alphanumeric() || b == b'-'
);

/// The SQS FIFO deduplication ID of an admission: candidate hash plus the request
/// timestamp, so a retried send is the same message and a real re-booking is not.
pub fn deduplication_id(candidate: &CandidateHash, request_ms: u64) -> String {
    format!("{}-{request_ms}", candidate.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidate_hashes_parse_and_group() {
        let c = CandidateHash::of("candidate-1");
        assert_eq!(c.as_str().len(), 64);
        assert_eq!(c.message_group(), &c.as_str()[..4]);
        assert_eq!(CandidateHash::parse(&c.as_str().to_uppercase()).unwrap(), c);
        assert!(CandidateHash::parse("abc").is_err());
        assert!(CandidateHash::parse(&"g".repeat(64)).is_err());
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(serde_json::from_str::<CandidateHash>(&json).unwrap(), c);
        assert!(serde_json::from_str::<CandidateHash>("\"nope\"").is_err());
    }

    #[test]
    fn string_ids_refuse_what_would_break_keys() {
        assert!(SaleId::parse("launch-2026").is_ok());
        for bad in ["", "Launch", "a{b}", "a:b", &"x".repeat(41)] {
            assert!(SaleId::parse(bad).is_err(), "{bad}");
        }
        assert!(Level::parse("gold_1").is_ok());
        assert!(Level::parse("gold 1").is_err());
        assert!(PaymentId::parse("TR0011ABC").is_ok());
        assert!(PaymentId::parse("TR|1").is_err());
        assert!(RequestToken::parse("r-1").is_ok());
        assert!(RequestToken::parse("r|1").is_err());
    }

    #[test]
    fn dedup_ids_differ_per_request() {
        let c = CandidateHash::of("x");
        assert_ne!(deduplication_id(&c, 1), deduplication_id(&c, 2));
        assert!(
            deduplication_id(&c, u64::MAX).len() <= 128,
            "SQS allows 128 characters"
        );
    }
}
