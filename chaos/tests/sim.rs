#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Whole sales in virtual time: the article's full-size sale, sales under
//! faults, many seeds, determinism, and bugs of the zoo caught by the right
//! check.

use std::time::Duration;

use booking::{Bug, Bugs};
use chaos::Schedule;
use chaos::sim::{self, SimConfig, SimReport, plan::PayerMix};

fn must_pass(report: &SimReport) {
    assert!(
        report.passed,
        "{}\n{:#?}",
        report.summary(),
        report
            .checks
            .iter()
            .filter(|c| !c.passed)
            .collect::<Vec<_>>()
    );
}

/// Latency on the ledger through the burst, some enqueues failing (the
/// admission is undone, the client retries), errors on record writes while
/// the worker drains the burst, message deletes failing (a worker that
/// crashed after writing: SQS redelivers), one reconciler's clock half a
/// second fast, and the gateway answering no query for a minute when the
/// burst's holds fall due.
const FAULTS: &str = r#"
[[fault]]
name = "ledger-latency"
target = "ledger"
start_ms = 0
duration_ms = 60_000
probability = 0.5
kind = { type = "latency", delay = { exponential = { mean_ms = 20.0, max_ms = 400 } } }

[[fault]]
name = "queue-send-errors"
target = "queue"
ops = ["send"]
start_ms = 0
duration_ms = 25_000
probability = 0.05
kind = { type = "error" }

[[fault]]
name = "records-write-errors"
target = "records"
ops = ["put", "replace", "mark_paid", "delete", "extend", "note_query_failure"]
start_ms = 2_000
duration_ms = 30_000
probability = 0.3
kind = { type = "error" }

[[fault]]
name = "queue-delete-errors"
target = "queue"
ops = ["delete"]
start_ms = 0
duration_ms = 60_000
probability = 0.2
kind = { type = "error" }

[[fault]]
name = "reconciler-clock-fast"
target = "clock"
instances = ["sim-reconciler-0"]
start_ms = 0
duration_ms = 3_600_000
kind = { type = "clock_skew", ms = 500 }

[[fault]]
name = "gateway-query-outage"
target = "gateway"
ops = ["query"]
start_ms = 600_000
duration_ms = 60_000
kind = { type = "error" }
"#;

fn faults() -> Schedule {
    let s = Schedule::from_toml(FAULTS).unwrap();
    s.validate().unwrap();
    s
}

#[test]
fn the_articles_full_sale_passes_every_check() {
    let config = SimConfig::article(1);
    assert_eq!(config.load.candidates, 40_000);
    assert_eq!(config.caps.iter().sum::<u32>(), 20_700);
    assert_eq!(config.load.burst_requests, 50_000);
    let report = sim::run(&config).unwrap();
    println!("{}", report.summary());
    must_pass(&report);
    // the sale sold out and settled: every seat counted is PAID
    assert!(report.admitted >= 20_700, "{}", report.summary());
    assert_eq!(
        report.paid + report.released,
        report.admitted - report.undone
    );
    assert_eq!(report.emails, report.paid);
    assert!(report.paid > 15_000 && report.paid <= 20_700);
    // holds of ten minutes and a settle period: at least half an hour of sale
    assert!(report.virtual_secs >= 30 * 60);
    assert_eq!(report.checks.len(), 12);
}

#[test]
fn sales_absorb_ledger_latency_record_write_errors_and_a_gateway_outage() {
    for seed in [11, 12] {
        let config = SimConfig {
            schedule: faults(),
            ..SimConfig::scaled(seed, 4_000)
        };
        let report = sim::run(&config).unwrap();
        println!("{}", report.summary());
        must_pass(&report);
        assert!(report.faults_fired > 1_000, "{}", report.summary());
        // failed enqueues were undone by their token; failed deletes redelivered
        assert!(report.undone > 0, "{}", report.summary());
        assert!(report.redelivered > 0, "{}", report.summary());
        // the outage caught holds in their last minute: extended, not released
        assert!(report.extended > 0, "{}", report.summary());
        assert!(report.paid > 0);
    }
}

#[test]
fn twenty_seeds_pass() {
    let mut paid = Vec::new();
    for seed in 100..120 {
        let report = sim::run(&SimConfig::scaled(seed, 1_000)).unwrap();
        must_pass(&report);
        paid.push(report.paid);
    }
    paid.dedup();
    assert!(paid.len() > 1, "the seeds make different sales: {paid:?}");
}

#[test]
fn the_same_seed_makes_the_same_sale() {
    let config = SimConfig {
        schedule: faults(),
        ..SimConfig::scaled(7, 2_000)
    };
    let a = sim::run(&config).unwrap();
    let b = sim::run(&config).unwrap();
    assert!(a.same_sale(&b), "\n{}\n{}", a.summary(), b.summary());
    assert!(a.faults_fired > 0);
    let other = sim::run(&SimConfig {
        seed: 8,
        ..config.clone()
    })
    .unwrap();
    assert!(!a.same_sale(&other), "another seed, another sale");
}

