//! Signed candidates (`candidate_auth`, off unless configured): a request
//! that acts in a candidate's name carries a token from the login front
//! door, and the token's subject must be that candidate.
//!
//! # Why
//!
//! Without it the API trusts the body's `candidate`: anyone can hold a seat
//! in another candidate's name and, since a candidate holds one booking at a
//! time, lock the real one out of the sale.
//!
//! # The rule
//!
//! `Authorization: Bearer <JWT>`, signed with HS256 (a shared secret of at
//! least [`HS256_SECRET_MIN_BYTES`] bytes), RS256 or EdDSA (public keys as
//! PEM, or a JWKS document whose `kid` picks the key). The token must have
//! `sub` and `exp`; `exp` and (when present) `nbf` are checked against the
//! caller's clock with [`LEEWAY`]; `iss` and `aud` are checked when the
//! settings name them. The algorithm is the key's, never the token's: a
//! token whose header names another algorithm (`none`, HS256 against an RSA
//! key, …) is refused before any signature check, so an RSA public key can
//! never be used as an HMAC secret.
//!
//! The subject names the same candidate as the request's `candidate` field:
//! the ledger keys candidates by [`CandidateHash`], so `sub` and `candidate`
//! are compared as hashes ([`crate::bookings::candidate_hash`]): a token for
//! `c-1` authorises a request naming `c-1` or its 64-hex-digit hash (either
//! case), and no other candidate.
//!
//! # What a refusal does
//!
//! Nothing: the check runs before the request path touches the ledger, the
//! gateway or the queue. The answer is `401` with the API's error body
//! (`{"error": "unauthorized", "message": ...}`) and
//! `WWW-Authenticate: Bearer error="invalid_token"` (RFC 6750; a request
//! without a token gets the bare `Bearer` challenge, as that RFC asks).
//! Refusals are counted on `/metrics` as
//! `booking_candidate_auth_refusals_total{reason}` ([`AuthRefusal::reason`])
//! and, like every answer of `POST /bookings`, as
//! `booking_admissions_total{outcome="unauthorized"}`.
//!
//! # Which routes
//!
//! Every route that acts in a candidate's name: today that is
//! `POST /bookings` only. `GET /payment/callback` and `POST /payment/webhook`
//! act on a payment the gateway vouches for (the payer's browser carries no
//! login token through the gateway's redirect), `status.json` and the rest
//! are sale-wide, and `/ops/` has its own `admin_token`.
//!
//! # The signing side
//!
//! [`CandidateSigner`] signs HS256 tokens (`sub`, `iat`, `exp` = now +
//! [`TOKEN_TTL`], and `iss`/`aud` when given): what the rehearsal's load
//! generator sends, standing in for the login front door.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use booking::CandidateHash;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet, KeyAlgorithm};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use crate::answers;
use crate::bookings::{ApiState, candidate_hash};

/// How far `exp` and `nbf` may be off the server's clock.
pub const LEEWAY: Duration = Duration::from_secs(30);
/// The shortest HS256 secret accepted (RFC 7518 §3.2: at least the hash's
/// 256 bits).
pub const HS256_SECRET_MIN_BYTES: usize = 32;
/// The life of a token [`CandidateSigner`] signs.
pub const TOKEN_TTL: Duration = Duration::from_secs(15 * 60);
/// The `error` code of a refusal.
pub const UNAUTHORIZED: &str = "unauthorized";

/// A signature algorithm `candidate_auth` accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AuthAlgorithm {
    /// HMAC-SHA256 with a shared secret.
    HS256,
    /// RSASSA-PKCS1-v1_5 with SHA-256, RSA public keys.
    RS256,
    /// Ed25519, Ed25519 public keys.
    EdDSA,
}

impl AuthAlgorithm {
    fn jwt(self) -> Algorithm {
        match self {
            AuthAlgorithm::HS256 => Algorithm::HS256,
            AuthAlgorithm::RS256 => Algorithm::RS256,
            AuthAlgorithm::EdDSA => Algorithm::EdDSA,
        }
    }

    /// The name as in a JWT header.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthAlgorithm::HS256 => "HS256",
            AuthAlgorithm::RS256 => "RS256",
            AuthAlgorithm::EdDSA => "EdDSA",
        }
    }
}

/// Where the verifying keys come from (already read: the server resolves
/// files and environment variables).
#[derive(Clone, PartialEq, Eq)]
pub enum AuthKeys {
    /// HS256 with this secret.
    Hs256 {
        /// The shared secret, at least [`HS256_SECRET_MIN_BYTES`].
        secret: Vec<u8>,
    },
    /// RS256 or EdDSA public keys as PEM (`-----BEGIN PUBLIC KEY-----`);
    /// a token is accepted if any of them verifies it (key rotation).
    Pem {
        /// `RS256` or `EdDSA`.
        algorithm: AuthAlgorithm,
        /// One PEM text per key.
        pems: Vec<String>,
    },
    /// A JWKS document (`{"keys": [...]}`, RSA and OKP/Ed25519 keys): the
    /// token's `kid` picks the key (a set of one key also takes tokens
    /// without `kid`). A key's algorithm is its `alg`, else RS256 for RSA
    /// and EdDSA for OKP.
    Jwks {
        /// The document's text.
        json: String,
    },
}

