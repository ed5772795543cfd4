//! `just bench`: one table from one run, each figure with a ratio.
//!
//! 1. **Raw `EVALSHA`** of the ledger's real admission script
//!    (`booking-redis/src/lua/prelude.lua` + `admit.lua`) by `redis-benchmark`
//!    (50 clients; then pipelined, `-P 16`) on a private `redis-server`:
//!    random eligible candidates (`__rand_int__` over the eligible set), so
//!    most calls admit (the rest find their own earlier hold).
//! 2. **The admission script through the ledger**: `booking-redis`'s
//!    `admission_rate` example (64 tasks, the production pool).
//! 3. **`POST /bookings`** closed loop (64 clients) and paced (2,000/s), on
//!    the embedded stack and on Redis: `booking-api`'s `bookings_rate`.
//! 4. **The capacity found**: `scenarios capacity` on both stacks.
//! 5. **The load generator against the system**: `scenarios rehearse
//!    --target` at 2,000 bookings/s against one `booking serve` process (and
//!    its private `redis-server`), the mock gateway in this process, seats
//!    for every arrival (the step's caps × 100: every booking admitted): CPU
//!    seconds of each process over the rush (`/proc/<pid>/stat`), the
//!    generator's CPU per 1,000 requests; then `wrk` (closed loop, 1 thread,
//!    64 connections) on the same `POST /bookings`, its CPU per 1,000
//!    requests.
//!
//! Every process it starts is a child of this one and is stopped when its
//! part ends (or when the part's time bound passes, or on Ctrl-C). The
//! binaries are the release ones next to this example (the `bench` recipe
//! builds them):
//!
//! ```text
//! just bench                      # builds, then runs this
//! target/release/examples/bench_table [--skip-capacity] [--capacity-minutes N]
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

#[path = "common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use booking_server::config::StackKind;
use common::{
    Started, Table, Wrk, booking_serve, free_port, line, mock_and_config, number_after, output,
    part, post_bookings_lua, redis_cli, redis_server, stop_children_on_ctrlc, thousands, wrk_run,
};
use parking_lot::Mutex;
use scenarios::Profile;
use scenarios::capacity::{self, CapacityReport, Plan};
use scenarios::cpu::{self, Sampler};
use scenarios::fleet::{Fleet, ensure_redis};

/// The admission script as the ledger loads it: the prelude, then the body.
const ADMIT_LUA: &str = concat!(
    include_str!("../../system/booking-redis/src/lua/prelude.lua"),
    "\n",
    include_str!("../../system/booking-redis/src/lua/admit.lua")
);
/// Eligible candidates of the raw run (`c` + 12 digits, as
/// `redis-benchmark` expands `c__rand_int__`).
const KEYSPACE: u64 = 2_000_000;
/// Calls of the raw runs.
const RAW_CALLS: u64 = 200_000;
/// Calls of the pipelined raw run.
const RAW_PIPELINED_CALLS: u64 = 500_000;
/// The rate the generator is measured at.
const GEN_RATE: f64 = 2_000.0;
/// The generator's sale has this many times the step's seats: nothing
/// sells out, every booking is admitted.
const CAP_FACTOR: u32 = 100;
/// wrk's run.
const WRK_SECS: u64 = 8;
/// wrk's connections.
const WRK_CONNECTIONS: u32 = 64;
/// Candidates loaded for wrk (more than it can post in its run).
const WRK_CANDIDATES: usize = 150_000;

/// One raw run's figures.
#[derive(Debug, Clone, Default)]
struct Raw {
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
    usec_per_call: f64,
    admitted: u64,
    calls: u64,
}

const KEYS: [&str; 8] = [
    "{b}:open",
    "{b}:levels",
    "{b}:counts",
    "{b}:eligible",
    "{b}:holds",
    "{b}:paid",
    "{b}:pending",
    "{b}:held",
];

