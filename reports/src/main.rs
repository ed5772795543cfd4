//! `reports`: re-render run folders, compare two runs, merge the shards of
//! a sharded load.
//!
//! Exit codes: 0 done, 1 a file could not be written (and, for `merge`, the
//! merged run failed a verdict), 2 bad input (a missing file, invalid JSON,
//! bad arguments, reports that are not shards of one run).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use reports::ReportError;

/// Renders rehearsal reports (SPEC §6).
#[derive(Debug, Parser)]
#[command(name = "reports", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Re-render report.html and summary.md from each run's report.json.
    Render {
        /// Run folders or report.json files.
        #[arg(required = true)]
        runs: Vec<PathBuf>,
    },
    /// Compare two runs: Markdown to stdout, and an HTML page if asked.
    Compare {
        /// The baseline run (folder or report.json).
        a: PathBuf,
        /// The run compared with it.
        b: PathBuf,
        /// Also write the comparison as one HTML page here.
        #[arg(long, value_name = "FILE.html")]
        out: Option<PathBuf>,
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
                println!("{}\n{}", w.html.display(), w.markdown.display());
            }
        }
        Command::Compare { a, b, out } => {
            let (ra, rb) = (reports::load_report(&a)?, reports::load_report(&b)?);
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
            eprintln!("wrote {}\nwrote {}", w.html.display(), w.markdown.display());
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