impl std::fmt::Debug for AuthKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AuthKeys::Hs256 { secret } => f
                .debug_struct("Hs256")
                .field("secret", &format_args!("<{} bytes>", secret.len()))
                .finish(),
            AuthKeys::Pem { algorithm, pems } => f
                .debug_struct("Pem")
                .field("algorithm", algorithm)
                .field("keys", &pems.len())
                .finish(),
            AuthKeys::Jwks { json } => f.debug_struct("Jwks").field("bytes", &json.len()).finish(),
        }
    }
}

/// What a [`CandidateAuth`] is built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthSettings {
    /// The keys.
    pub keys: AuthKeys,
    /// When set, `iss` must be exactly this.
    pub issuer: Option<String>,
    /// When set, `aud` must be (or contain) this.
    pub audience: Option<String>,
}

/// Why settings cannot make a verifier. The messages name the setting
/// (relative to the `[candidate_auth]` section).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthSettingsError {
    /// An HS256 secret shorter than [`HS256_SECRET_MIN_BYTES`].
    #[error(
        "secret: an HS256 secret must be at least {HS256_SECRET_MIN_BYTES} bytes, this one is {0}"
    )]
    ShortSecret(usize),
    /// A PEM key list with an HS256 algorithm, or no key at all.
    #[error("public_keys: {0}")]
    Keys(String),
    /// A PEM key that does not parse.
    #[error("public_keys[{index}]: not a {algorithm} public key in PEM: {message}")]
    Pem {
        /// Which key (0-based).
        index: usize,
        /// The algorithm it was read for.
        algorithm: &'static str,
        /// Why.
        message: String,
    },
    /// A JWKS document that does not parse or holds an unusable key.
    #[error("jwks_file: {0}")]
    Jwks(String),
    /// `issuer` or `audience` set but empty.
    #[error("{0} is empty: leave it out to skip that check")]
    Empty(&'static str),
}

/// Why a request's token was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AuthRefusal {
    /// No `Authorization` header.
    Missing,
    /// Not `Bearer <JWT>`, or a JWT that does not decode (bad base64 or
    /// JSON, an unknown algorithm such as `none`, a claim of the wrong type,
    /// no `sub` or `exp`).
    Malformed,
    /// The header names another algorithm than the key's.
    WrongAlgorithm,
    /// No configured key has the token's `kid`.
    UnknownKey,
    /// The signature does not verify.
    BadSignature,
    /// `exp` is past (beyond [`LEEWAY`]).
    Expired,
    /// `nbf` is ahead (beyond [`LEEWAY`]).
    NotYetValid,
    /// `iss` is not the configured issuer.
    WrongIssuer,
    /// `aud` is not the configured audience.
    WrongAudience,
    /// `sub` names another candidate than the request.
    WrongSubject,
}

impl AuthRefusal {
    /// Every refusal, in [`AuthRefusal::reason`] order.
    pub const ALL: [AuthRefusal; 10] = [
        AuthRefusal::Missing,
        AuthRefusal::Malformed,
        AuthRefusal::WrongAlgorithm,
        AuthRefusal::UnknownKey,
        AuthRefusal::BadSignature,
        AuthRefusal::Expired,
        AuthRefusal::NotYetValid,
        AuthRefusal::WrongIssuer,
        AuthRefusal::WrongAudience,
        AuthRefusal::WrongSubject,
    ];

    /// The `reason` label on `/metrics`.
    pub fn reason(self) -> &'static str {
        match self {
            AuthRefusal::Missing => "missing",
            AuthRefusal::Malformed => "malformed",
            AuthRefusal::WrongAlgorithm => "wrong_algorithm",
            AuthRefusal::UnknownKey => "unknown_key",
            AuthRefusal::BadSignature => "bad_signature",
            AuthRefusal::Expired => "expired",
            AuthRefusal::NotYetValid => "not_yet_valid",
            AuthRefusal::WrongIssuer => "wrong_issuer",
            AuthRefusal::WrongAudience => "wrong_audience",
            AuthRefusal::WrongSubject => "wrong_subject",
        }
    }

    /// For a human (the answer's `message`).
    pub fn message(self) -> &'static str {
        match self {
            AuthRefusal::Missing => {
                "a candidate token is required: Authorization: Bearer <token from the login>"
            }
            AuthRefusal::Malformed => "the candidate token is malformed",
            AuthRefusal::WrongAlgorithm => "the candidate token is signed with the wrong algorithm",
            AuthRefusal::UnknownKey => "the candidate token names an unknown key",
            AuthRefusal::BadSignature => "the candidate token's signature does not verify",
            AuthRefusal::Expired => "the candidate token has expired: log in again",
            AuthRefusal::NotYetValid => "the candidate token is not valid yet",
            AuthRefusal::WrongIssuer => "the candidate token has the wrong issuer",
            AuthRefusal::WrongAudience => "the candidate token has the wrong audience",
            AuthRefusal::WrongSubject => "the candidate token is for another candidate",
        }
    }
}