fn raw_evalsha(started: &Started, dir: &Path) -> anyhow::Result<(Raw, Raw)> {
    let (_redis, port) = redis_server(started)?;
    let sha = redis_cli(port, &["SCRIPT", "LOAD", ADMIT_LUA])?;
    redis_cli(port, &["SET", KEYS[0], "1"])?;
    redis_cli(port, &["HSET", KEYS[1], "a", "1000000000"])?;
    let fill = "for i = 0, tonumber(ARGV[1]) - 1 do redis.call('SADD', KEYS[1], string.format('c%012d', i)) end return redis.call('SCARD', KEYS[1])";
    let n = redis_cli(port, &["EVAL", fill, "1", KEYS[3], &KEYSPACE.to_string()])?;
    if n != KEYSPACE.to_string() {
        bail!("loaded {n} eligible candidates, not {KEYSPACE}");
    }
    let run = |calls: u64, pipeline: u32| -> anyhow::Result<Raw> {
        redis_cli(port, &["DEL", KEYS[2], KEYS[4], KEYS[6]])?;
        redis_cli(port, &["CONFIG", "RESETSTAT"])?;
        let keys: Vec<String> = KEYS.iter().map(|k| (*k).to_owned()).collect();
        let mut cmd = Command::new("redis-benchmark");
        cmd.args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args([
                "-n",
                &calls.to_string(),
                "-c",
                "50",
                "-P",
                &pipeline.to_string(),
            ])
            .args(["-r", &KEYSPACE.to_string(), "--csv"])
            .args(["EVALSHA", &sha, "8"])
            .args(&keys)
            .args(["c__rand_int__", "a", "tok", "1700000000000"]);
        let text = output(
            &mut cmd,
            Duration::from_secs(120),
            &dir.join(format!("redis-benchmark-P{pipeline}.log")),
            started,
        )?;
        // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
        let row = text
            .lines()
            .rfind(|l| l.starts_with("\"EVALSHA"))
            .with_context(|| format!("no EVALSHA row in redis-benchmark's output:\n{text}"))?;
        let fields: Vec<f64> = row
            .split("\",\"")
            .skip(1)
            .map(|f| f.trim_matches('"').parse().unwrap_or(f64::NAN))
            .collect();
        let stats = redis_cli(port, &["INFO", "commandstats"])?;
        let evalsha = line(&stats, "cmdstat_evalsha:").unwrap_or("");
        if number_after(evalsha, "failed_calls=").unwrap_or(0.0) > 0.0 {
            bail!("EVALSHA calls failed: {evalsha}");
        }
        let admitted: u64 = redis_cli(port, &["HLEN", KEYS[4]])?.parse().unwrap_or(0);
        Ok(Raw {
            rps: fields.first().copied().unwrap_or(f64::NAN),
            p50_ms: fields.get(3).copied().unwrap_or(f64::NAN),
            p99_ms: fields.get(5).copied().unwrap_or(f64::NAN),
            usec_per_call: number_after(evalsha, "usec_per_call=").unwrap_or(f64::NAN),
            admitted,
            calls: number_after(evalsha, "calls=").unwrap_or(0.0) as u64,
        })
    };
    let plain = run(RAW_CALLS, 1)?;
    let pipelined = run(RAW_PIPELINED_CALLS, 16)?;
    Ok((plain, pipelined))
}

/// The ledger example's figures: admits/s, p99 µs.
fn ledger_admission(bin: &Path, started: &Started, dir: &Path) -> anyhow::Result<(f64, f64)> {
    let text = output(
        &mut Command::new(bin),
        Duration::from_secs(180),
        &dir.join("admission_rate.log"),
        started,
    )?;
    let l = line(&text, "admission script:").with_context(|| format!("no figures in:\n{text}"))?;
    let rate = number_after(l, "s = ").context("admits/s")?;
    let p99 = number_after(l, "p99").context("p99")?;
    Ok((rate, p99))
}

