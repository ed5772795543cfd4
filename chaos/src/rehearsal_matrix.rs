//! `chaos matrix --rehearsal`: the built-in rehearsal fault schedules
//! (`faults::builtin`: processes killed at each point of the request path,
//! paused and restarted, `redis-server` paused and restarted, toxics on the
//! links, port faults and gateway rules) × seeds, each a rehearsal of the
//! `ci` profile on a process fleet of three `booking serve` instances over
//! a private `redis-server`, judged by the audit and the fault verdicts;
//! one line per run and the command that reproduces a failure.
//!
//! Profiles: `ci` (one seed of each schedule CI runs, a few minutes in a
//! debug build), `soak` (the `headline` schedule on the default profile, at
//! 2,000 bookings/s, three seeds: a recipe, release build).

use std::path::Path;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::matrix::MatrixProfile;

/// The schedules the `ci` profile runs: every built-in one written for the
/// short profile.
pub const CI_SCHEDULES: [&str; 11] = [
    "kill-after-admission",
    "kill-after-create",
    "kill-after-enqueue",
    "kill-during-execute",
    "kill-after-paid",
    "redis-pause",
    "redis-restart",
    "instance-pause-restart",
    "link-trouble",
    "redis-link-blackhole",
    "ports-and-gateway",
];

/// Instances of every rehearsal of the matrix.
pub const INSTANCES: usize = 3;

/// One rehearsal of the matrix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RehearsalRun {
    /// The schedule.
    pub schedule: String,
    /// The seed.
    pub seed: u64,
    /// Whether every verdict held.
    pub passed: bool,
    /// The failed verdicts, or why it could not run.
    pub failures: Vec<String>,
    /// The run folder.
    pub run: String,
    /// Wall time, ms.
    pub wall_ms: u64,
    /// The command that runs it again.
    pub reproduce: String,
}

impl RehearsalRun {
    /// Its line in the output.
    pub fn line(&self) -> String {
        format!(
            "{:<24} seed {:>3}  {}  {:>6} ms wall  {}",
            self.schedule,
            self.seed,
            if self.passed { "ok  " } else { "FAIL" },
            self.wall_ms,
            if self.passed {
                self.run.clone()
            } else {
                format!(
                    "{} — reproduce: {}",
                    self.failures.join("; "),
                    self.reproduce
                )
            }
        )
    }
}

/// `(profile, schedules, seeds)` of a matrix profile (`seeds` overrides).
pub fn plan(profile: MatrixProfile, seeds: Option<u64>) -> (&'static str, Vec<&'static str>, u64) {
    match profile {
        MatrixProfile::Ci => ("ci", CI_SCHEDULES.to_vec(), seeds.unwrap_or(1)),
        MatrixProfile::Soak => ("default", vec!["headline"], seeds.unwrap_or(3)),
    }
}

/// The overrides that put a rehearsal on the matrix's process fleet under
/// `schedule` (also the zoo's process rows).
pub fn process_sets(schedule: &str) -> Vec<String> {
    vec![
        "fleet=\"processes\"".to_owned(),
        "stack.kind=\"redis\"".to_owned(),
        format!("instances={INSTANCES}"),
        format!("faults={schedule:?}"),
    ]
}

/// The overrides of one run.
pub fn sets(schedule: &str, seed: u64, out: &Path) -> Vec<String> {
    let mut sets = process_sets(schedule);
    sets.push(format!("seed={seed}"));
    sets.push(format!("out={:?}", out.display().to_string()));
    sets
}

/// Runs one rehearsal of the matrix.
pub async fn run_one(profile: &str, schedule: &str, seed: u64, out: &Path) -> RehearsalRun {
    let started = Instant::now();
    let reproduce = format!(
        "cargo run -p scenarios -- rehearse --profile {profile} --fleet processes --instances {INSTANCES} --faults {schedule} --seed {seed}"
    );
    let result = match scenarios::Profile::load(Some(profile), &sets(schedule, seed, out)) {
        Err(e) => Err(e.to_string()),
        Ok(p) => scenarios::rehearse(&p, scenarios::Progress::Quiet)
            .await
            .map_err(|e| e.to_string()),
    };
    let (passed, failures, run) = match result {
        Ok(outcome) => (
            outcome.report.passed,
            outcome
                .report
                .failed()
                .map(|v| {
                    format!(
                        "{} ({})",
                        v.name,
                        v.detail.chars().take(200).collect::<String>()
                    )
                })
                .collect(),
            outcome.dir.display().to_string(),
        ),
        Err(e) => (false, vec![format!("could not run: {e}")], String::new()),
    };
    RehearsalRun {
        schedule: schedule.to_owned(),
        seed,
        passed,
        failures,
        run,
        wall_ms: started.elapsed().as_millis() as u64,
        reproduce,
    }
}

