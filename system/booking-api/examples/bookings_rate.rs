//! How fast `POST /bookings` runs on the embedded stack with the mock gateway
//! in process: the whole request path (admit → create payment over HTTP at the
//! mock → attach → booking copy → enqueue → 201) over real loopback sockets.
//! With `BENCH_STACK=redis` the seat ledger and coordination (admission, the
//! booking copy, the gateway token, the status latches) are on a private
//! `redis-server` started for the run (a free loopback port, killed at the
//! end; `scripts/setup` installs it), with the article's pool of 300
//! connections; records, queue and outputs stay embedded.
//!
//! ```text
//! cargo run --release -p booking-api --example bookings_rate
//! BENCH_STACK=redis cargo run --release -p booking-api --example bookings_rate
//! ```
//!
//! Two phases, every booking for a distinct candidate in one level with a cap
//! nobody reaches:
//! 1. **Closed loop**: `BENCH_CLIENTS` (default 64) clients, each posting its
//!    next booking as soon as the last answered, for `BENCH_SECONDS` (default
//!    10): bookings/s and latency p50/p99.
//! 2. **Paced**: `BENCH_RATE` (default 2,000) bookings/s, open loop (each sent
//!    on schedule whatever the previous did), for `BENCH_PACED_SECONDS`
//!    (default 10): latency p50/p99/max.
//!
//! Three runtimes share the machine's cores: the booking system (the API and
//! its ports, `BENCH_THREADS` workers, default 2, threads named `system`),
//! the mock gateway (the third party, 1 worker, `gateway`) and the clients
//! (1 worker, `load`). On a 2-core machine the clients' and the mock's work
//! are taken out of the system's budget, so the wall-clock rates are a floor.
//! Each phase also prints the CPU time each group of threads used
//! (`/proc/self/task/*/schedstat`), and from it **bookings per system
//! CPU-second**: what the booking system itself costs, whatever else the
//! shared machine runs, and so its capacity on 2 cores of its own
//! (`2 ×` that figure). Ratios measured in one run are what to compare.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use booking::Settings;
use common::{Backend, TestOptions, TestStack};
use hdrhistogram::Histogram;

// the `booking` binary's allocator, so the bench measures what it serves with
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// CPU time (ns) used so far by this process's threads, per thread-name
/// group: (`system`, `gateway`, `load`, everything else).
fn cpu_by_group() -> [u64; 4] {
    let mut groups = [0u64; 4];
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return groups;
    };
    for task in tasks.flatten() {
        let dir = task.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        let ns: u64 = std::fs::read_to_string(dir.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
            .unwrap_or(0);
        let group = match comm.trim() {
            c if c.starts_with("system") => 0,
            c if c.starts_with("gateway") => 1,
            c if c.starts_with("load") => 2,
            _ => 3,
        };
        groups[group] += ns;
    }
    groups
}

/// Prints where the CPU went between two [`cpu_by_group`] readings, and the
/// bookings per system CPU-second.
fn report_cpu(phase: &str, before: [u64; 4], after: [u64; 4], bookings: u64, wall: Duration) {
    let secs: Vec<f64> = (0..4)
        .map(|i| after[i].saturating_sub(before[i]) as f64 / 1e9)
        .collect();
    let per_system_cpu_s = if secs[0] > 0.0 {
        bookings as f64 / secs[0]
    } else {
        0.0
    };
    println!(
        "{phase} CPU over {:.1} s wall: system {:.2} s, gateway (mock) {:.2} s, load (clients) {:.2} s, other {:.2} s",
        wall.as_secs_f64(),
        secs[0],
        secs[1],
        secs[2],
        secs[3],
    );
    println!(
        "{phase}: {per_system_cpu_s:.0} bookings per system CPU-second (2 cores of its own: {:.0} bookings/s; target 10,000)",
        2.0 * per_system_cpu_s
    );
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds")
}

fn report(name: &str, h: &Histogram<u64>) {
    println!(
        "{name}: n={} p50={:.2} ms p90={:.2} ms p99={:.2} ms p99.9={:.2} ms max={:.2} ms",
        h.len(),
        h.value_at_quantile(0.5) as f64 / 1000.0,
        h.value_at_quantile(0.9) as f64 / 1000.0,
        h.value_at_quantile(0.99) as f64 / 1000.0,
        h.value_at_quantile(0.999) as f64 / 1000.0,
        h.max() as f64 / 1000.0,
    );
}

