//! The SNS certificate fetch's bounds against an allowed host that
//! misbehaves: a certificate past `CERT_BYTES_MAX` is refused without being
//! read whole, and a host that trickles is given up after `FETCH_TIMEOUT`
//! (the delivery may be genuine: 503, SNS delivers again).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use booking_api::WebhookTrust;
use booking_api::sns_delivery::{CERT_BYTES_MAX, FETCH_TIMEOUT, Rejected, SnsDelivery};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOPIC: &str = "arn:aws:sns:ap-southeast-1:000000000000:bounds";

/// A certificate host on loopback that answers `head` and then `chunk`
/// `times` times, `pause` apart; counts the body bytes it got written.
async fn host(
    head: &'static str,
    chunk: Vec<u8>,
    times: usize,
    pause: Duration,
) -> (u16, Arc<AtomicUsize>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let written = Arc::new(AtomicUsize::new(0));
    let w = written.clone();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut buf = vec![0u8; 8192];
        let _ = s.read(&mut buf).await;
        if s.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        for _ in 0..times {
            if s.write_all(&chunk).await.is_err() {
                return;
            }
            w.fetch_add(chunk.len(), Ordering::SeqCst);
            tokio::time::sleep(pause).await;
        }
    });
    (port, written)
}

fn signed_message(port: u16) -> Vec<u8> {
    let signer = sns::Signer::generate("sns.amazonaws.com").unwrap();
    let mut msg = sns::SnsMessage {
        message_type: sns::MessageType::Notification,
        message_id: "m-1".into(),
        topic_arn: TOPIC.into(),
        message: "{}".into(),
        timestamp: "2026-12-07T00:00:00.000Z".into(),
        signing_cert_url: format!("http://127.0.0.1:{port}/SimpleNotificationService-b.pem"),
        unsubscribe_url: Some("http://127.0.0.1/unsubscribe".into()),
        ..sns::SnsMessage::default()
    };
    signer.sign(&mut msg, sns::SignatureVersion::V1).unwrap();
    serde_json::to_vec(&msg).unwrap()
}

fn trust(port: u16) -> WebhookTrust {
    WebhookTrust {
        cert_urls: sns::CertUrlPolicy::none()
            .allow_http_loopback(IpAddr::V4(Ipv4Addr::LOCALHOST), Some(port))
            .unwrap(),
        topics: sns::TopicPolicy::only([TOPIC]),
    }
}

#[tokio::test]
async fn a_certificate_past_the_cap_is_refused_and_not_read_whole() {
    // 64 MiB of "certificate", no length announced
    let (port, written) = host(
        "HTTP/1.1 200 OK\r\ncontent-type: application/x-pem-file\r\nconnection: close\r\n\r\n",
        vec![b'A'; 64 * 1024],
        1024,
        Duration::ZERO,
    )
    .await;
    let delivery = SnsDelivery::new();
    let err = delivery
        .verify(&trust(port), &signed_message(port))
        .await
        .unwrap_err();
    match err {
        Rejected::Untrusted(why) => {
            assert!(
                why.contains(&format!("larger than {CERT_BYTES_MAX}")),
                "{why}"
            )
        }
        other => panic!("expected Untrusted, got {other:?}"),
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let got = written.load(Ordering::SeqCst);
    assert!(got < 64 * 1024 * 1024, "the whole body was read: {got}");
}

#[tokio::test]
async fn a_certificate_host_that_trickles_is_given_up_after_the_fetch_timeout() {
    // a byte a second of an announced 1 KiB certificate
    let (port, _) = host(
        "HTTP/1.1 200 OK\r\ncontent-type: application/x-pem-file\r\ncontent-length: 1024\r\n\r\n",
        b"-".to_vec(),
        1024,
        Duration::from_secs(1),
    )
    .await;
    let delivery = SnsDelivery::new();
    let started = Instant::now();
    let err = delivery
        .verify(&trust(port), &signed_message(port))
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(matches!(err, Rejected::CertUnavailable(_)), "{err:?}");
    assert!(
        took >= FETCH_TIMEOUT - Duration::from_millis(100),
        "{took:?}"
    );
    assert!(took < FETCH_TIMEOUT + Duration::from_secs(3), "{took:?}");
}
