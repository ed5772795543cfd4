//! Issue 19: the sweep's filter (this sale's HELD records only) and every
//! count the operator reads (the sweep's report and `stats()`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use booking::records::{Condition, ConfirmPath, RecordStatus, RecordStore};
use booking::{GatewayPaymentState, Ledger, SaleId};
use booking_service::reconciler::{ReconcilerCounts, SweepReport};
use common::{Script, Stack, cand, pay};

fn minutes(m: u64) -> Duration {
    Duration::from_secs(m * 60)
}

/// An overdue HELD record of another sale and an overdue PAID record of
/// this sale: the sweep neither queries nor touches them.
#[tokio::test(start_paused = true)]
async fn the_sweep_leaves_other_sales_and_paid_records_alone() {
    let s = Stack::new(3, &["p", "q"]).await;
    // p: PAID in this sale
    let p = s.book("p", "t1", "P1").await;
    s.records
        .put(p.held_record(), Condition::NotExists)
        .await
        .unwrap();
    s.records
        .mark_paid(&cand("p"), &pay("P1"), ConfirmPath::Webhook, s.now())
        .await
        .unwrap();
    s.ledger
        .mark_paid(&s.sale, &cand("p"), &pay("P1"))
        .await
        .unwrap();
    // q: a HELD record of another sale (its gateway says cancelled: a sweep
    // that took it would release it and delete the record)
    let q = s.book("q", "t2", "P2").await;
    let other = SaleId::parse("other").unwrap();
    let mut foreign = q.held_record();
    foreign.sale = other.clone();
    s.records
        .put(foreign.clone(), Condition::NotExists)
        .await
        .unwrap();
    s.gateway
        .set(&pay("P1"), Script::State(GatewayPaymentState::Cancelled));
    s.gateway
        .set(&pay("P2"), Script::State(GatewayPaymentState::Cancelled));
    s.clock.advance(minutes(11)); // both overdue
    let r = s.reconciler("a");
    let report = r.tick().await;
    assert!(
        s.gateway.queried.lock().is_empty(),
        "nothing queried: {:?}",
        s.gateway.queried.lock()
    );
    assert_eq!(
        report,
        SweepReport {
            leader: true,
            // p's email was owed (marked PAID by hand above): the outbox
            // step sends it; nothing else happened
            emails_recovered: 1,
            ..SweepReport::default()
        }
    );
    let p_rec = s.records.get(&cand("p"), true).await.unwrap().unwrap();
    assert_eq!(p_rec.status, RecordStatus::Paid);
    let q_rec = s.records.get(&cand("q"), true).await.unwrap().unwrap();
    assert_eq!(q_rec.status, RecordStatus::Held);
    assert_eq!(q_rec.sale, other);
    // the ledger still has p paid and q's seat held (q's hold is this sale's
    // in the ledger, but its record says another sale: not this sweep's)
    assert_eq!(
        s.ledger.paid(&s.sale, &cand("p")).await.unwrap(),
        Some(pay("P1"))
    );
    assert!(s.ledger.hold(&s.sale, &cand("q")).await.unwrap().is_some());
    assert_eq!(s.count().await, 2);
    assert_eq!(r.stats().released, 0);
}

