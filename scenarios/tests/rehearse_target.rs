//! `--target URL`: a rehearsal of a deployment that is already running,
//! driven only through its HTTP surface (`/ops/*`, `/bookings`) and the mock
//! gateway's ledger. The deployment here is an in-process fleet, reached as
//! if it were remote. Rehearsing one deployment twice in a row, the way
//! staging is rehearsed, passes twice: the reset clears the sale on every
//! stack.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use scenarios::fleet::Fleet;
use scenarios::{Profile, Progress, rehearse};

/// One rehearsal at a time in this binary: two at full rate on a 2-core
/// machine miss the rate and latency bounds they are judged on.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_running_deployment_is_rehearsed_through_its_ops_routes() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let out = std::env::temp_dir().join(format!("rehearse-target-{:016x}", rand::random::<u64>()));
    let out_set = format!("out={:?}", out.display().to_string());
    let deployment = Profile::load(Some("ci"), std::slice::from_ref(&out_set)).unwrap();
    let fleet = Fleet::start(&deployment).await.unwrap();

    let target = Profile::load(
        Some("ci"),
        &[
            out_set,
            format!("target={:?}", fleet.booking_urls[0]),
            format!("target_admin={:?}", fleet.admin_urls[0]),
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

/// Rehearses one running deployment (an in-process fleet of the `ci`
/// profile with `sets`, reached as if remote) twice in a row; both pass, and
/// what is left in the record store is the second run's only.
async fn rehearsed_twice(name: &str, sets: &[String]) {
    let _alone = ONE_AT_A_TIME.lock().await;
    let out = std::env::temp_dir().join(format!(
        "rehearse-twice-{name}-{:016x}",
        rand::random::<u64>()
    ));
    // the invariants are the point, not the speed: a run at half the ci
    // rate (still more arrivals than seats), with latency bounds a loaded
    // 2-core machine keeps; a stack's own `sets` come after and win
    let mut with_out: Vec<String> = [
        "candidates=1000",
        "levels.0.cap=50",
        "levels.1.cap=100",
        "levels.2.cap=150",
        "load.rate=100.0",
        "thresholds.rush_rate_min=80.0",
        "thresholds.booking_p99_ms_max=4000.0",
        "thresholds.queue_age_ms_max=10000.0",
    ]
    .map(str::to_owned)
    .to_vec();
    with_out.extend_from_slice(sets);
    with_out.push(format!("out={:?}", out.display().to_string()));
    let deployment = Profile::load(Some("ci"), &with_out).unwrap();
    let fleet = Fleet::start(&deployment).await.unwrap();
    let mut target_sets = with_out.clone();
    target_sets.extend([
        format!("target={:?}", fleet.booking_urls[0]),
        format!("target_admin={:?}", fleet.admin_urls[0]),
        format!("target_gateway={:?}", fleet.gateway_url),
    ]);
    let target = Profile::load(Some("ci"), &target_sets).unwrap();
    let mut paid_by_run = Vec::new();
    for run in 1..=2 {
        let outcome = rehearse(&target, Progress::Quiet).await.unwrap();
        let report = &outcome.report;
        let failed: Vec<_> = report.failed().collect();
        assert!(failed.is_empty(), "{name}, run {run} failed: {failed:#?}");
        let paid: u64 = report.sale.paid_by_path.values().sum();
        assert!(paid > 0, "{name}, run {run}: {:?}", report.sale);
        paid_by_run.push(paid);
    }
    // the first run's bookings went with the second run's reset
    let first = fleet.first().unwrap();
    let sale = &fleet.sale;
    let left = first
        .stack
        .records
        .scan_all()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| &r.sale == sale)
        .count() as u64;
    assert_eq!(left, paid_by_run[1], "{name}: records left after two runs");
    fleet.stop().await;
    let _ = std::fs::remove_dir_all(&out);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_embedded_deployment_rehearsed_twice_passes_twice() {
    rehearsed_twice("embedded", &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_redis_deployment_rehearsed_twice_passes_twice() {
    rehearsed_twice("redis", &["stack.kind=\"redis\"".to_owned()]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_aws_deployment_on_local_emulators_rehearsed_twice_passes_twice() {
    let local = booking_aws_local::LocalAws::start().await.unwrap();
    let e = local.settings().endpoints;
    let postgres = std::env::var("SELLOUT_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "host=127.0.0.1 port=5432 user=postgres dbname=test".to_owned());
    let set = |k: &str, v: &str| format!("{k}={v:?}");
    let sets = [
        "stack.kind=\"aws\"".to_owned(),
        set("stack.aws.sdk.endpoints.dynamodb", &e.dynamodb.unwrap()),
        set(
            "stack.aws.sdk.endpoints.dynamodb_streams",
            &e.dynamodb_streams.unwrap(),
        ),
        set("stack.aws.sdk.endpoints.sqs", &e.sqs.unwrap()),
        set("stack.aws.sdk.endpoints.s3", &e.s3.unwrap()),
        "stack.aws.sdk.local_credentials=true".to_owned(),
        "stack.aws.sdk.s3_path_style=true".to_owned(),
        "stack.aws.allow_unsupported_settings=true".to_owned(),
        set("stack.postgres_url", &postgres),
        // the ci profile shrunk for a debug build on the local servers, as
        // in rehearse_mail.rs: 90 seats, 12 s at 8/s
        "candidates=400".to_owned(),
        "levels.0.cap=20".to_owned(),
        "levels.1.cap=30".to_owned(),
        "levels.2.cap=40".to_owned(),
        "load.rate=8.0".to_owned(),
        "load.rush_secs=12.0".to_owned(),
        "load.late_rate=3.0".to_owned(),
        "load.late_secs=6.0".to_owned(),
        "settle.max_ms=120000".to_owned(),
        "thresholds.rush_rate_min=6.5".to_owned(),
        "thresholds.booking_p99_ms_max=5000.0".to_owned(),
        "thresholds.queue_age_ms_max=30000.0".to_owned(),
    ];
    rehearsed_twice("aws", &sets).await;
}