#[test]
fn a_sale_that_cannot_settle_fails_instead_of_hanging() {
    // the gateway never answers a query again, and the time limit is short:
    // holds are extended, then alerted on, never released
    let schedule = Schedule::from_toml(
        r#"
[[fault]]
name = "gateway-gone"
target = "gateway"
ops = ["query"]
start_ms = 0
duration_ms = 100_000_000
kind = { type = "error" }
"#,
    )
    .unwrap();
    let config = SimConfig {
        schedule,
        virtual_limit: Duration::from_secs(2 * 60 * 60),
        ..SimConfig::scaled(3, 200)
    };
    match sim::run(&config) {
        Err(sim::SimError::NoQuiescence {
            virtual_secs,
            waiting_on,
        }) => {
            assert!(virtual_secs >= 2 * 60 * 60);
            assert!(waiting_on.contains("HELD records"), "{waiting_on}");
        }
        other => panic!("expected no quiescence, got {other:?}"),
    }
}

/// Payers who pay in the last ninety seconds, and whose confirmations are
/// all lost: only the reconciler's query can find their payments.
fn late_and_silent() -> PayerMix {
    PayerMix {
        pay_now: 0.3,
        pay_late: 0.5,
        callback_crash: 1.0,
        webhook_lost: 1.0,
        ..PayerMix::default()
    }
}

/// The gateway answers no query while the burst's holds fall due.
fn outage_at_the_deadlines() -> Schedule {
    Schedule::from_toml(
        r#"
[[fault]]
name = "gateway-query-outage"
target = "gateway"
ops = ["query"]
start_ms = 590_000
duration_ms = 120_000
kind = { type = "error" }
"#,
    )
    .unwrap()
}

fn with_bug(config: SimConfig, bug: Option<Bug>) -> SimReport {
    let report = sim::run(&SimConfig {
        bugs: Bugs::of(bug),
        ..config
    })
    .unwrap();
    println!("{bug:?}: {}", report.summary());
    report
}

fn caught_by(report: &SimReport, check: &str) {
    assert!(!report.passed, "not caught: {}", report.summary());
    let c = report.check(check).unwrap();
    assert!(
        !c.passed,
        "caught by {:?}, not {check}: {}",
        report.failed(),
        report.summary()
    );
}

#[test]
fn release_on_unanswered_query_loses_completed_payments() {
    let config = SimConfig {
        payers: late_and_silent(),
        schedule: outage_at_the_deadlines(),
        ..SimConfig::scaled(5, 2_000)
    };
    // without the bug the same sale is absorbed: extended, then paid
    let clean = with_bug(config.clone(), None);
    must_pass(&clean);
    assert!(clean.extended > 0);
    let buggy = with_bug(config, Some(Bug::ReleaseOnUnansweredQuery));
    caught_by(&buggy, "completed_is_paid");
    assert!(buggy.released > clean.released);
}

#[test]
fn paid_keeps_ttl_loses_paid_bookings_to_the_ttl_service() {
    let report = with_bug(SimConfig::scaled(6, 1_000), Some(Bug::PaidKeepsTtl));
    caught_by(&report, "completed_is_paid");
    caught_by(&report, "count_is_paid");
}

#[test]
fn email_before_paid_sends_two_emails_when_two_paths_confirm() {
    let config = SimConfig {
        payers: PayerMix {
            webhook_with_callback: 0.5,
            webhook_lost: 0.0,
            ..PayerMix::default()
        },
        ..SimConfig::scaled(9, 1_000)
    };
    let report = with_bug(config, Some(Bug::EmailBeforePaid));
    caught_by(&report, "one_email_per_paid");
    caught_by(&report, "total_queue");
}

/// The reconciler's record deletes failing for a while after releases
/// (the ledger released, the HELD record left behind until the next sweep),
/// and payers who cancel and book again: the worker then meets a stale HELD
/// record of the same candidate with another payment.
fn stale_records_and_rebooks() -> SimConfig {
    let schedule = Schedule::from_toml(
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
    )
    .unwrap();
    SimConfig {
        schedule,
        payers: PayerMix {
            cancel: 0.5,
            rebook: 1.0,
            ..PayerMix::default()
        },
        ..SimConfig::scaled(21, 2_000)
    }
}

#[test]
fn rebook_counted_as_duplicate_gives_a_rebooked_seat_away() {
    let clean = with_bug(stale_records_and_rebooks(), None);
    must_pass(&clean);
    let buggy = with_bug(
        stale_records_and_rebooks(),
        Some(Bug::RebookCountedAsDuplicate),
    );
    caught_by(&buggy, "completed_is_paid");
}
