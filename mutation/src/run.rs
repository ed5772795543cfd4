//! Runs cargo-mutants over a [`Scope`], in shards when a time cap is set.
//!
//! A capped run (CI) splits the scope's mutants into `shards` round-robin
//! shards and runs them one after another, starting at `start`, until the
//! next shard would not fit in the cap: its mutants (counted with
//! `--list`) at the time per mutant the run has seen so far. The first
//! step always runs. Successive CI runs start at successive shards, so
//! every mutant is tried within `shards` landings while each run stays
//! inside its budget.
//!
//! Mutants are tested in place (cargo-mutants restores each file after its
//! mutant, and on Ctrl-C): the workspace's own `target/` is reused, so no
//! mutant pays for a cold build.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::outcomes::{self, Row};
use crate::targets::Scope;

/// How to run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Which mutants.
    pub scope: Scope,
    /// Where each shard's `mutants.out` goes (`<out>/shard-<k>`).
    pub out: PathBuf,
    /// Round-robin shards the scope is cut into (1: the whole scope at once).
    pub shards: u32,
    /// The first shard to run (0-based; taken modulo `shards`).
    pub start: u32,
    /// Stop starting shards once the next would end past this.
    pub cap: Option<Duration>,
    /// Per-mutant test timeout, seconds (cargo-mutants' `--timeout`).
    pub timeout_s: u32,
    /// Run the unmutated tests first (else assume they pass: the CI step
    /// runs right after the workspace's tests).
    pub baseline: bool,
    /// Only these packages of the scope (empty: all).
    pub packages: Vec<String>,
    /// Mutate the source tree itself (reusing `target/`), else a copy of
    /// it that cargo-mutants builds from cold (the tree stays editable).
    pub in_place: bool,
    /// First the mutants on lines changed since this revision (`git diff`),
    /// whole, then the shards: what a commit changed on the money path is
    /// always tried in the run that lands it.
    pub changed_since: Option<String>,
}

/// One cargo-mutants invocation of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The mutants on the lines of a diff (`--in-diff`).
    Changed,
    /// One round-robin shard of the scope.
    Shard(u32),
}

/// What a run did.
#[derive(Debug)]
pub struct Ran {
    /// Every tested mutant.
    pub rows: Vec<Row>,
    /// The shards run, in order.
    pub shards_run: Vec<u32>,
    /// The shards left out by the cap.
    pub shards_skipped: Vec<u32>,
    /// Mutants tried because their lines changed.
    pub changed: usize,
}

/// The cargo-mutants command line of one step: a shard of `plan.shards`,
/// or the mutants of the diff in `<out>/changed.diff`.
pub fn command(plan: &Plan, step: Step, baseline: bool) -> Vec<String> {
    let mut args: Vec<String> = vec!["mutants".into(), "--no-shuffle".into()];
    if plan.in_place {
        args.push("--in-place".into());
    } else {
        // the copy starts from the workspace's build: only workspace crates rebuild
        args.extend(["--copy-target".into(), "true".into()]);
    }
    for t in plan.scope.targets() {
        if !plan.packages.is_empty() && !plan.packages.iter().any(|p| p == t.package) {
            continue;
        }
        args.extend(["--package".into(), t.package.into()]);
        for f in t.files {
            args.extend(["--file".into(), (*f).into()]);
        }
    }
    args.extend([
        "--timeout".into(),
        plan.timeout_s.to_string(),
        "--baseline".into(),
        if baseline { "run" } else { "skip" }.into(),
        "--output".into(),
        step_dir(&plan.out, step).display().to_string(),
        "--colors".into(),
        "never".into(),
    ]);
    match step {
        Step::Changed => {
            args.extend([
                "--in-diff".into(),
                diff_path(&plan.out).display().to_string(),
            ]);
        }
        Step::Shard(shard) if plan.shards > 1 => {
            args.extend([
                "--shard".into(),
                format!("{shard}/{}", plan.shards),
                "--sharding".into(),
                "round-robin".into(),
            ]);
        }
        Step::Shard(_) => {}
    }
    args
}

fn step_dir(out: &Path, step: Step) -> PathBuf {
    match step {
        Step::Changed => out.join("changed"),
        Step::Shard(shard) => out.join(format!("shard-{shard}")),
    }
}

fn diff_path(out: &Path) -> PathBuf {
    out.join("changed.diff")
}

