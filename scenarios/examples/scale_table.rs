//! `just scale`: how the cost of a sale on Redis grows with its size and
//! with its fleet, two tables from one run.
//!
//! 1. **Candidates** 40,000 → 400,000 → 4,000,000 (the article's sale, ×10,
//!    ×100): for each, a private `redis-server` and one `booking serve
//!    --stack redis` process; `reset`, `load-candidates` (timed, through
//!    the ops API in 2 MiB requests, as `booking load-candidates` sends
//!    them) and `open`; Redis's `used_memory` and the instance's resident
//!    memory after the load and after the bookings; then `POST /bookings`
//!    closed loop by `wrk` (64 connections) for the booking rate and p99.
//! 2. **Instances** 2 → 4 → 8 on one private `redis-server` (400,000
//!    candidates): one `wrk` per instance (64 connections shared out, each
//!    on candidates of its own), the fleet's booking rate, the worst p99,
//!    Redis's clients and CPU, and each instance's resident memory.
//!
//! The mock gateway runs in this process (every booking creates a payment
//! there, as in production). Every process it starts is a child of this one
//! and is stopped when its part ends, on an error, or on Ctrl-C. On a
//! 2-core machine everything shares the cores: more instances show what
//! they cost, not what they would add on machines of their own.
//!
//! ```text
//! just scale                       # builds, then runs this (about 4 minutes)
//! target/release/examples/scale_table [--candidates 40000,400000,4000000]
//!     [--instances 2,4,8] [--instances-candidates 400000] [--secs 8]
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

#[path = "common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail};
use booking_server::config::StackKind;
use common::{
    Guard, Started, Wrk, booking_serve, free_port, mock_and_config, post_bookings_lua, redis_cli,
    redis_server, rss_bytes, stop_children_on_ctrlc, thousands, wrk_run,
};
use parking_lot::Mutex;
use scenarios::Profile;
use scenarios::cpu;
use scenarios::fleet::Fleet;

/// wrk's connections in all (shared out over the instances).
const CONNECTIONS: u32 = 64;
/// Seats per level: more than any run books, so every booking takes the
/// whole path (admission, payment, hold).
const CAP: u32 = 1_000_000;

/// The options.
struct Options {
    candidates: Vec<u64>,
    instances: Vec<usize>,
    instances_candidates: u64,
    secs: u64,
}

impl Options {
    fn parse() -> anyhow::Result<Options> {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let value = |flag: &str| {
            args.iter()
                .position(|a| a == flag)
                .and_then(|i| args.get(i + 1))
                .cloned()
        };
        let list = |flag: &str, default: &str| -> anyhow::Result<Vec<u64>> {
            value(flag)
                .unwrap_or_else(|| default.to_owned())
                .split(',')
                .map(|v| {
                    v.trim()
                        .replace('_', "")
                        .parse::<u64>()
                        .with_context(|| format!("{flag}: {v:?} is not a count"))
                })
                .collect()
        };
        let o = Options {
            candidates: list("--candidates", "40000,400000,4000000")?,
            instances: list("--instances", "2,4,8")?
                .into_iter()
                .map(|n| n as usize)
                .collect(),
            instances_candidates: list("--instances-candidates", "400000")?
                .first()
                .copied()
                .context("--instances-candidates")?,
            secs: list("--secs", "8")?.first().copied().context("--secs")?,
        };
        if o.candidates.contains(&0) || o.instances.contains(&0) || o.secs == 0 {
            bail!("counts and --secs must be at least 1");
        }
        if o.instances.iter().any(|&k| k as u32 > CONNECTIONS) {
            bail!("at most {CONNECTIONS} instances: wrk's connections are shared out");
        }
        Ok(o)
    }
}

/// One private Redis with `instances` `booking serve` processes on it, the
/// sale reset, loaded with `candidates` and open.
struct Deployment {
    redis: Guard,
    redis_port: u16,
    instances: Vec<(Guard, String)>,
    mock: mock_gateway::Running,
    level: String,
    load_s: f64,
    used_before: u64,
}

impl Deployment {
    /// Stops the mock gateway, then the instances, then Redis.
    fn stop(self, runtime: &tokio::runtime::Runtime) {
        runtime.block_on(self.mock.stop());
        drop(self.instances);
        drop(self.redis);
    }
}

