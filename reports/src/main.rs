//! `reports`: re-render run folders and compare two runs.
//!
//! Exit codes: 0 done, 1 a file could not be written, 2 bad input (a missing
//! file, invalid JSON, bad arguments).

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
}

/// Runs the command; errors say which file and why.
fn run(cli: Cli) -> Result<(), ReportError> {
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
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("reports: {e}");
            ExitCode::from(if e.is_bad_input() { 2 } else { 1 })
        }
    }
}