/// `bookings_rate`'s figures on one stack.
#[derive(Debug, Clone, Default)]
struct Bookings {
    closed_rate: f64,
    closed_p99_ms: f64,
    paced_p99_ms: f64,
    paced_not_created: f64,
    paced_late: f64,
    per_system_cpu_s: f64,
}

fn bookings_rate(
    bin: &Path,
    stack: &str,
    started: &Started,
    dir: &Path,
) -> anyhow::Result<Bookings> {
    let text = output(
        Command::new(bin).env("BENCH_STACK", stack),
        Duration::from_secs(300),
        &dir.join(format!("bookings_rate-{stack}.log")),
        started,
    )?;
    let find =
        |prefix: &str| line(&text, prefix).with_context(|| format!("no {prefix:?} in:\n{text}"));
    let closed = find("closed loop (")?;
    let closed_rate = number_after(closed, "not created,").context("closed-loop rate")?;
    let closed_p99_ms = number_after(find("closed loop latency")?, "p99=").context("p99")?;
    let paced = find("paced (")?;
    let paced_not_created = number_after(paced, "created,").unwrap_or(f64::NAN);
    let paced_late = number_after(paced, "not created,").unwrap_or(f64::NAN);
    let paced_p99_ms = number_after(find("paced latency")?, "p99=").context("paced p99")?;
    let per_system_cpu_s = number_after(find("closed loop: ")?, "closed loop:").unwrap_or(f64::NAN);
    Ok(Bookings {
        closed_rate,
        closed_p99_ms,
        paced_p99_ms,
        paced_not_created,
        paced_late,
        per_system_cpu_s,
    })
}

fn run_capacity(
    bin: &Path,
    minutes: f64,
    started: &Started,
    dir: &Path,
) -> anyhow::Result<CapacityReport> {
    let out = dir.join("capacity");
    let minutes = minutes.to_string();
    let mut cmd = Command::new(bin);
    cmd.args(["capacity", "--stack", "embedded", "--stack", "redis"])
        .args([
            "--start",
            "1000",
            "--factor",
            "2",
            "--max-rate",
            "16000",
            "--bisect",
            "2",
        ])
        .args(["--step-secs", "8", "--max-minutes", &minutes])
        .arg("--out")
        .arg(&out);
    let text = output(
        &mut cmd,
        Duration::from_secs_f64(2.0 * 60.0 * minutes.parse::<f64>().unwrap_or(6.0) + 600.0),
        &dir.join("capacity.log"),
        started,
    )?;
    let path = line(&text, "written:")
        .and_then(|l| l.strip_prefix("written:"))
        .map(|p| PathBuf::from(p.trim()))
        .with_context(|| format!("no capacity.json in:\n{text}"))?;
    eprint!(
        "{}",
        text.lines()
            // goose's one line per run
            .filter(|l| !l.starts_with("written:") && !l.starts_with("All ") && !l.is_empty())
            .collect::<Vec<_>>()
            .join("\n")
    );
    eprintln!();
    let json =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(serde_json::from_str(&json)?)
}

/// The generator measured against one `booking serve` process.
#[derive(Debug, Clone, Default)]
struct Generator {
    achieved_rate: f64,
    booking_p99_ms: f64,
    /// The verdicts that broke.
    broken: Vec<String>,
    rush_s: f64,
    generator_s: f64,
    booking_s: f64,
    redis_s: f64,
    mock_s: f64,
    load_requests: u64,
    load_generator_s: f64,
    wrk: Option<Wrk>,
}