fn used_memory(port: u16) -> anyhow::Result<u64> {
    let info = redis_cli(port, &["INFO", "memory"])?;
    common::line(&info, "used_memory:")
        .and_then(|l| common::number_after(l, "used_memory:"))
        .map(|b| b as u64)
        .context("no used_memory in INFO")
}

fn redis_info(port: u16, section: &str, field: &str) -> f64 {
    redis_cli(port, &["INFO", section])
        .ok()
        .and_then(|info| {
            let prefix = format!("{field}:");
            common::line(&info, &prefix).and_then(|l| common::number_after(l, &prefix))
        })
        .unwrap_or(f64::NAN)
}

fn deploy(
    instances: usize,
    candidates: u64,
    booking_bin: &Path,
    runtime: &tokio::runtime::Runtime,
    started: &Started,
    dir: &Path,
) -> anyhow::Result<Deployment> {
    std::fs::create_dir_all(dir)?;
    let (redis, redis_port) = redis_server(started)?;
    let used_before = used_memory(redis_port)?;
    let mut profile = Profile::load(Some("default"), &["webhooks=\"never\"".to_owned()])?;
    for l in &mut profile.levels {
        l.cap = CAP;
    }
    profile.stack.kind = StackKind::Redis;
    let (mock, base) = mock_and_config(
        &profile,
        StackKind::Redis,
        format!("redis://127.0.0.1:{redis_port}"),
        runtime,
    )?;
    let token = base.admin_token.clone().context("an admin token")?;
    let mut started_instances = Vec::with_capacity(instances);
    let mut admin_urls = Vec::with_capacity(instances);
    for i in 0..instances {
        let port = free_port();
        let mut config = base.clone();
        config.listen = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        config.admin_listen = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
        config.public_url = format!("http://127.0.0.1:{port}");
        let guard = booking_serve(
            booking_bin,
            &config,
            &format!("booking-{i}"),
            dir,
            runtime,
            started,
        )?;
        admin_urls.push(format!("http://{}", config.admin_listen));
        started_instances.push((guard, config.public_url.clone()));
    }
    let level = profile
        .levels
        .first()
        .map(|l| l.level.to_string())
        .context("no level")?;
    let mut target = profile.clone();
    target.target = Some(started_instances[0].1.clone());
    target.target_admin = Some(admin_urls[0].clone());
    target.target_gateway = Some(mock.url.clone());
    target.target_admin_token = Some(token);
    let list: Vec<String> = (0..candidates).map(|i| format!("s-{i}")).collect();
    let load_s = runtime.block_on(async {
        let fleet = Fleet::start(&target).await?;
        fleet.reset().await?;
        let t = Instant::now();
        let added = fleet.load_candidates(&list).await?;
        let load_s = t.elapsed().as_secs_f64();
        if added != candidates {
            bail!("{added} of {candidates} candidates added");
        }
        fleet.open().await?;
        fleet.stop().await;
        anyhow::Ok(load_s)
    })?;
    Ok(Deployment {
        redis,
        redis_port,
        instances: started_instances,
        mock,
        level,
        load_s,
        used_before,
    })
}

/// wrk on every instance at once, `CONNECTIONS` shared out; candidates
/// `s-<i>` with `i` ≡ the instance's index (mod the instances).
fn book_everywhere(d: &Deployment, secs: u64, started: &Started, dir: &Path) -> Vec<Wrk> {
    let k = d.instances.len();
    std::thread::scope(|s| {
        let runs: Vec<_> = d
            .instances
            .iter()
            .enumerate()
            .map(|(i, (_, url))| {
                let script = post_bookings_lua(&d.level, "s-", i as u64, k as u64);
                s.spawn(move || {
                    wrk_run(
                        url,
                        &script,
                        (CONNECTIONS / k as u32).max(1),
                        secs,
                        &format!("wrk-{i}"),
                        dir,
                        started,
                    )
                })
            })
            .collect();
        runs.into_iter()
            .map(|r| {
                r.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("wrk thread panicked")))
                    .unwrap_or_else(|e| {
                        eprintln!("scale: {e:#}");
                        Wrk {
                            requests: f64::NAN,
                            rps: f64::NAN,
                            non_2xx: f64::NAN,
                            cpu_s: f64::NAN,
                            p99_ms: f64::NAN,
                        }
                    })
            })
            .collect()
    })
}

