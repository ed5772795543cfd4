//! The bug zoo (SPEC §5, issue 5): each bug the article's team found in
//! testing, switched back on ([`booking::bugs`]), run through the harness
//! that should catch it, and held to the invariant that must fail.
//!
//! A case names its harness:
//! - [`Harness::Sim`]: a whole sale in virtual time ([`crate::sim`]) with
//!   the faults and payers that make the bug bite; its checks are
//!   [`crate::sim::checks::invariants`] and the history's checkers;
//! - [`Harness::Rehearsal`]: a short rehearsal of the in-process fleet over
//!   HTTP (the `ci` profile with the case's overrides), judged by the audit
//!   and the rehearsal's verdicts, for bugs that need the fleet: the token
//!   manager, the Redis pool, and the confirm paths over real HTTP (the
//!   redirect bugs have a row on each harness).
//!
//! A bug both can catch has a row for each: `token_grant_per_instance` is
//! caught by the rehearsal's audit and, in seconds, by a sale in virtual
//! time whose API instances pay through the real `TokenManager` against the
//! grant allowance ([`crate::sim::ports::SimTokenEndpoint`]).
//!
//! A row is caught when the run fails and at least one failed check is one
//! the case expects. A control (the same run with every switch off) must
//! pass, or the row proves nothing: sim rows always run theirs (seconds);
//! rehearsal rows run theirs with `controls` on (the `ci` profile without
//! overrides is the CI gate's own rehearsal, green on every run).

use std::time::Instant;

use booking::{Bug, Bugs};
use serde::{Deserialize, Serialize};

use crate::schedule::Schedule;
use crate::sim::plan::PayerMix;
use crate::sim::{self, SimConfig};

/// Where a case runs.
#[derive(Debug, Clone)]
pub enum Harness {
    /// A sale in virtual time.
    Sim(Box<SimConfig>),
    /// A rehearsal of the `ci` profile with these `key=value` overrides;
    /// with `redis_one_way_ms`, the fleet's Redis sits behind a
    /// [`crate::netem::DelayProxy`] adding that much each way.
    Rehearsal {
        /// `key=value` profile overrides.
        sets: Vec<String>,
        /// Network delay to Redis, each way, ms.
        redis_one_way_ms: Option<u64>,
    },
}

impl Harness {
    /// `sim` or `rehearsal`.
    pub fn name(&self) -> &'static str {
        match self {
            Harness::Sim(_) => "sim",
            Harness::Rehearsal { .. } => "rehearsal",
        }
    }
}

/// One bug of the zoo and how the harness must catch it.
#[derive(Debug, Clone)]
pub struct ZooCase {
    /// The bug switched on.
    pub bug: Bug,
    /// What it broke, in a few words (the table's second column).
    pub what: &'static str,
    /// The run that should catch it.
    pub harness: Harness,
    /// The checks any one of which failing is the right catch.
    pub expect: &'static [&'static str],
}

/// One row of the zoo's table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ZooRow {
    /// The bug's switch.
    pub bug: String,
    /// What it broke.
    pub what: String,
    /// `sim` or `rehearsal`.
    pub harness: String,
    /// The checks that failed with the bug on.
    pub failed: Vec<String>,
    /// The expected checks among them.
    pub caught_by: Vec<String>,
    /// Whether an expected check failed.
    pub caught: bool,
    /// Whether the same run without the bug passed (`None`: not run).
    pub control_passed: Option<bool>,
    /// Wall time of the run that caught it, s.
    pub secs: f64,
    /// Virtual time of a sim run, s.
    pub virtual_secs: Option<u64>,
    /// The failed checks' details, or why the run could not be judged.
    pub detail: String,
}

impl ZooRow {
    /// Caught, and the control (if run) passed.
    pub fn ok(&self) -> bool {
        self.caught && self.control_passed != Some(false)
    }
}

/// The schedule of a TOML literal the zoo ships (checked by the tests).
fn schedule(toml: &str) -> Schedule {
    Schedule::from_toml(toml).unwrap_or_else(|e| unreachable!("the zoo's schedule: {e}"))
}

/// Payers who pay in the last ninety seconds of the hold, with every
/// confirmation lost: only the reconciler's query finds their payments.
fn late_and_silent() -> PayerMix {
    PayerMix {
        pay_now: 0.3,
        pay_late: 0.5,
        callback_crash: 1.0,
        webhook_lost: 1.0,
        ..PayerMix::default()
    }
}

