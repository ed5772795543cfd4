//! How fast the whole-sale simulation runs: K seeds of the article's sale
//! (40,000 candidates, 20,700 seats, 2,000 admissions/s for 25 s, 10-minute
//! holds, 20-second sweeps), each on its own paused current-thread runtime,
//! on JOBS threads at once, under the faults of SCHEDULE (a TOML file) if
//! given. Prints each sale's figures, then simulated sales per minute of wall
//! time.
//!
//! `cargo run --release -p chaos --example sim_rate -- [K] [CANDIDATES] [JOBS] [SCHEDULE]`
//! (defaults: 5 seeds, 40,000 candidates, 1 thread, no faults).

use std::sync::Mutex;
use std::time::Instant;

use anyhow::{Context, bail};
use chaos::Schedule;
use chaos::sim::{self, SimConfig, SimReport};

// the allocator the `chaos` binary runs its sales with (glibc's malloc was
// half of a sale's time: 40,000 tasks' allocations)
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn arg<T: std::str::FromStr>(
    args: &mut impl Iterator<Item = String>,
    what: &str,
    default: T,
) -> anyhow::Result<T> {
    match args.next() {
        Some(a) => a
            .parse()
            .ok()
            .with_context(|| format!("{what}: not a number")),
        None => Ok(default),
    }
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let k: u64 = arg(&mut args, "K", 5)?;
    let candidates: usize = arg(&mut args, "CANDIDATES", sim::ARTICLE_CANDIDATES)?;
    let jobs: u64 = arg(&mut args, "JOBS", 1)?;
    let schedule = match args.next() {
        Some(path) => Schedule::load(std::path::Path::new(&path))
            .and_then(|s| s.validate().map(|()| s))
            .with_context(|| format!("schedule {path}"))?,
        None => Schedule::default(),
    };
    if k == 0 || jobs == 0 || candidates == 0 {
        bail!("K, CANDIDATES and JOBS must be at least 1");
    }
    let started = Instant::now();
    let reports: Mutex<Vec<Result<SimReport, sim::SimError>>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for job in 0..jobs {
            let (reports, schedule) = (&reports, &schedule);
            scope.spawn(move || {
                for seed in (1..=k).filter(|s| s % jobs == job) {
                    let report = sim::run(&SimConfig {
                        schedule: schedule.clone(),
                        ..SimConfig::scaled(seed, candidates)
                    });
                    if let Ok(r) = &report {
                        println!("{}", r.summary());
                    }
                    if let Ok(mut all) = reports.lock() {
                        all.push(report);
                    }
                }
            });
        }
    });
    let wall = started.elapsed();
    let reports = reports
        .into_inner()
        .map_err(|_| anyhow::anyhow!("a simulation thread panicked"))?;
    let mut walls = Vec::new();
    let mut virtual_secs = 0u64;
    let mut failed = Vec::new();
    for report in reports {
        let report = report?;
        if !report.passed {
            for c in report.checks.iter().filter(|c| !c.passed) {
                println!("  seed {} {}: {}", report.seed, c.name, c.detail);
            }
            failed.push(report.seed);
        }
        virtual_secs += report.virtual_secs;
        walls.push(report.wall_ms);
    }
    walls.sort_unstable();
    let mean_ms = walls.iter().sum::<u64>() as f64 / walls.len() as f64;
    println!(
        "{k} sales of {candidates} candidates on {jobs} thread(s) in {:.1} s wall: \
         {:.1} simulated sales per minute; {mean_ms:.0} ms wall a sale \
         (fastest {} ms, slowest {} ms) for {:.0} virtual s, {:.0}x real time",
        wall.as_secs_f64(),
        k as f64 * 60.0 / wall.as_secs_f64(),
        walls.first().copied().unwrap_or(0),
        walls.last().copied().unwrap_or(0),
        virtual_secs as f64 / k as f64,
        virtual_secs as f64 * 1_000.0 / (mean_ms * k as f64),
    );
    if !failed.is_empty() {
        bail!("seeds {failed:?} failed their checks");
    }
    Ok(())
}