fn mib(bytes: f64) -> String {
    if bytes.is_finite() {
        format!("{:.1} MiB", bytes / (1024.0 * 1024.0))
    } else {
        "?".into()
    }
}

/// One candidates row.
struct SizeRow {
    candidates: u64,
    load_s: f64,
    redis_loaded: f64,
    redis_after: f64,
    rss_loaded: f64,
    rss_after: f64,
    wrk: Wrk,
}

/// One instances row.
struct FleetRow {
    instances: usize,
    rate: f64,
    worst_p99_ms: f64,
    non_2xx: f64,
    clients: f64,
    redis_cpu_s: f64,
    rss_mean: f64,
}

fn size_row(
    candidates: u64,
    o: &Options,
    booking_bin: &Path,
    runtime: &tokio::runtime::Runtime,
    started: &Started,
    dir: &Path,
) -> anyhow::Result<SizeRow> {
    let dir = dir.join(format!("candidates-{candidates}"));
    let d = deploy(1, candidates, booking_bin, runtime, started, &dir)?;
    let pid = d.instances[0].0.pid();
    let redis_loaded = (used_memory(d.redis_port)? - d.used_before) as f64;
    let rss_loaded = rss_bytes(pid).map_or(f64::NAN, |b| b as f64);
    let mut wrk = book_everywhere(&d, o.secs, started, &dir);
    let redis_after = (used_memory(d.redis_port)? - d.used_before) as f64;
    let rss_after = rss_bytes(pid).map_or(f64::NAN, |b| b as f64);
    let load_s = d.load_s;
    d.stop(runtime);
    Ok(SizeRow {
        candidates,
        load_s,
        redis_loaded,
        redis_after,
        rss_loaded,
        rss_after,
        wrk: wrk.remove(0),
    })
}

fn fleet_row(
    instances: usize,
    o: &Options,
    booking_bin: &Path,
    runtime: &tokio::runtime::Runtime,
    started: &Started,
    dir: &Path,
) -> anyhow::Result<FleetRow> {
    let dir = dir.join(format!("instances-{instances}"));
    let d = deploy(
        instances,
        o.instances_candidates,
        booking_bin,
        runtime,
        started,
        &dir,
    )?;
    let redis_pid = d.redis.pid();
    let redis_cpu =
        || cpu::stat_of(redis_pid).map_or(f64::NAN, |s| s.ticks as f64 / cpu::TICKS_PER_S);
    let before = redis_cpu();
    let runs = book_everywhere(&d, o.secs, started, &dir);
    let redis_cpu_s = redis_cpu() - before;
    let clients = redis_info(d.redis_port, "clients", "connected_clients");
    let rss: Vec<f64> = d
        .instances
        .iter()
        .filter_map(|(g, _)| rss_bytes(g.pid()))
        .map(|b| b as f64)
        .collect();
    d.stop(runtime);
    Ok(FleetRow {
        instances,
        rate: runs.iter().map(|w| w.rps).sum(),
        worst_p99_ms: runs.iter().map(|w| w.p99_ms).fold(f64::NAN, f64::max),
        non_2xx: runs.iter().map(|w| w.non_2xx).sum(),
        clients,
        redis_cpu_s,
        rss_mean: rss.iter().sum::<f64>() / rss.len().max(1) as f64,
    })
}

fn booking_bin() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let target = exe
        .parent()
        .and_then(Path::parent)
        .context("no target folder")?;
    let bin = target.join("booking");
    if !bin.is_file() {
        bail!(
            "{} is missing: `just scale` builds it (cargo build --release -p booking-server \
             --bin booking -p scenarios --example scale_table)",
            bin.display()
        );
    }
    Ok(bin)
}