#[allow(clippy::too_many_arguments)]
fn generator_against(
    stack: StackKind,
    with_wrk: bool,
    bins: &Bins,
    runtime: &tokio::runtime::Runtime,
    sampler: &Sampler,
    started: &Started,
    dir: &Path,
) -> anyhow::Result<Generator> {
    let name = match stack {
        StackKind::Redis => "redis",
        _ => "embedded",
    };
    let dir = dir.join(format!("generator-{name}"));
    std::fs::create_dir_all(&dir)?;
    let base = Profile::load(Some("default"), &["webhooks=\"never\"".to_owned()])?;
    let plan = Plan {
        ladder: vec![GEN_RATE],
        bisections: 0,
        resolution: 0.0,
        min_rate: GEN_RATE,
        max_steps: 1,
        budget_s: 600.0,
        rush_secs: 8.0,
        late_secs: 2.0,
        time_scale: Some(0.01),
    };
    let mut profile = capacity::step_profile(&base, &plan, GEN_RATE, stack, &dir)?;
    // seats for every arrival and for wrk's run: each request takes the
    // whole path (admission, payment, hold), for the generator and wrk alike
    for l in &mut profile.levels {
        l.cap = l.cap.saturating_mul(CAP_FACTOR);
    }
    let (redis_url, _redis) = match stack {
        StackKind::Redis => {
            let (url, process) = ensure_redis(&format!("redis://127.0.0.1:{}", free_port()))?;
            (url, process)
        }
        _ => (profile.stack.redis_url.clone(), None),
    };
    let (mock, mut config) = mock_and_config(&profile, stack, redis_url, runtime)?;
    let token = config.admin_token.clone().context("an admin token")?;
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    config.listen = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    config.admin_listen = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
    let admin = format!("http://{}", config.admin_listen);
    config.public_url = url.clone();
    let _booking = booking_serve(&bins.booking, &config, "booking", &dir, runtime, started)?;
    let profile_path = dir.join("profile.toml");
    std::fs::write(&profile_path, toml::to_string(&profile)?)?;
    let out = output(
        Command::new(&bins.scenarios)
            .args(["rehearse", "--quiet", "--profile"])
            .arg(&profile_path)
            .args([
                "--target",
                &url,
                "--target-admin",
                &admin,
                "--target-gateway",
                &mock.url,
            ])
            .args(["--set", &format!("target_admin_token={token:?}")])
            .arg("--out")
            .arg(dir.join("runs")),
        Duration::from_secs(600),
        &dir.join("rehearse.log"),
        started,
    );
    // a failed verdict exits 1: the report is still there
    if let Err(e) = &out
        && !e.to_string().contains("exit status: 1")
    {
        bail!("the generator's rehearsal: {e:#}");
    }
    std::thread::sleep(cpu::SAMPLE_EVERY * 2);
    let report_path = std::fs::read_dir(dir.join("runs"))?
        .flatten()
        .map(|e| e.path().join("report.json"))
        .find(|p| p.is_file())
        .context("no report.json of the generator's rehearsal")?;
    let report: reports::Report = serde_json::from_str(&std::fs::read_to_string(&report_path)?)?;
    let (from, to) = capacity::rush_window(&report).context("no rush in the report")?;
    let samples = sampler.samples();
    let rush = cpu::window(&samples, from, to);
    let load_end = report
        .phases
        .iter()
        .find(|p| p.name == "late")
        .map(|p| p.end_ms)
        .unwrap_or(0);
    let load_to = chrono::DateTime::parse_from_rfc3339(&report.started_at)?
        .with_timezone(&chrono::Utc)
        + chrono::Duration::milliseconds(load_end as i64);
    let load = cpu::window(&samples, from, load_to.max(to));
    let booking = report
        .load
        .transactions
        .iter()
        .find(|t| t.name == "booking");
    let mut g = Generator {
        achieved_rate: report.load.achieved_rate,
        booking_p99_ms: booking.map_or(f64::NAN, |b| b.p99_ms),
        broken: report.failed().map(|v| v.name.clone()).collect(),
        rush_s: rush.wall_s,
        generator_s: rush.children_named("scenarios").0,
        booking_s: rush.children_named("booking").0,
        redis_s: rush.children_named("redis-server").0,
        mock_s: rush.this_process_s,
        load_requests: report.load.requests,
        load_generator_s: load.children_named("scenarios").0,
        wrk: None,
    };
    if with_wrk {
        g.wrk = Some(wrk(
            &url, &admin, &token, &mock.url, &profile, runtime, started, &dir,
        )?);
    }
    runtime.block_on(mock.stop());
    Ok(g)
}

