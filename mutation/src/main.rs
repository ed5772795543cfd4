//! `mutation`: the project's mutation testing (issue 19).
//!
//! - `mutation run --scope core`: cargo-mutants over the core crates
//!   (`just mutants`), the per-file score table, exit 1 when a package is
//!   below the minimum score (90 % of viable mutants caught).
//! - `mutation run --scope money --shards N --minutes M`: the money path's
//!   mutants in rotating shards inside a time cap (the CI step, in
//!   scripts/test).
//! - `mutation lua`: the Redis ledger's Lua scripts mutated and run against
//!   the ledger's tests; the same table.
//! - `mutation summary DIR…`: the table of earlier runs, together.
//!
//! Each run writes `rows.json` (every mutant and its outcome), `summary.md`
//! and `summary.json` into its `--out` folder.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};

use mutation::lua_run::{self, LuaPlan};
use mutation::outcomes::Row;
use mutation::run::{self, Plan};
use mutation::table;
use mutation::targets::Scope;

#[derive(Parser)]
#[command(
    about = "Mutation testing of the money path: cargo-mutants per crate, a Lua pass, the score table"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// cargo-mutants over a scope, then the table.
    Run {
        /// The core crates, or the money path only.
        #[arg(long, value_enum, default_value = "core")]
        scope: Scope,
        /// Where the run's files go (default target/mutants/<scope>).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Cut the scope into this many round-robin shards.
        #[arg(long, default_value_t = 1)]
        shards: u32,
        /// The first shard (default: the commit count of HEAD modulo
        /// `shards`, so successive landings try successive shards).
        #[arg(long)]
        start: Option<u32>,
        /// Start no shard that would end past this many minutes.
        #[arg(long)]
        minutes: Option<f64>,
        /// Per-mutant test timeout, seconds.
        #[arg(long, default_value_t = 180)]
        timeout: u32,
        /// First the mutants on the scope's lines changed since this git
        /// revision (e.g. HEAD~1), then the shards.
        #[arg(long)]
        changed_since: Option<String>,
        /// Skip the unmutated tests (they just passed).
        #[arg(long)]
        no_baseline: bool,
        /// Test in a copy of the tree (built from cold) instead of in
        /// place, so the tree can be edited meanwhile.
        #[arg(long)]
        copy: bool,
        /// Only this package of the scope (repeat).
        #[arg(long = "package", short = 'p')]
        packages: Vec<String>,
        /// The minimum score of each package, percent.
        #[arg(long, default_value_t = 90.0)]
        min_score: f64,
    },
    /// The ledger's Lua scripts mutated, the ledger's tests run on each.
    Lua {
        /// Where the pass's files go.
        #[arg(long, default_value = "target/mutants/lua")]
        out: PathBuf,
        /// Per-mutant timeout, seconds.
        #[arg(long, default_value_t = 300)]
        timeout: u64,
        /// Only scripts whose name contains this (repeat).
        #[arg(long)]
        only: Vec<String>,
        /// List the mutants, run nothing.
        #[arg(long)]
        list: bool,
        /// The minimum score, percent.
        #[arg(long, default_value_t = 90.0)]
        min_score: f64,
    },
    /// The table of earlier runs' folders (each with rows.json), together.
    Summary {
        /// Run folders.
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// The minimum score of each package, percent.
        #[arg(long, default_value_t = 90.0)]
        min_score: f64,
    },
}

/// The Redis ledger's scripts and the tests that run them.
const LEDGER_LUA_DIR: &str = mutation::run::LUA_DIR;
/// The ledger scripts' equivalent mutants, with their reasons.
const LUA_EQUIVALENTS: &str = "mutation/lua-equivalent.txt";
const LEDGER_TESTS: &[&str] = &[
    "cargo",
    "test",
    "--locked",
    "-p",
    "booking-redis",
    "--test",
    "ledger",
    "--test",
    "model_equivalence",
];

fn workspace_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    root.canonicalize().unwrap_or(root)
}

fn commit_count(root: &Path) -> Option<u32> {
    let out = std::process::Command::new("git")
        .args(["rev-list", "--count", "HEAD"])
        .current_dir(root)
        .output()
        .ok()?;
    String::from_utf8(out.stdout).ok()?.trim().parse().ok()
}

