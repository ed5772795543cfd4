//! A short rehearsal on the AWS stack against the local servers: the CI
//! profile (2,000 candidates, late arrivals, holds expiring and reselling)
//! shrunk to what a debug build and the local servers carry on a busy
//! 2-core machine in CI (SQS on fauxqs where installed, else on a moto of
//! its own, which takes about 70 bookings a second in a release build; the
//! release rehearsal at the profile's full rate is `just
//! rehearse-aws-local`): 180 seats, a 24 s rush at 10 bookings/s so the
//! levels still sell out and resell, with the rate, latency and queue-age
//! bounds loosened to match; every audit invariant stays at zero
//! on two in-process instances with
//! the ledger on a private Redis, DynamoDB and its stream on dynoxide, SQS
//! on its own server, S3 on moto and the back office on this machine's PostgreSQL. Every
//! invariant holds, and every PAID booking is in PostgreSQL.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use booking_aws_local::LocalAws;
use booking_server::config::StackKind;
use scenarios::{Profile, Progress, rehearse};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_ci_profile_rehearses_green_on_aws_and_fills_the_back_office() {
    let local = LocalAws::start().await.unwrap();
    let out = std::env::temp_dir().join(format!("rehearse-aws-{:016x}", rand::random::<u64>()));
    let mut profile = Profile::load(
        Some("ci"),
        &[
            format!("out={:?}", out.display().to_string()),
            "levels.0.cap=40".into(),
            "levels.1.cap=60".into(),
            "levels.2.cap=80".into(),
            "load.rate=10.0".into(),
            "load.rush_secs=24.0".into(),
            "load.late_rate=3.0".into(),
            "settle.max_ms=120000".into(),
            "thresholds.rush_rate_min=8.5".into(),
            "thresholds.booking_p99_ms_max=5000.0".into(),
            "thresholds.queue_age_ms_max=30000.0".into(),
        ],
    )
    .unwrap();
    let postgres = std::env::var("SELLOUT_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "host=127.0.0.1 port=5432 user=postgres dbname=test".to_owned());
    profile.stack.kind = StackKind::Aws;
    profile.stack.aws.sdk = local.settings();
    profile.stack.postgres_url = Some(postgres.clone());
    profile.stack.aws.allow_unsupported_settings = true;
    let outcome = rehearse(&profile, Progress::Quiet).await.unwrap();
    let report = &outcome.report;
    let failed: Vec<_> = report.failed().collect();
    assert!(failed.is_empty(), "failed: {failed:#?}");
    assert!(report.passed);
    assert_eq!(report.stack, "aws");
    let synced = report
        .invariants
        .iter()
        .find(|i| i.name == "paid_in_back_office")
        .expect("the back office audited");
    assert!(synced.passed);

    // the audit compared every PAID record with its PostgreSQL row (in the
    // run's own schema) and found none missing; there were dozens
    assert_eq!(synced.figure, 0.0, "{}", synced.detail);
    let paid: u64 = report.sale.paid_by_path.values().sum();
    assert!(paid >= 60, "paid: {paid}");
    let _ = std::fs::remove_dir_all(&out);
}