/// One sweep over a known mix; every field of the report and of `stats()`.
#[tokio::test(start_paused = true)]
async fn one_sweep_over_a_known_mix_counts_every_outcome_exactly() {
    let s = Stack::new(10, &["a", "b", "c", "d", "e", "l", "o"]).await;
    let threshold = s.settings.query_failures_before_extension;
    let max = s.settings.extensions_max;
    assert!(threshold > 1, "e needs a failure below the threshold");
    // o: a held hold whose record never came (an orphan); the gateway says
    // initiated (the default script): past the deadline → released
    s.book("o", "t0", "P0").await;
    let put = |r| async { s.records.put(r, Condition::NotExists).await.unwrap() };
    // a: completed → paid
    put(s.book("a", "t1", "PA").await.held_record()).await;
    s.gateway.set(
        &pay("PA"),
        Script::State(GatewayPaymentState::Completed {
            trx_id: "TRXA".into(),
        }),
    );
    // b: cancelled → released
    put(s.book("b", "t2", "PB").await.held_record()).await;
    s.gateway
        .set(&pay("PB"), Script::State(GatewayPaymentState::Cancelled));
    // c: unanswered, at the threshold → extended
    let mut c = s.book("c", "t3", "PC").await.held_record();
    c.query_failures = threshold - 1;
    put(c.clone()).await;
    s.gateway.set(&pay("PC"), Script::Fail);
    // d: unanswered, at the threshold, extensions spent → alert
    let mut d = s.book("d", "t4", "PD").await.held_record();
    d.query_failures = threshold - 1;
    d.extensions = max;
    put(d).await;
    s.gateway.set(&pay("PD"), Script::Fail);
    // e: unanswered, first failure → counted only
    put(s.book("e", "t5", "PE").await.held_record()).await;
    s.gateway.set(&pay("PE"), Script::Fail);
    // l: booked later, initiated, due inside the window but before its
    // deadline → left
    s.clock.advance(minutes(8));
    put(s.book("l", "t6", "PL").await.held_record()).await;
    // now: everything but l past its deadline, o past the slack too
    s.clock.advance(minutes(5));

    let r = s.reconciler("a");
    let report = r.tick().await;
    assert_eq!(
        report,
        SweepReport {
            leader: true,
            pending_undone: 0,
            orphans_recovered: 1,
            paid_marks_repaired: 0,
            due: 7,
            started: 7,
            paid: 1,
            released: 2,
            left: 1,
            query_failures: 3,
            extended: 1,
            alerts: 1,
            errors: 0,
            emails_recovered: 0,
            emails_failed: 0,
            emails_waiting: 0,
            emails_given_up: 0,
        }
    );
    assert_eq!(
        r.stats(),
        ReconcilerCounts {
            sweeps: 1,
            not_leader: 0,
            pending_undone: 0,
            orphans_recovered: 1,
            paid_marks_repaired: 0,
            started: 7,
            paid: 1,
            released: 2,
            left: 1,
            query_failures: 3,
            extended: 1,
            alerts: 1,
            errors: 0,
            deferred: 0,
            emails_recovered: 0,
            emails_failed: 0,
            emails_waiting: 0,
            emails_given_up: 0,
        }
    );
    // the counts are what happened
    assert_eq!(s.mailer.0.lock().len(), 1, "a's email");
    assert_eq!(s.alerts.kinds(), vec!["extensions_exhausted".to_string()]);
    assert!(s.ledger.hold(&s.sale, &cand("b")).await.unwrap().is_none());
    assert!(s.ledger.hold(&s.sale, &cand("o")).await.unwrap().is_none());
    let c_now = s.records.get(&cand("c"), true).await.unwrap().unwrap();
    assert_eq!(c_now.extensions, 1);
    assert_eq!(c_now.deadline_ms, c.deadline_ms + 600_000);
    assert_eq!(
        s.records
            .get(&cand("e"), true)
            .await
            .unwrap()
            .unwrap()
            .query_failures,
        1
    );
    // 7 seats taken, b and o came back
    assert_eq!(s.count().await, 5);
}

/// A recovered orphan whose gateway does not answer stays HELD, and its
/// re-created record's TTL runs a hold past now: the TTL service must not
/// delete it (and the safety net release it) before the next sweep.
#[tokio::test(start_paused = true)]
async fn a_recovered_orphan_record_outlives_the_sweep_that_made_it() {
    let s = Stack::new(1, &["o"]).await;
    let o = s.book("o", "t0", "P0").await;
    s.gateway.set(&pay("P0"), Script::Fail);
    s.clock.advance(minutes(13)); // past the deadline and the slack
    let r = s.reconciler("a");
    let report = r.tick().await;
    assert_eq!(
        (report.orphans_recovered, report.due, report.query_failures),
        (1, 1, 1),
        "{report:?}"
    );
    let rec = s.records.get(&cand("o"), true).await.unwrap().unwrap();
    assert_eq!(rec.status, RecordStatus::Held);
    assert_eq!(rec.deadline_ms, o.deadline_ms);
    let hold_ms = s.settings.hold.as_millis() as u64;
    assert_eq!(
        rec.expires_at_s,
        Some(booking::records::ttl_for_deadline(s.now() + hold_ms))
    );
    assert!(
        s.records.sweep_ttl(100).is_empty(),
        "the TTL does not fire right away"
    );
    assert_eq!(s.count().await, 1);
}
