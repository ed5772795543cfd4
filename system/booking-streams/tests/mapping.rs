//! The event-source mapping over the embedded table's stream: partial batch
//! failures, bisection down to a poison record, the on-failure destination
//! after the last retry, the max record age, and the expiry handler run
//! through it end to end.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use booking::records::{BookingRecord, Condition, RecordStore, StreamRecord};
use booking::{CandidateHash, Clock, Level, ManualClock, PaymentId, SaleId};
use booking_embedded::records::{EmbeddedRecords, RecordsConfig};
use booking_streams::{
    BatchHandler, DiscardReason, EventSourceMapping, MappingConfig, MemoryDestination, Next,
    Stepped,
};
use parking_lot::Mutex;

fn record(i: u32, now_ms: u64) -> BookingRecord {
    BookingRecord::held(
        CandidateHash::of(&format!("c{i}")),
        SaleId::parse("s").unwrap(),
        Level::parse("a").unwrap(),
        PaymentId::parse(&format!("P{i}")).unwrap(),
        now_ms,
        now_ms + 60_000,
    )
}

/// Fails every batch that holds a poison payment, at that record; records
/// every invocation's size and what it handled.
#[derive(Debug, Default)]
struct Picky {
    poison: BTreeSet<String>,
    sizes: Mutex<Vec<usize>>,
    handled: Mutex<Vec<u64>>,
}

#[async_trait]
impl BatchHandler for Picky {
    fn name(&self) -> &'static str {
        "picky"
    }

    async fn handle_batch(&self, records: &[StreamRecord]) -> Option<u64> {
        self.sizes.lock().push(records.len());
        for r in records {
            let payment = r.new.as_ref().map(|n| n.payment_id.to_string());
            if payment.is_some_and(|p| self.poison.contains(&p)) {
                return Some(r.sequence);
            }
            self.handled.lock().push(r.sequence);
        }
        None
    }
}

struct Setup {
    clock: Arc<ManualClock>,
    table: Arc<EmbeddedRecords>,
    handler: Arc<Picky>,
    destination: Arc<MemoryDestination>,
    mapping: EventSourceMapping,
}

async fn setup(records: u32, poison: &[&str], config: MappingConfig) -> Setup {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let table = Arc::new(EmbeddedRecords::new(
        clock.clone(),
        RecordsConfig::default(),
    ));
    for i in 0..records {
        table
            .put(record(i, clock.now_ms()), Condition::NotExists)
            .await
            .unwrap();
    }
    let handler = Arc::new(Picky {
        poison: poison.iter().map(|p| (*p).to_owned()).collect(),
        ..Picky::default()
    });
    let destination = Arc::new(MemoryDestination::default());
    let mapping = EventSourceMapping::new(
        table.clone(),
        handler.clone(),
        destination.clone(),
        clock.clone(),
        MappingConfig {
            poll_wait: Duration::from_millis(1),
            ..config
        },
        0,
    )
    .unwrap();
    Setup {
        clock,
        table,
        handler,
        destination,
        mapping,
    }
}

async fn run_until_idle(m: &EventSourceMapping) -> Vec<Stepped> {
    let mut steps = Vec::new();
    for _ in 0..200 {
        let s = m.step().await;
        if s == Stepped::Idle {
            return steps;
        }
        steps.push(s);
    }
    panic!("no quiet after 200 steps: {steps:?}");
}

#[tokio::test]
async fn a_clean_stream_is_read_in_batches_once() {
    let s = setup(
        25,
        &[],
        MappingConfig {
            batch_size: 10,
            ..MappingConfig::default()
        },
    )
    .await;
    let steps = run_until_idle(&s.mapping).await;
    assert_eq!(steps.len(), 3);
    assert_eq!(*s.handler.sizes.lock(), vec![10, 10, 5]);
    assert_eq!(*s.handler.handled.lock(), (1..=25).collect::<Vec<u64>>());
    let stats = s.mapping.stats();
    assert_eq!(
        (stats.handled, stats.position, stats.invocations),
        (25, 25, 3)
    );
    assert!(s.destination.sent().is_empty());
}

