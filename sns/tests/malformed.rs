//! Malformed input gives typed errors, never a panic.

// clippy's allow-unwrap-in-tests covers #[test] fns, not this binary's helper fns.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use sns::{ParseError, SnsMessage, VerifyError, verify};

fn parse_obj(obj: &serde_json::Map<String, serde_json::Value>) -> Result<SnsMessage, ParseError> {
    SnsMessage::from_json(&serde_json::to_vec(obj).unwrap())
}

#[test]
fn garbage_json_is_malformed() {
    for body in [
        &b""[..],
        b"not json",
        b"{",
        b"[]",
        b"null",
        b"\"Notification\"",
        b"\xff\xfe",
        br#"{"Type": 5}"#,
        br#"{"Type": "Notification", "Message": {"nested": true}}"#,
    ] {
        let err = SnsMessage::from_json(body).unwrap_err();
        assert!(
            matches!(err, ParseError::MalformedJson(_)),
            "{:?} -> {err:?}",
            String::from_utf8_lossy(body)
        );
    }
}

#[test]
fn duplicated_field_is_malformed() {
    let body = String::from_utf8(AWS_V1_JSON.to_vec()).unwrap().replacen(
        "\"Message\":",
        "\"Message\": \"forged\", \"Message\":",
        1,
    );
    assert!(matches!(
        SnsMessage::from_json(body.as_bytes()),
        Err(ParseError::MalformedJson(_))
    ));
}

#[test]
fn each_missing_required_field_is_named() {
    for field in [
        "Type",
        "MessageId",
        "TopicArn",
        "Message",
        "Timestamp",
        "SignatureVersion",
        "Signature",
        "SigningCertURL",
    ] {
        let mut obj = json_object(AWS_V1_JSON);
        obj.remove(field).unwrap();
        assert_eq!(
            parse_obj(&obj),
            Err(ParseError::MissingField(field)),
            "without {field}"
        );
        let mut obj = json_object(AWS_V1_JSON);
        obj.insert(field.into(), serde_json::Value::Null);
        assert_eq!(
            parse_obj(&obj),
            Err(ParseError::MissingField(field)),
            "{field}: null"
        );
    }
    // Optional for notifications.
    let mut obj = json_object(AWS_V1_JSON);
    obj.remove("UnsubscribeURL").unwrap();
    assert!(parse_obj(&obj).is_ok());
}

#[test]
fn confirmation_requires_token_and_subscribe_url() {
    let mut obj = json_object(AWS_V1_JSON);
    obj.insert("Type".into(), "SubscriptionConfirmation".into());
    obj.insert(
        "SubscribeURL".into(),
        "https://sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription".into(),
    );
    assert_eq!(parse_obj(&obj), Err(ParseError::MissingField("Token")));
    obj.insert("Token".into(), "tok".into());
    assert!(parse_obj(&obj).is_ok());
    obj.remove("SubscribeURL");
    obj.insert("Type".into(), "UnsubscribeConfirmation".into());
    assert_eq!(
        parse_obj(&obj),
        Err(ParseError::MissingField("SubscribeURL"))
    );
}

#[test]
fn unknown_type_is_named() {
    let mut obj = json_object(AWS_V1_JSON);
    obj.insert("Type".into(), "notification".into());
    assert_eq!(
        parse_obj(&obj),
        Err(ParseError::UnknownMessageType("notification".into()))
    );
}

#[test]
fn unsupported_signature_version() {
    for version in ["3", "", "01", "2 "] {
        let mut msg = aws_v2();
        msg.signature_version = version.into();
        assert_eq!(
            verify(&msg, AWS_CERT),
            Err(VerifyError::UnsupportedSignatureVersion(version.into()))
        );
    }
    // It parses: the error comes from verification, with the offending value.
    let mut obj = json_object(AWS_V2_JSON);
    obj.insert("SignatureVersion".into(), "3".into());
    assert_eq!(parse_obj(&obj).unwrap().signature_version, "3");
}

#[test]
fn bad_signature_encodings() {
    for sig in ["!!!not base64!!!", "abc", "a b c d", "aGVsbG8=\n"] {
        let mut msg = aws_v1();
        msg.signature = sig.into();
        assert_eq!(
            verify(&msg, AWS_CERT),
            Err(VerifyError::BadBase64),
            "{sig:?}"
        );
    }
    for sig in ["", "AAAA", "aGVsbG8="] {
        // valid base64 but the wrong length for the key
        let mut msg = aws_v1();
        msg.signature = sig.into();
        assert_eq!(
            verify(&msg, AWS_CERT),
            Err(VerifyError::BadSignature),
            "{sig:?}"
        );
    }
}

#[test]
fn bad_certificates() {
    let msg = aws_v1();
    let truncated = &AWS_CERT[..AWS_CERT.len() / 2];
    let wrong_block = String::from_utf8(AWS_CERT.to_vec())
        .unwrap()
        .replace("CERTIFICATE", "PUBLIC KEY");
    for cert in [
        &b""[..],
        b"garbage",
        b"-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n",
        truncated,
        wrong_block.as_bytes(),
        b"\x30\x03\x02\x01\x01",
    ] {
        let err = verify(&msg, cert).unwrap_err();
        assert!(
            matches!(err, VerifyError::BadCertificate(_)),
            "{:?} -> {err:?}",
            String::from_utf8_lossy(cert)
        );
    }
}