fn main() -> anyhow::Result<()> {
    let o = Options::parse()?;
    let booking = booking_bin()?;
    let dir = std::env::temp_dir().join(format!("sellout-scale-{:08x}", rand::random::<u32>()));
    std::fs::create_dir_all(&dir)?;
    let started: Started = Arc::new(Mutex::new(Vec::new()));
    stop_children_on_ctrlc(&started, "scale")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let t0 = Instant::now();
    let load_before = scenarios::capacity::loadavg();
    eprintln!("scale: logs in {}", dir.display());

    let mut sizes = Vec::new();
    for &n in &o.candidates {
        eprintln!("scale: {} candidates …", thousands(n as f64));
        match size_row(n, &o, &booking, &runtime, &started, &dir) {
            Ok(r) => sizes.push(Ok(r)),
            Err(e) => {
                eprintln!("scale: {} candidates failed: {e:#}", thousands(n as f64));
                sizes.push(Err((n, format!("{e:#}"))));
            }
        }
    }
    let mut fleets = Vec::new();
    for &k in &o.instances {
        eprintln!("scale: {k} instances …");
        match fleet_row(k, &o, &booking, &runtime, &started, &dir) {
            Ok(r) => fleets.push(Ok(r)),
            Err(e) => {
                eprintln!("scale: {k} instances failed: {e:#}");
                fleets.push(Err((k, format!("{e:#}"))));
            }
        }
    }

    println!(
        "sellout scale: {} cores, release build, Redis stack, load average {load_before} before, {} after, {:.0} s; wrk {CONNECTIONS} connections for {} s",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        scenarios::capacity::loadavg(),
        t0.elapsed().as_secs_f64(),
        o.secs
    );
    println!();
    println!(
        "| candidates | load | Redis memory loaded (per candidate) | after bookings | instance RSS loaded / after | bookings/s (p99) | vs first row |"
    );
    println!("|---|---|---|---|---|---|---|");
    let first_rate = sizes
        .iter()
        .find_map(|r| r.as_ref().ok())
        .map_or(f64::NAN, |r| r.wrk.rps);
    for r in &sizes {
        match r {
            Ok(r) => println!(
                "| {} | {:.1} s ({}/s) | {} ({:.0} B) | {} | {} / {} | {} ({:.1} ms){} | {:.2} × |",
                thousands(r.candidates as f64),
                r.load_s,
                thousands(r.candidates as f64 / r.load_s),
                mib(r.redis_loaded),
                r.redis_loaded / r.candidates as f64,
                mib(r.redis_after),
                mib(r.rss_loaded),
                mib(r.rss_after),
                thousands(r.wrk.rps),
                r.wrk.p99_ms,
                if r.wrk.non_2xx > 0.0 {
                    format!(", {} not 2xx", thousands(r.wrk.non_2xx))
                } else {
                    String::new()
                },
                r.wrk.rps / first_rate
            ),
            Err((n, e)) => println!(
                "| {} | not measured: {} | | | | | |",
                thousands(*n as f64),
                e.lines().next().unwrap_or(e)
            ),
        }
    }
    println!();
    println!(
        "| instances ({} candidates) | bookings/s | worst p99 | Redis clients | redis-server CPU per 1,000 bookings | instance RSS (mean) | vs first row |",
        thousands(o.instances_candidates as f64)
    );
    println!("|---|---|---|---|---|---|---|");
    let first_fleet = fleets
        .iter()
        .find_map(|r| r.as_ref().ok())
        .map_or(f64::NAN, |r| r.rate);
    for r in &fleets {
        match r {
            Ok(r) => println!(
                "| {} | {}{} | {:.1} ms | {:.0} | {:.1} ms | {} | {:.2} × |",
                r.instances,
                thousands(r.rate),
                if r.non_2xx > 0.0 {
                    format!(" ({} not 2xx)", thousands(r.non_2xx))
                } else {
                    String::new()
                },
                r.worst_p99_ms,
                r.clients,
                1e6 * r.redis_cpu_s / (r.rate * o.secs as f64).max(1.0),
                mib(r.rss_mean),
                r.rate / first_fleet
            ),
            Err((k, e)) => println!(
                "| {k} | not measured: {} | | | | | |",
                e.lines().next().unwrap_or(e)
            ),
        }
    }
    eprintln!("scale: logs in {}", dir.display());
    if !started.lock().is_empty() {
        bail!("processes left: {:?}", started.lock());
    }
    Ok(())
}
