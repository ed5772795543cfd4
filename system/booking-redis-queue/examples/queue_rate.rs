//! How fast the Redis queue goes, against a `redis-server` of its own on
//! loopback, with admission-sized messages (one candidate each, so spread
//! over the 65,536 message groups as the API's are):
//!
//! 1. sends/s: 32 tasks sending for 2 s;
//! 2. receive+delete/s: 4 receivers draining what phase 1 sent (at most
//!    10 s), each receiving 10 at a time and deleting each message, as the
//!    worker does;
//! 3. the send → receive lag at a steady 2,000 sends/s for 3 s, the sends
//!    through one instance and the receives through another (two
//!    "processes": no in-process wake, the receivers see the sends only by
//!    polling), with two worker-like receivers.
//!
//! ```text
//! cargo run --release -p booking-redis-queue --example queue_rate
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../booking-redis/tests/support/redis_server.rs"]
mod redis_server;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use booking::clock::{Clock, SystemClock};
use booking::queue::{Message, Queue, QueueConfig, RECEIVE_BATCH_MAX};
use booking::{CandidateHash, SaleId};
use booking_redis::KeyPrefix;
use booking_redis_queue::RedisQueue;
use redis_server::RedisServer;

/// Concurrent senders in phase 1.
const SENDERS: usize = 32;
/// How long phase 1 sends.
const SEND_RUN: Duration = Duration::from_secs(2);
/// Receivers in phase 2.
const DRAINERS: usize = 4;
/// Phase 2 stops here even if messages are left.
const DRAIN_MAX: Duration = Duration::from_secs(10);
/// Phase 3's steady rate.
const STEADY_PER_S: u64 = 2_000;
/// How long phase 3 sends.
const STEADY_RUN: Duration = Duration::from_secs(3);
/// Receivers in phase 3 (one worker loop per process, two processes).
const WORKERS: usize = 2;
/// Connections per instance.
const POOL: usize = 64;

/// An admission-sized body (about 400 bytes of JSON), carrying the
/// microsecond it was sent at since `start`.
fn body(i: usize, sent_us: u128) -> String {
    format!(
        "{{\"sent_us\":{sent_us},\"candidate\":\"candidate-{i}\",\"level\":\"gold\",\"payment_id\":\"TR0011{i:010}\",\"token\":\"{}\",\"copy\":\"{}\"}}",
        "t".repeat(32),
        "c".repeat(280)
    )
}

fn admission(i: usize, start: Instant) -> Message {
    let c = CandidateHash::of(&format!("candidate-{i}"));
    Message::admission(&c, 1, body(i, start.elapsed().as_micros()))
}

fn sent_us(m: &Message) -> u128 {
    let v: serde_json::Value = serde_json::from_str(&m.body).unwrap();
    v["sent_us"].as_u64().unwrap() as u128
}

async fn connect(server: &RedisServer, prefix: &str) -> Arc<RedisQueue> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let q = RedisQueue::connect(
        &server.url(),
        POOL,
        &KeyPrefix::parse(prefix).unwrap(),
        &SaleId::parse("rate").unwrap(),
        clock,
        QueueConfig::default(),
    )
    .await
    .expect("connect");
    q.warm(POOL).await;
    Arc::new(q)
}

fn percentile(sorted: &[u128], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1_000.0
}

#[tokio::main]
async fn main() {
    let server = RedisServer::start();

    // 1. sends/s
    let q = connect(&server, "rate-1").await;
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let senders: Vec<_> = (0..SENDERS)
        .map(|_| {
            let (q, next) = (Arc::clone(&q), Arc::clone(&next));
            tokio::spawn(async move {
                while start.elapsed() < SEND_RUN {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    q.send(admission(i, start)).await.unwrap();
                }
            })
        })
        .collect();
    for s in senders {
        s.await.unwrap();
    }
    let sent = next.load(Ordering::Relaxed);
    let send_s = start.elapsed().as_secs_f64();
    println!(
        "send: {sent} messages by {SENDERS} tasks in {send_s:.2} s: {:.0} sends/s",
        sent as f64 / send_s
    );

    // 2. receive+delete/s
    let done = Arc::new(AtomicUsize::new(0));
    let start_drain = Instant::now();
    let drainers: Vec<_> = (0..DRAINERS)
        .map(|_| {
            let (q, done) = (Arc::clone(&q), Arc::clone(&done));
            tokio::spawn(async move {
                while start_drain.elapsed() < DRAIN_MAX {
                    let batch = q
                        .receive(RECEIVE_BATCH_MAX, Duration::from_millis(100))
                        .await
                        .unwrap();
                    if batch.is_empty() {
                        break;
                    }
                    for r in batch {
                        q.delete(&r.receipt).await.unwrap();
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for d in drainers {
        d.await.unwrap();
    }
    let drained = done.load(Ordering::Relaxed);
    // the last empty poll of 100 ms is not work
    let drain_s = (start_drain.elapsed().as_secs_f64() - 0.1).max(0.001);
    println!(
        "receive+delete: {drained} of {sent} messages by {DRAINERS} receivers in {drain_s:.2} s: {:.0} messages/s",
        drained as f64 / drain_s
    );

    // 3. lag at a steady rate, sends and receives through two instances
    let sending = connect(&server, "rate-3").await;
    let receiving = connect(&server, "rate-3").await;
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (q, stop) = (Arc::clone(&receiving), Arc::clone(&stop));
            tokio::spawn(async move {
                let mut lags_us = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let batch = q
                        .receive(RECEIVE_BATCH_MAX, Duration::from_millis(500))
                        .await
                        .unwrap();
                    let received_us = start.elapsed().as_micros();
                    for r in batch {
                        lags_us.push(received_us.saturating_sub(sent_us(&r.message)));
                        q.delete(&r.receipt).await.unwrap();
                    }
                }
                lags_us
            })
        })
        .collect();
    let total = (STEADY_PER_S * STEADY_RUN.as_secs()) as usize;
    let mut sends = tokio::task::JoinSet::new();
    for i in 0..total {
        // paced by the clock, each send on its own task so a slow one does
        // not hold the next back
        let due = start + Duration::from_micros(i as u64 * 1_000_000 / STEADY_PER_S);
        tokio::time::sleep_until(due.into()).await;
        let q = Arc::clone(&sending);
        sends.spawn(async move { q.send(admission(i, start)).await.unwrap() });
    }
    while let Some(r) = sends.join_next().await {
        r.unwrap();
    }
    let send_s = start.elapsed().as_secs_f64();
    // let the receivers finish what is queued
    let drain_until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < drain_until {
        let depth = receiving.depth().await.unwrap();
        if depth.visible + depth.in_flight == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut lags = Vec::new();
    for w in workers {
        lags.extend(w.await.unwrap());
    }
    lags.sort_unstable();
    println!(
        "steady {STEADY_PER_S} sends/s for {:.2} s ({total} sent, {} received by {WORKERS} receivers of another instance): send→receive lag p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        send_s,
        lags.len(),
        percentile(&lags, 0.50),
        percentile(&lags, 0.99),
        percentile(&lags, 1.0),
    );
}