/// The claims read from a token (`iss` and `aud` are checked by the
/// validation itself).
#[derive(Debug, Deserialize)]
struct Claims {
    sub: String,
    exp: u64,
    #[serde(default)]
    nbf: Option<u64>,
}

/// One verifying key.
struct VerifyKey {
    kid: Option<String>,
    key: DecodingKey,
    validation: Validation,
}

/// Verifies candidate tokens; built once from [`AuthSettings`].
pub struct CandidateAuth {
    keys: Vec<VerifyKey>,
    /// Tokens without `kid` may use any key (PEM keys); else `kid` picks.
    by_kid: bool,
}

impl std::fmt::Debug for CandidateAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let algs: BTreeSet<String> = self
            .keys
            .iter()
            .flat_map(|k| k.validation.algorithms.iter().map(|a| format!("{a:?}")))
            .collect();
        f.debug_struct("CandidateAuth")
            .field("keys", &self.keys.len())
            .field("algorithms", &algs)
            .field("by_kid", &self.by_kid)
            .finish()
    }
}

fn validation(algorithm: Algorithm, issuer: Option<&str>, audience: Option<&str>) -> Validation {
    let mut v = Validation::new(algorithm);
    // exp and nbf are checked against the caller's clock in `verify`
    v.validate_exp = false;
    v.validate_nbf = false;
    v.leeway = 0;
    let mut required = vec!["exp", "sub"];
    match issuer {
        Some(iss) => {
            v.set_issuer(&[iss]);
            required.push("iss");
        }
        None => v.iss = None,
    }
    match audience {
        Some(aud) => {
            v.set_audience(&[aud]);
            required.push("aud");
        }
        None => {
            v.aud = None;
            v.validate_aud = false;
        }
    }
    v.set_required_spec_claims(&required);
    v
}

fn jwks_keys(
    json: &str,
    issuer: Option<&str>,
    audience: Option<&str>,
) -> Result<Vec<VerifyKey>, AuthSettingsError> {
    let bad = AuthSettingsError::Jwks;
    let set: JwkSet = serde_json::from_str(json).map_err(|e| bad(format!("not a JWKS: {e}")))?;
    if set.keys.is_empty() {
        return Err(bad("the set has no key".into()));
    }
    let mut keys = Vec::with_capacity(set.keys.len());
    let mut kids = BTreeSet::new();
    for (i, jwk) in set.keys.iter().enumerate() {
        let kid = jwk.common.key_id.clone();
        if let Some(kid) = &kid
            && !kids.insert(kid.clone())
        {
            return Err(bad(format!("kid {kid:?} given twice")));
        }
        if kid.is_none() && set.keys.len() > 1 {
            return Err(bad(format!(
                "key {i} has no kid: in a set of several keys, every key needs one"
            )));
        }
        let algorithm = match (&jwk.algorithm, jwk.common.key_algorithm) {
            (AlgorithmParameters::RSA(_), None | Some(KeyAlgorithm::RS256)) => Algorithm::RS256,
            (AlgorithmParameters::OctetKeyPair(_), None | Some(KeyAlgorithm::EdDSA)) => {
                Algorithm::EdDSA
            }
            (AlgorithmParameters::OctetKey(_), _) => {
                return Err(bad(format!(
                    "key {i} is a symmetric (oct) key: a JWKS holds public keys; use secret_* for HS256"
                )));
            }
            (_, alg) => {
                return Err(bad(format!(
                    "key {i}: only RSA keys for RS256 and OKP (Ed25519) keys for EdDSA are \
                     accepted (alg {alg:?})"
                )));
            }
        };
        let key = DecodingKey::from_jwk(jwk).map_err(|e| bad(format!("key {i}: {e}")))?;
        keys.push(VerifyKey {
            kid,
            key,
            validation: validation(algorithm, issuer, audience),
        });
    }
    Ok(keys)
}

