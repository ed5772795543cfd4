//! How fast the admission script admits: 64 concurrent tasks admitting
//! distinct candidates for about 2 s, against a `redis-server` of its own on
//! loopback, through the production-sized pool.
//!
//! ```text
//! cargo run --release -p booking-redis --example admission_rate
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/support/redis_server.rs"]
mod redis_server;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use booking::ledger::{Admission, Ledger};
use booking::{CandidateHash, Level, RequestToken, SaleId};
use booking_redis::RedisLedger;
use redis_server::RedisServer;

/// Concurrent admitting tasks.
const TASKS: usize = 64;
/// How long they admit.
const RUN: Duration = Duration::from_secs(2);
/// Candidates on the list: more than 2 s of admissions can use, so every
/// admission counts a seat (the run stops early if they run out).
const CANDIDATES: usize = 300_000;

#[tokio::main]
async fn main() {
    let server = RedisServer::start();
    let ledger = Arc::new(
        RedisLedger::connect_default(&server.url(), "admission-rate")
            .await
            .expect("connect"),
    );
    let sale = SaleId::parse("rate").unwrap();
    let level = Level::parse("a").unwrap();
    let candidates: Arc<Vec<CandidateHash>> = Arc::new(
        (0..CANDIDATES)
            .map(|i| CandidateHash::of(&format!("candidate-{i}")))
            .collect(),
    );
    ledger
        .reset(&sale, &[(level.clone(), u32::MAX)])
        .await
        .unwrap();
    let loaded = Instant::now();
    ledger.load_candidates(&sale, &candidates).await.unwrap();
    println!(
        "loaded {CANDIDATES} candidates in {:.2} s",
        loaded.elapsed().as_secs_f64()
    );
    ledger.set_open(&sale, true).await.unwrap();
    reset_stats(&server.url()).await;

    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let (ledger, candidates, next) = (ledger.clone(), candidates.clone(), next.clone());
            let (sale, level) = (sale.clone(), level.clone());
            let token = RequestToken::parse(&format!("task-{task}")).unwrap();
            tokio::spawn(async move {
                let mut latencies_us = Vec::new();
                while started.elapsed() < RUN {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(candidate) = candidates.get(i) else {
                        break;
                    };
                    let sent = Instant::now();
                    let answer = ledger
                        .admit(&sale, candidate, &level, &token, 1)
                        .await
                        .unwrap();
                    latencies_us.push(sent.elapsed().as_micros() as u64);
                    assert!(
                        matches!(answer, Admission::Admitted { .. }),
                        "unexpected {answer:?}"
                    );
                }
                latencies_us
            })
        })
        .collect();
    let mut latencies_us = Vec::new();
    for task in tasks {
        latencies_us.extend(task.await.unwrap());
    }
    let elapsed = started.elapsed().as_secs_f64();
    latencies_us.sort_unstable();
    let pct = |p: f64| latencies_us[((latencies_us.len() - 1) as f64 * p) as usize];
    let script_us = script_time_us(&server.url()).await;
    let counted = ledger.counters(&sale).await.unwrap().levels[0].count;
    assert_eq!(
        counted as usize,
        latencies_us.len(),
        "every admission counted once"
    );
    println!(
        "admission script: {} admissions in {elapsed:.2} s by {TASKS} tasks = {:.0} admits/s \
         (latency p50 {} us, p99 {} us, max {} us; server time per script call {script_us:.1} us; \
         pool {}, redis-server {} on loopback)",
        latencies_us.len(),
        latencies_us.len() as f64 / elapsed,
        pct(0.50),
        pct(0.99),
        pct(1.0),
        booking::settings::REDIS_POOL_SIZE,
        redis_version(),
    );
}

async fn reset_stats(url: &str) {
    let mut conn = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn)
        .await
        .unwrap();
}

/// The server's own time per script call (`INFO commandstats`), all calls
/// of the run: what Redis spends per admission, without the network.
async fn script_time_us(url: &str) -> f64 {
    let mut conn = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:"))
        .and_then(|l| {
            l.split(',')
                .find_map(|kv| kv.strip_prefix("usec_per_call="))
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

fn redis_version() -> String {
    std::process::Command::new("redis-server")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|v| {
            v.split_whitespace()
                .find(|w| w.starts_with("v="))
                .map(|w| w[2..].to_owned())
        })
        .unwrap_or_else(|| "?".into())
}
