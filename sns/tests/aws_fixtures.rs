//! Real AWS-signed notifications verify, and any tampering breaks them.

// clippy's allow-unwrap-in-tests covers #[test] fns, not this binary's helper fns.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use common::*;
use sns::{
    CertUrlPolicy, MessageType, SignatureVersion, SigningCert, SnsMessage, TopicPolicy, Verifier,
    VerifyError, string_to_sign, verify,
};

#[test]
fn aws_v1_fixture_verifies() {
    let msg = aws_v1();
    assert_eq!(msg.signature_version().unwrap(), SignatureVersion::V1);
    assert_eq!(verify(&msg, AWS_CERT), Ok(()));
}

#[test]
fn aws_v2_fixture_verifies() {
    let msg = aws_v2();
    assert_eq!(msg.signature_version().unwrap(), SignatureVersion::V2);
    assert_eq!(verify(&msg, AWS_CERT), Ok(()));
}

#[test]
fn aws_fixtures_pass_full_verifier_at_their_timestamp() {
    let verifier = Verifier::new(CertUrlPolicy::aws(), TopicPolicy::only([AWS_TOPIC]));
    for msg in [aws_v1(), aws_v2()] {
        let url = verifier.check_before_fetch(&msg).unwrap();
        assert_eq!(url.as_str(), msg.signing_cert_url);
        assert_eq!(verifier.verify(&msg, AWS_CERT), Ok(()));
        assert_eq!(
            verifier.verify_at(&msg, AWS_CERT, at(&msg.timestamp)),
            Ok(())
        );
    }
}

#[test]
fn aws_v1_string_to_sign_is_exact() {
    let expected = "Message\n\
                    This notification has no subject.\n\
                    MessageId\n\
                    c0e5a280-53c9-5a98-93bb-c0a560b3d192\n\
                    Timestamp\n\
                    2026-03-06T19:55:38.903Z\n\
                    TopicArn\n\
                    arn:aws:sns:us-west-2:131990247566:dongie-standard-topic\n\
                    Type\n\
                    Notification\n";
    assert_eq!(string_to_sign(&aws_v1()).unwrap(), expected);
}

#[test]
fn aws_v2_string_to_sign_is_exact() {
    let expected = "Message\nThis message uses signature version 2.\n\
                    MessageId\n9d2c5580-b61d-550c-8583-37a582870907\n\
                    Timestamp\n2026-03-06T20:00:26.893Z\n\
                    TopicArn\narn:aws:sns:us-west-2:131990247566:dongie-standard-topic\n\
                    Type\nNotification\n";
    assert_eq!(string_to_sign(&aws_v2()).unwrap(), expected);
}

/// Each tampering, applied to each fixture, must break the signature.
#[test]
fn tampered_fixtures_fail_with_bad_signature() {
    type Tamper = fn(&mut SnsMessage);
    let tampers: [(&str, Tamper); 9] = [
        ("one character of Message", |m| {
            m.message = m.message.replacen("This", "this", 1)
        }),
        ("Message with trailing newline", |m| m.message.push('\n')),
        ("TopicArn", |m| {
            m.topic_arn = m.topic_arn.replace("dongie", "dongle")
        }),
        ("MessageId", |m| {
            m.message_id = m.message_id.replace('c', "d")
        }),
        ("Timestamp, same instant", |m| {
            m.timestamp = m.timestamp.replace('Z', "+00:00")
        }),
        ("Subject added", |m| m.subject = Some(String::new())),
        ("Type", |m| {
            m.message_type = MessageType::SubscriptionConfirmation;
            m.token = Some("t".into());
            m.subscribe_url = Some("https://example.test/".into());
        }),
        ("Signature bit flipped", |m| {
            let mut raw = STANDARD.decode(&m.signature).unwrap();
            raw[100] ^= 0x01;
            m.signature = STANDARD.encode(raw);
        }),
        ("SignatureVersion switched", |m| {
            m.signature_version = if m.signature_version == "1" { "2" } else { "1" }.into()
        }),
    ];
    for original in [aws_v1(), aws_v2()] {
        for (what, tamper) in tampers {
            let mut msg = original.clone();
            tamper(&mut msg);
            assert_ne!(msg, original, "{what}: tamper changed nothing");
            assert_eq!(
                verify(&msg, AWS_CERT),
                Err(VerifyError::BadSignature),
                "{what} on v{}",
                original.signature_version
            );
        }
    }
}

#[test]
fn fields_outside_string_to_sign_do_not_matter() {
    for json in [AWS_V1_JSON, AWS_V2_JSON] {
        let mut obj = json_object(json);
        obj.insert("UnsubscribeURL".into(), "https://elsewhere.test/".into());
        obj.insert(
            "MessageAttributes".into(),
            serde_json::json!({"a": {"Type": "String"}}),
        );
        obj.insert("Subject".into(), serde_json::Value::Null); // null is absent
        let msg = SnsMessage::from_json(&serde_json::to_vec(&obj).unwrap()).unwrap();
        assert_eq!(verify(&msg, AWS_CERT), Ok(()));
    }
}

#[test]
fn aws_cert_validity_window_is_checked_only_when_asked() {
    let cert = SigningCert::from_pem(AWS_CERT).unwrap();
    assert_eq!(cert.not_before(), at("2025-11-10T00:00:00Z"));
    assert_eq!(cert.not_after(), at("2026-10-14T23:59:59Z"));
    assert_eq!(
        cert.check_validity_at(at("2026-03-06T19:55:38.903Z")),
        Ok(())
    );
    assert_eq!(cert.check_validity_at(at("2026-10-14T23:59:59Z")), Ok(()));
    assert_eq!(
        cert.check_validity_at(at("2026-10-15T00:00:00Z")),
        Err(VerifyError::CertExpired)
    );
    assert_eq!(
        cert.check_validity_at(at("2025-11-09T23:59:59Z")),
        Err(VerifyError::CertNotYetValid)
    );

    let verifier = Verifier::new(CertUrlPolicy::aws(), TopicPolicy::any());
    let msg = aws_v2();
    assert_eq!(
        verifier.verify(&msg, AWS_CERT),
        Ok(()),
        "no time check by default"
    );
    assert_eq!(
        verifier.verify_at(&msg, AWS_CERT, at("2026-12-02T12:00:00Z")),
        Err(VerifyError::CertExpired)
    );
}

#[test]
fn verifier_enforces_topic_and_cert_url() {
    let msg = aws_v1();
    let other_topic = Verifier::new(
        CertUrlPolicy::aws(),
        TopicPolicy::only(["arn:aws:sns:us-west-2:1:x"]),
    );
    assert_eq!(
        other_topic.verify(&msg, AWS_CERT),
        Err(VerifyError::TopicNotAllowed(AWS_TOPIC.into()))
    );
    let no_aws = Verifier::new(CertUrlPolicy::none(), TopicPolicy::any());
    assert_eq!(
        no_aws.verify(&msg, AWS_CERT),
        Err(VerifyError::CertUrlNotAllowed(msg.signing_cert_url.clone()))
    );
}
