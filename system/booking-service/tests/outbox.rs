#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The outbox of confirmation emails through the real confirm step and
//! reconciler, on the embedded stores: a failed send is tried again after
//! its back-off (not before), the budget of tries ends in one
//! `email_undeliverable` alert with the email still owed, a forced resend
//! sends it, and the sweep keeps its named rate and stops at its budget.

mod common;

use std::time::Duration;

use booking::coordination::keys;
use booking::records::{ConfirmPath, RecordStatus, RecordStore};
use booking::{Coordination, PaymentId};
use booking_service::confirm::{EmailOutcome, MarkPaidOutcome, PaidRequest, mark_paid};
use booking_service::outbox::{self, Retry, SweepMode};
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

/// `who` booked, the worker's HELD record written, then the callback's
/// confirm step (which sends the email, or fails to).
async fn paid_through_the_callback(s: &Stack, who: &str, p: &str) -> MarkPaidOutcome {
    let m = s.book(who, &format!("t-{who}"), p).await;
    s.records
        .put(m.held_record(), booking::Condition::NotExists)
        .await
        .unwrap();
    let request = PaidRequest {
        sale: s.sale.clone(),
        candidate: cand(who),
        payment_id: pay(p),
        trx_id: Some("TRX".into()),
        path: ConfirmPath::Callback,
        now_ms: s.now(),
    };
    mark_paid(s.confirm_ports(), &request).await.unwrap()
}

/// PAID with its email owed, as a winner that died before its send leaves it.
async fn paid_then_died(s: &Stack, who: &str, p: &str) {
    let m = s.book(who, &format!("t-{who}"), p).await;
    s.records
        .put(m.held_record(), booking::Condition::NotExists)
        .await
        .unwrap();
    s.records
        .mark_paid(&cand(who), &pay(p), ConfirmPath::Callback, s.now())
        .await
        .unwrap();
}

async fn email_sent_mark(s: &Stack, who: &str) -> bool {
    let r = s.records.get(&cand(who), true).await.unwrap().unwrap();
    assert_eq!(r.status, RecordStatus::Paid);
    r.email_sent
}

#[tokio::test(start_paused = true)]
async fn a_failed_send_is_written_down_and_tried_again_after_its_back_off_not_before() {
    let mut s = Stack::new(1, &["x"]).await;
    // a back-off longer than the sweep's grace, so the two can be told apart
    s.settings.email_retry_backoff = secs(60);
    s.mailer.set_down(true);
    let out = paid_through_the_callback(&s, "x", "P1").await;
    let MarkPaidOutcome::Won { email, .. } = out else {
        panic!("{out:?}")
    };
    assert!(matches!(email, EmailOutcome::SendFailed(_)), "{email:?}");
    let paid_at = s.now();
    assert_eq!(
        retry_state(&s, "P1").await,
        Some(Retry {
            attempts: 1,
            next_ms: paid_at + 60_000
        })
    );
    assert_eq!(s.alerts.kinds(), ["email_failed"]);
    assert!(!email_sent_mark(&s, "x").await, "still owed");

    s.mailer.set_down(false);
    let r = s.reconciler("a");
    // past the grace (a sweep interval), inside the back-off: left waiting
    s.clock.advance(s.settings.sweep_interval + secs(1));
    let report = r.tick().await;
    assert_eq!(
        (report.emails_recovered, report.emails_waiting),
        (0, 1),
        "{report:?}"
    );
    assert!(s.mailer.0.lock().is_empty());
    // past the back-off: sent once, recovered, marked, its state gone
    s.clock.advance(secs(40));
    let report = r.tick().await;
    assert_eq!(
        (
            report.emails_recovered,
            report.emails_waiting,
            report.emails_failed
        ),
        (1, 0, 0),
        "{report:?}"
    );
    {
        let sent = s.mailer.0.lock();
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].payment_id, pay("P1"));
        assert!(sent[0].recovered);
    }
    assert!(email_sent_mark(&s, "x").await);
    assert_eq!(retry_state(&s, "P1").await, None, "state deleted");
    s.clock.advance(secs(600));
    assert_eq!(r.tick().await.emails_recovered, 0);
    assert_eq!(s.mailer.0.lock().len(), 1, "sent once");
}

