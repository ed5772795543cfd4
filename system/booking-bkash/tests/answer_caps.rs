//! The gateway client's bounds against a hostile or broken gateway: an
//! answer past `ANSWER_BYTES_MAX` is not buffered, and an answer that
//! trickles is cut off at the call's deadline.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use booking::gateway::GatewayError;
use booking_bkash::client::ANSWER_BYTES_MAX;
use booking_bkash::{BkashClient, BkashConfig, Credentials, TokenIssuer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn client(base: &str) -> BkashClient {
    BkashClient::new(BkashConfig::new(
        base,
        Credentials {
            username: "u".into(),
            password: "p".into(),
            app_key: "k".into(),
            app_secret: "s".into(),
        },
    ))
    .unwrap()
}

/// A token grant from the gateway at `base` within `deadline`, which must
/// fail: why.
async fn grant_refused(base: &str, deadline: Duration) -> GatewayError {
    client(base).grant(deadline).await.unwrap_err()
}

/// Answers one request with `head`, then writes `chunk` `times` times with
/// `pause` between; returns the bytes of body it managed to write.
async fn gateway(
    head: &'static str,
    chunk: Vec<u8>,
    times: usize,
    pause: Duration,
) -> (String, tokio::task::JoinHandle<usize>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", l.local_addr().unwrap());
    let h = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        let _ = s.read(&mut buf).await;
        if s.write_all(head.as_bytes()).await.is_err() {
            return 0;
        }
        let mut written = 0;
        for _ in 0..times {
            if s.write_all(&chunk).await.is_err() {
                break;
            }
            written += chunk.len();
            tokio::time::sleep(pause).await;
        }
        written
    });
    (base, h)
}

#[tokio::test]
async fn an_oversized_answer_is_unavailable_and_not_read_whole() {
    // a "JSON" answer of 100 MiB, sent without a length
    let (base, h) = gateway(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n",
        vec![b' '; 64 * 1024],
        1600,
        Duration::ZERO,
    )
    .await;
    let err = grant_refused(&base, Duration::from_secs(10)).await;
    match &err {
        GatewayError::Unavailable(why) => {
            assert!(
                why.contains(&format!("larger than {ANSWER_BYTES_MAX}")),
                "{why}"
            )
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    let written = h.await.unwrap();
    assert!(
        written < 100 * 1024 * 1024,
        "the whole answer was read: {written}"
    );
}

#[tokio::test]
async fn an_announced_oversized_answer_is_refused_before_reading() {
    let (base, _h) = gateway(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 10000000\r\n\r\n",
        Vec::new(),
        0,
        Duration::ZERO,
    )
    .await;
    let err = grant_refused(&base, Duration::from_secs(10)).await;
    assert!(
        matches!(&err, GatewayError::Unavailable(why) if why.contains("larger than")),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_trickling_answer_times_out_at_the_deadline() {
    // one byte of a valid-looking answer every 100 ms, forever
    let (base, _h) = gateway(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n",
        b" ".to_vec(),
        1000,
        Duration::from_millis(100),
    )
    .await;
    let started = Instant::now();
    let err = grant_refused(&base, Duration::from_millis(500)).await;
    let took = started.elapsed();
    assert_eq!(err, GatewayError::Timeout);
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert!(took >= Duration::from_millis(450), "{took:?}");
}