/// The reconciler's record deletes failing for a while after releases, and
/// payers who cancel and book again: the worker meets a stale HELD record of
/// the same candidate with another payment.
fn stale_records_and_rebooks(seed: u64) -> SimConfig {
    SimConfig {
        schedule: schedule(
            r#"
[[fault]]
name = "delete-errors"
target = "records"
ops = ["delete"]
start_ms = 200_000
duration_ms = 700_000
probability = 0.7
kind = { type = "error" }
"#,
        ),
        payers: PayerMix {
            cancel: 0.5,
            rebook: 1.0,
            ..PayerMix::default()
        },
        ..SimConfig::scaled(seed, 2_000)
    }
}

/// A small calm sale in which `payers` weighs in a share of payers who
/// exercise one confirm-path trap (forged statuses, late redirects), the
/// rest as usual: the sim rows of the redirect bugs.
fn confirm_path_sale(seed: u64, payers: PayerMix) -> SimConfig {
    SimConfig {
        payers,
        ..SimConfig::scaled(seed, 1_000)
    }
}

/// Every case, in the order of [`Bug::ALL`]; a bug may have a row on each
/// harness (the redirect bugs: a sale in virtual time and the HTTP
/// rehearsal; `token_grant_per_instance`: the rehearsal's first).
pub fn cases() -> Vec<ZooCase> {
    let process_rehearsal = |schedule: &str| Harness::Rehearsal {
        sets: crate::rehearsal_matrix::process_sets(schedule),
        redis_one_way_ms: None,
    };
    let rehearsal = |sets: &[&str]| Harness::Rehearsal {
        sets: sets.iter().map(|s| (*s).to_owned()).collect(),
        redis_one_way_ms: None,
    };
    let sim = |c: SimConfig| Harness::Sim(Box::new(c));
    vec![
        ZooCase {
            bug: Bug::SmallRedisPool,
            what: "Redis pool sized for normal traffic (load test)",
            // the real Redis ledger behind a network hop of 20 ms a round
            // trip (a loaded Redis across availability zones): the rush
            // keeps about twenty connections busy, and a pool of 8 queues
            // the rest until the pool's wait runs out
            harness: Harness::Rehearsal {
                sets: vec![
                    "stack.kind=\"redis\"".to_owned(),
                    "load.users=256".to_owned(),
                    "thresholds.booking_p99_ms_max=500.0".to_owned(),
                    // every Redis round trip of the worker is slow too
                    "thresholds.queue_age_ms_max=60000.0".to_owned(),
                ],
                redis_one_way_ms: Some(10),
            },
            // caught by its cause: callers waiting for a connection
            expect: &["redis_pool_waits"],
        },
        ZooCase {
            bug: Bug::RebookCountedAsDuplicate,
            what: "cancel-then-rebook taken for a duplicate: counter drift",
            harness: sim(stale_records_and_rebooks(21)),
            expect: &["completed_is_paid", "count_is_paid", "counter_bounds"],
        },
        ZooCase {
            bug: Bug::UnguardedUndo,
            what: "an undo that runs twice decrements twice",
            // payments refused at create (the admission is undone), and the
            // undo's answer lost after it took effect (so it is tried again)
            harness: sim(SimConfig {
                schedule: schedule(
                    r#"
[[fault]]
name = "create-errors"
target = "gateway"
ops = ["create"]
start_ms = 0
duration_ms = 30_000
probability = 0.2
kind = { type = "error" }

[[fault]]
name = "undo-answers-lost"
target = "ledger"
ops = ["undo_admission"]
start_ms = 0
duration_ms = 30_000
probability = 0.5
kind = { type = "reset" }
"#,
                ),
                ..SimConfig::scaled(31, 2_000)
            }),
            expect: &["count_is_paid", "counter_bounds", "within_caps"],
        },
        ZooCase {
            bug: Bug::PaidKeepsTtl,
            what: "PAID record keeps the hold's TTL: lost paid booking",
            harness: sim(SimConfig::scaled(6, 1_000)),
            expect: &["completed_is_paid", "count_is_paid"],
        },
        ZooCase {
            bug: Bug::TrustRedirectCancel,
            what: "redirect's status=cancel trusted: a paying payer's seat freed",
            // payers who approve, then edit the redirect to say cancel
            harness: sim(confirm_path_sale(
                51,
                PayerMix {
                    pay_forge_cancel: 0.2,
                    ..PayerMix::default()
                },
            )),
            expect: &["approved_payers_told_paid"],
        },
        ZooCase {
            bug: Bug::TrustRedirectCancel,
            what: "redirect's status=cancel trusted: a paying payer's seat freed",
            harness: rehearsal(&[]),
            expect: &["approved_payers_told_paid"],
        },
        ZooCase {
            bug: Bug::UnlatchedStatusWriter,
            what: "concurrent status writers show a full level open",
            // three instances' writers refreshing the page every 100 ms,
            // their Redis round trips (between a read of the counters and
            // the write) slowed to tens of ms, as a busy Redis is in a rush
            harness: sim(SimConfig {
                api_instances: 3,
                settings: booking::Settings {
                    status_throttle: std::time::Duration::from_millis(100),
                    ..booking::Settings::default()
                },
                schedule: schedule(
                    r#"
[[fault]]
name = "slow-coordination-reads"
target = "coordination"
ops = ["get"]
start_ms = 0
duration_ms = 60_000
kind = { type = "latency", delay = { exponential = { mean_ms = 30.0, max_ms = 300 } } }
"#,
                ),
                ..SimConfig::scaled(41, 2_000)
            }),
            expect: &[
                "status_never_showed_full_level_open",
                "status_writes_in_read_order",
                "status_matches_counters",
            ],
        },
        ZooCase {
            bug: Bug::StaleHeldNotReplaced,
            what: "stale HELD record kept: the new booking never PAID",
            harness: sim(stale_records_and_rebooks(21)),
            expect: &[
                "handled_bookings_have_their_record",
                "confirm_paths_mark_paid",
                "completed_is_paid",
                "count_is_paid",
                "no_held_left",
            ],
        },
        ZooCase {
            bug: Bug::TrustRedirectSuccess,
            what: "redirect's status=success trusted: PAID without an execute",
            // payers who cancel at the gateway, then edit the redirect to
            // say success
            harness: sim(confirm_path_sale(
                52,
                PayerMix {
                    cancel_forge_success: 0.2,
                    ..PayerMix::default()
                },
            )),
            expect: &["paid_bookings_completed_at_gateway"],
        },
        ZooCase {
            bug: Bug::TrustRedirectSuccess,
            what: "redirect's status=success trusted: PAID without an execute",
            harness: rehearsal(&[]),
            expect: &["paid_bookings_completed_at_gateway"],
        },
        ZooCase {
            bug: Bug::ReleaseOnUnansweredQuery,
            what: "release when the gateway query goes unanswered",
            harness: sim(SimConfig {
                payers: late_and_silent(),
                schedule: schedule(
                    r#"
[[fault]]
name = "gateway-query-outage"
target = "gateway"
ops = ["query"]
start_ms = 590_000
duration_ms = 120_000
kind = { type = "error" }
"#,
                ),
                ..SimConfig::scaled(5, 2_000)
            }),
            expect: &["completed_is_paid"],
        },
        ZooCase {
            bug: Bug::TokenGrantPerInstance,
            what: "every instance grants its own gateway token",
            harness: rehearsal(&[]),
            expect: &["one_token_grant"],
        },
        ZooCase {
            bug: Bug::TokenGrantPerInstance,
            what: "every instance grants its own gateway token",
            // two API instances, each paying through its own TokenManager:
            // the burst's first requests reach both at once, while the
            // first grant is still on its way
            harness: sim(SimConfig {
                api_instances: 2,
                ..SimConfig::scaled(10, 200)
            }),
            expect: &["one_token_grant"],
        },
        ZooCase {
            bug: Bug::ExecuteAfterDeadline,
            what: "callback executes after the hold's deadline",
            // payers who approve in the hold's last ninety seconds and whose
            // redirect comes back up to half a minute after the deadline
            harness: sim(confirm_path_sale(
                53,
                PayerMix {
                    pay_after_deadline: 0.2,
                    ..PayerMix::default()
                },
            )),
            expect: &[
                "no_payment_executed_after_deadline",
                "no_paid_after_release",
                "completed_is_paid",
            ],
        },
        ZooCase {
            bug: Bug::ExecuteAfterDeadline,
            what: "callback executes after the hold's deadline",
            // a quarter of the payers come back a second after the hold ends
            harness: rehearsal(&[
                "load.pay_late_after_ms=7000",
                "load.mix.pay_late=0.25",
                "load.mix.pay_now=0.38",
            ]),
            expect: &["no_payment_executed_after_deadline"],
        },
        ZooCase {
            bug: Bug::EmailBeforePaid,
            what: "email sent before the PAID update",
            // the callback and the webhook at the same moment, the record
            // store's HELD→PAID taking a few ms (as DynamoDB's conditional
            // update does): both paths read the HELD record before either
            // has marked it
            harness: sim(SimConfig {
                schedule: schedule(
                    r#"
[[fault]]
name = "slow-mark-paid"
target = "records"
ops = ["mark_paid"]
start_ms = 0
duration_ms = 3_600_000
kind = { type = "latency", delay = { uniform = { lo_ms = 5, hi_ms = 30 } } }
"#,
                ),
                payers: PayerMix {
                    webhook_with_callback: 0.5,
                    webhook_lost: 0.0,
                    ..PayerMix::default()
                },
                ..SimConfig::scaled(9, 1_000)
            }),
            expect: &["one_email_per_paid", "total_queue"],
        },
        ZooCase {
            bug: Bug::EmailLatchBeforeSend,
            what: "email marked sent before the send (lost when the mailer fails)",
            // a fifth of the sends fail all sale long: with the mark first,
            // each is an email nobody owes any more; in the right order the
            // email sweep sends it again
            harness: sim(SimConfig {
                schedule: schedule(
                    r#"
[[fault]]
name = "mailer-flaky"
target = "mailer"
start_ms = 0
duration_ms = 3_600_000
probability = 0.2
kind = { type = "error" }
"#,
                ),
                ..SimConfig::scaled(9, 1_000)
            }),
            expect: &["one_email_per_paid"],
        },
        // what only real processes show: a process fleet of three
        // `booking serve` instances over a private redis-server, under a
        // rehearsal fault schedule (`faults::builtin`)
        ZooCase {
            bug: Bug::NoStalePendingCleanup,
            what: "a killed instance's admission stays counted (stale-pending cleanup off)",
            harness: process_rehearsal("kill-after-admission"),
            expect: &[
                "ledger_matches_records",
                "status_matches_counters",
                "sale_settled",
                "at_cap_when_demand_exceeded",
            ],
        },
        ZooCase {
            bug: Bug::IgnoreLostRedisConnection,
            what: "an instance keeps its dead Redis connections after a restart",
            // every instance's connections die with redis-server, the ops
            // instance's too: on `redis-restart` alone the bugged run cannot
            // close the sale (503, ledger unavailable: broken pipe) and is
            // never judged. Here instance-0, which the rehearsal closes,
            // samples and audits through, is restarted 5 s after Redis came
            // back; the other two answer 5xx on their dead connections until
            // the end
            harness: process_rehearsal("redis-restart-instance-0-restarted"),
            expect: &["server_errors_outside_faults"],
        },
        ZooCase {
            bug: Bug::RedisWithoutPersistence,
            what: "Redis without persistence restarted: seats forgotten",
            harness: process_rehearsal("redis-restart"),
            expect: &[
                "gateway_completed_have_paid_booking",
                "at_cap_when_demand_exceeded",
                "admissions_within_cap",
                "ledger_matches_records",
                "one_booking_per_candidate",
                "status_matches_counters",
                "never_above_cap_during_run",
            ],
        },
    ]
}

