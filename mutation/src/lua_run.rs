//! The Lua pass: each mutant of each ledger script ([`crate::lua::mutants`])
//! written over the script, the ledger's tests run (the scripts are
//! `include_str!`ed, so cargo rebuilds what embeds them), the script put
//! back. A failing test run is a caught mutant; one past the timeout, a
//! timeout; a passing one, missed.
//!
//! The original text is kept beside the script (`<script>.mutation-orig`)
//! while its mutant is in, and put back on drop; a run killed hard leaves
//! that file, and the next run restores from it before anything else.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::lua::{self, LuaMutant};
use crate::outcomes::{Outcome, Row};

/// How to run the pass.
#[derive(Debug, Clone)]
pub struct LuaPlan {
    /// The package whose scripts these are (the table's package column).
    pub package: String,
    /// The scripts' folder, relative to the workspace root.
    pub dir: PathBuf,
    /// The test command (program and arguments), run from the root.
    pub test: Vec<String>,
    /// Per-mutant timeout.
    pub timeout: Duration,
    /// Only scripts whose file name contains one of these (empty: all).
    pub only: Vec<String>,
    /// Mutants known not to change behaviour: never run.
    pub equivalents: Vec<lua::Equivalent>,
}

/// Puts a script back when dropped.
struct Restore {
    path: PathBuf,
    backup: PathBuf,
    original: String,
}

impl Drop for Restore {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(&self.path, &self.original) {
            eprintln!(
                "mutation: could not restore {}: {e} (the original is in {})",
                self.path.display(),
                self.backup.display()
            );
            return;
        }
        let _ = std::fs::remove_file(&self.backup);
    }
}

fn backup_of(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(".mutation-orig");
    path.with_file_name(name)
}

/// Puts back any script an earlier, killed run left mutated.
fn recover(dir: &Path) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if let Some(script) = name.strip_suffix(".mutation-orig") {
            let target = path.with_file_name(script);
            std::fs::copy(&path, &target)
                .with_context(|| format!("restoring {}", target.display()))?;
            std::fs::remove_file(&path)?;
            eprintln!(
                "mutation: restored {} from an interrupted run",
                target.display()
            );
        }
    }
    Ok(())
}

/// Runs the test command with a timeout; `None` on timeout (the process
/// group is killed), else whether it passed.
fn run_tests(root: &Path, test: &[String], timeout: Duration) -> anyhow::Result<Option<bool>> {
    use std::os::unix::process::CommandExt;
    let (program, args) = test.split_first().context("an empty test command")?;
    let mut child = Command::new(program)
        .args(args)
        .current_dir(root)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .with_context(|| format!("running {program}"))?;
    let began = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status.success()));
        }
        if began.elapsed() > timeout {
            // the whole group: cargo and the test binary it started
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The scripts of the plan, sorted.
fn scripts(root: &Path, plan: &LuaPlan) -> anyhow::Result<Vec<PathBuf>> {
    let dir = root.join(&plan.dir);
    let mut out: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "lua"))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            plan.only.is_empty() || plan.only.iter().any(|o| name.contains(o.as_str()))
        })
        .collect();
    out.sort();
    Ok(out)
}

/// Every mutant of the plan's scripts but the equivalent ones, without
/// running anything; and how many equivalent ones were left out.
pub fn list(root: &Path, plan: &LuaPlan) -> anyhow::Result<(Vec<(PathBuf, LuaMutant)>, usize)> {
    let mut out = Vec::new();
    let mut left_out = 0;
    for path in scripts(root, plan)? {
        let text = std::fs::read_to_string(&path)?;
        let script = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_owned();
        for m in lua::mutants(&text) {
            if plan.equivalents.iter().any(|e| e.matches(&script, &m)) {
                left_out += 1;
            } else {
                out.push((path.clone(), m));
            }
        }
    }
    Ok((out, left_out))
}

/// Runs the pass: the unmutated tests first (they must pass), then each mutant.
pub fn run(root: &Path, plan: &LuaPlan) -> anyhow::Result<Vec<Row>> {
    recover(&root.join(&plan.dir))?;
    let (all, left_out) = list(root, plan)?;
    eprintln!(
        "mutation: lua: {} mutants ({left_out} equivalent ones left out); baseline: {}",
        all.len(),
        plan.test.join(" ")
    );
    let t = Instant::now();
    anyhow::ensure!(
        run_tests(root, &plan.test, plan.timeout * 3)? == Some(true),
        "the ledger's tests fail on the unmutated scripts: fix them first ({})",
        plan.test.join(" ")
    );
    eprintln!(
        "mutation: lua: baseline passed in {:.0} s",
        t.elapsed().as_secs_f64()
    );
    let mut rows = Vec::with_capacity(all.len());
    for (i, (path, m)) in all.iter().enumerate() {
        let original = std::fs::read_to_string(path)?;
        let backup = backup_of(path);
        std::fs::write(&backup, &original)?;
        let t = Instant::now();
        let outcome = {
            // the script comes back when this block ends, however it ends
            let _restore = Restore {
                path: path.clone(),
                backup,
                original: original.clone(),
            };
            std::fs::write(path, lua::apply(&original, m))?;
            match run_tests(root, &plan.test, plan.timeout)? {
                Some(true) => Outcome::Missed,
                Some(false) => Outcome::Caught,
                None => Outcome::Timeout,
            }
        };
        let file = path
            .strip_prefix(root)
            .unwrap_or(path)
            .display()
            .to_string();
        eprintln!(
            "mutation: lua {}/{} {file}:{m}: {outcome:?} ({:.0} s)",
            i + 1,
            all.len(),
            t.elapsed().as_secs_f64()
        );
        rows.push(Row {
            package: plan.package.clone(),
            file: file.clone(),
            line: u32::try_from(m.line).unwrap_or(u32::MAX),
            name: format!("{file}:{m}"),
            outcome,
        });
    }
    Ok(rows)
}
