//! `chaos`: fault schedules run against whole sales, the matrix of every
//! built-in schedule across seeds, and the bug zoo.
//!
//! - `chaos run --schedule NAME|FILE --seed N`: one sale in virtual time
//!   under the schedule's faults; prints what each fault did, what the
//!   system did about it (undos, redeliveries, extensions, alerts, dead
//!   letters) and every check.
//! - `chaos matrix [--profile ci|soak]`: every built-in schedule × seeds,
//!   one line per run, the seed and command that reproduce any failure.
//! - `chaos zoo`: every bug of the zoo switched on in turn; a table of the
//!   invariant that caught it and the seconds it took.
//!
//! `matrix` and `zoo` write into `--out` (default [`DEFAULT_OUT`], beside
//! the rehearsals' run folders, which git ignores): their JSON, their
//! Markdown table and their JUnit XML (`matrix.junit.xml`,
//! `rehearsal-matrix.junit.xml`, `zoo.junit.xml`) for CI's test reporters.
//!
//! Exit status: 0 when everything held (every zoo row caught), 1 when a
//! check failed (or a bug went uncaught), 2 when the command could not run.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, bail};
use booking::{Bug, Bugs};
use chaos::matrix::{self, MatrixProfile, MatrixRun};
use chaos::schedule::Schedule;
use chaos::sim::{self, SimConfig};
use chaos::zoo::{self, Harness, ZooRow};
use clap::{Parser, Subcommand};

/// Where `matrix` and `zoo` write by default: under `reports/runs/`, which
/// git ignores.
const DEFAULT_OUT: &str = "reports/runs/chaos";

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Faults, the matrix and the bug zoo.
#[derive(Debug, Parser)]
#[command(name = "chaos", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    log: service_main::LogArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// One sale in virtual time under a fault schedule.
    Run {
        /// A built-in schedule's name (`chaos run --list`) or a TOML file.
        #[arg(long, default_value = "calm")]
        schedule: String,
        /// The seed: arrivals, payers and every fault's coin.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Candidates (seats and the burst scale with them).
        #[arg(long, default_value_t = sim::ARTICLE_CANDIDATES)]
        candidates: usize,
        /// Switch a bug of the zoo on (repeat).
        #[arg(long, value_parser = parse_bug)]
        bug: Vec<Bug>,
        /// Also write the report as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// List the built-in schedules and exit.
        #[arg(long)]
        list: bool,
    },
    /// Every built-in schedule across seeds.
    Matrix {
        /// `ci` (3 seeds, 2,000 candidates) or `soak` (10 seeds, 40,000).
        #[arg(long, value_enum, default_value = "ci")]
        profile: MatrixProfile,
        /// Seeds per schedule (overrides the profile's).
        #[arg(long)]
        seeds: Option<u64>,
        /// Candidates per sale (overrides the profile's).
        #[arg(long)]
        candidates: Option<usize>,
        /// Threads (default: the machine's cores).
        #[arg(long)]
        jobs: Option<usize>,
        /// Where `matrix.json`, `matrix.md` and `matrix.junit.xml` go (with
        /// --rehearsal: `rehearsal-matrix.*` and the run folders).
        #[arg(long, default_value = DEFAULT_OUT)]
        out: PathBuf,
        /// Rehearsals instead of sales in virtual time: the built-in
        /// rehearsal schedules (process, link, port and gateway faults) on a
        /// fleet of three `booking serve` processes over a private
        /// redis-server (`ci`: one seed of each short schedule; `soak`: the
        /// headline at 2,000 bookings/s, three seeds). Needs the `booking`
        /// binary built beside this one.
        #[arg(long)]
        rehearsal: bool,
    },
    /// Every bug of the zoo, switched on in turn, must be caught.
    Zoo {
        /// Only these bugs (repeat; default: all).
        #[arg(long, value_parser = parse_bug)]
        bug: Vec<Bug>,
        /// Also run each rehearsal row's control (the same run without the
        /// bug, which must pass); sim rows always run theirs.
        #[arg(long)]
        controls: bool,
        /// Where `zoo.json`, `zoo.md`, `zoo.junit.xml` and the rehearsals'
        /// run folders go.
        #[arg(long, default_value = DEFAULT_OUT)]
        out: PathBuf,
    },
}