impl CandidateAuth {
    /// A verifier, or why the settings cannot make one (a short secret, a
    /// key that does not parse): the server refuses to start on it.
    pub fn new(settings: &AuthSettings) -> Result<CandidateAuth, AuthSettingsError> {
        let issuer = settings.issuer.as_deref();
        let audience = settings.audience.as_deref();
        if issuer.is_some_and(str::is_empty) {
            return Err(AuthSettingsError::Empty("issuer"));
        }
        if audience.is_some_and(str::is_empty) {
            return Err(AuthSettingsError::Empty("audience"));
        }
        let (keys, by_kid) = match &settings.keys {
            AuthKeys::Hs256 { secret } => {
                if secret.len() < HS256_SECRET_MIN_BYTES {
                    return Err(AuthSettingsError::ShortSecret(secret.len()));
                }
                let key = VerifyKey {
                    kid: None,
                    key: DecodingKey::from_secret(secret),
                    validation: validation(Algorithm::HS256, issuer, audience),
                };
                (vec![key], false)
            }
            AuthKeys::Pem { algorithm, pems } => {
                if *algorithm == AuthAlgorithm::HS256 {
                    return Err(AuthSettingsError::Keys(
                        "public keys are for RS256 or EdDSA; HS256 takes a secret".into(),
                    ));
                }
                if pems.is_empty() {
                    return Err(AuthSettingsError::Keys("no key given".into()));
                }
                let mut keys = Vec::with_capacity(pems.len());
                for (index, pem) in pems.iter().enumerate() {
                    let parsed = match algorithm {
                        AuthAlgorithm::RS256 => DecodingKey::from_rsa_pem(pem.as_bytes()),
                        _ => DecodingKey::from_ed_pem(pem.as_bytes()),
                    };
                    let key = parsed.map_err(|e| AuthSettingsError::Pem {
                        index,
                        algorithm: algorithm.as_str(),
                        message: e.to_string(),
                    })?;
                    keys.push(VerifyKey {
                        kid: None,
                        key,
                        validation: validation(algorithm.jwt(), issuer, audience),
                    });
                }
                (keys, false)
            }
            AuthKeys::Jwks { json } => (jwks_keys(json, issuer, audience)?, true),
        };
        Ok(CandidateAuth { keys, by_kid })
    }

    /// Checks `token` for a request naming `candidate` (a raw identifier or
    /// its hash) at `now` (seconds since the epoch). Pure: no clock, no I/O.
    pub fn verify(&self, token: &str, candidate: &str, now: u64) -> Result<(), AuthRefusal> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| AuthRefusal::Malformed)?;
        let candidates: Vec<&VerifyKey> = if self.by_kid {
            match &header.kid {
                Some(kid) => self
                    .keys
                    .iter()
                    .filter(|k| k.kid.as_deref() == Some(kid.as_str()))
                    .collect(),
                None if self.keys.len() == 1 => self.keys.iter().collect(),
                None => Vec::new(),
            }
        } else {
            self.keys.iter().collect()
        };
        if candidates.is_empty() {
            return Err(AuthRefusal::UnknownKey);
        }
        let mut refusal = AuthRefusal::BadSignature;
        let mut claims = None;
        for k in candidates {
            match jsonwebtoken::decode::<Claims>(token, &k.key, &k.validation) {
                Ok(data) => {
                    claims = Some(data.claims);
                    break;
                }
                Err(e) => {
                    refusal = refusal_of(e.kind());
                    // another key may verify it; any other verdict is final
                    if refusal != AuthRefusal::BadSignature {
                        return Err(refusal);
                    }
                }
            }
        }
        let Some(claims) = claims else {
            return Err(refusal);
        };
        let leeway = LEEWAY.as_secs();
        if claims.exp.saturating_add(leeway) < now {
            return Err(AuthRefusal::Expired);
        }
        if claims
            .nbf
            .is_some_and(|nbf| nbf > now.saturating_add(leeway))
        {
            return Err(AuthRefusal::NotYetValid);
        }
        let named = candidate_hash(candidate).map_err(|_| AuthRefusal::WrongSubject)?;
        let subject = candidate_hash(&claims.sub).map_err(|_| AuthRefusal::WrongSubject)?;
        if named != subject {
            return Err(AuthRefusal::WrongSubject);
        }
        Ok(())
    }

    /// [`CandidateAuth::verify`] on a request's `Authorization` header, for
    /// the request's candidate, at the system clock.
    pub fn check(&self, headers: &HeaderMap, candidate: &CandidateHash) -> Result<(), AuthRefusal> {
        let token = bearer(headers)?;
        self.verify(token, candidate.as_str(), unix_now())
    }
}

fn refusal_of(kind: &ErrorKind) -> AuthRefusal {
    match kind {
        ErrorKind::InvalidSignature => AuthRefusal::BadSignature,
        ErrorKind::InvalidAlgorithm | ErrorKind::MissingAlgorithm => AuthRefusal::WrongAlgorithm,
        ErrorKind::InvalidIssuer => AuthRefusal::WrongIssuer,
        ErrorKind::InvalidAudience => AuthRefusal::WrongAudience,
        // never ExpiredSignature, ImmatureSignature or InvalidSubject:
        // `validation` leaves exp, nbf and sub to `verify` (the caller's
        // clock, the request's candidate), so jsonwebtoken reports none
        // a required claim missing or of the wrong type, bad base64/JSON,
        // a key of the wrong kind for the header's algorithm, …
        _ => AuthRefusal::Malformed,
    }
}

