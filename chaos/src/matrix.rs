//! `chaos matrix`: every built-in fault schedule across several seeds, each a
//! whole sale in virtual time ([`crate::sim`]), one line per run, and the
//! command that reproduces any failure.
//!
//! Two sizes: [`MatrixProfile::Ci`] (bounded, for the CI gate) and
//! [`MatrixProfile::Soak`] (the article's full 40,000-candidate sale, more
//! seeds: a justfile recipe).

use std::sync::Mutex;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::schedule::Schedule;
use crate::sim::{self, SimConfig};

/// The built-in schedules, by name (files in `chaos/schedules/matrix/`).
pub const SCHEDULES: [(&str, &str); 6] = [
    ("calm", include_str!("../schedules/matrix/calm.toml")),
    (
        "ledger-trouble",
        include_str!("../schedules/matrix/ledger-trouble.toml"),
    ),
    (
        "gateway-trouble",
        include_str!("../schedules/matrix/gateway-trouble.toml"),
    ),
    (
        "queue-and-records",
        include_str!("../schedules/matrix/queue-and-records.toml"),
    ),
    (
        "hangs-and-skew",
        include_str!("../schedules/matrix/hangs-and-skew.toml"),
    ),
    (
        "mail-trouble",
        include_str!("../schedules/matrix/mail-trouble.toml"),
    ),
];

/// The built-in schedule `name`, parsed and validated.
pub fn builtin(name: &str) -> Option<Result<Schedule, String>> {
    SCHEDULES.iter().find(|(n, _)| *n == name).map(|(_, text)| {
        Schedule::from_toml(text)
            .and_then(|s| s.validate().map(|()| s))
            .map_err(|e| format!("schedule {name}: {e}"))
    })
}

/// How big a matrix is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum MatrixProfile {
    /// 3 seeds × every schedule, 2,000 candidates a sale.
    Ci,
    /// 10 seeds × every schedule, the article's 40,000 candidates.
    Soak,
}

impl MatrixProfile {
    /// (seeds, candidates per sale).
    pub fn size(self) -> (u64, usize) {
        match self {
            MatrixProfile::Ci => (3, 2_000),
            MatrixProfile::Soak => (10, sim::ARTICLE_CANDIDATES),
        }
    }
}

/// One run of the matrix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MatrixRun {
    /// The schedule's name.
    pub schedule: String,
    /// The seed.
    pub seed: u64,
    /// Candidates.
    pub candidates: usize,
    /// Whether every check held.
    pub passed: bool,
    /// The report's one-line summary, or why the run failed.
    pub summary: String,
    /// Failed checks and their details.
    pub failures: Vec<String>,
    /// Wall time, ms.
    pub wall_ms: u64,
    /// Virtual time, s.
    pub virtual_secs: u64,
}

impl MatrixRun {
    /// The command that runs it again.
    pub fn reproduce(&self) -> String {
        format!(
            "cargo run --release -p chaos -- run --schedule {} --seed {} --candidates {}",
            self.schedule, self.seed, self.candidates
        )
    }

    /// Its line in the matrix output.
    pub fn line(&self) -> String {
        format!(
            "{:<18} seed {:>3}  {}  {:>6} ms wall  {:>6} virtual s  {}",
            self.schedule,
            self.seed,
            if self.passed { "ok  " } else { "FAIL" },
            self.wall_ms,
            self.virtual_secs,
            if self.passed {
                String::new()
            } else {
                format!(
                    "{} — reproduce: {}",
                    self.failures.join("; "),
                    self.reproduce()
                )
            }
        )
    }
}

/// The whole matrix's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MatrixSummary {
    /// Every run, schedule-major.
    pub runs: Vec<MatrixRun>,
    /// Wall time of the whole matrix, ms.
    pub wall_ms: u64,
    /// Threads it ran on.
    pub jobs: usize,
}

impl MatrixSummary {
    /// Whether every run passed.
    pub fn passed(&self) -> bool {
        self.runs.iter().all(|r| r.passed)
    }

    /// Simulated sales per minute of wall time.
    pub fn sales_per_minute(&self) -> f64 {
        self.runs.len() as f64 * 60_000.0 / self.wall_ms.max(1) as f64
    }

    /// The matrix as a JUnit suite: one case per schedule × seed (classname
    /// `chaos.matrix.<schedule>`, name `seed N`); a failed run's message
    /// carries its failed checks and the command that reproduces it.
    pub fn junit(&self) -> reports::junit::TestSuite {
        use reports::junit::{Failure, TestCase, TestSuite};
        TestSuite {
            name: "chaos matrix".to_owned(),
            timestamp: None,
            time_secs: self.wall_ms as f64 / 1_000.0,
            properties: vec![("jobs".to_owned(), self.jobs.to_string())],
            cases: self
                .runs
                .iter()
                .map(|r| TestCase {
                    name: format!("seed {}", r.seed),
                    classname: format!("chaos.matrix.{}", r.schedule),
                    time_secs: r.wall_ms as f64 / 1_000.0,
                    failure: (!r.passed).then(|| Failure {
                        message: format!(
                            "{} — reproduce: {}",
                            r.failures.join("; "),
                            r.reproduce()
                        ),
                        kind: "check_failed".to_owned(),
                        text: format!(
                            "{}\n\nfailed checks:\n{}\n\nreproduce:\n{}\n",
                            r.summary,
                            r.failures.join("\n"),
                            r.reproduce()
                        ),
                    }),
                    output: Some(r.summary.clone()),
                })
                .collect(),
        }
    }

