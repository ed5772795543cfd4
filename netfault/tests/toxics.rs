//! Each toxic on real loopback sockets, measured from the client's side.
//! Timing asserts are lower bounds (what the toxic must add) with generous
//! upper bounds only where a toxic must stop acting.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::ErrorKind;
use std::time::{Duration, Instant};

use common::{
    WAIT, connect, echo_server, pattern, proxy, read_to_end, round_trip, sending_server,
    serve_with, silent_for,
};
use netfault::{Netfault, Stream, Toxic, ToxicKind};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// Timer rounding: a delay may end up to this much early as measured here.
const EPSILON: Duration = Duration::from_millis(5);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test]
async fn latency_delays_each_way_it_is_set_on() {
    let echo = echo_server().await;
    let nf = Netfault::new();
    let addr = proxy(&nf, "slow", echo.addr).await;
    nf.add_toxic(
        "slow",
        Toxic::new(
            Stream::Downstream,
            ToxicKind::Latency {
                latency: 150,
                jitter: 0,
            },
        ),
    )
    .unwrap();
    let mut client = connect(addr).await;
    for _ in 0..3 {
        let rtt = round_trip(&mut client, b"ping").await;
        assert!(rtt >= ms(150) - EPSILON, "round trip {rtt:?} under 150 ms");
    }
    nf.add_toxic(
        "slow",
        Toxic::new(
            Stream::Upstream,
            ToxicKind::Latency {
                latency: 100,
                jitter: 0,
            },
        ),
    )
    .unwrap();
    let rtt = round_trip(&mut client, b"pong").await;
    assert!(
        rtt >= ms(250) - EPSILON,
        "round trip {rtt:?} under 150 + 100 ms"
    );
}

#[tokio::test]
async fn jitter_varies_the_delay_within_its_range() {
    let echo = echo_server().await;
    let nf = Netfault::new();
    let addr = proxy(&nf, "jittery", echo.addr).await;
    nf.add_toxic(
        "jittery",
        Toxic::new(
            Stream::Downstream,
            ToxicKind::Latency {
                latency: 100,
                jitter: 50,
            },
        ),
    )
    .unwrap();
    let mut client = connect(addr).await;
    let mut rtts = Vec::new();
    for _ in 0..8 {
        rtts.push(round_trip(&mut client, b"x").await);
    }
    let (min, max) = (*rtts.iter().min().unwrap(), *rtts.iter().max().unwrap());
    assert!(min >= ms(50) - EPSILON, "{rtts:?}: one under 100 - 50 ms");
    assert!(
        max < ms(150) + ms(500),
        "{rtts:?}: one far over 100 + 50 ms"
    );
    assert!(max - min > ms(5), "{rtts:?}: no jitter at all");
}

#[tokio::test]
async fn bandwidth_caps_throughput() {
    let payload = pattern(150_000);
    let server = sending_server(payload.clone()).await;
    let nf = Netfault::new();
    let addr = proxy(&nf, "narrow", server.addr).await;
    nf.add_toxic(
        "narrow",
        Toxic::new(Stream::Downstream, ToxicKind::Bandwidth { rate: 100 }),
    )
    .unwrap();
    let start = Instant::now();
    let got = read_to_end(&mut connect(addr).await).await.unwrap();
    let took = start.elapsed();
    assert!(got == payload, "the bytes differ");
    // 150 KB at 100 KB/s is 1.5 s
    assert!(took >= ms(1400), "150 KB took {took:?} at 100 KB/s");
}

#[tokio::test]
async fn timeout_zero_blackholes_until_removed_which_closes_as_toxiproxy_does() {
    let echo = echo_server().await;
    let nf = Netfault::new();
    let addr = proxy(&nf, "hole", echo.addr).await;
    nf.add_toxic(
        "hole",
        Toxic::new(Stream::Downstream, ToxicKind::Timeout { timeout: 0 }).named("hole"),
    )
    .unwrap();
    let mut client = connect(addr).await;
    client.write_all(b"anyone?").await.unwrap();
    assert!(
        silent_for(&mut client, ms(400)).await,
        "data or a close came through a blackhole"
    );

    let start = Instant::now();
    nf.remove_toxic("hole", "hole").unwrap();
    // the blackholed connection lost data: it is closed, not resumed
    let got = read_to_end(&mut client).await;
    assert!(matches!(got.as_deref(), Ok([]) | Err(_)), "{got:?}");
    assert!(start.elapsed() < ms(2000), "not closed promptly");
    // new connections flow again
    round_trip(&mut connect(addr).await, b"back").await;
}