/// Writes the run's files and prints the table; whether it passed.
fn report(out: &Path, rows: &[Row], min_score: f64, note: &str) -> anyhow::Result<bool> {
    std::fs::create_dir_all(out)?;
    std::fs::write(out.join("rows.json"), serde_json::to_string_pretty(rows)?)?;
    let summary = table::summarize(rows, min_score);
    let mut text = table::render(&summary);
    if !note.is_empty() {
        text = format!("{note}\n\n{text}");
    }
    std::fs::write(out.join("summary.md"), &text)?;
    std::fs::write(
        out.join("summary.json"),
        serde_json::to_string_pretty(&summary)?,
    )?;
    println!("{text}");
    println!("(written to {})", out.join("summary.md").display());
    Ok(summary.passed())
}

/// A run folder's rows: its rows.json, or a cargo-mutants output folder's
/// outcomes (a run still going or stopped).
fn read_rows(dir: &Path) -> anyhow::Result<Vec<Row>> {
    let path = dir.join("rows.json");
    if !path.exists() {
        return mutation::outcomes::read_cargo_mutants(dir);
    }
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| path.display().to_string())
}

fn main() -> ExitCode {
    match run_cli(Cli::parse()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("mutation: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run_cli(cli: Cli) -> anyhow::Result<bool> {
    let root = workspace_root();
    match cli.command {
        Cmd::Run {
            scope,
            out,
            shards,
            start,
            minutes,
            timeout,
            changed_since,
            no_baseline,
            copy,
            packages,
            min_score,
        } => {
            anyhow::ensure!(shards > 0, "--shards must be at least 1");
            let out = out.unwrap_or_else(|| {
                root.join("target/mutants").join(match scope {
                    Scope::Core => "core",
                    Scope::Money => "money",
                })
            });
            let start = start.or_else(|| commit_count(&root)).unwrap_or(0) % shards;
            let plan = Plan {
                scope,
                out: out.clone(),
                shards,
                start,
                cap: minutes.map(|m| Duration::from_secs_f64(m * 60.0)),
                timeout_s: timeout,
                baseline: !no_baseline,
                packages,
                in_place: !copy,
                changed_since,
            };
            let ran = run::run(&plan, &root)?;
            anyhow::ensure!(
                !ran.rows.is_empty(),
                "no mutant was tested: the cap is shorter than one shard"
            );
            let mut note = String::new();
            if ran.changed > 0 {
                note.push_str(&format!(
                    "{} mutants on lines changed since {}. ",
                    ran.changed,
                    plan.changed_since.as_deref().unwrap_or("?")
                ));
            }
            if shards > 1 {
                note.push_str(&format!(
                    "Shards {:?} of {shards} run; {:?} left for later runs (the time cap).",
                    ran.shards_run, ran.shards_skipped
                ));
            }
            report(&out, &ran.rows, min_score, &note)
        }
        Cmd::Lua {
            out,
            timeout,
            only,
            list,
            min_score,
        } => {
            let equivalents = std::fs::read_to_string(root.join(LUA_EQUIVALENTS))
                .with_context(|| format!("reading {LUA_EQUIVALENTS}"))?;
            let equivalents = mutation::lua::parse_equivalents(&equivalents)
                .map_err(|e| anyhow::anyhow!("{LUA_EQUIVALENTS}: {e}"))?;
            let plan = LuaPlan {
                package: "booking-redis (lua)".into(),
                dir: LEDGER_LUA_DIR.into(),
                test: LEDGER_TESTS.iter().map(|s| (*s).to_owned()).collect(),
                timeout: Duration::from_secs(timeout),
                only,
                equivalents,
            };
            if list {
                let (mutants, left_out) = lua_run::list(&root, &plan)?;
                for (path, m) in mutants {
                    println!(
                        "{}:{m}",
                        path.strip_prefix(&root).unwrap_or(&path).display()
                    );
                }
                eprintln!("({left_out} equivalent mutants left out: {LUA_EQUIVALENTS})");
                return Ok(true);
            }
            let rows = lua_run::run(&root, &plan)?;
            report(&root.join(out), &rows, min_score, "")
        }
        Cmd::Summary { dirs, min_score } => {
            let mut rows = Vec::new();
            for d in &dirs {
                rows.extend(read_rows(d)?);
            }
            let summary = table::summarize(&rows, min_score);
            println!("{}", table::render(&summary));
            Ok(summary.passed())
        }
    }
}
