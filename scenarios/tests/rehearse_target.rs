//! `--target URL`: a rehearsal of a deployment that is already running,
//! driven only through its HTTP surface (`/ops/*`, `/bookings`) and the mock
//! gateway's ledger. The deployment here is an in-process fleet, reached as
//! if it were remote.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use scenarios::fleet::Fleet;
use scenarios::{Profile, Progress, rehearse};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_running_deployment_is_rehearsed_through_its_ops_routes() {
    let out = std::env::temp_dir().join(format!("rehearse-target-{:016x}", rand::random::<u64>()));
    let out_set = format!("out={:?}", out.display().to_string());
    let deployment = Profile::load(Some("ci"), std::slice::from_ref(&out_set)).unwrap();
    let fleet = Fleet::start(&deployment).await.unwrap();

    let target = Profile::load(
        Some("ci"),
        &[
            out_set,
            format!("target={:?}", fleet.booking_urls[0]),
            format!("target_gateway={:?}", fleet.gateway_url),
        ],
    )
    .unwrap();
    let outcome = rehearse(&target, Progress::Quiet).await.unwrap();
    let report = &outcome.report;
    let failed: Vec<_> = report.failed().collect();
    assert!(failed.is_empty(), "failed: {failed:#?}");
    assert_eq!(report.stack, "target");
    let names: Vec<&str> = report.invariants.iter().map(|i| i.name.as_str()).collect();
    for n in [
        "ledger_matches_records",
        "gateway_completed_have_paid_booking",
        "no_payment_executed_after_deadline",
        "rush_rate",
        "at_cap_when_demand_exceeded",
        "sale_settled",
    ] {
        assert!(names.contains(&n), "{n} missing: {names:?}");
    }
    assert!(
        !names.contains(&"queue_age_max_ms"),
        "the queue is not observable from outside"
    );
    let paid: u64 = report.sale.paid_by_path.values().sum();
    assert!(paid > 0, "{:?}", report.sale);
    assert_eq!(report.sale.emails, paid);

    // the deployment's own state agrees: the audit ran on it
    let first = fleet.first().unwrap();
    let records = first.stack.records.scan_all().await.unwrap();
    assert_eq!(records.len() as u64, paid);
    fleet.stop().await;
    std::fs::remove_dir_all(&out).unwrap();
}
