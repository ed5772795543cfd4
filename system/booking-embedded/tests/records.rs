//! The embedded record store: the records and stream contract suites
//! (booking-contract), once as configured by default and once with lagging
//! eventually consistent reads; then what only the embedded store has:
//! the replication lag itself, throttling, and its TTL service
//! (`sweep_ttl`, late by `ttl_delay_ms`, and the zoo's `paid_keeps_ttl`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use booking::clock::{Clock, ManualClock};
use booking::records::{
    ChangeStream, Condition, ConfirmPath, RecordError, RecordStatus, RecordStore, StreamKind,
    Throttles, UserIdentity,
};
use booking_contract::records::{HOLD_MS, RecordsFixture, cand, held, pay};
use booking_embedded::records::{EmbeddedRecords, RecordsConfig};

const T0: u64 = 1_700_000_000_000;

fn store_with(config: RecordsConfig) -> (EmbeddedRecords, ManualClock) {
    let clock = ManualClock::new(T0);
    (EmbeddedRecords::new(Arc::new(clock.clone()), config), clock)
}

fn store() -> (EmbeddedRecords, ManualClock) {
    store_with(RecordsConfig::default())
}

async fn everything(s: &EmbeddedRecords) -> Vec<booking::records::StreamRecord> {
    s.read(0, 10_000, Duration::ZERO).await.unwrap()
}

/// An embedded store on a manual clock, for the contract suites.
struct EmbeddedFixture {
    records: EmbeddedRecords,
    clock: ManualClock,
}

#[async_trait]
impl RecordsFixture for EmbeddedFixture {
    fn records(&self) -> &dyn RecordStore {
        &self.records
    }

    fn stream(&self) -> &dyn ChangeStream {
        &self.records
    }

    fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    async fn run_ttl_service(&self) {
        self.records.sweep_ttl(usize::MAX);
    }

    /// The replica catches up once its lag has passed.
    async fn settle(&self) {
        self.clock
            .advance_ms(self.records.config().replication_lag_ms);
    }

    fn rereads_behind(&self) -> bool {
        true
    }
}

fn fixture_with(config: RecordsConfig) -> EmbeddedFixture {
    let (records, clock) = store_with(config);
    EmbeddedFixture { records, clock }
}

async fn fixture() -> EmbeddedFixture {
    fixture_with(RecordsConfig::default())
}

/// Eventually consistent reads a second behind: the suite settles before
/// each such read, so every case holds as it does without lag.
async fn lagging_fixture() -> EmbeddedFixture {
    fixture_with(RecordsConfig {
        replication_lag_ms: 1_000,
        ..RecordsConfig::default()
    })
}

async fn trimmed_fixture() -> EmbeddedFixture {
    fixture_with(RecordsConfig {
        stream_retained_max: 2,
        ..RecordsConfig::default()
    })
}

booking_contract::records_contract!(fixture);
booking_contract::records_contract!(lagging_fixture, as lagging_records_contract);
booking_contract::stream_contract!(fixture, trimmed: trimmed_fixture);

#[tokio::test]
async fn eventually_consistent_reads_serve_the_previous_version_within_the_lag() {
    let (s, clock) = store_with(RecordsConfig {
        replication_lag_ms: 1_000,
        ..RecordsConfig::default()
    });
    let r = held("x", "P1", T0);
    s.put(r.clone(), Condition::NotExists).await.unwrap();
    assert_eq!(s.get(&cand("x"), true).await.unwrap(), Some(r.clone()));
    assert_eq!(
        s.get(&cand("x"), false).await.unwrap(),
        None,
        "not replicated yet"
    );
    assert_eq!(
        s.by_payment(&pay("P1")).await.unwrap(),
        None,
        "the GSI lags too"
    );

    clock.advance_ms(1_000);
    assert_eq!(s.get(&cand("x"), false).await.unwrap(), Some(r.clone()));
    assert_eq!(s.by_payment(&pay("P1")).await.unwrap(), Some(r.clone()));

    let paid = s
        .mark_paid(&cand("x"), &pay("P1"), ConfirmPath::Webhook, T0 + 1_000)
        .await
        .unwrap();
    clock.advance_ms(999);
    assert_eq!(s.get(&cand("x"), false).await.unwrap(), Some(r.clone()));
    assert_eq!(s.get(&cand("x"), true).await.unwrap(), Some(paid.clone()));
    clock.advance_ms(1);
    assert_eq!(s.get(&cand("x"), false).await.unwrap(), Some(paid.clone()));

    // a delete is seen late by the lagging reads, at once by the consistent one
    s.delete(&cand("x"), Condition::PaymentIs(pay("P1")))
        .await
        .unwrap();
    assert_eq!(s.get(&cand("x"), true).await.unwrap(), None);
    assert_eq!(s.get(&cand("x"), false).await.unwrap(), Some(paid.clone()));
    assert_eq!(s.by_payment(&pay("P1")).await.unwrap(), Some(paid));
    assert!(
        s.scan_all().await.unwrap().is_empty(),
        "the audit scan is consistent"
    );
    clock.advance_ms(1_000);
    assert_eq!(s.get(&cand("x"), false).await.unwrap(), None);
    assert_eq!(s.by_payment(&pay("P1")).await.unwrap(), None);
}

