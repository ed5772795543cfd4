//! Shared helpers for the integration tests: fixtures, one-per-binary signers, time parsing.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::OnceLock;
use std::time::SystemTime;

use sns::{Signer, SnsMessage};

/// AWS's real signing certificate for the fixtures.
pub const AWS_CERT: &[u8] =
    include_bytes!("../fixtures/SimpleNotificationService-7506a1e35b36ef5a444dd1a8e7cc3ed8.pem");
/// A real AWS notification signed with SignatureVersion 1.
pub const AWS_V1_JSON: &[u8] = include_bytes!("../fixtures/notification-v1.json");
/// A real AWS notification signed with SignatureVersion 2.
pub const AWS_V2_JSON: &[u8] = include_bytes!("../fixtures/notification-v2.json");
/// The fixtures' topic.
pub const AWS_TOPIC: &str = "arn:aws:sns:us-west-2:131990247566:dongie-standard-topic";

pub fn aws_v1() -> SnsMessage {
    SnsMessage::from_json(AWS_V1_JSON).unwrap()
}

pub fn aws_v2() -> SnsMessage {
    SnsMessage::from_json(AWS_V2_JSON).unwrap()
}

/// The fixture JSON as a mutable JSON object, for tampering at the JSON level.
pub fn json_object(json: &[u8]) -> serde_json::Map<String, serde_json::Value> {
    match serde_json::from_slice(json).unwrap() {
        serde_json::Value::Object(map) => map,
        other => panic!("fixture is not an object: {other}"),
    }
}

/// RFC 3339 → `SystemTime`.
pub fn at(rfc3339: &str) -> SystemTime {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .unwrap()
        .into()
}

/// The signer used by the tests in this binary (RSA keygen is slow: do it once).
pub fn signer() -> &'static Signer {
    static SIGNER: OnceLock<Signer> = OnceLock::new();
    SIGNER.get_or_init(|| Signer::generate("sns.mock.local").unwrap())
}

/// A second, unrelated signer.
pub fn other_signer() -> &'static Signer {
    static SIGNER: OnceLock<Signer> = OnceLock::new();
    SIGNER.get_or_init(|| Signer::generate("other.mock.local").unwrap())
}
