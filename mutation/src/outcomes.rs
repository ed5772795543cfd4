//! What a mutation run found, one [`Row`] a mutant: read from cargo-mutants'
//! `mutants.out/outcomes.json`, or made by the Lua pass ([`crate::lua_run`]).

use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// What became of one mutant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Outcome {
    /// A test failed: the mutant was noticed.
    Caught,
    /// Every test passed with the mutant in: a line no test checks.
    Missed,
    /// The tests ran past the per-mutant timeout (a mutant that hangs the
    /// code; a CI run would fail on it): counted as caught, shown apart.
    Timeout,
    /// The mutant did not build: not a test's business, out of the score.
    Unviable,
}

/// One mutant and its outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Row {
    /// The package (or, for Lua, the crate whose scripts they are).
    pub package: String,
    /// The file, relative to the workspace root.
    pub file: String,
    /// 1-based line of the change.
    pub line: u32,
    /// The mutant as cargo-mutants names it (`file:line:col: replace … with …`).
    pub name: String,
    /// What became of it.
    pub outcome: Outcome,
}

/// cargo-mutants' `outcomes.json` (27.x), the parts read here.
#[derive(Debug, Deserialize)]
struct LabOutcome {
    outcomes: Vec<ScenarioOutcome>,
}

#[derive(Debug, Deserialize)]
struct ScenarioOutcome {
    scenario: Scenario,
    summary: String,
}

#[derive(Debug, Deserialize)]
enum Scenario {
    Baseline,
    Mutant(Mutant),
}

#[derive(Debug, Deserialize)]
struct Mutant {
    package: String,
    file: String,
    span: Span,
    replacement: String,
    #[serde(default)]
    function: Option<Function>,
    #[serde(default)]
    name: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Function {
    function_name: String,
}

#[derive(Debug, Deserialize)]
struct Span {
    start: LineColumn,
}

#[derive(Debug, Deserialize)]
struct LineColumn {
    line: u32,
    column: u32,
}

/// The rows of one `outcomes.json` text. A baseline that did not succeed is
/// an error: no mutant's outcome means anything then.
pub fn parse_cargo_mutants(json: &str) -> anyhow::Result<Vec<Row>> {
    let lab: LabOutcome =
        serde_json::from_str(json).context("not a cargo-mutants outcomes.json")?;
    let mut rows = Vec::new();
    for o in lab.outcomes {
        match o.scenario {
            Scenario::Baseline => {
                anyhow::ensure!(
                    o.summary == "Success",
                    "the unmutated tree's tests did not pass (baseline {}): fix them first",
                    o.summary
                );
            }
            Scenario::Mutant(m) => {
                let outcome = match o.summary.as_str() {
                    "CaughtMutant" => Outcome::Caught,
                    "MissedMutant" => Outcome::Missed,
                    "Timeout" => Outcome::Timeout,
                    "Unviable" => Outcome::Unviable,
                    other => {
                        anyhow::bail!("mutant outcome {other:?} is not one cargo-mutants 27 writes")
                    }
                };
                let name = m.name.clone().unwrap_or_else(|| {
                    let what = m
                        .function
                        .as_ref()
                        .map(|f| f.function_name.as_str())
                        .unwrap_or("?");
                    format!(
                        "{}:{}:{}: replace in {what} with {}",
                        m.file, m.span.start.line, m.span.start.column, m.replacement
                    )
                });
                rows.push(Row {
                    package: m.package,
                    file: m.file,
                    line: m.span.start.line,
                    name,
                    outcome,
                });
            }
        }
    }
    Ok(rows)
}

/// The rows of `dir/mutants.out/outcomes.json` (or `dir/outcomes.json`).
pub fn read_cargo_mutants(dir: &Path) -> anyhow::Result<Vec<Row>> {
    let inner = dir.join("mutants.out").join("outcomes.json");
    let path = if inner.exists() {
        inner
    } else {
        dir.join("outcomes.json")
    };
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    parse_cargo_mutants(&text).with_context(|| path.display().to_string())
}
