//! Issue 19: the sweep's time budget and its failures as the operator sees
//! them (`SweepReport`, `Reconciler::stats`): the orphan step gets half the
//! budget, a sweep that starts out of time defers every due record and
//! says how many, a failed due query is counted as an error.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use booking::Settings;
use booking::records::{Condition, RecordStore};
use booking_service::reconciler::{Reconciler, ReconcilerConfig};
use common::{Stack, faulty_reconciler};

fn minutes(m: u64) -> Duration {
    Duration::from_secs(m * 60)
}

/// A reconciler of `s` whose record store suffers `fault` (ops and kind)
/// and whose sweep budget is `budget`.
fn reconciler(s: &Stack, fault: &str, budget: Duration) -> Reconciler {
    let settings = Settings {
        sweep_budget: budget,
        ..s.settings.clone()
    };
    let config = ReconcilerConfig::new(s.sale.clone(), "test", "a", settings);
    faulty_reconciler(s, &format!("target = \"records\"\n{fault}"), config)
}

/// `n` candidates booked past their deadline; the first `with_records` of
/// them have their HELD records, the rest are orphans (held, no record).
async fn overdue(n: usize, with_records: usize) -> Stack {
    let names: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let s = Stack::new(n as u32, &refs).await;
    for (i, name) in names.iter().enumerate() {
        let m = s.book(name, &format!("t{i}"), &format!("P{i}")).await;
        if i < with_records {
            s.records
                .put(m.held_record(), Condition::NotExists)
                .await
                .unwrap();
        }
    }
    s.clock.advance(minutes(13));
    s
}

/// Twenty orphans, each record read 100 ms, a 1 s budget: the orphan step
/// starts reads until half the budget (0, 100, … 400 ms: five), the rest
/// wait for the next sweep.
#[tokio::test(start_paused = true)]
async fn the_orphan_step_stops_at_half_the_budget() {
    let s = overdue(20, 0).await;
    let r = reconciler(
        &s,
        "ops = [\"get\"]\nkind = { type = \"latency\", delay = { fixed = { ms = 100 } } }",
        Duration::from_secs(1),
    );
    let report = r.sweep().await;
    assert_eq!(report.orphans_recovered, 5, "{report:?}");
    assert_eq!(r.stats().orphans_recovered, 5);
}

/// One orphan whose record read outlasts the whole budget, and three due
/// records: by the time the due records could start the budget is spent,
/// so none starts and all four (the recovered orphan's among them) are
/// deferred, and counted so.
#[tokio::test(start_paused = true)]
async fn a_sweep_out_of_time_before_its_first_start_defers_every_due_record() {
    let s = overdue(4, 3).await;
    let r = reconciler(
        &s,
        "ops = [\"get\"]\nkind = { type = \"latency\", delay = { fixed = { ms = 2_000 } } }",
        Duration::from_secs(1),
    );
    let report = r.sweep().await;
    assert_eq!((report.orphans_recovered, report.due), (1, 4), "{report:?}");
    assert_eq!((report.started, report.released), (0, 0), "{report:?}");
    assert_eq!(r.stats().deferred, 4);
    assert_eq!(s.count().await, 4, "no seat given back");
}

/// The due query fails: one error in the report and the counts, nothing
/// released, and the next sweep (the store back) decides the records.
#[tokio::test(start_paused = true)]
async fn a_failed_due_query_is_one_error_and_the_next_sweep_decides() {
    let s = overdue(2, 2).await;
    let r = reconciler(
        &s,
        "ops = [\"held_due\"]\nkind = { type = \"error\" }",
        Duration::from_secs(45),
    );
    let report = r.sweep().await;
    assert_eq!(
        (report.errors, report.due, report.released),
        (1, 0, 0),
        "{report:?}"
    );
    assert_eq!(r.stats().errors, 1);
    assert_eq!(s.count().await, 2);
    // the same store without the fault: both released
    let healthy = s.reconciler("b");
    let report = healthy.sweep().await;
    assert_eq!((report.errors, report.released), (0, 2), "{report:?}");
}