#[tokio::test]
async fn two_quick_writes_are_seen_in_order_by_a_lagging_reader() {
    let (s, clock) = store_with(RecordsConfig {
        replication_lag_ms: 100,
        ..RecordsConfig::default()
    });
    let v1 = held("x", "P1", T0);
    s.put(v1.clone(), Condition::NotExists).await.unwrap();
    clock.advance_ms(50);
    let v2 = s.note_query_failure(&cand("x"), &pay("P1")).await.unwrap();
    clock.advance_ms(50);
    let v3 = s.note_query_failure(&cand("x"), &pay("P1")).await.unwrap();
    assert_eq!(s.get(&cand("x"), false).await.unwrap(), Some(v1));
    clock.advance_ms(50);
    assert_eq!(s.get(&cand("x"), false).await.unwrap(), Some(v2));
    clock.advance_ms(50);
    assert_eq!(s.get(&cand("x"), false).await.unwrap(), Some(v3));
}

#[tokio::test]
async fn the_ttl_sweep_is_late_and_marks_only_its_own_removals() {
    let (s, clock) = store();
    let expiring = held("a", "P1", T0);
    let later = held("b", "P2", T0 + 60_000);
    s.put(expiring.clone(), Condition::NotExists).await.unwrap();
    s.put(later.clone(), Condition::NotExists).await.unwrap();
    s.put(held("c", "P3", T0), Condition::NotExists)
        .await
        .unwrap();
    let paid = s
        .mark_paid(&cand("c"), &pay("P3"), ConfirmPath::Callback, T0 + 1)
        .await
        .unwrap();
    s.put(held("d", "P4", T0), Condition::NotExists)
        .await
        .unwrap();
    let released = s
        .delete(
            &cand("d"),
            Condition::StatusIsWithPayment(RecordStatus::Held, pay("P4")),
        )
        .await
        .unwrap();

    // long past a's TTL, nothing happens until the TTL service gets round to it
    clock.advance(Duration::from_secs(630));
    assert_eq!(
        s.get(&cand("a"), true).await.unwrap(),
        Some(expiring.clone()),
        "TTL deletion is late, not on time"
    );
    let after = s.last_sequence();
    let swept = s.sweep_ttl(100);
    assert_eq!(
        swept,
        vec![expiring.clone()],
        "only a: b's TTL has not passed, c has none"
    );
    assert_eq!(s.get(&cand("a"), true).await.unwrap(), None);
    assert_eq!(s.get(&cand("c"), true).await.unwrap(), Some(paid));
    assert!(s.sweep_ttl(100).is_empty(), "nothing twice");

    let stream = everything(&s).await;
    let removals: Vec<_> = stream
        .iter()
        .filter(|r| r.kind == StreamKind::Remove)
        .collect();
    assert_eq!(removals.len(), 2);
    let app = removals[0];
    assert_eq!(app.old, Some(released));
    assert_eq!(
        app.user_identity, None,
        "application deletes carry no identity"
    );
    assert!(!app.is_ttl_removal());
    let ttl = removals[1];
    assert!(ttl.sequence > after);
    assert_eq!(ttl.old, Some(expiring));
    assert_eq!(ttl.new, None);
    assert_eq!(ttl.user_identity, Some(UserIdentity::ttl_service()));
    assert!(ttl.is_ttl_removal());
    let sequences: Vec<u64> = stream.iter().map(|r| r.sequence).collect();
    assert_eq!(sequences, (1..=sequences.len() as u64).collect::<Vec<_>>());

    clock.advance(Duration::from_secs(60));
    assert_eq!(s.sweep_ttl(100), vec![later]);
}

