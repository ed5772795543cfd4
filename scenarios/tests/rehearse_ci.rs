//! The CI gate's rehearsal, end to end in process: the `ci` profile (the
//! mock gateway and two booking instances on the embedded stack, a short
//! rush, late arrivals, holds expiring and reselling) passes every invariant
//! and threshold, writes its run folder, and its figures add up.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use reports::Report;
use scenarios::{Profile, Progress, rehearse};

/// Verdicts a rehearsal on an in-process fleet gives (the audit may add more).
const NAMES: [&str; 21] = [
    "admissions_within_cap",
    "queue_drained",
    "ledger_matches_records",
    "one_booking_per_candidate",
    "no_throttling",
    "dead_letter_queue_empty",
    "one_email_per_paid",
    "status_matches_counters",
    "status_never_showed_full_level_open",
    "gateway_completed_have_paid_booking",
    "paid_bookings_completed_at_gateway",
    "rush_rate",
    "booking_p99_ms",
    "queue_age_max_ms",
    "server_error_pct",
    "at_cap_when_demand_exceeded",
    "never_above_cap_during_run",
    "no_payment_executed_after_deadline",
    "one_token_grant",
    "sale_settled",
    "approved_payers_told_paid",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_ci_profile_rehearses_a_whole_sale_green() {
    let out = std::env::temp_dir().join(format!("rehearse-ci-{:016x}", rand::random::<u64>()));
    let profile = Profile::load(
        Some("ci"),
        &[format!("out={:?}", out.display().to_string())],
    )
    .unwrap();
    let outcome = rehearse(&profile, Progress::Quiet).await.unwrap();
    let report = &outcome.report;
    let failed: Vec<_> = report.failed().collect();
    assert!(failed.is_empty(), "failed: {failed:#?}");
    assert!(report.passed);

    // every verdict, once
    let names: Vec<&str> = report.invariants.iter().map(|i| i.name.as_str()).collect();
    let unique: BTreeSet<&str> = names.iter().copied().collect();
    assert_eq!(unique.len(), names.len(), "{names:?}");
    for n in NAMES {
        assert!(unique.contains(n), "{n} missing from {names:?}");
    }

    // the run folder: named <timestamp>-<seed>, with report.json that reads back
    assert!(outcome.dir.starts_with(&out));
    let folder = outcome
        .dir
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(folder.ends_with(&format!("-{}", profile.seed)), "{folder}");
    assert_eq!(folder, report.run_id);
    let json = std::fs::read(outcome.dir.join("report.json")).unwrap();
    let back: Report = serde_json::from_slice(&json).unwrap();
    assert_eq!(back.run_id, report.run_id);
    assert_eq!(back.passed, report.passed);
    assert_eq!(back.invariants.len(), report.invariants.len());
    assert_eq!(back.timeline.len(), report.timeline.len());
    assert_eq!(back.sale, report.sale);
    for f in &report.files {
        assert!(outcome.dir.join(f).exists(), "{f} listed but absent");
    }

    // the figures add up
    let load = &report.load;
    assert!(load.arrivals_scheduled > 0);
    assert_eq!(
        load.arrivals_started + load.arrivals_dropped,
        load.arrivals_scheduled
    );
    assert!(
        load.achieved_rate >= profile.thresholds.rush_rate_min,
        "{load:?}"
    );
    assert!(load.requests >= load.arrivals_started);
    let sale = &report.sale;
    assert_eq!(sale.seats, profile.seats());
    assert!(
        sale.holds_created >= sale.seats,
        "demand exceeds the seats: {sale:?}"
    );
    let paid: u64 = sale.paid_by_path.values().sum();
    assert!(paid > 0, "{sale:?}");
    assert_eq!(sale.emails, paid, "one email per PAID booking");
    assert!(sale.released > 0, "abandoned holds were released: {sale:?}");
    assert!(
        sale.resold > 0,
        "late arrivals bought freed seats: {sale:?}"
    );
    for l in &sale.levels {
        assert!(l.taken <= l.cap, "{l:?}");
        assert_eq!(l.paid, l.taken, "settled: every seat left is paid: {l:?}");
    }
    let phases: Vec<&str> = report.phases.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        phases,
        ["setup", "rush", "late", "settle", "audit", "report"]
    );
    for w in report.phases.windows(2) {
        assert!(w[0].start_ms <= w[1].start_ms, "{:?}", report.phases);
    }
    assert!(report.timeline.len() >= 5, "a sample a second");
    assert!(report.timeline.iter().any(|s| s.bookings_per_s > 0.0));
    assert_eq!(report.stack, "embedded");
    assert_eq!(report.seed, profile.seed);
    assert_eq!(report.profile["candidates"], profile.candidates);
    std::fs::remove_dir_all(&out).unwrap();
}
