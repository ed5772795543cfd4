//! `http_serve::serve`'s limits, each against a client that breaks it:
//! stalled heads, idle connections, slow bodies, slow handlers, too many
//! connections, a thousand half-open clients; and its graceful shutdown.
//! Small limits keep them fast.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::routing::{get, post};
use booking_server::http_serve::{HttpLimits, serve};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

fn app() -> Router {
    Router::new()
        .route("/ok", get(|| async { "ok" }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(600)).await;
                "slow"
            }),
        )
        .route(
            "/echo",
            post(|body: Bytes| async move { body.len().to_string() }),
        )
}

struct Running {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    served: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn start(limits: HttpLimits) -> Running {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel::<()>();
    let served = tokio::spawn(serve(listener, app(), limits, async move {
        let _ = rx.await;
    }));
    Running {
        addr,
        stop: Some(tx),
        served,
    }
}

fn limits(header_ms: u64, max_connections: usize) -> HttpLimits {
    HttpLimits {
        header_read_timeout: Duration::from_millis(header_ms),
        body_timeout: Duration::from_millis(400),
        request_timeout: Duration::from_millis(300_000),
        max_connections,
    }
}

/// Everything the server writes until it closes (or `within` runs out:
/// then `None`).
async fn read_to_close(s: &mut TcpStream, within: Duration) -> Option<String> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let read = tokio::time::timeout(within, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    read.ok()
        .map(|()| String::from_utf8_lossy(&out).into_owned())
}

async fn get_ok(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /ok HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    read_to_close(&mut s, Duration::from_secs(10))
        .await
        .expect("an answer and a close")
}

#[tokio::test]
async fn a_client_that_stalls_in_its_head_is_disconnected_after_the_header_timeout() {
    let r = start(limits(300, 100)).await;
    let mut s = TcpStream::connect(r.addr).await.unwrap();
    let started = Instant::now();
    s.write_all(b"GET /ok HTTP/1.1\r\nhost: x\r\nx-half: ")
        .await
        .unwrap();
    let heard = read_to_close(&mut s, Duration::from_secs(5))
        .await
        .expect("closed within 5 s");
    let took = started.elapsed();
    assert!(!heard.contains("200 OK"), "{heard}");
    assert!(
        took >= Duration::from_millis(250),
        "closed too early: {took:?}"
    );
    assert!(took < Duration::from_secs(2), "closed late: {took:?}");
}

#[tokio::test]
async fn a_connection_that_sends_nothing_or_idles_after_an_answer_is_closed_too() {
    let r = start(limits(300, 100)).await;
    let mut silent = TcpStream::connect(r.addr).await.unwrap();
    let started = Instant::now();
    read_to_close(&mut silent, Duration::from_secs(5))
        .await
        .expect("a silent connection is closed");
    assert!(started.elapsed() < Duration::from_secs(2));

    // keep-alive: one answer, then the wait for the next head is bounded
    let mut idle = TcpStream::connect(r.addr).await.unwrap();
    idle.write_all(b"GET /ok HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let heard = read_to_close(&mut idle, Duration::from_secs(5))
        .await
        .expect("an idle keep-alive connection is closed");
    assert!(heard.starts_with("HTTP/1.1 200 OK"), "{heard}");
    assert!(started.elapsed() >= Duration::from_millis(250));
}

#[tokio::test]
async fn the_connection_past_the_cap_gets_503_and_a_close_and_the_slot_comes_back() {
    // heads never time out here: the slots are held until the clients leave
    let r = start(limits(60_000, 3)).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut s = TcpStream::connect(r.addr).await.unwrap();
        s.write_all(b"GET /ok HTTP/1.1\r\nhost: x\r\n")
            .await
            .unwrap();
        held.push(s);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut over = TcpStream::connect(r.addr).await.unwrap();
    over.write_all(b"GET /ok HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let heard = read_to_close(&mut over, Duration::from_secs(5))
        .await
        .expect("answered and closed");
    assert!(heard.starts_with("HTTP/1.1 503 "), "{heard}");
    assert!(heard.contains("connection: close"), "{heard}");
    assert!(heard.contains("retry-after: 1"), "{heard}");
    assert!(
        heard.ends_with(r#"{"error":"too_many_connections"}"#),
        "{heard}"
    );

    drop(held);
    // the server sees the closes and frees the slots
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let heard = get_ok(r.addr).await;
        if heard.starts_with("HTTP/1.1 200 OK") {
            break;
        }
        assert!(Instant::now() < deadline, "slots never freed: {heard}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_header_timeout_frees_slots_a_slowloris_holds() {
    let r = start(limits(400, 5)).await;
    let mut loris = Vec::new();
    for _ in 0..5 {
        let mut s = TcpStream::connect(r.addr).await.unwrap();
        s.write_all(b"GET /ok HTTP/1.1\r\n").await.unwrap();
        loris.push(s);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(get_ok(r.addr).await.starts_with("HTTP/1.1 503 "));
    // the slowloris keeps its sockets open; the server drops them
    tokio::time::sleep(Duration::from_millis(600)).await;
    let heard = get_ok(r.addr).await;
    assert!(heard.starts_with("HTTP/1.1 200 OK"), "{heard}");
    drop(loris);
}

#[tokio::test]
async fn a_thousand_half_open_clients_do_not_stop_service() {
    let r = start(limits(10_000, 2_000)).await;
    let mut half_open = Vec::new();
    for i in 0..1_000 {
        let mut s = TcpStream::connect(r.addr).await.unwrap();
        if i % 2 == 0 {
            s.write_all(b"POST /echo HTTP/1.1\r\nhost: x\r\n")
                .await
                .unwrap();
        }
        half_open.push(s);
    }
    let started = Instant::now();
    let answer = reqwest::Client::new()
        .get(format!("http://{}/ok", r.addr))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.text().await.unwrap(), "ok");
    assert!(started.elapsed() < Duration::from_secs(2));
    drop(half_open);
}

#[tokio::test]
async fn a_body_that_trickles_gets_408_and_a_close() {
    let r = start(limits(10_000, 100)).await;
    let mut s = TcpStream::connect(r.addr).await.unwrap();
    s.write_all(b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n0123456789")
        .await
        .unwrap();
    let started = Instant::now();
    let heard = read_to_close(&mut s, Duration::from_secs(5))
        .await
        .expect("answered and closed");
    assert!(heard.starts_with("HTTP/1.1 408 "), "{heard}");
    assert!(heard.contains("connection: close"), "{heard}");
    assert!(heard.ends_with(r#"{"error":"body_timeout"}"#), "{heard}");
    assert!(started.elapsed() >= Duration::from_millis(350));

    // a whole body in time is served
    let mut s = TcpStream::connect(r.addr).await.unwrap();
    s.write_all(
        b"POST /echo HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: 10\r\n\r\n0123456789",
    )
    .await
    .unwrap();
    let heard = read_to_close(&mut s, Duration::from_secs(5)).await.unwrap();
    assert!(
        heard.starts_with("HTTP/1.1 200 OK") && heard.ends_with("\r\n\r\n10"),
        "{heard}"
    );
}

#[tokio::test]
async fn a_request_past_the_whole_request_timeout_gets_503() {
    let mut l = limits(10_000, 100);
    l.request_timeout = Duration::from_millis(200);
    let r = start(l).await;
    let answer = reqwest::get(format!("http://{}/slow", r.addr))
        .await
        .unwrap();
    assert_eq!(answer.status(), 503);
    assert_eq!(answer.headers()["connection"], "close");
    assert_eq!(answer.headers()["retry-after"], "1");
    assert_eq!(
        answer.text().await.unwrap(),
        r#"{"error":"request_timeout"}"#
    );
    // a quick one is untouched
    let answer = reqwest::get(format!("http://{}/ok", r.addr)).await.unwrap();
    assert_eq!(answer.status(), 200);
}

#[tokio::test]
async fn shutdown_stops_accepting_and_finishes_the_requests_in_flight() {
    let mut r = start(limits(10_000, 100)).await;
    let url = format!("http://{}/slow", r.addr);
    let in_flight = tokio::spawn(async move { reqwest::get(url).await });
    tokio::time::sleep(Duration::from_millis(150)).await;
    r.stop.take().unwrap().send(()).unwrap();
    let answer = in_flight.await.unwrap().unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.text().await.unwrap(), "slow");
    tokio::time::timeout(Duration::from_secs(5), &mut r.served)
        .await
        .expect("serve returned once the last connection finished")
        .unwrap()
        .unwrap();
    assert!(TcpStream::connect(r.addr).await.is_err(), "still accepting");
}

#[test]
fn the_defaults_are_the_documented_constants() {
    use booking_server::http_serve as h;
    let d = HttpLimits::default();
    assert_eq!(d, HttpLimits::PUBLIC);
    assert_eq!(d.header_read_timeout, Duration::from_secs(10));
    assert_eq!(d.body_timeout, Duration::from_secs(10));
    assert_eq!(d.request_timeout, Duration::from_secs(30));
    assert_eq!(d.max_connections, 10_000);
    assert_eq!(h::HEADER_READ_TIMEOUT, d.header_read_timeout);
    assert!(HttpLimits::ADMIN.request_timeout > d.request_timeout);
}