/// The (first) case of `bug`.
pub fn case(bug: Bug) -> Option<ZooCase> {
    cases().into_iter().find(|c| c.bug == bug)
}

/// What one judged run gave: the failed checks (name, detail), whether it
/// passed, and its virtual time.
#[derive(Debug, Clone)]
pub struct Judged {
    /// Failed checks, name and detail.
    pub failed: Vec<(String, String)>,
    /// Whether every check passed.
    pub passed: bool,
    /// Virtual seconds (sim runs).
    pub virtual_secs: Option<u64>,
}

/// Runs a sim case's sale with `bugs`.
pub fn run_sim(config: &SimConfig, bugs: Bugs) -> Result<Judged, String> {
    let report = sim::run(&SimConfig {
        bugs,
        ..config.clone()
    })
    .map_err(|e| e.to_string())?;
    tracing::info!("{}", report.summary());
    Ok(Judged {
        failed: report
            .checks
            .iter()
            .filter(|c| !c.passed)
            .map(|c| (c.name.clone(), c.detail.clone()))
            .collect(),
        passed: report.passed,
        virtual_secs: Some(report.virtual_secs),
    })
}

/// The row of `case` from the bugged run's judgement, its wall time and the
/// control's verdict.
pub fn row(
    case: &ZooCase,
    bugged: Result<Judged, String>,
    secs: f64,
    control_passed: Option<bool>,
) -> ZooRow {
    let (failed, virtual_secs, detail) = match &bugged {
        Ok(j) => (
            j.failed.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
            j.virtual_secs,
            j.failed
                .iter()
                .filter(|(n, _)| case.expect.contains(&n.as_str()))
                .map(|(n, d)| format!("{n}: {d}"))
                .collect::<Vec<_>>()
                .join("; "),
        ),
        Err(e) => (Vec::new(), None, format!("run failed: {e}")),
    };
    let caught_by: Vec<String> = failed
        .iter()
        .filter(|n| case.expect.contains(&n.as_str()))
        .cloned()
        .collect();
    ZooRow {
        bug: case.bug.name().to_owned(),
        what: case.what.to_owned(),
        harness: case.harness.name().to_owned(),
        caught: !caught_by.is_empty(),
        failed,
        caught_by,
        control_passed,
        secs,
        virtual_secs,
        detail: detail.chars().take(600).collect(),
    }
}