/// `git diff <since>` of the scope's files; `None` when they did not change.
fn changed_diff(root: &Path, plan: &Plan, since: &str) -> anyhow::Result<Option<String>> {
    let mut cmd = Command::new("git");
    cmd.args(["diff", "--no-color", "--no-ext-diff", since, "--"])
        .current_dir(root);
    for t in plan.scope.targets() {
        for f in t.files {
            cmd.arg(format!(":(glob){f}"));
        }
    }
    let out = cmd.output().context("running git diff")?;
    anyhow::ensure!(
        out.status.success(),
        "git diff {since}: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let text = String::from_utf8(out.stdout).context("a diff that is not UTF-8")?;
    Ok((!text.trim().is_empty()).then_some(text))
}

/// The shards in run order: `start`, `start + 1`, … modulo `shards`.
pub fn order(shards: u32, start: u32) -> Vec<u32> {
    assert!(shards > 0, "at least one shard");
    (0..shards).map(|i| (start + i) % shards).collect()
}

/// Whether the next step fits: `None` when nothing ran yet (it runs);
/// else it must end inside the cap at the estimated duration.
pub fn fits(elapsed: Duration, estimate: Option<Duration>, cap: Option<Duration>) -> bool {
    match (cap, estimate) {
        (None, _) | (_, None) => true,
        (Some(cap), Some(estimate)) => elapsed + estimate <= cap,
    }
}

/// The time per mutant seen so far; `None` before any mutant ran.
fn per_mutant(spent: Duration, mutants: usize) -> Option<Duration> {
    let n = u32::try_from(mutants).ok().filter(|n| *n > 0)?;
    Some(spent / n)
}

/// How many mutants a shard has (`cargo mutants --list` of it).
fn count_shard(plan: &Plan, root: &Path, shard: u32) -> anyhow::Result<usize> {
    let mut args = command(plan, Step::Shard(shard), false);
    args.push("--list".into());
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(&args)
        .current_dir(root)
        .output()
        .context("running cargo mutants --list")?;
    anyhow::ensure!(
        out.status.success(),
        "cargo mutants --list: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count())
}

/// The folder the Lua pass mutates in place ([`crate::lua_run`]).
pub const LUA_DIR: &str = "system/booking-redis/src/lua";

/// Refuses to run while a Lua pass has a script of this tree mutated: a
/// copy would take the mutant along, and in place the mutant would be
/// built into every test (it happened: a copy's baseline failed on a
/// mutated `release.lua`).
fn refuse_during_lua_pass(root: &Path) -> anyhow::Result<()> {
    let dir = root.join(LUA_DIR);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if let Some(script) = name.strip_suffix(".mutation-orig") {
            anyhow::bail!(
                "{script} in {} is mutated by a Lua pass (its original is {name}): \
                 wait for `mutation lua` to end, or run it again to restore the script",
                dir.display()
            );
        }
    }
    Ok(())
}

/// Runs one cargo-mutants invocation and reads its outcomes.
fn run_step(
    plan: &Plan,
    root: &Path,
    step: Step,
    baseline: bool,
    began: Instant,
) -> anyhow::Result<Vec<Row>> {
    let args = command(plan, step, baseline);
    let what = match step {
        Step::Changed => "the changed lines".to_owned(),
        Step::Shard(k) => format!("shard {k} of {}", plan.shards),
    };
    eprintln!(
        "mutation: {what} ({:.0} s so far): cargo {}",
        began.elapsed().as_secs_f64(),
        args.join(" ")
    );
    let dir = step_dir(&plan.out, step);
    std::fs::create_dir_all(&dir)?;
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(&args)
        .current_dir(root)
        .status()
        .context("running cargo mutants (scripts/setup installs cargo-mutants)")?;
    // 0: all caught; 2: some missed; 3: some timed out (cargo-mutants' exit codes)
    anyhow::ensure!(
        matches!(status.code(), Some(0 | 2 | 3)),
        "cargo mutants failed ({status}) on {what}: see {}",
        dir.join("mutants.out").display()
    );
    if !dir.join("mutants.out").join("outcomes.json").exists() {
        // nothing to mutate on these lines (cargo-mutants wrote no outcomes)
        return Ok(Vec::new());
    }
    outcomes::read_cargo_mutants(&dir)
}

/// Runs the plan from the workspace root `root`.
pub fn run(plan: &Plan, root: &Path) -> anyhow::Result<Ran> {
    refuse_during_lua_pass(root)?;
    let began = Instant::now();
    if plan.out.exists() {
        std::fs::remove_dir_all(&plan.out)
            .with_context(|| format!("clearing {}", plan.out.display()))?;
    }
    // what the steps so far took, and how many mutants they tried
    let (mut spent, mut tried) = (Duration::ZERO, 0usize);
    let mut ran = Ran {
        rows: Vec::new(),
        shards_run: Vec::new(),
        shards_skipped: Vec::new(),
        changed: 0,
    };
    let mut baseline = plan.baseline;
    if let Some(since) = &plan.changed_since {
        match changed_diff(root, plan, since) {
            Ok(Some(diff)) => {
                std::fs::create_dir_all(&plan.out)?;
                std::fs::write(diff_path(&plan.out), diff)?;
                let t = Instant::now();
                let rows = run_step(plan, root, Step::Changed, baseline, began)?;
                (spent, tried) = (spent + t.elapsed(), tried + rows.len());
                baseline = false;
                ran.changed = rows.len();
                ran.rows.extend(rows);
            }
            Ok(None) => eprintln!("mutation: no line of the scope changed since {since}"),
            Err(e) => eprintln!("mutation: no diff against {since} ({e:#}): the shards only"),
        }
    }
    for shard in order(plan.shards, plan.start) {
        let estimate = match (plan.cap, per_mutant(spent, tried)) {
            (Some(_), Some(each)) => {
                let n = count_shard(plan, root, shard)?;
                Some(each * u32::try_from(n).unwrap_or(u32::MAX))
            }
            _ => None,
        };
        if !fits(began.elapsed(), estimate, plan.cap) {
            eprintln!(
                "mutation: shard {shard} left for a later run: about {:.0} s more would pass the cap",
                estimate.unwrap_or_default().as_secs_f64()
            );
            ran.shards_skipped.push(shard);
            continue;
        }
        let t = Instant::now();
        let rows = run_step(plan, root, Step::Shard(shard), baseline, began)?;
        baseline = false;
        (spent, tried) = (spent + t.elapsed(), tried + rows.len());
        // a mutant of the changed lines already tried is not counted twice
        for row in rows {
            if !ran.rows.iter().any(|r| r.name == row.name) {
                ran.rows.push(row);
            }
        }
        ran.shards_run.push(shard);
    }
    Ok(ran)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(shards: u32) -> Plan {
        Plan {
            scope: Scope::Money,
            out: PathBuf::from("target/mutants"),
            shards,
            start: 0,
            cap: None,
            timeout_s: 120,
            baseline: true,
            packages: vec![],
            in_place: true,
            changed_since: None,
        }
    }

    #[test]
    fn a_run_refuses_to_start_while_a_lua_script_is_mutated() {
        let root = std::env::temp_dir().join(format!("mutation-run-{}", std::process::id()));
        let dir = root.join(LUA_DIR);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("admit.lua"), "x").unwrap();
        assert!(refuse_during_lua_pass(&root).is_ok());
        std::fs::write(dir.join("admit.lua.mutation-orig"), "y").unwrap();
        let e = refuse_during_lua_pass(&root).unwrap_err().to_string();
        assert!(e.contains("admit.lua") && e.contains("Lua pass"), "{e}");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn shards_rotate_from_the_start_and_each_runs_once() {
        assert_eq!(order(4, 6), vec![2, 3, 0, 1]);
        assert_eq!(order(1, 9), vec![0]);
    }

    #[test]
    fn a_step_starts_only_if_its_estimate_ends_inside_the_cap() {
        let cap = Some(Duration::from_secs(600));
        let secs = |s| Some(Duration::from_secs(s));
        assert!(fits(Duration::from_secs(400), secs(200), cap));
        assert!(!fits(Duration::from_secs(401), secs(200), cap));
        // nothing ran yet: the first step always runs, even past the cap
        assert!(fits(Duration::from_secs(700), None, cap));
        assert!(fits(Duration::from_secs(10_000), secs(200), None));
        // 9 mutants in 90 s: 10 s each; none yet: no estimate
        assert_eq!(per_mutant(Duration::from_secs(90), 9), secs(10));
        assert_eq!(per_mutant(Duration::from_secs(90), 0), None);
    }

    #[test]
    fn the_command_names_every_file_of_the_scope_and_only_the_asked_packages() {
        let args = command(&plan(6), Step::Shard(4), false).join(" ");
        assert!(
            args.starts_with("mutants --no-shuffle --in-place"),
            "{args}"
        );
        assert!(
            args.contains("--package booking-service --file system/booking-service/src/confirm.rs")
        );
        assert!(args.contains("--file system/booking-redis/src/ledger.rs"));
        assert!(
            args.contains("--shard 4/6 --sharding round-robin"),
            "{args}"
        );
        assert!(args.contains("--baseline skip"), "{args}");
        let mut only = plan(1);
        only.packages = vec!["booking-redis".into()];
        let args = command(&only, Step::Shard(0), true).join(" ");
        assert!(!args.contains("booking-service"), "{args}");
        assert!(!args.contains("--shard"), "{args}");
        assert!(args.contains("--baseline run"), "{args}");
        only.in_place = false;
        assert!(!command(&only, Step::Shard(0), true).contains(&"--in-place".to_owned()));
        let changed = command(&plan(6), Step::Changed, false).join(" ");
        assert!(
            changed.contains("--in-diff target/mutants/changed.diff"),
            "{changed}"
        );
        assert!(
            changed.contains("--output target/mutants/changed"),
            "{changed}"
        );
        assert!(!changed.contains("--shard"), "{changed}");
    }
}