/// The rehearsal matrix as a JUnit suite: one case per schedule × seed
/// (classname `chaos.rehearsal_matrix.<schedule>`, name `seed N`); a failed
/// run's message carries its failed verdicts and the command that
/// reproduces it. `wall_ms`: the whole matrix's wall time.
pub fn junit(runs: &[RehearsalRun], wall_ms: u64) -> reports::junit::TestSuite {
    use reports::junit::{Failure, TestCase, TestSuite};
    TestSuite {
        name: "chaos matrix --rehearsal".to_owned(),
        timestamp: None,
        time_secs: wall_ms as f64 / 1_000.0,
        properties: vec![("instances".to_owned(), INSTANCES.to_string())],
        cases: runs
            .iter()
            .map(|r| TestCase {
                name: format!("seed {}", r.seed),
                classname: format!("chaos.rehearsal_matrix.{}", r.schedule),
                time_secs: r.wall_ms as f64 / 1_000.0,
                failure: (!r.passed).then(|| Failure {
                    message: format!("{} — reproduce: {}", r.failures.join("; "), r.reproduce),
                    kind: "verdict_failed".to_owned(),
                    text: format!(
                        "failed:\n{}\n\nrun folder: {}\nreproduce:\n{}\n",
                        r.failures.join("\n"),
                        r.run,
                        r.reproduce
                    ),
                }),
                output: (!r.run.is_empty()).then(|| format!("run folder: {}", r.run)),
            })
            .collect(),
    }
}

/// The Markdown table of a matrix's runs.
pub fn table(runs: &[RehearsalRun]) -> String {
    let mut s =
        String::from("| schedule | seed | verdict | wall s | failed |\n|---|---|---|---|---|\n");
    for r in runs {
        s.push_str(&format!(
            "| `{}` | {} | {} | {:.1} | {} |\n",
            r.schedule,
            r.seed,
            if r.passed { "passed" } else { "FAILED" },
            r.wall_ms as f64 / 1_000.0,
            if r.failures.is_empty() {
                "–".to_owned()
            } else {
                r.failures
                    .iter()
                    .map(|f| f.split(' ').next().unwrap_or_default().to_owned())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_ci_schedule_is_built_in_and_fits_the_ci_profile() {
        let names = faults::builtin::rehearsal_names();
        for s in CI_SCHEDULES {
            assert!(names.contains(&s), "{s}");
            let p = scenarios::Profile::load(Some("ci"), &sets(s, 1, Path::new("/tmp"))).unwrap();
            let (_, schedule) = p.fault_schedule().unwrap().unwrap();
            // each window opens inside the ci load (a 6 s rush, 8 s late)
            assert!(schedule.faults.iter().all(|f| f.start_ms < 12_000), "{s}");
        }
        let run = |passed: bool| RehearsalRun {
            schedule: "link-trouble".into(),
            seed: 2,
            passed,
            failures: if passed {
                vec![]
            } else {
                vec!["booking_p99_ms (p99 80 ms)".into()]
            },
            run: "reports/runs/x".into(),
            wall_ms: 1_500,
            reproduce: "cargo run -p scenarios -- rehearse --seed 2".into(),
        };
        let suite = junit(&[run(true), run(false)], 4_000);
        assert_eq!((suite.cases.len(), suite.failures()), (2, 1));
        assert_eq!(
            suite.cases[1].classname,
            "chaos.rehearsal_matrix.link-trouble"
        );
        assert_eq!(
            suite.cases[1].failure.as_ref().unwrap().message,
            "booking_p99_ms (p99 80 ms) — reproduce: cargo run -p scenarios -- rehearse --seed 2"
        );
        assert_eq!(suite.time_secs, 4.0);
        let (profile, schedules, seeds) = plan(MatrixProfile::Soak, None);
        assert_eq!(
            (profile, schedules, seeds),
            ("default", vec!["headline"], 3)
        );
    }
}