/// Seconds since the epoch, by the system clock.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The token of `Authorization: Bearer <token>` (the scheme in any case).
pub fn bearer(headers: &HeaderMap) -> Result<&str, AuthRefusal> {
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or(AuthRefusal::Missing)?;
    let value = value.to_str().map_err(|_| AuthRefusal::Malformed)?;
    let (scheme, token) = value.split_once(' ').ok_or(AuthRefusal::Malformed)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(AuthRefusal::Malformed);
    }
    Ok(token)
}

/// The `401` answer: the API's error body, `WWW-Authenticate: Bearer`
/// (with `error="invalid_token"` when a token was given).
pub fn refusal_response(refusal: AuthRefusal) -> Response {
    let mut response = answers::error(StatusCode::UNAUTHORIZED, UNAUTHORIZED, refusal.message());
    let challenge = match refusal {
        AuthRefusal::Missing => HeaderValue::from_static("Bearer"),
        _ => HeaderValue::from_static("Bearer error=\"invalid_token\""),
    };
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, challenge);
    response
}

impl ApiState {
    /// This state requiring candidate tokens on the routes that act in a
    /// candidate's name (`None`: off, the default).
    pub fn with_candidate_auth(mut self, auth: Option<Arc<CandidateAuth>>) -> ApiState {
        self.candidate_auth = auth;
        self
    }

    /// The verifier, when `candidate_auth` is on.
    pub fn candidate_auth(&self) -> Option<&Arc<CandidateAuth>> {
        self.candidate_auth.as_ref()
    }
}

/// The check a handler runs before acting for `candidate`: `None` when
/// `candidate_auth` is off or the token is good; else the `401` to answer,
/// counted (nothing else has been done).
pub fn guard(api: &ApiState, headers: &HeaderMap, candidate: &CandidateHash) -> Option<Response> {
    let auth = api.candidate_auth.as_ref()?;
    let refusal = auth.check(headers, candidate).err()?;
    api.metrics.candidate_auth_refusal(refusal.reason());
    api.metrics.outcome(UNAUTHORIZED);
    tracing::debug!(reason = refusal.reason(), "candidate token refused");
    Some(refusal_response(refusal))
}

/// The claims [`CandidateSigner`] writes.
#[derive(Debug, Serialize)]
struct SignedClaims<'a> {
    sub: &'a str,
    iat: u64,
    exp: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    iss: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    aud: Option<&'a str>,
}

/// Why a token could not be signed.
#[derive(Debug, thiserror::Error)]
#[error("signing a candidate token: {0}")]
pub struct SignError(String);

/// Signs HS256 candidate tokens, as the login front door would: what a
/// rehearsal's load generator sends.
#[derive(Clone)]
pub struct CandidateSigner {
    key: EncodingKey,
    header: Header,
    issuer: Option<String>,
    audience: Option<String>,
    ttl: Duration,
}

