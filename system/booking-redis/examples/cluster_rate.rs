//! One server against a three-shard Redis Cluster, side by side: the ledger
//! with the production pool (300) warmed, then 64 tasks admitting distinct
//! candidates into three sales (on a cluster, one sale per shard) for about
//! 2 s each. Prints, per target: the warm-up, admissions/s, latency
//! percentiles and this process's CPU per 1,000 admissions (the client's
//! cost of routing by slot), and the ratios.
//!
//! ```text
//! cargo run --release -p booking-redis --example cluster_rate
//! ```
//!
//! The cluster is `SELLOUT_REDIS_CLUSTER`'s (`scripts/redis-cluster url`),
//! else a private one; the server a private one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/support/redis_server.rs"]
mod redis_server;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use booking::ledger::{Admission, Ledger};
use booking::{CandidateHash, Level, RequestToken, SaleId};
use booking_redis::RedisLedger;
use redis_server::{RedisCluster, RedisServer, unique_prefix};

/// Concurrent admitting tasks.
const TASKS: usize = 64;
/// How long they admit.
const RUN: Duration = Duration::from_secs(2);
/// Candidates per sale: more than the run can use.
const CANDIDATES: usize = 100_000;

/// One target's figures.
struct Figures {
    warm_s: f64,
    rate: f64,
    p50_us: u64,
    p99_us: u64,
    cpu_ms_per_1000: f64,
}

/// This process's user + system CPU time so far (`/proc/self/stat`).
fn cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime, stime: fields 14 and 15 of stat, 12 and 13 after the name
    (ticks(11) + ticks(12)) / 100.0
}

async fn run(url: &str, sales: &[String]) -> Figures {
    let ledger = Arc::new(
        RedisLedger::connect_default(url, &unique_prefix("rate"))
            .await
            .expect("connect"),
    );
    let warming = Instant::now();
    ledger.warm(booking::settings::REDIS_POOL_SIZE).await;
    let warm_s = warming.elapsed().as_secs_f64();
    let level = Level::parse("a").unwrap();
    let sales: Vec<SaleId> = sales.iter().map(|s| SaleId::parse(s).unwrap()).collect();
    let candidates: Arc<Vec<CandidateHash>> = Arc::new(
        (0..CANDIDATES)
            .map(|i| CandidateHash::of(&format!("candidate-{i}")))
            .collect(),
    );
    for sale in &sales {
        ledger
            .reset(sale, &[(level.clone(), u32::MAX)])
            .await
            .unwrap();
        ledger.load_candidates(sale, &candidates).await.unwrap();
        ledger.set_open(sale, true).await.unwrap();
    }
    let next = Arc::new(AtomicUsize::new(0));
    let cpu_before = cpu_s();
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let (ledger, candidates, next) = (ledger.clone(), candidates.clone(), next.clone());
            let (sale, level) = (sales[task % sales.len()].clone(), level.clone());
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
                    assert!(matches!(answer, Admission::Admitted { .. }), "{answer:?}");
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
    let cpu = cpu_s() - cpu_before;
    latencies_us.sort_unstable();
    let pct = |p: f64| latencies_us[((latencies_us.len() - 1) as f64 * p) as usize];
    Figures {
        warm_s,
        rate: latencies_us.len() as f64 / elapsed,
        p50_us: pct(0.5),
        p99_us: pct(0.99),
        cpu_ms_per_1000: cpu * 1_000.0 / latencies_us.len() as f64 * 1_000.0,
    }
}

#[tokio::main]
async fn main() {
    let cluster = RedisCluster::shared();
    let sales = cluster.sales_on_every_shard("rate");
    let server = RedisServer::start();
    let one = run(&server.url(), &sales).await;
    let many = run(&cluster.url(), &sales).await;
    for (name, f) in [("one server", &one), ("3-shard cluster", &many)] {
        println!(
            "{name:>16}: warm 300 connections {:.2} s; {:.0} admits/s; p50 {} us, p99 {} us; \
             client CPU {:.1} ms per 1,000 admissions",
            f.warm_s, f.rate, f.p50_us, f.p99_us, f.cpu_ms_per_1000
        );
    }
    println!(
        "cluster / one server: rate {:.2}x, client CPU per admission {:.2}x, warm-up {:.1}x",
        many.rate / one.rate,
        many.cpu_ms_per_1000 / one.cpu_ms_per_1000,
        many.warm_s / one.warm_s
    );
}
