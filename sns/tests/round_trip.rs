//! Our Signer's messages verify with its certificate and with nothing else.

// clippy's allow-unwrap-in-tests covers #[test] fns, not this binary's helper fns.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, SystemTime};

use common::*;
use sns::{
    CertUrlPolicy, KeyError, MessageType, ParseError, SignError, SignatureVersion, Signer,
    SigningCert, SnsMessage, TopicPolicy, Verifier, VerifyError, verify,
};

const TOPIC: &str = "arn:aws:sns:ap-southeast-1:000000000000:bkash-ipn";
const CERT_URL: &str = "http://127.0.0.1:9099/SimpleNotificationService-mock.pem";

fn message(message_type: MessageType, subject: Option<&str>) -> SnsMessage {
    let confirmation = message_type != MessageType::Notification;
    SnsMessage {
        message_type,
        message_id: "5b0f5c5e-7a51-4c43-9a0b-2f8a0a7d3d11".into(),
        token: confirmation.then(|| "2336412f37fb687f5d51e6e2425a8a5870".into()),
        topic_arn: TOPIC.into(),
        subject: subject.map(Into::into),
        message: r#"{"paymentID":"TR0011","trxID":"AB12CD34","amount":"1500.00"}"#.into(),
        subscribe_url: confirmation
            .then(|| "http://127.0.0.1:9099/?Action=ConfirmSubscription".into()),
        timestamp: "2026-12-02T10:11:12.345Z".into(),
        signature_version: String::new(),
        signature: String::new(),
        signing_cert_url: CERT_URL.into(),
        unsubscribe_url: (!confirmation)
            .then(|| "http://127.0.0.1:9099/?Action=Unsubscribe".into()),
    }
}

fn all_messages() -> Vec<SnsMessage> {
    vec![
        message(MessageType::Notification, None),
        message(MessageType::Notification, Some("bKash IPN")),
        message(MessageType::SubscriptionConfirmation, None),
        message(MessageType::UnsubscribeConfirmation, None),
    ]
}

#[test]
fn signed_messages_verify_only_with_the_signers_cert() {
    let signer = signer();
    let verifier = Verifier::new(
        CertUrlPolicy::aws()
            .allow_http_loopback([127, 0, 0, 1].into(), Some(9099))
            .unwrap(),
        TopicPolicy::only([TOPIC]),
    );
    for version in [SignatureVersion::V1, SignatureVersion::V2] {
        for mut msg in all_messages() {
            signer.sign(&mut msg, version).unwrap();
            let what = format!("{} v{version}", msg.message_type);
            assert_eq!(msg.signature_version, version.as_str(), "{what}");
            assert_eq!(verify(&msg, signer.cert_pem().as_bytes()), Ok(()), "{what}");
            assert_eq!(
                verifier.verify_at(&msg, signer.cert_pem().as_bytes(), SystemTime::now()),
                Ok(())
            );
            assert_eq!(
                verify(&msg, AWS_CERT),
                Err(VerifyError::BadSignature),
                "{what} with AWS cert"
            );
            assert_eq!(
                verify(&msg, other_signer().cert_pem().as_bytes()),
                Err(VerifyError::BadSignature),
                "{what} with another generated cert"
            );

            // Through the wire format and back.
            let json = serde_json::to_vec(&msg).unwrap();
            let parsed = SnsMessage::from_json(&json).unwrap();
            assert_eq!(parsed, msg);
            assert_eq!(
                verify(&parsed, signer.cert_pem().as_bytes()),
                Ok(()),
                "{what} after JSON"
            );

            let mut tampered = msg.clone();
            tampered.message.push(' ');
            assert_eq!(
                verify(&tampered, signer.cert_pem().as_bytes()),
                Err(VerifyError::BadSignature)
            );
        }
    }
}

#[test]
fn v1_and_v2_signatures_differ_and_do_not_cross_verify() {
    let mut v1 = message(MessageType::Notification, None);
    let mut v2 = v1.clone();
    signer().sign(&mut v1, SignatureVersion::V1).unwrap();
    signer().sign(&mut v2, SignatureVersion::V2).unwrap();
    assert_ne!(v1.signature, v2.signature);
    v1.signature_version = "2".into();
    assert_eq!(
        signer().signing_cert().verify_signature(&v1),
        Err(VerifyError::BadSignature)
    );
}