/// Runs a sim case: the bugged sale, then its control.
pub fn run_sim_case(case: &ZooCase, config: &SimConfig) -> ZooRow {
    let started = Instant::now();
    let bugged = run_sim(config, Bugs::of([case.bug]));
    let secs = started.elapsed().as_secs_f64();
    let control = run_sim(config, Bugs::none())
        .map(|j| j.passed)
        .unwrap_or(false);
    row(case, bugged, secs, Some(control))
}

/// The zoo as a JUnit suite: per row, a case that the bug is caught
/// (`<bug> caught`, classname `chaos.zoo.<harness>`; a failure when no
/// expected check failed) and, when the control ran, a case that it passed
/// (`<bug> control`; a failure when the run without the bug failed too).
/// `secs`: the whole zoo's wall time.
pub fn junit(rows: &[ZooRow], secs: f64) -> reports::junit::TestSuite {
    use reports::junit::{Failure, TestCase, TestSuite};
    let mut cases = Vec::new();
    for r in rows {
        let classname = format!("chaos.zoo.{}", r.harness);
        let reproduce = format!(
            "cargo run --release -p chaos -- zoo --bug {}{}",
            r.bug,
            if r.harness == "rehearsal" {
                " --controls"
            } else {
                ""
            }
        );
        cases.push(TestCase {
            name: format!("{} caught", r.bug),
            classname: classname.clone(),
            time_secs: r.secs,
            failure: (!r.caught).then(|| Failure {
                message: format!(
                    "{} ({}) NOT CAUGHT: failed checks [{}]; {} — reproduce: {reproduce}",
                    r.bug,
                    r.what,
                    r.failed.join(", "),
                    r.detail
                ),
                kind: "not_caught".to_owned(),
                text: format!(
                    "{}: {}\nfailed checks: {}\n{}\nreproduce: {reproduce}\n",
                    r.bug,
                    r.what,
                    r.failed.join(", "),
                    r.detail
                ),
            }),
            output: r
                .caught
                .then(|| format!("caught by {}", r.caught_by.join(", "))),
        });
        if let Some(passed) = r.control_passed {
            cases.push(TestCase {
                name: format!("{} control", r.bug),
                classname,
                time_secs: 0.0,
                failure: (!passed).then(|| Failure {
                    message: format!(
                        "the control of {} (the same run without the bug) failed: catching the bug proves nothing — reproduce: {reproduce}",
                        r.bug
                    ),
                    kind: "control_failed".to_owned(),
                    text: format!("{}\nreproduce: {reproduce}\n", r.detail),
                }),
                output: None,
            });
        }
    }
    TestSuite {
        name: "chaos zoo".to_owned(),
        timestamp: None,
        time_secs: secs,
        properties: Vec::new(),
        cases,
    }
}