#[tokio::test]
async fn writes_over_the_rate_are_throttled_counted_and_change_nothing() {
    let (s, clock) = store_with(RecordsConfig {
        writes_per_s: Some(2),
        reads_per_s: Some(1),
        ..RecordsConfig::default()
    });
    assert_eq!(s.throttles().await.unwrap(), Throttles::default());
    s.put(held("a", "P1", T0), Condition::NotExists)
        .await
        .unwrap();
    s.put(held("b", "P2", T0), Condition::NotExists)
        .await
        .unwrap();
    assert_eq!(
        s.put(held("c", "P3", T0), Condition::NotExists).await,
        Err(RecordError::Throttled)
    );
    assert_eq!(
        s.mark_paid(&cand("a"), &pay("P1"), ConfirmPath::Callback, T0)
            .await,
        Err(RecordError::Throttled)
    );
    s.get(&cand("c"), true).await.unwrap();
    assert_eq!(s.get(&cand("c"), true).await, Err(RecordError::Throttled));
    assert_eq!(
        s.throttles().await.unwrap(),
        Throttles {
            reads: 1,
            writes: 2
        }
    );

    // half a second refills one write at 2/s
    clock.advance_ms(500);
    s.put(held("c", "P3", T0), Condition::NotExists)
        .await
        .unwrap();
    assert_eq!(
        s.put(held("d", "P4", T0), Condition::NotExists).await,
        Err(RecordError::Throttled)
    );
    clock.advance_ms(1_000);
    assert_eq!(
        s.scan_all().await.unwrap().len(),
        3,
        "throttled writes wrote nothing"
    );
    assert_eq!(s.throttles().await.unwrap().total(), 4);
}

/// The zoo's bug `paid_keeps_ttl`: the PAID record keeps the hold's TTL, and
/// the TTL service deletes a paid booking later. Without it, never.
#[tokio::test]
async fn the_paid_keeps_ttl_bug_lets_the_ttl_service_delete_a_paid_booking() {
    for (bugs, deleted) in [
        (booking::Bugs::none(), 0),
        (booking::Bugs::of([booking::Bug::PaidKeepsTtl]), 1),
    ] {
        let (s, clock) = store_with(RecordsConfig {
            bugs: bugs.clone(),
            ..RecordsConfig::default()
        });
        s.put(held("x", "P1", T0), Condition::NotExists)
            .await
            .unwrap();
        let paid = s
            .mark_paid(&cand("x"), &pay("P1"), ConfirmPath::Callback, T0)
            .await
            .unwrap();
        assert_eq!(paid.status, RecordStatus::Paid);
        assert_eq!(paid.expires_at_s.is_some(), deleted == 1, "{bugs:?}");
        clock.advance(std::time::Duration::from_millis(2 * HOLD_MS));
        assert_eq!(s.sweep_ttl(10).len(), deleted, "{bugs:?}");
        assert_eq!(
            s.get(&cand("x"), true).await.unwrap().is_none(),
            deleted == 1
        );
    }
}

/// The TTL service is late by `ttl_delay_ms`: nothing goes before.
#[tokio::test]
async fn the_ttl_service_deletes_only_after_its_delay() {
    let (s, clock) = store_with(RecordsConfig {
        ttl_delay_ms: 30_000,
        ..RecordsConfig::default()
    });
    s.put(held("x", "P1", T0), Condition::NotExists)
        .await
        .unwrap();
    clock.advance(std::time::Duration::from_millis(HOLD_MS + 29_000));
    assert!(s.sweep_ttl(10).is_empty(), "expired, but not yet swept");
    clock.advance(std::time::Duration::from_millis(1_000));
    assert_eq!(s.sweep_ttl(10).len(), 1);
}
