//! `admin::fetch_gateway_ledger` against a gateway that answers too much:
//! an announced ledger past `GATEWAY_LEDGER_BYTES_MAX` is refused before a
//! byte of it is read, and a redirect is not followed (the fetch goes only
//! to the configured gateway).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use booking_server::admin::{GATEWAY_LEDGER_BYTES_MAX, LedgerFetchError, fetch_gateway_ledger};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A one-request server answering `head`; returns its base URL.
async fn answering(head: String) -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", l.local_addr().unwrap());
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut buf = vec![0u8; 8192];
        let _ = s.read(&mut buf).await;
        let _ = s.write_all(head.as_bytes()).await;
        // hold the connection: the client must not wait for the body
        tokio::time::sleep(std::time::Duration::from_secs(30)).await;
    });
    base
}

#[tokio::test]
async fn an_announced_ledger_past_the_cap_is_refused_unread() {
    let base = answering(format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        GATEWAY_LEDGER_BYTES_MAX + 1
    ))
    .await;
    let started = std::time::Instant::now();
    let err = fetch_gateway_ledger(&base).await.unwrap_err();
    assert!(matches!(err, LedgerFetchError::Body(_)), "{err:?}");
    assert!(err.to_string().contains("larger than"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

#[tokio::test]
async fn a_redirect_elsewhere_is_not_followed() {
    let trap = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let trap_addr = trap.local_addr().unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let s = seen.clone();
    tokio::spawn(async move {
        while let Ok(_c) = trap.accept().await {
            s.fetch_add(1, Ordering::SeqCst);
        }
    });
    let base = answering(format!(
        "HTTP/1.1 302 Found\r\nlocation: http://{trap_addr}/__mock/ledger\r\ncontent-length: 0\r\n\r\n"
    ))
    .await;
    let err = fetch_gateway_ledger(&base).await.unwrap_err();
    // a 302 is not a ledger
    assert!(
        matches!(err, LedgerFetchError::Json(_) | LedgerFetchError::Http(_)),
        "{err:?}"
    );
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(seen.load(Ordering::SeqCst), 0, "the redirect was followed");
}
