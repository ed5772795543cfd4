//! The load engine's own cost: its achieved rate and latency against a
//! trivial in-process endpoint that answers every booking `201` at once
//! (no payment follows: the answer has no checkout URL), at 2,000 and
//! 5,000 arrivals/s for 10 s each, plus the CPU the process used per 1,000
//! bookings (engine, goose and the trivial server together).
//!
//! ```text
//! cargo run --release -p scenarios --example load_rate
//! BENCH_CANDIDATE_AUTH=1 cargo run --release -p scenarios --example load_rate
//! ```
//!
//! With `BENCH_CANDIDATE_AUTH=1` every booking carries a candidate token
//! (HS256, signed ahead when the run starts: [`scenarios::candidate_tokens`]);
//! the signing is inside the measured CPU.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::Router;
use axum::http::StatusCode;
use axum::routing::post;
use scenarios::load::{self, LiveStats, LoadConfig, LoadProfile, Targets};

/// Seconds of each run.
const RUSH_SECS: f64 = 10.0;

async fn admitted() -> (StatusCode, &'static str) {
    (
        StatusCode::CREATED,
        r#"{"outcome":"admitted","status":"HELD"}"#,
    )
}

/// User plus system CPU time of this process, from `/proc/self/stat`
/// (clock ticks at 100 Hz), or `None` off Linux.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

async fn measure(rate: f64, url: &str) -> anyhow::Result<()> {
    let profile = LoadProfile {
        rate,
        rush_secs: RUSH_SECS,
        late_secs: 0.0,
        duplicate_fraction: 0.0,
        ..LoadProfile::default()
    };
    let n = profile.rush_arrivals();
    let candidates: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
    let arrivals = load::schedule(&profile, &candidates, &[("gold".into(), 1)], 1)?;
    let live = Arc::new(LiveStats::default());
    let cpu0 = cpu_time();
    let wall0 = Instant::now();
    let result = load::run(
        arrivals,
        Targets {
            booking_urls: vec![url.to_owned()],
            gateway_url: url.to_owned(),
        },
        &profile,
        LoadConfig {
            out_dir: None,
            stop_by: Duration::from_secs_f64(RUSH_SECS + 20.0),
            start_at: None,
            // `BENCH_CANDIDATE_AUTH=1`: every booking carries its candidate's
            // token, signed ahead (what `--candidate-auth` costs the generator)
            candidate_tokens: scenarios::candidate_tokens::signer(&scenarios::profile::Profile {
                candidate_auth: std::env::var("BENCH_CANDIDATE_AUTH").is_ok_and(|v| v == "1"),
                ..scenarios::profile::Profile::default()
            })
            .map_err(anyhow::Error::msg)?,
        },
        live,
    )
    .await?;
    let wall = wall0.elapsed();
    let f = &result.figures;
    let b = &f.transactions[0];
    let cpu = match (cpu0, cpu_time()) {
        (Some(a), Some(b)) => format!(
            "{:.1} ms CPU per 1,000 bookings ({:.2} cores over {:.1} s)",
            (b - a).as_secs_f64() * 1e3 / (f.arrivals_started.max(1) as f64 / 1e3),
            (b - a).as_secs_f64() / wall.as_secs_f64(),
            wall.as_secs_f64()
        ),
        _ => "CPU time unknown".to_owned(),
    };
    println!(
        "target {rate:>6.0}/s: achieved {:>8.1}/s; started {}/{}, late {}, dropped {}; \
         booking latency from intended start p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, \
         max {:.2} ms; {cpu}",
        f.achieved_rate,
        f.arrivals_started,
        f.arrivals_scheduled,
        f.arrivals_late,
        f.arrivals_dropped,
        b.p50_ms,
        b.p99_ms,
        b.p999_ms,
        b.max_ms,
    );
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let app = Router::new().route("/bookings", post(admitted));
    tokio::spawn(async move { axum::serve(listener, app).await });
    for rate in [2_000.0, 5_000.0] {
        measure(rate, &url)
            .await
            .with_context(|| format!("at {rate}/s"))?;
    }
    Ok(())
}