impl std::fmt::Debug for CandidateSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CandidateSigner")
            .field("algorithm", &self.header.alg)
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl CandidateSigner {
    /// HS256 with `secret` (at least [`HS256_SECRET_MIN_BYTES`]), tokens
    /// living [`TOKEN_TTL`].
    pub fn hs256(secret: &[u8]) -> Result<CandidateSigner, AuthSettingsError> {
        if secret.len() < HS256_SECRET_MIN_BYTES {
            return Err(AuthSettingsError::ShortSecret(secret.len()));
        }
        Ok(CandidateSigner {
            key: EncodingKey::from_secret(secret),
            header: Header::new(Algorithm::HS256),
            issuer: None,
            audience: None,
            ttl: TOKEN_TTL,
        })
    }

    /// The same signer writing `iss` and `aud`.
    pub fn with_claims(mut self, issuer: Option<String>, audience: Option<String>) -> Self {
        self.issuer = issuer;
        self.audience = audience;
        self
    }

    /// The life of the tokens it signs.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// A token for `candidate` issued at `now` (seconds since the epoch),
    /// expiring [`CandidateSigner::ttl`] later.
    pub fn sign(&self, candidate: &str, now: u64) -> Result<String, SignError> {
        let claims = SignedClaims {
            sub: candidate,
            iat: now,
            exp: now.saturating_add(self.ttl.as_secs()),
            iss: self.issuer.as_deref(),
            aud: self.audience.as_deref(),
        };
        jsonwebtoken::encode(&self.header, &claims, &self.key).map_err(|e| SignError(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use jsonwebtoken::encode;
    use serde_json::json;

    const NOW: u64 = 1_800_000_000;
    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef-test";
    const RSA_PRIVATE: &str = include_str!("../tests/fixtures/jwt/rsa.pem");
    const RSA_PUBLIC: &str = include_str!("../tests/fixtures/jwt/rsa.pub");
    const ED_PRIVATE: &str = include_str!("../tests/fixtures/jwt/ed.pem");
    const ED_PUBLIC: &str = include_str!("../tests/fixtures/jwt/ed.pub");
    const ED2_PRIVATE: &str = include_str!("../tests/fixtures/jwt/ed2.pem");
    /// ed.pub and ed2.pub's raw keys (base64url), for a JWKS.
    const ED_X: &str = "Zvsf0s_sz0E_JolKbFok-WWcyVFMQDvvh-ob1ouEtbA";
    const ED2_X: &str = "5HfztZh0SD07yuHUAlurpswfs7BbUahqftxgKgvnquY";

    fn hs256() -> CandidateAuth {
        CandidateAuth::new(&AuthSettings {
            keys: AuthKeys::Hs256 {
                secret: SECRET.to_vec(),
            },
            issuer: None,
            audience: None,
        })
        .unwrap()
    }

    fn token(alg: Algorithm, key: &EncodingKey, claims: serde_json::Value) -> String {
        encode(&Header::new(alg), &claims, key).unwrap()
    }

    fn hs(claims: serde_json::Value) -> String {
        token(Algorithm::HS256, &EncodingKey::from_secret(SECRET), claims)
    }

    #[test]
    fn a_good_token_for_the_candidate_passes_raw_or_hashed() {
        let auth = hs256();
        let t = hs(json!({"sub": "c-1", "exp": NOW + 60}));
        assert_eq!(auth.verify(&t, "c-1", NOW), Ok(()));
        let hash = CandidateHash::of("c-1");
        assert_eq!(auth.verify(&t, hash.as_str(), NOW), Ok(()));
        assert_eq!(
            auth.verify(&t, &hash.as_str().to_uppercase(), NOW),
            Ok(()),
            "a hash in either case names the same candidate"
        );
        // the signer's tokens verify too
        let signed = CandidateSigner::hs256(SECRET)
            .unwrap()
            .sign("c-1", NOW)
            .unwrap();
        assert_eq!(auth.verify(&signed, "c-1", NOW + 14 * 60), Ok(()));
        assert_eq!(
            auth.verify(&signed, "c-1", NOW + 15 * 60 + LEEWAY.as_secs() + 1),
            Err(AuthRefusal::Expired)
        );
    }

    #[test]
    fn another_candidates_token_is_refused() {
        let auth = hs256();
        let t = hs(json!({"sub": "c-2", "exp": NOW + 60}));
        assert_eq!(auth.verify(&t, "c-1", NOW), Err(AuthRefusal::WrongSubject));
        assert_eq!(
            auth.verify(&t, CandidateHash::of("c-1").as_str(), NOW),
            Err(AuthRefusal::WrongSubject)
        );
        // a subject that is no candidate at all
        let t = hs(json!({"sub": "", "exp": NOW + 60}));
        assert_eq!(auth.verify(&t, "c-1", NOW), Err(AuthRefusal::WrongSubject));
    }

    #[test]
    fn expiry_and_not_before_keep_the_leeway() {
        let auth = hs256();
        let leeway = LEEWAY.as_secs();
        let t = hs(json!({"sub": "c-1", "exp": NOW}));
        assert_eq!(auth.verify(&t, "c-1", NOW + leeway), Ok(()));
        assert_eq!(
            auth.verify(&t, "c-1", NOW + leeway + 1),
            Err(AuthRefusal::Expired)
        );
        let t = hs(json!({"sub": "c-1", "exp": NOW + 600, "nbf": NOW + leeway + 10}));
        assert_eq!(auth.verify(&t, "c-1", NOW), Err(AuthRefusal::NotYetValid));
        assert_eq!(auth.verify(&t, "c-1", NOW + 10), Ok(()));
    }

    #[test]
    fn forged_and_malformed_tokens_are_refused() {
        let auth = hs256();
        let other = EncodingKey::from_secret(b"another secret of thirty-two bytes!!");
        let forged = token(
            Algorithm::HS256,
            &other,
            json!({"sub": "c-1", "exp": NOW + 60}),
        );
        assert_eq!(
            auth.verify(&forged, "c-1", NOW),
            Err(AuthRefusal::BadSignature)
        );
        // a good token with its payload swapped for another candidate's
        let good = hs(json!({"sub": "c-2", "exp": NOW + 60}));
        let mine = hs(json!({"sub": "c-1", "exp": NOW + 60}));
        let g: Vec<&str> = good.split('.').collect();
        let m: Vec<&str> = mine.split('.').collect();
        let spliced = format!("{}.{}.{}", g[0], m[1], g[2]);
        assert_eq!(
            auth.verify(&spliced, "c-1", NOW),
            Err(AuthRefusal::BadSignature)
        );
        for bad in ["", "abc", "a.b.c", "Bearer x"] {
            assert_eq!(auth.verify(bad, "c-1", NOW), Err(AuthRefusal::Malformed));
        }
        // no exp, no sub, exp of the wrong type
        for claims in [
            json!({"sub": "c-1"}),
            json!({"exp": NOW + 60}),
            json!({"sub": "c-1", "exp": "soon"}),
        ] {
            assert_eq!(
                auth.verify(&hs(claims.clone()), "c-1", NOW),
                Err(AuthRefusal::Malformed),
                "{claims}"
            );
        }
    }

    #[test]
    fn alg_none_and_algorithm_confusion_are_refused() {
        use base64::Engine as _;
        let b64 = |v: serde_json::Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
        };
        let claims = json!({"sub": "c-1", "exp": NOW + 60});
        let none = format!(
            "{}.{}.",
            b64(json!({"alg": "none", "typ": "JWT"})),
            b64(claims.clone())
        );
        assert!(hs256().verify(&none, "c-1", NOW).is_err());
        let rsa = CandidateAuth::new(&AuthSettings {
            keys: AuthKeys::Pem {
                algorithm: AuthAlgorithm::RS256,
                pems: vec![RSA_PUBLIC.into()],
            },
            issuer: None,
            audience: None,
        })
        .unwrap();
        assert!(rsa.verify(&none, "c-1", NOW).is_err());
        // HS256 keyed with the RSA public key's own text: the classic confusion
        let confused = token(
            Algorithm::HS256,
            &EncodingKey::from_secret(RSA_PUBLIC.as_bytes()),
            claims.clone(),
        );
        assert_eq!(
            rsa.verify(&confused, "c-1", NOW),
            Err(AuthRefusal::WrongAlgorithm)
        );
        // an HS256 verifier refuses an RS256 token (no RSA key to check it with)
        let rs = token(
            Algorithm::RS256,
            &EncodingKey::from_rsa_pem(RSA_PRIVATE.as_bytes()).unwrap(),
            claims.clone(),
        );
        assert_eq!(rsa.verify(&rs, "c-1", NOW), Ok(()));
        assert_eq!(
            hs256().verify(&rs, "c-1", NOW),
            Err(AuthRefusal::WrongAlgorithm)
        );
    }

    #[test]
    fn issuer_and_audience_are_checked_when_configured() {
        let auth = CandidateAuth::new(&AuthSettings {
            keys: AuthKeys::Hs256 {
                secret: SECRET.to_vec(),
            },
            issuer: Some("https://login.example".into()),
            audience: Some("sellout".into()),
        })
        .unwrap();
        let ok = hs(
            json!({"sub": "c-1", "exp": NOW + 60, "iss": "https://login.example", "aud": "sellout"}),
        );
        assert_eq!(auth.verify(&ok, "c-1", NOW), Ok(()));
        let iss = hs(
            json!({"sub": "c-1", "exp": NOW + 60, "iss": "https://evil.example", "aud": "sellout"}),
        );
        assert_eq!(auth.verify(&iss, "c-1", NOW), Err(AuthRefusal::WrongIssuer));
        let aud = hs(
            json!({"sub": "c-1", "exp": NOW + 60, "iss": "https://login.example", "aud": "other"}),
        );
        assert_eq!(
            auth.verify(&aud, "c-1", NOW),
            Err(AuthRefusal::WrongAudience)
        );
        let none = hs(json!({"sub": "c-1", "exp": NOW + 60}));
        assert_eq!(auth.verify(&none, "c-1", NOW), Err(AuthRefusal::Malformed));
        // the signer writes them
        let signed = CandidateSigner::hs256(SECRET)
            .unwrap()
            .with_claims(Some("https://login.example".into()), Some("sellout".into()))
            .sign("c-1", NOW)
            .unwrap();
        assert_eq!(auth.verify(&signed, "c-1", NOW), Ok(()));
        // unconfigured: a token's aud is not held against it
        let t = hs(json!({"sub": "c-1", "exp": NOW + 60, "aud": "anything"}));
        assert_eq!(hs256().verify(&t, "c-1", NOW), Ok(()));
    }

    #[test]
    fn eddsa_pem_and_jwks_with_kid() {
        let claims = json!({"sub": "c-1", "exp": NOW + 60});
        let ed = EncodingKey::from_ed_pem(ED_PRIVATE.as_bytes()).unwrap();
        let ed2 = EncodingKey::from_ed_pem(ED2_PRIVATE.as_bytes()).unwrap();
        let pem = CandidateAuth::new(&AuthSettings {
            keys: AuthKeys::Pem {
                algorithm: AuthAlgorithm::EdDSA,
                pems: vec![ED_PUBLIC.into()],
            },
            issuer: None,
            audience: None,
        })
        .unwrap();
        assert_eq!(
            pem.verify(&token(Algorithm::EdDSA, &ed, claims.clone()), "c-1", NOW),
            Ok(())
        );
        assert_eq!(
            pem.verify(&token(Algorithm::EdDSA, &ed2, claims.clone()), "c-1", NOW),
            Err(AuthRefusal::BadSignature)
        );
        let jwks = json!({"keys": [
            {"kty": "OKP", "crv": "Ed25519", "x": ED_X, "kid": "k1", "alg": "EdDSA", "use": "sig"},
            {"kty": "OKP", "crv": "Ed25519", "x": ED2_X, "kid": "k2"},
        ]})
        .to_string();
        let auth = CandidateAuth::new(&AuthSettings {
            keys: AuthKeys::Jwks { json: jwks },
            issuer: None,
            audience: None,
        })
        .unwrap();
        let with_kid = |kid: Option<&str>, key: &EncodingKey| {
            let mut h = Header::new(Algorithm::EdDSA);
            h.kid = kid.map(str::to_owned);
            encode(&h, &claims, key).unwrap()
        };
        assert_eq!(auth.verify(&with_kid(Some("k1"), &ed), "c-1", NOW), Ok(()));
        assert_eq!(auth.verify(&with_kid(Some("k2"), &ed2), "c-1", NOW), Ok(()));
        assert_eq!(
            auth.verify(&with_kid(Some("k1"), &ed2), "c-1", NOW),
            Err(AuthRefusal::BadSignature),
            "the kid picks the key: another key's signature does not pass"
        );
        assert_eq!(
            auth.verify(&with_kid(Some("k9"), &ed), "c-1", NOW),
            Err(AuthRefusal::UnknownKey)
        );
        assert_eq!(
            auth.verify(&with_kid(None, &ed), "c-1", NOW),
            Err(AuthRefusal::UnknownKey)
        );
        // an HS256 token naming a JWKS key is refused, whatever its secret
        let mut h = Header::new(Algorithm::HS256);
        h.kid = Some("k1".into());
        let hs = encode(&h, &claims, &EncodingKey::from_secret(ED_X.as_bytes())).unwrap();
        assert_eq!(
            auth.verify(&hs, "c-1", NOW),
            Err(AuthRefusal::WrongAlgorithm)
        );
    }

    #[test]
    fn settings_that_cannot_work_are_refused() {
        let err = |keys: AuthKeys| {
            CandidateAuth::new(&AuthSettings {
                keys,
                issuer: None,
                audience: None,
            })
            .unwrap_err()
        };
        assert_eq!(
            err(AuthKeys::Hs256 {
                secret: vec![7; 31]
            }),
            AuthSettingsError::ShortSecret(31)
        );
        assert!(
            err(AuthKeys::Hs256 {
                secret: vec![7; 31]
            })
            .to_string()
            .starts_with("secret:")
        );
        assert!(CandidateSigner::hs256(&[7; 16]).is_err());
        assert!(matches!(
            err(AuthKeys::Pem {
                algorithm: AuthAlgorithm::RS256,
                pems: vec!["not a key".into()]
            }),
            AuthSettingsError::Pem { index: 0, .. }
        ));
        assert!(matches!(
            err(AuthKeys::Pem {
                algorithm: AuthAlgorithm::HS256,
                pems: vec![ED_PUBLIC.into()]
            }),
            AuthSettingsError::Keys(_)
        ));
        for json in [
            "{".to_owned(),
            json!({"keys": []}).to_string(),
            json!({"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}).to_string(),
            json!({"keys": [
                {"kty": "OKP", "crv": "Ed25519", "x": ED_X},
                {"kty": "OKP", "crv": "Ed25519", "x": ED2_X},
            ]})
            .to_string(),
        ] {
            assert!(
                matches!(
                    err(AuthKeys::Jwks { json: json.clone() }),
                    AuthSettingsError::Jwks(_)
                ),
                "{json}"
            );
        }
    }

    #[test]
    fn the_bearer_header_is_read_and_refusals_answer_401() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer(&h), Err(AuthRefusal::Missing));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(bearer(&h), Err(AuthRefusal::Malformed));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer "));
        assert_eq!(bearer(&h), Err(AuthRefusal::Malformed));
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("bearer a.b.c"),
        );
        assert_eq!(bearer(&h), Ok("a.b.c"));
        let r = refusal_response(AuthRefusal::WrongSubject);
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            r.headers()[header::WWW_AUTHENTICATE],
            "Bearer error=\"invalid_token\""
        );
        assert_eq!(
            refusal_response(AuthRefusal::Missing).headers()[header::WWW_AUTHENTICATE],
            "Bearer"
        );
        let reasons: BTreeSet<&str> = AuthRefusal::ALL.iter().map(|r| r.reason()).collect();
        assert_eq!(reasons.len(), AuthRefusal::ALL.len());
    }
}
