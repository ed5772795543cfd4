//! `reports`: re-render run folders, compare two runs, merge the shards of
//! a sharded load.
//!
//! Exit codes: 0 done, 1 a file could not be written (and, for `merge`, the
//! merged run failed a verdict; for `compare --fail-on`, a gate failed), 2
//! bad input (a missing file, invalid JSON, bad arguments, a gate naming no
//! figure or one only one run has, reports that are not shards of one run).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use reports::ReportError;
use reports::gate::Gate;

/// Renders rehearsal reports (SPEC §6).
#[derive(Debug, Parser)]
#[command(name = "reports", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Re-render report.html, summary.md and junit.xml from each run's
    /// report.json.
    Render {
        /// Run folders or report.json files.
        #[arg(required = true)]
        runs: Vec<PathBuf>,
    },
    /// Compare two runs: Markdown to stdout, and an HTML page if asked;
    /// with --fail-on, exit 1 when B regressed past a gate.
    Compare {
        /// The baseline run (folder or report.json).
        a: PathBuf,
        /// The run compared with it.
        b: PathBuf,
        /// Also write the comparison as one HTML page here.
        #[arg(long, value_name = "FILE.html")]
        out: Option<PathBuf>,
        /// A regression gate (repeat): `booking_p99_ms=+10%` fails when B's
        /// figure is more than 10 % above A's, `rush_rate=-2%` when it is
        /// more than 2 % below; `booking_p99_ms=+5` allows 5 units (ms).
        /// Figures: the comparison's in snake_case (`rush_rate`,
        /// `server_errors`, `queue_age_max_ms`, …) and every transaction's
        /// `<name>_p50_ms`, `_p90_ms`, `_p99_ms`, `_p999_ms`, `_max_ms`
        /// from its HDR histogram.
        #[arg(long = "fail-on", value_name = "FIGURE=±N%", value_parser = Gate::parse)]
        fail_on: Vec<Gate>,
    },
    /// Join the reports of every shard of one sharded load (`scenarios
    /// rehearse --shard INDEX/COUNT`) into one run folder: percentiles from
    /// the merged HDR histograms, counts summed, the timeline on the shared
    /// wall clock, the verdicts on the load judged again.
    Merge {
        /// Every shard's run folder or report.json, in any order.
        #[arg(required = true)]
        shards: Vec<PathBuf>,
        /// The folder to write report.json, report.html and summary.md into.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
}

/// Runs the command; errors say which file and why. `Ok(false)`: a merged
/// run that failed a verdict.
fn run(cli: Cli) -> Result<bool, ReportError> {
    match cli.command {
        Command::Render { runs } => {
            for run in runs {
                let w = reports::render_dir(&run)?;
                println!(
                    "{}\n{}\n{}",
                    w.html.display(),
                    w.markdown.display(),
                    w.junit.display()
                );
            }
        }
        Command::Compare { a, b, out, fail_on } => {
            let (ra, rb) = (reports::load_report(&a)?, reports::load_report(&b)?);
            // a gate naming no figure is bad input: said before anything else
            let judged = reports::gate::check(&fail_on, &ra, &rb)?;
            let c = reports::compare(&ra, &rb);
            print!("{}", reports::markdown::render_comparison(&c));
            if let Some(path) = out {
                let page = reports::html::render_comparison(&ra, &rb, &c);
                std::fs::write(&path, page).map_err(|source| ReportError::Write {
                    path: path.clone(),
                    source,
                })?;
                eprintln!("wrote {}", path.display());
            }
            if !judged.is_empty() {
                println!("\n### Gates\n");
                for j in &judged {
                    println!("- {}", j.line());
                }
            }
            return Ok(judged.iter().all(|j| j.passed));
        }
        Command::Merge { shards, out } => {
            let reports = shards
                .iter()
                .map(|p| reports::load_report(p))
                .collect::<Result<Vec<_>, _>>()?;
            let merged = reports::merge(&reports)?;
            let w = reports::write_run(&out, &merged)?;
            print!("{}", reports::markdown::render_summary(&merged));
            if let Some(json) = &w.json {
                eprintln!("wrote {}", json.display());
            }
            eprintln!(
                "wrote {}\nwrote {}\nwrote {}",
                w.html.display(),
                w.markdown.display(),
                w.junit.display()
            );
            return Ok(merged.passed);
        }
    }
    Ok(true)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("reports: {e}");
            ExitCode::from(if e.is_bad_input() { 2 } else { 1 })
        }
    }
}