/// Posts one booking; its latency in µs and whether it was a 201.
async fn post(http: &reqwest::Client, url: &str, candidate: &str) -> (u64, bool) {
    let body = format!(r#"{{"candidate":"{candidate}","level":"gold"}}"#);
    let started = Instant::now();
    let ok = match http
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
    {
        Ok(r) => {
            let created = r.status().as_u16() == 201;
            let _ = r.bytes().await;
            created
        }
        Err(_) => false,
    };
    (started.elapsed().as_micros() as u64, ok)
}

/// `BENCH_STACK`: `embedded` (the default) or `redis`.
fn backend() -> Backend {
    match std::env::var("BENCH_STACK").as_deref() {
        Err(_) | Ok("" | "embedded") => Backend::Embedded,
        Ok("redis") => Backend::Redis,
        Ok(other) => panic!("BENCH_STACK={other:?}: expected embedded or redis"),
    }
}

fn main() {
    let backend = backend();
    let threads = env_or("BENCH_THREADS", 2) as usize;
    let clients = env_or("BENCH_CLIENTS", 64) as usize;
    let seconds = env_or("BENCH_SECONDS", 10);
    let rate = env_or("BENCH_RATE", 2_000);
    let paced_seconds = env_or("BENCH_PACED_SECONDS", 10);
    // enough distinct candidates for both phases at a generous rate
    let candidates = (seconds * 40_000 + rate * paced_seconds + 10_000) as usize;

    let system = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("system")
        .enable_all()
        .build()
        .expect("system runtime");
    let gateway = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("gateway")
        .enable_all()
        .build()
        .expect("gateway runtime");
    let load = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("load")
        .enable_all()
        .build()
        .expect("load runtime");

    let stack = match backend {
        Backend::Embedded => "embedded stack",
        Backend::Redis => "ledger + coordination on a private redis-server",
    };
    println!(
        "bookings_rate ({stack}): {} cores on this machine; system runtime {threads} workers, \
         mock gateway on 1, clients on 1; {candidates} candidates loaded",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let t = system.block_on(TestStack::start_with(TestOptions {
        levels: vec![("gold".into(), u32::MAX, "500".into())],
        candidates: (0..candidates).map(|i| format!("cand-{i}")).collect(),
        settings: Settings::default(),
        webhooks: false,
        backend,
        gateway_runtime: Some(gateway.handle().clone()),
        ..TestOptions::default()
    }));
    let url = format!("{}/bookings", t.url);
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(clients.max(256))
        .build()
        .expect("client");
    let next = Arc::new(AtomicU64::new(0));

    // warm up: the gateway token, connections
    load.block_on(async {
        let mut tasks = Vec::new();
        for _ in 0..clients {
            let (http, url, next) = (http.clone(), url.clone(), next.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..5 {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    post(&http, &url, &format!("cand-{i}")).await;
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
    });

    // phase 1: closed loop
    let cpu0 = cpu_by_group();
    let (h, created, failed, elapsed) = load.block_on(async {
        let until = Instant::now() + Duration::from_secs(seconds);
        let started = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..clients {
            let (http, url, next) = (http.clone(), url.clone(), next.clone());
            tasks.push(tokio::spawn(async move {
                let mut h = histogram();
                let (mut ok, mut bad) = (0u64, 0u64);
                while Instant::now() < until {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let (us, created) = post(&http, &url, &format!("cand-{i}")).await;
                    h.record(us.max(1)).expect("record");
                    if created { ok += 1 } else { bad += 1 }
                }
                (h, ok, bad)
            }));
        }
        let mut all = histogram();
        let (mut ok, mut bad) = (0, 0);
        for task in tasks {
            let (h, o, b) = task.await.unwrap();
            all.add(&h).expect("add");
            ok += o;
            bad += b;
        }
        (all, ok, bad, started.elapsed())
    });
    let with = match backend {
        Backend::Embedded => "embedded",
        Backend::Redis => "with Redis",
    };
    println!(
        "closed loop ({with}), {clients} clients, {:.1} s: {created} created, {failed} not created, \
         {:.0} bookings/s",
        elapsed.as_secs_f64(),
        created as f64 / elapsed.as_secs_f64()
    );
    report("closed loop latency", &h);
    report_cpu(
        "closed loop",
        cpu0,
        cpu_by_group(),
        created + failed,
        elapsed,
    );

    // phase 2: paced, open loop
    let cpu0 = cpu_by_group();
    let paced_started = Instant::now();
    let (h, created, failed, late) = load.block_on(async {
        let total = rate * paced_seconds;
        let period = Duration::from_nanos(1_000_000_000 / rate.max(1));
        let started = tokio::time::Instant::now();
        let mut tasks = Vec::with_capacity(total as usize);
        let mut late = 0u64;
        for k in 0..total {
            let at = started + period * k as u32;
            tokio::time::sleep_until(at).await;
            if tokio::time::Instant::now() > at + Duration::from_millis(5) {
                late += 1;
            }
            let (http, url) = (http.clone(), url.clone());
            let i = next.fetch_add(1, Ordering::Relaxed);
            tasks.push(tokio::spawn(async move {
                post(&http, &url, &format!("cand-{i}")).await
            }));
        }
        let mut h = histogram();
        let (mut ok, mut bad) = (0, 0);
        for task in tasks {
            let (us, created) = task.await.unwrap();
            h.record(us.max(1)).expect("record");
            if created { ok += 1 } else { bad += 1 }
        }
        (h, ok, bad, late)
    });
    println!(
        "paced ({with}) at {rate}/s for {paced_seconds} s: {created} created, {failed} not created, \
         {late} sent more than 5 ms late"
    );
    report("paced latency", &h);
    report_cpu(
        "paced",
        cpu0,
        cpu_by_group(),
        created + failed,
        paced_started.elapsed(),
    );

    let taken = system.block_on(t.taken("gold"));
    println!("ledger: {taken} seats counted");
    system.block_on(t.stop());
}
