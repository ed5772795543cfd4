//! Key names: every key of one sale carries the same hash tag, so a Redis
//! Cluster keeps a sale on one node and a script may touch all of them.

use booking::SaleId;

/// The longest key prefix accepted.
pub const KEY_PREFIX_LEN_MAX: usize = 64;

/// Why a key prefix was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid key prefix {prefix:?}: 1..={KEY_PREFIX_LEN_MAX} characters from [A-Za-z0-9:_.-]")]
pub struct InvalidKeyPrefix {
    /// The refused prefix.
    pub prefix: String,
}

/// The first part of every key, so several deployments or test runs can share
/// one server. Braces are refused: a `{` in the prefix would move the hash tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPrefix(String);

impl KeyPrefix {
    /// Parses 1..=64 characters from `[A-Za-z0-9:_.-]`.
    pub fn parse(prefix: &str) -> Result<KeyPrefix, InvalidKeyPrefix> {
        let ok = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b':' | b'_' | b'.' | b'-');
        if prefix.is_empty() || prefix.len() > KEY_PREFIX_LEN_MAX || !prefix.bytes().all(ok) {
            return Err(InvalidKeyPrefix {
                prefix: prefix.to_owned(),
            });
        }
        Ok(KeyPrefix(prefix.to_owned()))
    }

    /// The prefix.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// `<prefix>:{sale:<sale-id>}:<name>`: a key of one sale, under the sale's
/// hash tag. Every Redis adapter (ledger, records, queue, outputs) names its
/// keys with this, so one script may touch any key of a sale on a Cluster.
/// `name` must not contain braces (it would move the hash tag).
pub fn sale_key(prefix: &KeyPrefix, sale: &SaleId, name: &str) -> String {
    assert!(
        !name.contains(['{', '}']),
        "key name {name:?} would move the hash tag"
    );
    format!("{}:{{sale:{sale}}}:{name}", prefix.as_str())
}

/// The names of one sale's eight keys, in the order every ledger script takes
/// them as `KEYS[1..8]`. `pending` orders pending holds by admission time,
/// `held` orders held holds by deadline (both sorted sets).
pub(crate) const SALE_KEY_NAMES: [&str; 8] = [
    "open", "levels", "counts", "eligible", "holds", "paid", "pending", "held",
];

/// One sale's keys: `<prefix>:{sale:<sale-id>}:<name>` for each of
/// [`SALE_KEY_NAMES`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SaleKeys([String; 8]);

impl SaleKeys {
    pub(crate) fn new(prefix: &KeyPrefix, sale: &SaleId) -> SaleKeys {
        // SaleId refuses braces, so the tag is exactly `sale:<sale-id>`
        SaleKeys(SALE_KEY_NAMES.map(|name| sale_key(prefix, sale, name)))
    }

    /// All eight, in script order.
    pub(crate) fn all(&self) -> &[String; 8] {
        &self.0
    }

    /// The hash of candidate → hold.
    pub(crate) fn holds(&self) -> &str {
        &self.0[4]
    }

    /// The hash of candidate → paid mark.
    pub(crate) fn paid(&self) -> &str {
        &self.0[5]
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_a_sale_has_the_sale_as_its_hash_tag() {
        let keys = SaleKeys::new(
            &KeyPrefix::parse("sellout").unwrap(),
            &SaleId::parse("launch-1").unwrap(),
        );
        assert_eq!(keys.all()[0], "sellout:{sale:launch-1}:open");
        assert_eq!(keys.holds(), "sellout:{sale:launch-1}:holds");
        assert_eq!(keys.paid(), "sellout:{sale:launch-1}:paid");
        for key in keys.all() {
            let tag = key.split_once('{').unwrap().1.split_once('}').unwrap().0;
            assert_eq!(tag, "sale:launch-1");
        }
    }

    #[test]
    fn prefixes_that_would_move_the_tag_are_refused() {
        assert!(KeyPrefix::parse("sellout:test-1.a_b").is_ok());
        for bad in ["", "a{b", "a}b", "a b", &"x".repeat(65)] {
            assert!(KeyPrefix::parse(bad).is_err(), "{bad:?}");
        }
    }
}