/// wrk on the same instance's `POST /bookings`: reset, eligible `wrk-<n>`
/// candidates, open, then wrk closed loop; its CPU from this process's
/// waited-children times.
#[allow(clippy::too_many_arguments)]
fn wrk(
    url: &str,
    admin: &str,
    token: &str,
    gateway: &str,
    profile: &Profile,
    runtime: &tokio::runtime::Runtime,
    started: &Started,
    dir: &Path,
) -> anyhow::Result<Wrk> {
    let level = profile
        .levels
        .iter()
        .max_by_key(|l| l.cap)
        .map(|l| l.level.to_string())
        .context("no level")?;
    let mut target = profile.clone();
    target.target = Some(url.to_owned());
    target.target_admin = Some(admin.to_owned());
    target.target_gateway = Some(gateway.to_owned());
    target.target_admin_token = Some(token.to_owned());
    runtime.block_on(async {
        let fleet = Fleet::start(&target).await?;
        fleet.reset().await?;
        let list: Vec<String> = (0..WRK_CANDIDATES).map(|i| format!("wrk-{i}")).collect();
        fleet.load_candidates(&list).await?;
        fleet.open().await?;
        fleet.stop().await;
        anyhow::Ok(())
    })?;
    wrk_run(
        url,
        &post_bookings_lua(&level, "wrk-", 0, 1),
        WRK_CONNECTIONS,
        WRK_SECS,
        "wrk",
        dir,
        started,
    )
}

/// The release binaries this run starts.
struct Bins {
    booking: PathBuf,
    scenarios: PathBuf,
    admission_rate: PathBuf,
    bookings_rate: PathBuf,
}