#[tokio::test]
async fn a_poison_record_is_bisected_to_retried_and_given_up_while_the_rest_is_handled() {
    // P5 is the 6th record (sequence 6)
    let s = setup(
        12,
        &["P5"],
        MappingConfig {
            batch_size: 8,
            retry_attempts_max: 2,
            ..MappingConfig::default()
        },
    )
    .await;
    let steps = run_until_idle(&s.mapping).await;
    // 8 records: 1..=5 done, 6 fails; remainder 3 (6,7,8) → 2 → 1, then 2 retries of [6], then it goes
    assert_eq!(*s.handler.sizes.lock(), vec![8, 2, 1, 1, 1, 6], "{steps:?}");
    let sent = s.destination.sent();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].reason, DiscardReason::RetriesExhausted);
    assert_eq!(sent[0].handler, "picky");
    assert_eq!(sent[0].attempts, 3);
    assert_eq!(sent[0].records.len(), 1);
    assert_eq!(sent[0].records[0].sequence, 6);
    let handled = s.handler.handled.lock().clone();
    let expected: Vec<u64> = (1..=12).filter(|s| *s != 6).collect();
    assert_eq!(handled, expected, "every other record exactly once");
    let stats = s.mapping.stats();
    assert_eq!(stats.bisections, 2);
    assert_eq!(stats.discarded_after_retries, 1);
    assert_eq!(stats.position, 12);
    assert!(steps.iter().any(|st| matches!(
        st,
        Stepped::Invoked(Next::Discard {
            first: 6,
            last: 6,
            ..
        })
    )));
    // a retry waits, a bisection does not
    let retry = Stepped::Invoked(Next::Retry {
        through: 5,
        limit: 1,
        attempts: 2,
        bisected: false,
    });
    assert_eq!(s.mapping.pause(&retry), Duration::from_millis(200));
    let split = Stepped::Invoked(Next::Retry {
        through: 5,
        limit: 1,
        attempts: 0,
        bisected: true,
    });
    assert_eq!(s.mapping.pause(&split), Duration::ZERO);
}

#[tokio::test]
async fn without_bisect_the_failed_remainder_goes_whole() {
    let s = setup(
        6,
        &["P2"],
        MappingConfig {
            batch_size: 10,
            retry_attempts_max: 1,
            bisect_on_error: false,
            ..MappingConfig::default()
        },
    )
    .await;
    run_until_idle(&s.mapping).await;
    assert_eq!(*s.handler.sizes.lock(), vec![6, 4]);
    let sent = s.destination.sent();
    assert_eq!(
        sent[0]
            .records
            .iter()
            .map(|r| r.sequence)
            .collect::<Vec<_>>(),
        vec![3, 4, 5, 6],
        "Lambda gives up the whole failed batch"
    );
    assert_eq!(*s.handler.handled.lock(), vec![1, 2]);
}

#[tokio::test]
async fn records_past_the_max_age_are_given_up_unread() {
    let s = setup(
        3,
        &[],
        MappingConfig {
            record_age_max: Duration::from_secs(60),
            ..MappingConfig::default()
        },
    )
    .await;
    s.clock.advance(Duration::from_secs(61));
    s.table
        .put(record(99, s.clock.now_ms()), Condition::NotExists)
        .await
        .unwrap();
    let steps = run_until_idle(&s.mapping).await;
    assert_eq!(steps[0], Stepped::Expired(3));
    let sent = s.destination.sent();
    assert_eq!(sent[0].reason, DiscardReason::RecordTooOld);
    assert_eq!(sent[0].records.len(), 3);
    assert_eq!(
        *s.handler.handled.lock(),
        vec![4],
        "only the young record is invoked"
    );
    assert_eq!(s.mapping.stats().discarded_too_old, 3);
}

#[test]
fn bad_settings_are_refused() {
    let table = Arc::new(EmbeddedRecords::default());
    let err = EventSourceMapping::new(
        table,
        Arc::new(Picky::default()),
        Arc::new(MemoryDestination::default()),
        Arc::new(ManualClock::new(0)),
        MappingConfig {
            batch_size: 0,
            ..MappingConfig::default()
        },
        0,
    )
    .unwrap_err();
    assert!(err.contains("batch_size"));
}