    /// The summary table in Markdown: one row per schedule.
    pub fn table(&self) -> String {
        let mut s = String::from(
            "| schedule | runs | passed | mean wall ms | mean virtual s | failing seeds |\n\
             |---|---|---|---|---|---|\n",
        );
        for (name, _) in SCHEDULES {
            let runs: Vec<&MatrixRun> = self.runs.iter().filter(|r| r.schedule == name).collect();
            if runs.is_empty() {
                continue;
            }
            let n = runs.len() as u64;
            let failing: Vec<String> = runs
                .iter()
                .filter(|r| !r.passed)
                .map(|r| r.seed.to_string())
                .collect();
            s.push_str(&format!(
                "| `{name}` | {n} | {} | {} | {} | {} |\n",
                runs.iter().filter(|r| r.passed).count(),
                runs.iter().map(|r| r.wall_ms).sum::<u64>() / n,
                runs.iter().map(|r| r.virtual_secs).sum::<u64>() / n,
                if failing.is_empty() {
                    "none".to_owned()
                } else {
                    failing.join(", ")
                }
            ));
        }
        s
    }
}

/// One sale of `schedule` with `seed`.
pub fn run_one(name: &str, schedule: &Schedule, seed: u64, candidates: usize) -> MatrixRun {
    let config = SimConfig {
        schedule: schedule.clone(),
        ..SimConfig::scaled(seed, candidates)
    };
    match sim::run(&config) {
        Ok(report) => MatrixRun {
            schedule: name.to_owned(),
            seed,
            candidates,
            passed: report.passed,
            summary: report.summary(),
            failures: report
                .checks
                .iter()
                .filter(|c| !c.passed)
                .map(|c| format!("{}: {}", c.name, c.detail))
                .collect(),
            wall_ms: report.wall_ms,
            virtual_secs: report.virtual_secs,
        },
        Err(e) => MatrixRun {
            schedule: name.to_owned(),
            seed,
            candidates,
            passed: false,
            summary: e.to_string(),
            failures: vec![e.to_string()],
            wall_ms: 0,
            virtual_secs: 0,
        },
    }
}

/// Runs every built-in schedule with seeds `1..=seeds` on `jobs` threads,
/// calling `each` with every run as it ends (in completion order).
pub fn run(
    seeds: u64,
    candidates: usize,
    jobs: usize,
    each: &(dyn Fn(&MatrixRun) + Sync),
) -> Result<MatrixSummary, String> {
    let mut work = Vec::new();
    for (name, _) in SCHEDULES {
        let schedule = builtin(name).unwrap_or_else(|| Err(format!("no schedule {name}")))?;
        for seed in 1..=seeds {
            work.push((name, schedule.clone(), seed));
        }
    }
    let started = Instant::now();
    let jobs = jobs.max(1);
    let queue = Mutex::new(work.into_iter().enumerate().collect::<Vec<_>>());
    let done: Mutex<Vec<(usize, MatrixRun)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                loop {
                    let next = queue.lock().ok().and_then(|mut q| q.pop());
                    let Some((i, (name, schedule, seed))) = next else {
                        break;
                    };
                    let run = run_one(name, &schedule, seed, candidates);
                    each(&run);
                    if let Ok(mut d) = done.lock() {
                        d.push((i, run));
                    }
                }
            });
        }
    });
    let mut runs = done
        .into_inner()
        .map_err(|_| "a matrix thread panicked".to_owned())?;
    runs.sort_by_key(|(i, _)| *i);
    Ok(MatrixSummary {
        runs: runs.into_iter().map(|(_, r)| r).collect(),
        wall_ms: started.elapsed().as_millis() as u64,
        jobs,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_builtin_schedule_is_valid_and_named_once() {
        for (name, _) in SCHEDULES {
            let s = builtin(name).unwrap().unwrap();
            assert_eq!(s.faults.is_empty(), name == "calm", "{name}");
        }
        assert!(builtin("no-such").is_none());
        let names: std::collections::BTreeSet<&str> = SCHEDULES.iter().map(|(n, _)| *n).collect();
        assert_eq!(names.len(), SCHEDULES.len());
    }

    #[test]
    fn a_failed_run_names_the_command_that_reproduces_it() {
        let run = MatrixRun {
            schedule: "gateway-trouble".into(),
            seed: 7,
            candidates: 2_000,
            passed: false,
            summary: String::new(),
            failures: vec!["count_is_paid: x".into()],
            wall_ms: 1,
            virtual_secs: 2,
        };
        assert!(run.line().contains("FAIL"));
        assert!(
            run.line()
                .contains("run --schedule gateway-trouble --seed 7 --candidates 2000")
        );
        let summary = MatrixSummary {
            runs: vec![run],
            wall_ms: 30_000,
            jobs: 1,
        };
        assert!(!summary.passed());
        assert_eq!(summary.sales_per_minute(), 2.0);
        assert!(summary.table().contains("| `gateway-trouble` | 1 | 0 |"));
        let mut ok = summary.runs[0].clone();
        ok.passed = true;
        ok.seed = 8;
        ok.failures.clear();
        let summary = MatrixSummary {
            runs: vec![summary.runs[0].clone(), ok],
            ..summary
        };
        let suite = summary.junit();
        assert_eq!((suite.cases.len(), suite.failures()), (2, 1));
        assert_eq!(suite.cases[0].name, "seed 7");
        assert_eq!(suite.cases[0].classname, "chaos.matrix.gateway-trouble");
        let failure = suite.cases[0].failure.as_ref().unwrap();
        assert!(
            failure
                .message
                .starts_with("count_is_paid: x — reproduce: cargo run")
        );
        assert!(failure.message.contains(&summary.runs[0].reproduce()));
        assert!(suite.cases[1].failure.is_none());
        let xml = reports::junit::render("chaos matrix", &[suite]);
        assert!(xml.contains("tests=\"2\" failures=\"1\""), "{xml}");
    }
}