#[test]
fn signing_a_confirmation_without_token_is_a_typed_error() {
    let mut msg = message(MessageType::SubscriptionConfirmation, None);
    msg.token = None;
    assert_eq!(
        signer().sign(&mut msg, SignatureVersion::V2),
        Err(SignError::Malformed(ParseError::MissingField("Token")))
    );
}

#[test]
fn generated_cert_has_subject_and_a_sane_validity_window() {
    let cert = SigningCert::from_pem(signer().cert_pem().as_bytes()).unwrap();
    let now = SystemTime::now();
    assert!(cert.not_before() < now && now < cert.not_after());
    assert!(cert.not_after() > now + Duration::from_secs(300 * 24 * 3600));
    assert!(cert.not_after() < now + Duration::from_secs(400 * 24 * 3600));
    assert_eq!(
        cert.check_validity_at(now + Duration::from_secs(2 * 365 * 24 * 3600)),
        Err(VerifyError::CertExpired)
    );
    assert!(
        signer()
            .cert_pem()
            .starts_with("-----BEGIN CERTIFICATE-----\n")
    );
    assert!(
        signer()
            .key_pem()
            .starts_with("-----BEGIN PRIVATE KEY-----\n")
    );
    assert_eq!(signer().signing_cert(), &cert);
}

#[test]
fn signer_reloads_from_pem() {
    let original = signer();
    let reloaded = Signer::from_pem(original.key_pem(), original.cert_pem()).unwrap();
    let mut msg = message(MessageType::Notification, Some("s"));
    reloaded.sign(&mut msg, SignatureVersion::V2).unwrap();
    assert_eq!(verify(&msg, original.cert_pem().as_bytes()), Ok(()));

    // PKCS#1 ("RSA PRIVATE KEY") is accepted too.
    use rsa::pkcs1::EncodeRsaPrivateKey as _;
    use rsa::pkcs8::DecodePrivateKey as _;
    let key = rsa::RsaPrivateKey::from_pkcs8_pem(original.key_pem()).unwrap();
    let pkcs1 = key.to_pkcs1_pem(rsa::pkcs8::LineEnding::LF).unwrap();
    assert!(pkcs1.starts_with("-----BEGIN RSA PRIVATE KEY-----"));
    assert!(Signer::from_pem(&pkcs1, original.cert_pem()).is_ok());
}

#[test]
fn signer_rejects_mismatched_or_bad_pem() {
    let (a, b) = (signer(), other_signer());
    assert_eq!(
        Signer::from_pem(a.key_pem(), b.cert_pem()).unwrap_err(),
        KeyError::KeyMismatch
    );
    assert!(matches!(
        Signer::from_pem("garbage", a.cert_pem()),
        Err(KeyError::BadKey(_))
    ));
    assert!(matches!(
        Signer::from_pem(a.key_pem(), "garbage"),
        Err(KeyError::BadCertificate(_))
    ));
    assert!(matches!(
        Signer::from_pem(a.key_pem(), std::str::from_utf8(AWS_CERT).unwrap()),
        Err(KeyError::KeyMismatch)
    ));
}

#[test]
fn signer_debug_does_not_leak_the_key() {
    let debug = format!("{:?}", signer());
    assert!(debug.starts_with("Signer"));
    assert!(!debug.contains("PRIVATE"), "{debug}");
    assert!(
        !debug.contains("d:") && !debug.contains("primes"),
        "{debug}"
    );
}

/// Version 2 is signed by AWS-LC; PKCS#1 v1.5 is deterministic, so its
/// signature must be byte for byte the one the pure-Rust `rsa` crate makes
/// with the same key (and version 1, signed by that crate, verifies too).
#[test]
fn version_2_signatures_match_the_rsa_crate_byte_for_byte() {
    use base64::Engine as _;
    use rsa::pkcs8::DecodePrivateKey as _;
    use rsa::signature::{SignatureEncoding as _, Signer as _};
    let signer = Signer::generate("cross-check").unwrap();
    let key = rsa::RsaPrivateKey::from_pkcs8_pem(signer.key_pem()).unwrap();
    let reference = rsa::pkcs1v15::SigningKey::<sha2::Sha256>::new(key);
    for mut msg in all_messages() {
        signer.sign(&mut msg, SignatureVersion::V2).unwrap();
        let ours = base64::engine::general_purpose::STANDARD
            .decode(&msg.signature)
            .unwrap();
        let data = sns::string_to_sign(&msg).unwrap();
        assert_eq!(ours, reference.sign(data.as_bytes()).to_vec());
        verify(&msg, signer.cert_pem().as_bytes()).unwrap();
    }
}