#[tokio::test(start_paused = true)]
async fn spent_tries_alert_once_and_leave_the_email_owed_until_a_forced_resend() {
    let mut s = Stack::new(1, &["x"]).await;
    s.settings.email_attempts_max = 3;
    s.settings.email_retry_backoff = secs(20);
    s.settings.email_retry_backoff_max = secs(40);
    s.mailer.set_down(true);
    paid_through_the_callback(&s, "x", "P1").await; // try 1: next at +20 s
    let r = s.reconciler("a");
    s.clock.advance(secs(21));
    let report = r.tick().await; // try 2: next at +40 s
    assert_eq!(report.emails_failed, 1, "{report:?}");
    s.clock.advance(secs(20));
    let report = r.tick().await; // 20 s into a 40 s back-off
    assert_eq!(
        (report.emails_failed, report.emails_waiting),
        (0, 1),
        "{report:?}"
    );
    s.clock.advance(secs(21));
    let report = r.tick().await; // try 3: the budget is spent
    assert_eq!(report.emails_failed, 1, "{report:?}");
    assert_eq!(s.mailer.refused(), 3);
    assert_eq!(
        s.alerts.kinds(),
        ["email_failed", "email_failed", "email_undeliverable"]
    );
    let state = retry_state(&s, "P1").await.unwrap();
    assert_eq!(state.attempts, 3);

    // given up: the sweeps leave it, owed, and try no more
    s.mailer.set_down(false);
    for _ in 0..5 {
        s.clock.advance(secs(600));
        let report = r.tick().await;
        assert_eq!(
            (report.emails_recovered, report.emails_given_up),
            (0, 1),
            "{report:?}"
        );
    }
    assert!(s.mailer.0.lock().is_empty());
    assert_eq!(s.alerts.kinds().len(), 3, "alerted once");
    assert_eq!(r.stats().emails_given_up, 1);
    assert!(!email_sent_mark(&s, "x").await, "still owed");

    // a human resends: forced past the spent budget, sent once
    let clock = s.clock.clone();
    let sweep = outbox::send_owed_emails(
        s.confirm_ports(),
        &s.sale,
        outbox::owed_paid_before(s.now(), &s.settings),
        100,
        SweepMode::Forced,
        tokio::time::Instant::now() + secs(45),
        &move || booking::Clock::now_ms(&clock),
    )
    .await
    .unwrap();
    assert_eq!((sweep.owed, sweep.sent, sweep.given_up), (1, 1, 0));
    assert_eq!(s.mailer.0.lock().len(), 1);
    assert!(email_sent_mark(&s, "x").await);
    assert_eq!(retry_state(&s, "P1").await, None);
}

#[tokio::test(start_paused = true)]
async fn the_sweep_keeps_its_rate_and_defers_what_its_budget_cannot_send() {
    let who: Vec<String> = (0..10).map(|i| format!("c{i}")).collect();
    let refs: Vec<&str> = who.iter().map(String::as_str).collect();
    let mut s = Stack::new(10, &refs).await;
    s.settings.email_send_rate = 4; // one every 250 ms
    for (i, w) in who.iter().enumerate() {
        paid_then_died(&s, w, &format!("P{i}")).await;
    }
    s.clock.advance(s.settings.sweep_interval + secs(1));
    let started = tokio::time::Instant::now();
    let report = s.reconciler("a").tick().await;
    let took = started.elapsed();
    assert_eq!(report.emails_recovered, 10, "{report:?}");
    // nine waits of a quarter second between ten sends
    assert!(
        (Duration::from_millis(2_250)..Duration::from_millis(2_500)).contains(&took),
        "{took:?}"
    );

    // a budget of one second: the sends due by then, the rest deferred
    let mut s = Stack::new(10, &refs).await;
    s.settings.email_send_rate = 4;
    for (i, w) in who.iter().enumerate() {
        paid_then_died(&s, w, &format!("P{i}")).await;
    }
    s.clock.advance(s.settings.sweep_interval + secs(1));
    let clock = s.clock.clone();
    let sweep = outbox::send_owed_emails(
        s.confirm_ports(),
        &s.sale,
        outbox::owed_paid_before(s.now(), &s.settings),
        100,
        SweepMode::Scheduled,
        tokio::time::Instant::now() + secs(1),
        &move || booking::Clock::now_ms(&clock),
    )
    .await
    .unwrap();
    assert_eq!((sweep.owed, sweep.sent, sweep.deferred), (10, 5, 5));
    let unsent: Vec<PaymentId> = {
        let sent = s.mailer.0.lock();
        (0..10)
            .map(|i| pay(&format!("P{i}")))
            .filter(|p| !sent.iter().any(|c| c.payment_id == *p))
            .collect()
    };
    assert_eq!(unsent.len(), 5, "the deferred ones are still owed");
    let owed = s.records.owed_emails(u64::MAX, 100).await.unwrap();
    assert_eq!(owed.len(), 5);
}