fn parse_bug(s: &str) -> Result<Bug, String> {
    Bug::parse(s).ok_or_else(|| {
        let names: Vec<&str> = Bug::ALL.iter().map(|b| b.name()).collect();
        format!("no bug {s:?}; the zoo has {}", names.join(", "))
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // the zoo's bugged systems log what they do wrong; the checks report it
    if let Err(e) = service_main::init_logging(cli.log.log_format, "chaos=info,off") {
        eprintln!("error: logging: {e}");
        return ExitCode::from(2);
    }
    let result = match cli.command {
        Command::Run {
            schedule,
            seed,
            candidates,
            bug,
            json,
            list,
        } => {
            if list {
                for (name, _) in matrix::SCHEDULES {
                    println!("{name}");
                }
                Ok(true)
            } else {
                run(&schedule, seed, candidates, bug, json.as_deref())
            }
        }
        Command::Matrix {
            profile,
            seeds,
            candidates,
            jobs,
            out,
            rehearsal,
        } => {
            if rehearsal {
                run_rehearsal_matrix(profile, seeds, &out)
            } else {
                run_matrix(profile, seeds, candidates, jobs, &out)
            }
        }
        Command::Zoo { bug, controls, out } => run_zoo(&bug, controls, &out),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("chaos: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn load_schedule(name: &str) -> anyhow::Result<Schedule> {
    if let Some(builtin) = matrix::builtin(name) {
        return builtin.map_err(anyhow::Error::msg);
    }
    if faults::builtin::rehearsal_names().contains(&name) {
        bail!(
            "{name} is a rehearsal schedule: `scenarios rehearse --fleet processes --faults {name}` or `chaos matrix --rehearsal` carry it out"
        );
    }
    let path = Path::new(name);
    if !path.exists() {
        let names: Vec<&str> = matrix::SCHEDULES.iter().map(|(n, _)| *n).collect();
        bail!(
            "no schedule {name:?}: neither a file nor a built-in ({})",
            names.join(", ")
        );
    }
    let schedule = Schedule::load(path).with_context(|| format!("schedule {name}"))?;
    schedule
        .validate()
        .with_context(|| format!("schedule {name}"))?;
    // the sale in virtual time has ports only: no process, link or rule
    schedule
        .check_scopes("the sale in virtual time", &[faults::Scope::Port])
        .with_context(|| format!("schedule {name}"))?;
    Ok(schedule)
}

fn run(
    schedule: &str,
    seed: u64,
    candidates: usize,
    bugs: Vec<Bug>,
    json: Option<&Path>,
) -> anyhow::Result<bool> {
    let config = SimConfig {
        schedule: load_schedule(schedule)?,
        bugs: Bugs::of(bugs),
        ..SimConfig::scaled(seed, candidates)
    };
    let report = sim::run(&config)?;
    println!("{}", report.summary());
    if !report.faults.is_empty() {
        println!("\nfaults (what fired, and what it cost):");
        println!(
            "  {:<28} {:<12} {:<12} {:>8} {:>8} {:>8} {:>10}",
            "fault", "target", "kind", "calls", "fired", "applied", "delay ms"
        );
        for f in &report.faults {
            println!(
                "  {:<28} {:<12} {:<12} {:>8} {:>8} {:>8} {:>10}",
                f.fault,
                f.target.to_string(),
                f.kind,
                f.calls,
                f.fired,
                f.resets_applied,
                f.delayed_ms
            );
        }
    }
    println!(
        "\nwhat the system did about it: {} admissions undone, {} redeliveries, \
         {} holds extended, {} alerts, {} dead letters, {} released",
        report.undone,
        report.redelivered,
        report.extended,
        report.alerts,
        report.dead_letters,
        report.released
    );
    println!("\nchecks:");
    for c in &report.checks {
        println!(
            "  {} {:<36} {}",
            if c.passed { "ok  " } else { "FAIL" },
            c.name,
            c.detail
        );
    }
    if let Some(path) = json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(report.passed)
}

fn run_matrix(
    profile: MatrixProfile,
    seeds: Option<u64>,
    candidates: Option<usize>,
    jobs: Option<usize>,
    out: &Path,
) -> anyhow::Result<bool> {
    let (default_seeds, default_candidates) = profile.size();
    let seeds = seeds.unwrap_or(default_seeds);
    let candidates = candidates.unwrap_or(default_candidates);
    let jobs = jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    eprintln!(
        "chaos matrix: {} schedules × {seeds} seeds, {candidates} candidates a sale, {jobs} threads",
        matrix::SCHEDULES.len()
    );
    let summary = matrix::run(seeds, candidates, jobs, &|r: &MatrixRun| {
        println!("{}", r.line())
    })
    .map_err(anyhow::Error::msg)?;
    println!("\n{}", summary.table());
    println!(
        "{} sales in {:.1} s on {} threads: {:.1} simulated sales per minute",
        summary.runs.len(),
        summary.wall_ms as f64 / 1_000.0,
        summary.jobs,
        summary.sales_per_minute()
    );
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    std::fs::write(
        out.join("matrix.json"),
        serde_json::to_string_pretty(&summary)?,
    )?;
    std::fs::write(out.join("matrix.md"), summary.table())?;
    write_junit(out, "matrix.junit.xml", &summary.junit())?;
    let failed: Vec<&MatrixRun> = summary.runs.iter().filter(|r| !r.passed).collect();
    for r in &failed {
        println!(
            "FAILED {} seed {}: reproduce with {}",
            r.schedule,
            r.seed,
            r.reproduce()
        );
    }
    Ok(failed.is_empty())
}

fn run_rehearsal_matrix(
    profile: MatrixProfile,
    seeds: Option<u64>,
    out: &Path,
) -> anyhow::Result<bool> {
    use chaos::rehearsal_matrix::{self as rm, RehearsalRun};
    let (rehearsal_profile, schedules, seeds) = rm::plan(profile, seeds);
    eprintln!(
        "chaos matrix --rehearsal: {} schedule(s) × {seeds} seed(s) on the {rehearsal_profile} profile, {} process instances on a private redis-server each",
        schedules.len(),
        rm::INSTANCES
    );
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("building the runtime")?;
    let started = Instant::now();
    let runs_dir = out.join("rehearsal-runs");
    let mut runs: Vec<RehearsalRun> = Vec::new();
    for schedule in &schedules {
        for seed in 1..=seeds {
            let r = runtime.block_on(rm::run_one(rehearsal_profile, schedule, seed, &runs_dir));
            println!("{}", r.line());
            runs.push(r);
        }
    }
    let table = rm::table(&runs);
    println!("\n{table}");
    let failed = runs.iter().filter(|r| !r.passed).count();
    println!(
        "{} of {} rehearsals passed in {:.1} s",
        runs.len() - failed,
        runs.len(),
        started.elapsed().as_secs_f64()
    );
    std::fs::write(
        out.join("rehearsal-matrix.json"),
        serde_json::to_string_pretty(&runs)?,
    )?;
    std::fs::write(out.join("rehearsal-matrix.md"), table)?;
    let wall_ms = started.elapsed().as_millis() as u64;
    write_junit(
        out,
        "rehearsal-matrix.junit.xml",
        &rm::junit(&runs, wall_ms),
    )?;
    Ok(failed == 0)
}

fn run_zoo(only: &[Bug], controls: bool, out: &Path) -> anyhow::Result<bool> {
    let cases: Vec<_> = zoo::cases()
        .into_iter()
        .filter(|c| only.is_empty() || only.contains(&c.bug))
        .collect();
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("building the runtime")?;
    let started = Instant::now();
    let mut rows: Vec<ZooRow> = Vec::new();
    for case in &cases {
        eprintln!("zoo: {} on the {} …", case.bug, case.harness.name());
        let row = match &case.harness {
            Harness::Sim(config) => zoo::run_sim_case(case, config),
            Harness::Rehearsal {
                sets,
                redis_one_way_ms,
            } => runtime.block_on(chaos::rehearsal::run_rehearsal_case(
                case,
                sets,
                *redis_one_way_ms,
                &out.join("zoo-runs"),
                controls,
            )),
        };
        eprintln!(
            "zoo: {} {} in {:.1} s{}",
            row.bug,
            if row.caught {
                format!("caught by {}", row.caught_by.join(", "))
            } else {
                format!("NOT CAUGHT (failed: {})", row.failed.join(", "))
            },
            row.secs,
            match row.control_passed {
                Some(true) => "; control passes",
                Some(false) => "; CONTROL FAILS",
                None => "",
            }
        );
        rows.push(row);
    }
    let table = zoo::table(&rows);
    println!("{table}");
    let ok = rows.iter().filter(|r| r.ok()).count();
    let mut bugs: Vec<&str> = rows.iter().map(|r| r.bug.as_str()).collect();
    bugs.sort_unstable();
    bugs.dedup();
    println!(
        "{ok} of {} zoo rows caught ({} bug{}) in {:.1} s",
        rows.len(),
        bugs.len(),
        if bugs.len() == 1 { "" } else { "s" },
        started.elapsed().as_secs_f64()
    );
    std::fs::write(out.join("zoo.json"), serde_json::to_string_pretty(&rows)?)?;
    std::fs::write(out.join("zoo.md"), &table)?;
    let secs = started.elapsed().as_secs_f64();
    write_junit(out, "zoo.junit.xml", &zoo::junit(&rows, secs))?;
    Ok(ok == rows.len())
}

/// Writes `suite` as JUnit XML to `out/name` (the reports crate's writer).
fn write_junit(out: &Path, name: &str, suite: &reports::junit::TestSuite) -> anyhow::Result<()> {
    let path = out.join(name);
    std::fs::write(
        &path,
        reports::junit::render(&suite.name, std::slice::from_ref(suite)),
    )
    .with_context(|| format!("writing {}", path.display()))?;
    tracing::info!(path = %path.display(), tests = suite.cases.len(), failures = suite.failures(), "wrote the JUnit XML");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// The default output folder is under `reports/runs/`, which the
    /// repository's .gitignore ignores (a run never dirties the tree).
    #[test]
    fn the_default_out_is_under_the_ignored_runs_folder() {
        assert!(DEFAULT_OUT.starts_with("reports/runs/"));
        let gitignore = include_str!("../../.gitignore");
        assert!(
            gitignore.lines().any(|l| l.trim() == "/reports/runs/"),
            "{gitignore}"
        );
        let cli = Cli::command();
        for sub in ["matrix", "zoo"] {
            let out: Option<Vec<String>> = cli
                .find_subcommand(sub)
                .and_then(|c| c.get_arguments().find(|a| a.get_id() == "out"))
                .map(|a| {
                    a.get_default_values()
                        .iter()
                        .map(|v| v.to_string_lossy().into_owned())
                        .collect()
                });
            assert_eq!(out, Some(vec![DEFAULT_OUT.to_owned()]), "{sub}");
        }
    }
}