impl Bins {
    fn find() -> anyhow::Result<Bins> {
        let exe = std::env::current_exe()?;
        let examples = exe.parent().context("no folder")?.to_owned();
        let target = examples.parent().context("no target folder")?.to_owned();
        let b = Bins {
            booking: target.join("booking"),
            scenarios: target.join("scenarios"),
            admission_rate: examples.join("admission_rate"),
            bookings_rate: examples.join("bookings_rate"),
        };
        for p in [
            &b.booking,
            &b.scenarios,
            &b.admission_rate,
            &b.bookings_rate,
        ] {
            if !p.is_file() {
                bail!(
                    "{} is missing: `just bench` builds it (cargo build --release -p booking-server \
                     --bin booking -p scenarios --bin scenarios --example bench_table -p booking-redis \
                     --example admission_rate -p booking-api --example bookings_rate)",
                    p.display()
                );
            }
        }
        Ok(b)
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let skip_capacity = args.iter().any(|a| a == "--skip-capacity");
    let capacity_minutes: f64 = args
        .iter()
        .position(|a| a == "--capacity-minutes")
        .and_then(|i| args.get(i + 1))
        .and_then(|m| m.parse().ok())
        .unwrap_or(5.0);
    let bins = Bins::find()?;
    let dir = std::env::temp_dir().join(format!("sellout-bench-{:08x}", rand::random::<u32>()));
    std::fs::create_dir_all(&dir)?;
    let started: Started = Arc::new(Mutex::new(Vec::new()));
    stop_children_on_ctrlc(&started, "bench")?;
    let t0 = Instant::now();
    let load_before = capacity::loadavg();
    let sampler = Sampler::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    eprintln!("bench: logs and run folders in {}", dir.display());

    let raw = part("raw EVALSHA by redis-benchmark", || {
        raw_evalsha(&started, &dir)
    });
    let ledger = part("the admission script through the ledger", || {
        ledger_admission(&bins.admission_rate, &started, &dir)
    });
    let embedded = part("POST /bookings, embedded", || {
        bookings_rate(&bins.bookings_rate, "embedded", &started, &dir)
    });
    let redis = part("POST /bookings, Redis", || {
        bookings_rate(&bins.bookings_rate, "redis", &started, &dir)
    });
    let gen_embedded = part("the generator against booking serve, embedded", || {
        generator_against(
            StackKind::Embedded,
            true,
            &bins,
            &runtime,
            &sampler,
            &started,
            &dir,
        )
    });
    let gen_redis = part("the generator against booking serve, Redis", || {
        generator_against(
            StackKind::Redis,
            false,
            &bins,
            &runtime,
            &sampler,
            &started,
            &dir,
        )
    });
    let cap = if skip_capacity {
        Err("skipped (--skip-capacity)".to_owned())
    } else {
        part("scenarios capacity", || {
            run_capacity(&bins.scenarios, capacity_minutes, &started, &dir)
        })
    };
    drop(sampler);

    let mut t = Table(Vec::new());
    let raw_rps = raw.as_ref().map(|(p, _)| p.rps).unwrap_or(f64::NAN);
    let of_raw = |x: f64| {
        if raw_rps.is_finite() && raw_rps > 0.0 {
            format!("{:.1} % of raw EVALSHA", 100.0 * x / raw_rps)
        } else {
            String::new()
        }
    };
    match &raw {
        Ok((p, pp)) => {
            t.row(
                "raw `EVALSHA` admit.lua, `redis-benchmark -c 50`",
                format!(
                    "{}/s, p50 {:.2} ms, p99 {:.2} ms; {:.1} µs of server time per call; {:.0} % admitted",
                    thousands(p.rps),
                    p.p50_ms,
                    p.p99_ms,
                    p.usec_per_call,
                    100.0 * p.admitted as f64 / p.calls.max(1) as f64
                ),
                "100 % (the reference)",
            );
            t.row(
                "same, pipelined `-P 16`",
                format!(
                    "{}/s, p99 {:.2} ms; {:.1} µs per call; {:.0} % admitted",
                    thousands(pp.rps),
                    pp.p99_ms,
                    pp.usec_per_call,
                    100.0 * pp.admitted as f64 / pp.calls.max(1) as f64
                ),
                format!("{:.1} × raw", pp.rps / p.rps),
            );
        }
        Err(e) => t.failed("raw `EVALSHA` (redis-benchmark)", e),
    }
    match &ledger {
        Ok((rate, p99)) => t.row(
            "admission script through the ledger (`admission_rate`, 64 tasks)",
            format!("{}/s, p99 {} µs", thousands(*rate), thousands(*p99)),
            of_raw(*rate),
        ),
        Err(e) => t.failed("admission script through the ledger", e),
    }
    for (name, b) in [("embedded", &embedded), ("Redis", &redis)] {
        match b {
            Ok(b) => {
                t.row(
                    format!("`POST /bookings` closed loop, 64 clients, {name}"),
                    format!(
                        "{}/s, p99 {:.1} ms; {} bookings per system CPU-second",
                        thousands(b.closed_rate),
                        b.closed_p99_ms,
                        thousands(b.per_system_cpu_s)
                    ),
                    if name == "Redis" {
                        format!("{} (target ≥ 20 %)", of_raw(b.closed_rate))
                    } else {
                        of_raw(b.closed_rate)
                    },
                );
                t.row(
                    format!("`POST /bookings` paced 2,000/s, {name}"),
                    format!(
                        "p99 {:.1} ms ({} not created, {} sent > 5 ms late)",
                        b.paced_p99_ms,
                        thousands(b.paced_not_created),
                        thousands(b.paced_late)
                    ),
                    "",
                );
            }
            Err(e) => t.failed(&format!("`POST /bookings`, {name}"), e),
        }
    }
    match &cap {
        Ok(c) => {
            for s in &c.stacks {
                let closed = match s.stack.as_str() {
                    "embedded" => embedded.as_ref().ok().map(|b| b.closed_rate),
                    _ => redis.as_ref().ok().map(|b| b.closed_rate),
                };
                let figure = match (s.highest_held, s.highest_held_p99_ms) {
                    (Some(r), Some(p)) => format!(
                        "{}/s held, booking p99 {p:.1} ms; above it ({}/s) broke: {}",
                        thousands(r),
                        s.broke_at.map_or("-".to_owned(), thousands),
                        if s.broke.is_empty() {
                            s.stop.describe().to_owned()
                        } else {
                            s.broke
                                .iter()
                                .map(capacity::Broken::describe)
                                .collect::<Vec<_>>()
                                .join(", ")
                        }
                    ),
                    _ => format!("no rate held ({})", s.stop.describe()),
                };
                let ratio = match (s.highest_held, closed) {
                    (Some(r), Some(c)) if c > 0.0 => format!("{:.2} × closed loop", r / c),
                    _ => String::new(),
                };
                t.row(
                    format!("capacity, {} (`scenarios capacity`)", s.stack),
                    figure,
                    ratio,
                );
            }
        }
        Err(e) => t.failed("capacity (`scenarios capacity`)", e),
    }
    for (name, g) in [("embedded", &gen_embedded), ("Redis", &gen_redis)] {
        match g {
            Ok(g) => {
                let system = g.booking_s + g.redis_s;
                // CPU ms per 1,000 requests = CPU µs per request
                let per_k = 1e6 * g.load_generator_s / g.load_requests.max(1) as f64;
                t.row(
                    format!("generator vs system at 2,000 bookings/s, {name} (`rehearse --target`, {:.1} s rush, caps × {CAP_FACTOR} so every booking is admitted)", g.rush_s),
                    format!(
                        "achieved {}/s, p99 {:.1} ms{}; CPU s: generator {:.2}, booking {:.2}{}, mock gateway {:.2}; generator {:.1} ms CPU per 1,000 requests ({} requests)",
                        thousands(g.achieved_rate),
                        g.booking_p99_ms,
                        if g.broken.is_empty() {
                            String::new()
                        } else {
                            format!(" (broke: {})", g.broken.join(", "))
                        },
                        g.generator_s,
                        g.booking_s,
                        if name == "Redis" { format!(", redis-server {:.2}", g.redis_s) } else { String::new() },
                        g.mock_s,
                        per_k,
                        thousands(g.load_requests as f64)
                    ),
                    format!("generator / system = {:.2} (target < 0.25)", g.generator_s / system.max(1e-9)),
                );
                if let Some(w) = &g.wrk {
                    let wrk_per_k = 1e6 * w.cpu_s / w.requests.max(1.0);
                    t.row(
                        format!("`wrk -t1 -c{WRK_CONNECTIONS}` closed loop, same `POST /bookings`, {name}"),
                        format!(
                            "{}/s, {} requests ({} not 2xx), {:.2} CPU s: {:.1} ms per 1,000 requests",
                            thousands(w.rps),
                            thousands(w.requests),
                            thousands(w.non_2xx),
                            w.cpu_s,
                            wrk_per_k
                        ),
                        format!("generator / wrk = {:.1} × per request", per_k / wrk_per_k.max(1e-9)),
                    );
                }
            }
            Err(e) => t.failed(&format!("generator vs system, {name}"), e),
        }
    }
    println!(
        "sellout bench: {} cores, release build, load average {load_before} before, {} after, {:.0} s",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        capacity::loadavg(),
        t0.elapsed().as_secs_f64()
    );
    println!();
    t.print();
    eprintln!("bench: logs and run folders in {}", dir.display());
    if !started.lock().is_empty() {
        bail!("processes left: {:?}", started.lock());
    }
    Ok(())
}