/// The zoo's table in Markdown.
pub fn table(rows: &[ZooRow]) -> String {
    let mut s = String::from(
        "| # | bug (switch) | what it breaks | harness | caught by | seconds to catch | control |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for (i, r) in rows.iter().enumerate() {
        let caught = if r.caught {
            r.caught_by
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        } else {
            format!("**NOT CAUGHT** (failed: {})", r.failed.join(", "))
        };
        let secs = match r.virtual_secs {
            Some(v) => format!("{:.1} ({v} virtual)", r.secs),
            None => format!("{:.1}", r.secs),
        };
        let control = match r.control_passed {
            Some(true) => "passes",
            Some(false) => "**FAILS**",
            None => "not run",
        };
        s.push_str(&format!(
            "| {} | `{}` | {} | {} | {caught} | {secs} | {control} |\n",
            i + 1,
            r.bug,
            r.what,
            r.harness
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_bug_has_a_case_per_harness_whose_schedule_is_valid() {
        let cases = cases();
        let mut bugs = cases.iter().map(|c| c.bug).collect::<Vec<_>>();
        bugs.dedup();
        assert_eq!(bugs, Bug::ALL.to_vec());
        let mut rows = cases
            .iter()
            .map(|c| (c.bug.name(), c.harness.name()))
            .collect::<Vec<_>>();
        rows.sort_unstable();
        rows.dedup();
        assert_eq!(rows.len(), cases.len(), "one row per bug and harness");
        let token = cases
            .iter()
            .filter(|c| c.bug == Bug::TokenGrantPerInstance)
            .map(|c| c.harness.name())
            .collect::<Vec<_>>();
        assert_eq!(token, ["rehearsal", "sim"]);
        // the redirect bugs are caught in virtual time too, not only over HTTP
        for bug in [
            Bug::TrustRedirectCancel,
            Bug::TrustRedirectSuccess,
            Bug::ExecuteAfterDeadline,
        ] {
            let harnesses: Vec<_> = cases
                .iter()
                .filter(|c| c.bug == bug)
                .map(|c| c.harness.name())
                .collect();
            assert_eq!(harnesses, ["sim", "rehearsal"], "{bug}");
        }
        for c in &cases {
            assert!(!c.expect.is_empty(), "{}", c.bug);
            if let Harness::Sim(config) = &c.harness {
                config.schedule.validate().unwrap();
            }
        }
    }

    #[test]
    fn a_row_is_caught_only_by_an_expected_check() {
        let case = case(Bug::PaidKeepsTtl).unwrap();
        let judged = |names: &[&str]| {
            Ok(Judged {
                failed: names
                    .iter()
                    .map(|n| ((*n).to_owned(), "d".to_owned()))
                    .collect(),
                passed: names.is_empty(),
                virtual_secs: Some(9),
            })
        };
        let r = row(
            &case,
            judged(&["no_held_left", "count_is_paid"]),
            1.0,
            Some(true),
        );
        assert!(r.caught && r.ok());
        assert_eq!(r.caught_by, ["count_is_paid"]);
        let r = row(&case, judged(&["no_held_left"]), 1.0, Some(true));
        assert!(!r.caught && !r.ok());
        let r = row(&case, judged(&[]), 1.0, Some(true));
        assert!(!r.caught);
        // caught, but the control failed too: proves nothing
        let r = row(&case, judged(&["count_is_paid"]), 1.0, Some(false));
        assert!(r.caught && !r.ok());
        let suite = junit(
            &[
                row(&case, judged(&["count_is_paid"]), 1.0, Some(true)),
                row(&case, judged(&["count_is_paid"]), 1.0, Some(false)),
            ],
            3.0,
        );
        // a caught row: its case and its control's, the failed control a failure
        let names: Vec<_> = suite.cases.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "paid_keeps_ttl caught",
                "paid_keeps_ttl control",
                "paid_keeps_ttl caught",
                "paid_keeps_ttl control"
            ]
        );
        assert_eq!(suite.failures(), 1);
        let failed = suite.cases[3].failure.as_ref().unwrap();
        assert_eq!(failed.kind, "control_failed");
        assert!(failed.message.contains("zoo --bug paid_keeps_ttl"));
        let r = row(&case, Err("boom".into()), 1.0, None);
        assert!(!r.caught && r.detail.contains("boom"));
        let suite = junit(std::slice::from_ref(&r), 1.0);
        assert_eq!((suite.cases.len(), suite.failures()), (1, 1));
        let failure = suite.cases[0].failure.as_ref().unwrap();
        assert_eq!(failure.kind, "not_caught");
        assert!(failure.message.contains("NOT CAUGHT") && failure.message.contains("boom"));
        assert!(table(&[r]).contains("NOT CAUGHT"));
    }
}
