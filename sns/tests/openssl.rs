//! Cross-checks against an independent implementation: the `openssl` command line.
//!
//! Requires `openssl` on PATH; set `SNS_SKIP_OPENSSL=1` to skip these tests explicitly
//! (they fail otherwise, so a missing tool can't silently pass).

// clippy's allow-unwrap-in-tests covers #[test] fns, not this binary's helper fns.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use common::*;
use sns::{MessageType, SignatureVersion, SnsMessage, string_to_sign};

fn openssl_available() -> bool {
    let found = Command::new("openssl")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found && std::env::var_os("SNS_SKIP_OPENSSL").is_none() {
        panic!("`openssl` not found on PATH; install it or set SNS_SKIP_OPENSSL=1");
    }
    found
}

/// A fresh empty directory under Cargo's per-target temp dir.
fn scratch_dir(label: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("sns-openssl-{}-{n}-{label}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn openssl(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
}

/// Writes cert, data and signature to a temp dir and runs `openssl dgst -verify` on them.
/// Returns whether openssl said "Verified OK".
fn openssl_verifies(
    label: &str,
    cert_pem: &[u8],
    data: &[u8],
    signature_b64: &str,
    version: SignatureVersion,
) -> bool {
    let dir = scratch_dir(label);
    std::fs::write(dir.join("cert.pem"), cert_pem).unwrap();
    std::fs::write(dir.join("data.txt"), data).unwrap();
    std::fs::write(dir.join("sig.bin"), STANDARD.decode(signature_b64).unwrap()).unwrap();
    let out = openssl(
        &dir,
        &[
            "x509",
            "-in",
            "cert.pem",
            "-pubkey",
            "-noout",
            "-out",
            "pubkey.pem",
        ],
    );
    assert!(
        out.status.success(),
        "openssl x509: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let digest = match version {
        SignatureVersion::V1 => "-sha1",
        SignatureVersion::V2 => "-sha256",
    };
    let out = openssl(
        &dir,
        &[
            "dgst",
            digest,
            "-verify",
            "pubkey.pem",
            "-signature",
            "sig.bin",
            "data.txt",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let ok = out.status.success() && stdout.trim() == "Verified OK";
    std::fs::remove_dir_all(&dir).unwrap();
    ok
}

fn check_with_openssl(label: &str, msg: &SnsMessage, cert_pem: &[u8]) -> bool {
    let data = string_to_sign(msg).unwrap();
    openssl_verifies(
        label,
        cert_pem,
        data.as_bytes(),
        &msg.signature,
        msg.signature_version().unwrap(),
    )
}

#[test]
fn openssl_verifies_aws_fixtures_over_our_string_to_sign() {
    if !openssl_available() {
        return;
    }
    assert!(check_with_openssl("aws-v1", &aws_v1(), AWS_CERT));
    assert!(check_with_openssl("aws-v2", &aws_v2(), AWS_CERT));
    // Negative control: the harness really can say no.
    let mut tampered = aws_v1();
    tampered.message.push('!');
    assert!(!check_with_openssl("aws-v1-tampered", &tampered, AWS_CERT));
    let mut wrong_digest = aws_v2();
    wrong_digest.signature_version = "1".into();
    assert!(!check_with_openssl("aws-v2-as-v1", &wrong_digest, AWS_CERT));
}

#[test]
fn openssl_verifies_our_signatures_with_our_cert() {
    if !openssl_available() {
        return;
    }
    for version in [SignatureVersion::V1, SignatureVersion::V2] {
        for message_type in [
            MessageType::Notification,
            MessageType::SubscriptionConfirmation,
        ] {
            let confirmation = message_type != MessageType::Notification;
            let mut msg = SnsMessage {
                message_type,
                message_id: "0b9d1b4e-openssl".into(),
                token: confirmation.then(|| "tok".into()),
                topic_arn: "arn:aws:sns:ap-southeast-1:000000000000:bkash-ipn".into(),
                subject: (!confirmation).then(|| "Subject line".into()),
                message: "{\"paymentID\":\"TR0011\",\n \"note\":\"ünïcödé\"}".into(),
                subscribe_url: confirmation.then(|| "http://127.0.0.1:9099/confirm".into()),
                timestamp: "2026-12-02T10:11:12.345Z".into(),
                signing_cert_url: "http://127.0.0.1:9099/cert.pem".into(),
                ..SnsMessage::default()
            };
            signer().sign(&mut msg, version).unwrap();
            let label = format!("ours-{message_type}-v{version}");
            assert!(
                check_with_openssl(&label, &msg, signer().cert_pem().as_bytes()),
                "{label}"
            );
            assert!(
                !check_with_openssl(&label, &msg, other_signer().cert_pem().as_bytes()),
                "{label} must not verify with another key"
            );
        }
    }
}

#[test]
fn openssl_accepts_our_certificate() {
    if !openssl_available() {
        return;
    }
    let dir = scratch_dir("cert");
    std::fs::write(dir.join("cert.pem"), signer().cert_pem()).unwrap();
    std::fs::write(dir.join("key.pem"), signer().key_pem()).unwrap();
    let out = openssl(
        &dir,
        &[
            "x509", "-in", "cert.pem", "-noout", "-subject", "-issuer", "-text",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("subject=CN = sns.mock.local") || text.contains("subject=CN=sns.mock.local"),
        "{text}"
    );
    assert!(text.contains("Public-Key: (2048 bit)"), "{text}");
    assert!(text.contains("sha256WithRSAEncryption"), "{text}");
    assert!(text.contains("Digital Signature"), "{text}");
    // The self-signature is valid.
    let out = openssl(
        &dir,
        &[
            "verify",
            "-partial_chain",
            "-CAfile",
            "cert.pem",
            "cert.pem",
        ],
    );
    assert!(
        out.status.success(),
        "openssl verify: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The private key is well-formed and matches the certificate.
    let key_mod = openssl(
        &dir,
        &["rsa", "-in", "key.pem", "-noout", "-modulus", "-check"],
    );
    let cert_mod = openssl(&dir, &["x509", "-in", "cert.pem", "-noout", "-modulus"]);
    assert!(
        key_mod.status.success(),
        "{}",
        String::from_utf8_lossy(&key_mod.stderr)
    );
    let key_mod = String::from_utf8_lossy(&key_mod.stdout);
    assert!(
        key_mod.contains(String::from_utf8_lossy(&cert_mod.stdout).trim()),
        "{key_mod}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
