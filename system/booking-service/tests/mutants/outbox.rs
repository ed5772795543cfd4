//! The outbox's email sweep (`outbox::send_owed_emails`) at its edges: a
//! given-up email stays given up for days (its tries are kept a week), a
//! send whose mark failed keeps the tries counted so far, and an email owed
//! on a record the store cannot mark is alerted and counted failed, not sent.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use booking::coordination::keys;
use booking::records::{Condition, ConfirmPath, RecordStore};
use booking::{Bug, Bugs, Coordination};
use booking_embedded::records::RecordsConfig;
use booking_service::confirm::{
    ConfirmPorts, EmailOutcome, MarkPaidOutcome, PaidRequest, mark_paid,
};
use booking_service::outbox::{self, OwedSweep, Retry, SweepMode};
use common::{Stack, cand, pay};

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

async fn retry_state(s: &Stack, p: &str) -> Option<Retry> {
    let key = keys::email_retry("test", &s.sale, &pay(p));
    s.coordination
        .get(&key)
        .await
        .unwrap()
        .map(|v| Retry::decode(&v).expect("a retry state"))
}

/// `x` booked with `P1`, its HELD record written, then the callback's
/// confirm step (which sends the email, or fails to).
async fn paid(s: &Stack) -> MarkPaidOutcome {
    let m = s.book("x", "t-x", "P1").await;
    s.records
        .put(m.held_record(), Condition::NotExists)
        .await
        .unwrap();
    let request = PaidRequest {
        sale: s.sale.clone(),
        candidate: cand("x"),
        payment_id: pay("P1"),
        trx_id: Some("TRX".into()),
        path: ConfirmPath::Callback,
        now_ms: s.now(),
    };
    mark_paid(s.confirm_ports(), &request).await.unwrap()
}

async fn sweep(s: &Stack, ports: ConfirmPorts<'_>) -> OwedSweep {
    let clock = s.clock.clone();
    outbox::send_owed_emails(
        ports,
        &s.sale,
        outbox::owed_paid_before(s.now(), &s.settings),
        100,
        SweepMode::Scheduled,
        tokio::time::Instant::now() + secs(45),
        &move || booking::Clock::now_ms(&clock),
    )
    .await
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_given_up_email_stays_given_up_for_days() {
    let mut s = Stack::new(1, &["x"]).await;
    s.settings.email_attempts_max = 1;
    s.mailer.set_down(true);
    paid(&s).await; // the one try: spent
    assert_eq!(s.alerts.kinds(), ["email_undeliverable"]);
    s.mailer.set_down(false);
    s.clock.advance(secs(3 * 24 * 60 * 60));
    let swept = sweep(&s, s.confirm_ports()).await;
    assert_eq!((swept.owed, swept.sent, swept.given_up), (1, 0, 1));
    assert!(s.mailer.0.lock().is_empty());
    assert_eq!(retry_state(&s, "P1").await.map(|r| r.attempts), Some(1));
}

#[tokio::test(start_paused = true)]
async fn a_send_whose_mark_failed_keeps_the_tries_counted_so_far() {
    use faults::wrappers::FaultyRecords;
    let s = Stack::new(1, &["x"]).await;
    s.mailer.set_down(true);
    paid(&s).await; // try 1 failed
    assert_eq!(retry_state(&s, "P1").await.map(|r| r.attempts), Some(1));
    s.mailer.set_down(false);
    s.clock.advance(s.settings.email_retry_backoff + secs(1));

    // the send works, its mark does not
    let schedule = faults::Schedule::from_toml(
        "[[fault]]\nname = \"f\"\ntarget = \"records\"\nops = [\"mark_emailed\"]\n\
         start_ms = 0\nduration_ms = 3_600_000\nkind = { type = \"error\" }\n",
    )
    .unwrap();
    let injector = Arc::new(faults::Injector::new(
        schedule,
        7,
        Arc::new(s.clock.clone()),
    ));
    let faulty = FaultyRecords::new(s.records.clone(), s.records.clone(), injector);
    let ports = ConfirmPorts {
        records: &faulty,
        ..s.confirm_ports()
    };
    let swept = sweep(&s, ports).await;
    assert_eq!((swept.owed, swept.sent, swept.failed), (1, 0, 1));
    assert_eq!(s.mailer.0.lock().len(), 1, "sent, not marked");
    assert_eq!(
        retry_state(&s, "P1").await.map(|r| r.attempts),
        Some(1),
        "still owed, with its tries"
    );
}

#[tokio::test(start_paused = true)]
async fn an_email_owed_on_a_broken_record_is_alerted_and_counted_failed() {
    let s = Stack::new_with(
        1,
        &["x"],
        RecordsConfig {
            bugs: Bugs::of([Bug::PaidKeepsTtl]),
            ..RecordsConfig::default()
        },
    )
    .await;
    s.mailer.set_down(true);
    let out = paid(&s).await;
    let MarkPaidOutcome::Won { email, .. } = out else {
        panic!("{out:?}")
    };
    assert!(matches!(email, EmailOutcome::SendFailed(_)), "{email:?}");
    s.mailer.set_down(false);
    s.clock.advance(s.settings.sweep_interval + secs(1));
    let swept = sweep(&s, s.confirm_ports()).await;
    assert_eq!((swept.owed, swept.sent, swept.failed), (1, 0, 1));
    assert!(s.mailer.0.lock().is_empty(), "not sent");
    assert!(
        s.alerts
            .kinds()
            .contains(&"email_owed_on_broken_record".to_owned()),
        "{:?}",
        s.alerts.kinds()
    );
}