#[tokio::test]
async fn timeout_closes_after_its_time_with_no_data() {
    let echo = echo_server().await;
    let nf = Netfault::new();
    let addr = proxy(&nf, "cut", echo.addr).await;
    nf.add_toxic(
        "cut",
        Toxic::new(Stream::Downstream, ToxicKind::Timeout { timeout: 200 }),
    )
    .unwrap();
    let start = Instant::now();
    let mut client = connect(addr).await;
    client.write_all(b"hello").await.unwrap();
    let got = read_to_end(&mut client).await.unwrap();
    assert!(got.is_empty(), "data came through: {got:?}");
    assert!(
        start.elapsed() >= ms(200) - EPSILON,
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn reset_peer_resets_the_client() {
    let echo = echo_server().await;
    let nf = Netfault::new();
    let addr = proxy(&nf, "rst", echo.addr).await;
    nf.add_toxic(
        "rst",
        Toxic::new(Stream::Downstream, ToxicKind::ResetPeer { timeout: 100 }),
    )
    .unwrap();
    let mut client = connect(addr).await;
    let start = Instant::now();
    client.write_all(b"hello").await.unwrap();
    let mut buf = [0_u8; 16];
    let got = tokio::time::timeout(WAIT, client.read(&mut buf))
        .await
        .unwrap();
    assert_eq!(
        got.map_err(|e| e.kind()).unwrap_err(),
        ErrorKind::ConnectionReset
    );
    assert!(
        start.elapsed() >= ms(100) - EPSILON,
        "{:?}",
        start.elapsed()
    );
    assert_eq!(nf.stats("rst").unwrap().resets_sent, 1);
}

#[tokio::test]
async fn slow_close_delays_the_close_not_the_data() {
    let server = sending_server(b"bye".to_vec()).await;
    let nf = Netfault::new();
    let addr = proxy(&nf, "lingering", server.addr).await;
    nf.add_toxic(
        "lingering",
        Toxic::new(Stream::Downstream, ToxicKind::SlowClose { delay: 300 }),
    )
    .unwrap();
    let start = Instant::now();
    let mut client = connect(addr).await;
    let mut bye = [0_u8; 3];
    tokio::time::timeout(WAIT, client.read_exact(&mut bye))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&bye, b"bye");
    let rest = read_to_end(&mut client).await.unwrap();
    assert!(rest.is_empty());
    assert!(
        start.elapsed() >= ms(300) - EPSILON,
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn slicer_splits_a_write_into_small_reads() {
    let (reads_tx, mut reads_rx) = mpsc::unbounded_channel();
    let server = serve_with(move |mut s| {
        let reads_tx = reads_tx.clone();
        async move {
            let mut sizes = Vec::new();
            let mut all = Vec::new();
            let mut buf = [0_u8; 4096];
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        sizes.push(n);
                        all.extend_from_slice(&buf[..n]);
                    }
                }
            }
            let _ = reads_tx.send((sizes, all));
        }
    })
    .await;
    let nf = Netfault::new();
    let addr = proxy(&nf, "sliced", server.addr).await;
    nf.add_toxic(
        "sliced",
        Toxic::new(
            Stream::Upstream,
            ToxicKind::Slicer {
                average_size: 10,
                size_variation: 0,
                delay: 5000,
            },
        ),
    )
    .unwrap();
    let mut client = connect(addr).await;
    let payload = pattern(100);
    client.write_all(&payload).await.unwrap();
    client.shutdown().await.unwrap();
    let (sizes, all) = tokio::time::timeout(WAIT, reads_rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(all, payload);
    assert!(sizes.len() >= 5, "one 100-byte write arrived in {sizes:?}");
}

#[tokio::test]
async fn limit_data_closes_after_its_bytes() {
    let echo = echo_server().await;
    let nf = Netfault::new();
    let addr = proxy(&nf, "capped", echo.addr).await;
    nf.add_toxic(
        "capped",
        Toxic::new(Stream::Downstream, ToxicKind::LimitData { bytes: 10 }),
    )
    .unwrap();
    let mut client = connect(addr).await;
    let payload = pattern(100);
    client.write_all(&payload).await.unwrap();
    let got = read_to_end(&mut client).await.unwrap();
    assert_eq!(got, payload[..10]);
}

#[tokio::test]
async fn toxicity_zero_never_applies() {
    let echo = echo_server().await;
    let nf = Netfault::new();
    let addr = proxy(&nf, "harmless", echo.addr).await;
    nf.add_toxic(
        "harmless",
        Toxic::new(Stream::Downstream, ToxicKind::Timeout { timeout: 0 }).with_toxicity(0.0),
    )
    .unwrap();
    for _ in 0..10 {
        // a blackhole that acted would make this time out
        round_trip(&mut connect(addr).await, b"through").await;
    }
}

#[tokio::test]
async fn toxics_added_apply_to_open_connections_and_removal_is_prompt() {
    let echo = echo_server().await;
    let nf = Netfault::new();
    let addr = proxy(&nf, "live", echo.addr).await;
    let mut client = connect(addr).await;
    round_trip(&mut client, b"plain").await;

    nf.add_toxic(
        "live",
        Toxic::new(
            Stream::Downstream,
            ToxicKind::Latency {
                latency: 200,
                jitter: 0,
            },
        )
        .named("lag"),
    )
    .unwrap();
    let rtt = round_trip(&mut client, b"delayed").await;
    assert!(
        rtt >= ms(200) - EPSILON,
        "an open connection missed the toxic: {rtt:?}"
    );

    // a long latency removed while a message waits: it leaves at once
    nf.update_toxic("live", "lag", serde_json::json!({"latency": 5000}))
        .unwrap();
    let start = Instant::now();
    client.write_all(b"stuck").await.unwrap();
    tokio::time::sleep(ms(100)).await;
    nf.remove_toxic("live", "lag").unwrap();
    let mut back = [0_u8; 5];
    tokio::time::timeout(WAIT, client.read_exact(&mut back))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&back, b"stuck");
    assert!(
        start.elapsed() < ms(2500),
        "removal waited: {:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn reset_clears_toxics_and_enables_every_proxy() {
    let echo = echo_server().await;
    let nf = Netfault::new();
    let addr = proxy(&nf, "messy", echo.addr).await;
    nf.add_toxic(
        "messy",
        Toxic::new(Stream::Downstream, ToxicKind::Timeout { timeout: 0 }),
    )
    .unwrap();
    nf.set_enabled("messy", false).await.unwrap();
    nf.reset().await;
    let info = nf.get("messy").unwrap();
    assert!(info.enabled);
    assert!(info.toxics.is_empty());
    round_trip(&mut connect(addr).await, b"clean").await;
}
