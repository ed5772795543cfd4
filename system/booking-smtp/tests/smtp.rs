//! The SMTP mailer against a real SMTP server: aiosmtpd (`scripts/smtp-sink`,
//! from the project's venv that `scripts/setup` makes) on a free loopback
//! port, every message it accepts written to a Maildir that the test reads
//! back. Plain, STARTTLS with AUTH (a private CA made by the `openssl`
//! command line), a wrong password, a server that requires STARTTLS, an
//! unknown CA, a server that refuses, one that accepts and then drops the
//! connection (the outcome a sender cannot know: a repeat with the same
//! Message-ID), and one slower than the mailer's timeout.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/smtp_sink.rs"]
mod smtp_sink;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use booking::notify::{Confirmation, Mailer};
use booking::{CandidateHash, Level, PaymentId, SaleId};
use booking_smtp::{SmtpConfig, SmtpMailer, SmtpTls};
use smtp_sink::{Sink, temp_dir};

fn confirmation(n: u32) -> Confirmation {
    Confirmation {
        sale: SaleId::parse("launch").unwrap(),
        candidate: CandidateHash::of(&format!("candidate-{n}")),
        level: Level::parse("floor").unwrap(),
        payment_id: PaymentId::parse(&format!("TR{n:08}")).unwrap(),
        trx_id: (n % 2 == 0).then(|| format!("TRX{n}")),
        recovered: n % 3 == 0,
    }
}

fn plain(port: u16) -> SmtpConfig {
    SmtpConfig {
        host: "127.0.0.1".into(),
        port,
        tls: SmtpTls::None,
        timeout_ms: 5_000,
        ..SmtpConfig::default()
    }
}

#[tokio::test]
async fn emails_reach_the_server_and_read_back_as_their_confirmations() {
    let sink = Sink::start(&[]);
    let mailer = SmtpMailer::new(plain(sink.port)).unwrap();
    let sent: Vec<Confirmation> = (1..=4).map(confirmation).collect();
    for c in &sent {
        mailer.send(c).await.unwrap();
    }
    let delivered = sink.log().delivered().unwrap();
    let mut got: Vec<Confirmation> = delivered.iter().map(|d| d.confirmation.clone()).collect();
    got.sort_by(|a, b| a.payment_id.cmp(&b.payment_id));
    assert_eq!(got, sent);
    for d in &delivered {
        assert_eq!(
            d.message_id,
            format!("<{}.launch@sellout.invalid>", d.confirmation.payment_id)
        );
    }
    assert_eq!(sink.log().sent_mail().await.unwrap().len(), 4);
}

/// A private CA and a server certificate for 127.0.0.1 it signed:
/// (ca.pem, server.pem, server.key).
fn certificates(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("the openssl command line");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=sellout test CA",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    ]);
    (
        dir.join("ca.pem"),
        dir.join("server.pem"),
        dir.join("server.key"),
    )
}

#[tokio::test]
async fn starttls_and_auth_deliver_and_nothing_else_gets_in() {
    let certs = temp_dir("certs");
    let (ca, cert, key) = certificates(&certs);
    let sink = Sink::start(&[
        "--auth",
        "tickets:s3cret",
        "--starttls",
        cert.to_str().unwrap(),
        key.to_str().unwrap(),
    ]);
    let secured = SmtpConfig {
        tls: SmtpTls::Starttls,
        username: Some("tickets".into()),
        password_env: Some("SELLOUT_SMTP_PASSWORD_UNUSED".into()),
        ca_file: Some(ca.clone()),
        ..plain(sink.port)
    };
    let mailer = SmtpMailer::with_password(secured.clone(), Some("s3cret".into())).unwrap();
    mailer.send(&confirmation(1)).await.unwrap();
    assert_eq!(sink.log().delivered().unwrap().len(), 1);

    let wrong = SmtpMailer::with_password(secured.clone(), Some("guess".into())).unwrap();
    let e = wrong.send(&confirmation(2)).await.unwrap_err();
    assert!(e.to_string().contains("smtp 127.0.0.1"), "{e}");

    // the server requires STARTTLS: a plain sender is refused
    let no_tls = SmtpMailer::with_password(
        SmtpConfig {
            tls: SmtpTls::None,
            ..secured.clone()
        },
        Some("s3cret".into()),
    )
    .unwrap();
    assert!(no_tls.send(&confirmation(3)).await.is_err());

    // a certificate from a CA the mailer does not trust is refused
    let unknown_ca = SmtpMailer::with_password(
        SmtpConfig {
            ca_file: None,
            ..secured
        },
        Some("s3cret".into()),
    )
    .unwrap();
    assert!(unknown_ca.send(&confirmation(4)).await.is_err());

    assert_eq!(
        sink.log().delivered().unwrap().len(),
        1,
        "only the authenticated, encrypted send was delivered"
    );
    let _ = std::fs::remove_dir_all(&certs);
}

#[tokio::test]
async fn a_dropped_answer_leaves_a_repeat_with_the_same_message_id() {
    // every second message is stored, then the connection is cut before
    // the server's 250
    let sink = Sink::start(&["--drop-every", "2"]);
    let mailer = SmtpMailer::new(plain(sink.port)).unwrap();
    mailer.send(&confirmation(1)).await.unwrap();
    let unknown = mailer.send(&confirmation(2)).await;
    assert!(unknown.is_err(), "the sender cannot know it was delivered");
    // the sender tries again (the email is still owed): a repeat
    mailer.send(&confirmation(2)).await.unwrap();
    let delivered = sink.log().delivered().unwrap();
    let of_2: Vec<_> = delivered
        .iter()
        .filter(|d| d.confirmation.payment_id.as_str() == "TR00000002")
        .collect();
    assert_eq!(of_2.len(), 2, "{delivered:?}");
    assert_eq!(of_2[0].message_id, of_2[1].message_id);
    assert_eq!(delivered.len(), 3);
}

#[tokio::test]
async fn a_refusing_server_is_an_error_and_stores_nothing() {
    let sink = Sink::start(&["--refuse-every", "1"]);
    let mailer = SmtpMailer::new(plain(sink.port)).unwrap();
    let e = mailer.send(&confirmation(1)).await.unwrap_err();
    assert!(
        e.to_string().contains("451") || e.to_string().contains("refused"),
        "{e}"
    );
    assert!(sink.log().delivered().unwrap().is_empty());
}

#[tokio::test]
async fn a_server_slower_than_the_timeout_is_an_error_in_time() {
    let sink = Sink::start(&["--delay-ms", "3000"]);
    let mailer = SmtpMailer::new(SmtpConfig {
        timeout_ms: 300,
        ..plain(sink.port)
    })
    .unwrap();
    let t = Instant::now();
    assert!(mailer.send(&confirmation(1)).await.is_err());
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "gave up after {:?}",
        t.elapsed()
    );
}

#[tokio::test]
async fn no_server_is_an_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mailer = SmtpMailer::new(plain(port)).unwrap();
    assert!(mailer.send(&confirmation(1)).await.is_err());
}
