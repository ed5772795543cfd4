//! A proxy without toxics on real loopback sockets: bytes pass intact both
//! ways, closes pass on, and disabling refuses and drops connections.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::ErrorKind;

use common::{WAIT, connect, echo_server, pattern, proxy, read_to_end, round_trip};
use netfault::{Netfault, ProxyPatch, ProxySpec};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test]
async fn bytes_pass_intact_both_ways_and_are_counted() {
    let echo = echo_server().await;
    let nf = Netfault::new();
    let addr = proxy(&nf, "echo", echo.addr).await;
    let payload = pattern(1 << 20);

    let mut client = connect(addr).await;
    let (mut r, mut w) = client.split();
    let send = async {
        w.write_all(&payload).await.unwrap();
        w.shutdown().await.unwrap();
    };
    let mut back = Vec::new();
    let receive = tokio::time::timeout(WAIT, r.read_to_end(&mut back));
    let ((), received) = tokio::join!(send, receive);
    received.expect("echo in time").unwrap();
    assert_eq!(back.len(), payload.len());
    assert!(back == payload, "the echoed bytes differ");
    drop(client);

    let stats = nf.stats("echo").unwrap();
    assert_eq!(stats.accepted, 1);
    assert_eq!(stats.bytes_upstream, payload.len() as u64);
    assert_eq!(stats.bytes_downstream, payload.len() as u64);
}

#[tokio::test]
async fn a_half_close_passes_on_and_the_answer_still_arrives() {
    // the server answers only after the client's EOF
    let server = common::serve_with(|mut s| async move {
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        s.write_all(format!("got {}", got.len()).as_bytes())
            .await
            .unwrap();
    })
    .await;
    let nf = Netfault::new();
    let addr = proxy(&nf, "half", server.addr).await;
    let mut client = connect(addr).await;
    client.write_all(b"12345").await.unwrap();
    client.shutdown().await.unwrap();
    assert_eq!(read_to_end(&mut client).await.unwrap(), b"got 5");
}

#[tokio::test]
async fn an_unreachable_upstream_closes_the_client_and_is_counted() {
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let nf = Netfault::new();
    let addr = proxy(&nf, "nowhere", closed).await;
    let mut client = connect(addr).await;
    let got = read_to_end(&mut client).await;
    assert!(matches!(got.as_deref(), Ok([]) | Err(_)), "{got:?}");
    assert_eq!(nf.stats("nowhere").unwrap().upstream_failed, 1);
}

#[tokio::test]
async fn disabled_refuses_and_drops_then_enabled_again_on_the_same_port() {
    let echo = echo_server().await;
    let nf = Netfault::new();
    let addr = proxy(&nf, "flaky", echo.addr).await;
    let mut open = connect(addr).await;
    round_trip(&mut open, b"before").await;

    let info = nf.set_enabled("flaky", false).await.unwrap();
    assert!(!info.enabled);
    // the open connection was dropped: EOF or a reset, never data
    let mut buf = [0_u8; 8];
    let got = tokio::time::timeout(WAIT, open.read(&mut buf))
        .await
        .unwrap();
    assert!(matches!(got, Ok(0) | Err(_)), "{got:?}");
    let refused = TcpStream::connect(addr).await;
    assert_eq!(refused.unwrap_err().kind(), ErrorKind::ConnectionRefused);
    assert_eq!(nf.stats("flaky").unwrap().dropped_on_disable, 1);
    assert_eq!(nf.stats("flaky").unwrap().open, 0);

    let info = nf.set_enabled("flaky", true).await.unwrap();
    assert!(info.enabled);
    assert_eq!(info.listen, addr.to_string());
    let mut again = connect(addr).await;
    round_trip(&mut again, b"after").await;
}

#[tokio::test]
async fn a_proxy_created_disabled_listens_once_enabled() {
    let echo = echo_server().await;
    let nf = Netfault::new();
    let mut spec = ProxySpec::new("later", echo.addr.to_string());
    spec.enabled = false;
    let info = nf.create(spec).await.unwrap();
    assert!(!info.enabled);
    assert_eq!(info.listen, "127.0.0.1:0");
    let info = nf.set_enabled("later", true).await.unwrap();
    let addr: std::net::SocketAddr = info.listen.parse().unwrap();
    assert_ne!(addr.port(), 0);
    round_trip(&mut connect(addr).await, b"hi").await;
}

#[tokio::test]
async fn a_new_upstream_restarts_the_proxy_toward_it() {
    let first = common::sending_server(b"first".to_vec()).await;
    let second = common::sending_server(b"second".to_vec()).await;
    let nf = Netfault::new();
    let addr = proxy(&nf, "moving", first.addr).await;
    assert_eq!(
        read_to_end(&mut connect(addr).await).await.unwrap(),
        b"first"
    );
    let patch = ProxyPatch {
        upstream: Some(second.addr.to_string()),
        ..ProxyPatch::default()
    };
    let info = nf.update("moving", patch).await.unwrap();
    assert!(info.enabled);
    assert_eq!(info.listen, addr.to_string());
    assert_eq!(
        read_to_end(&mut connect(addr).await).await.unwrap(),
        b"second"
    );
}

#[tokio::test]
async fn delete_drops_connections_and_frees_the_name() {
    let echo = echo_server().await;
    let nf = Netfault::new();
    let addr = proxy(&nf, "gone", echo.addr).await;
    let mut open = connect(addr).await;
    round_trip(&mut open, b"x").await;
    nf.delete("gone").await.unwrap();
    assert!(nf.get("gone").is_none());
    let mut buf = [0_u8; 1];
    let got = tokio::time::timeout(WAIT, open.read(&mut buf))
        .await
        .unwrap();
    assert!(matches!(got, Ok(0) | Err(_)), "{got:?}");
    assert_eq!(
        TcpStream::connect(addr).await.unwrap_err().kind(),
        ErrorKind::ConnectionRefused
    );
    assert!(matches!(
        nf.delete("gone").await,
        Err(netfault::NetfaultError::ProxyNotFound)
    ));
    // the name is free again
    proxy(&nf, "gone", echo.addr).await;
}

#[tokio::test]
async fn proxies_listen_on_loopback_only_unless_allowed() {
    let nf = Netfault::new();
    let mut spec = ProxySpec::new("wide", "127.0.0.1:9");
    spec.listen = "0.0.0.0:0".into();
    let err = nf.create(spec).await.unwrap_err();
    assert_eq!(err.status(), 400);
    assert!(nf.list().is_empty(), "a refused proxy must not be created");
}
