//! Leased mappings over one stream: one reader for the fleet at a time, a
//! checkpoint a new leader starts from, a dead leader replaced after its
//! lease, a clean stop handing over at once, and every record handled.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use booking::records::{BookingRecord, Condition, RecordStore, StreamRecord};
use booking::{CandidateHash, Clock, Coordination, Level, PaymentId, SaleId, SystemClock};
use booking_embedded::coordination::EmbeddedCoordination;
use booking_embedded::outputs::AlertLog;
use booking_embedded::records::{EmbeddedRecords, RecordsConfig};
use booking_streams::lease::parse_checkpoint;
use booking_streams::{
    AlertDestination, BatchHandler, EventSourceMapping, LeaseConfig, LeasedMapping, MappingConfig,
};
use parking_lot::Mutex;
use tokio::sync::watch;

/// Records which owner handled which sequence.
#[derive(Debug)]
struct Tally {
    owner: &'static str,
    seen: Arc<Mutex<Vec<(&'static str, u64)>>>,
}

#[async_trait]
impl BatchHandler for Tally {
    fn name(&self) -> &'static str {
        "tally"
    }

    async fn handle_batch(&self, records: &[StreamRecord]) -> Option<u64> {
        let mut seen = self.seen.lock();
        for r in records {
            seen.push((self.owner, r.sequence));
        }
        None
    }
}

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

const LEASE: Duration = Duration::from_millis(600);
const POLL: Duration = Duration::from_millis(50);

struct Fleet {
    table: Arc<EmbeddedRecords>,
    coordination: Arc<EmbeddedCoordination>,
    seen: Arc<Mutex<Vec<(&'static str, u64)>>>,
    config: LeaseConfig,
}

impl Fleet {
    fn new() -> Fleet {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let mut config = LeaseConfig::new("t", &SaleId::parse("s").unwrap(), "tally", "unused");
        config.lease_ttl = LEASE;
        config.check(POLL).unwrap();
        Fleet {
            table: Arc::new(EmbeddedRecords::new(
                clock.clone(),
                RecordsConfig::default(),
            )),
            coordination: Arc::new(EmbeddedCoordination::new(clock)),
            seen: Arc::new(Mutex::new(Vec::new())),
            config,
        }
    }

    fn instance(&self, owner: &'static str) -> Arc<LeasedMapping> {
        let table = self.table.clone();
        let seen = self.seen.clone();
        let alerts = Arc::new(AlertLog::new());
        Arc::new(LeasedMapping::new(
            self.coordination.clone(),
            LeaseConfig {
                owner: owner.to_owned(),
                ..self.config.clone()
            },
            "tally",
            Box::new(move |start| {
                EventSourceMapping::new(
                    table.clone(),
                    Arc::new(Tally {
                        owner,
                        seen: seen.clone(),
                    }),
                    Arc::new(AlertDestination::new(alerts.clone())),
                    Arc::new(SystemClock),
                    MappingConfig {
                        poll_wait: POLL,
                        batch_size: 10,
                        ..MappingConfig::default()
                    },
                    start,
                )
            }),
        ))
    }

    async fn write(&self, from: u32, to: u32) {
        for i in from..to {
            self.table
                .put(record(i, SystemClock.now_ms()), Condition::NotExists)
                .await
                .unwrap();
        }
    }

    async fn checkpoint(&self) -> u64 {
        let v = self
            .coordination
            .get(&self.config.checkpoint_key)
            .await
            .unwrap();
        parse_checkpoint(&self.config.checkpoint_key, v.as_deref()).unwrap()
    }

    async fn wait_handled(&self, through: u64) {
        let started = Instant::now();
        while self.checkpoint().await < through {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "stuck at {} of {through}",
                self.checkpoint().await
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test]
async fn one_reader_at_a_time_and_a_dead_leader_is_replaced_from_the_checkpoint() {
    let fleet = Fleet::new();
    fleet.write(0, 30).await;
    let a = fleet.instance("a");
    let b = fleet.instance("b");
    let (stop_a, rx_a) = watch::channel(false);
    let (stop_b, rx_b) = watch::channel(false);
    let ra = a.clone();
    let task_a = tokio::spawn(async move { ra.run(rx_a).await });
    fleet.wait_handled(30).await;
    // b starts once a leads: it never reads while a holds the lease
    let rb = b.clone();
    let task_b = tokio::spawn(async move { rb.run(rx_b).await });
    fleet.write(30, 40).await;
    fleet.wait_handled(40).await;
    assert!(fleet.seen.lock().iter().all(|(o, _)| *o == "a"));
    assert_eq!(b.stats().leases_taken, 0);

    // a dies without a word (a kill -9): its lease runs out, b resumes
    task_a.abort();
    let _ = task_a.await;
    let died = Instant::now();
    fleet.write(40, 55).await;
    fleet.wait_handled(55).await;
    let took = died.elapsed();
    assert!(
        took >= LEASE / 2,
        "b took over in {took:?}, before a's lease ran out"
    );
    assert_eq!(b.stats().leases_taken, 1);
    let seen = fleet.seen.lock().clone();
    let by_b: Vec<u64> = seen
        .iter()
        .filter(|(o, _)| *o == "b")
        .map(|(_, s)| *s)
        .collect();
    // b starts after a's last checkpoint: only records 41.. (a had written through 40)
    assert_eq!(by_b.first(), Some(&41), "{by_b:?}");
    // every record handled at least once, in order per reader
    for s in 1..=55 {
        assert!(
            seen.iter().any(|(_, q)| *q == s),
            "record {s} never handled"
        );
    }
    stop_a.send(true).ok();
    stop_b.send(true).unwrap();
    task_b.await.unwrap();
}

#[tokio::test]
async fn a_clean_stop_checkpoints_and_hands_over_at_once() {
    let fleet = Fleet::new();
    fleet.write(0, 12).await;
    let a = fleet.instance("a");
    let b = fleet.instance("b");
    let (stop_a, rx_a) = watch::channel(false);
    let (stop_b, rx_b) = watch::channel(false);
    let ra = a.clone();
    let task_a = tokio::spawn(async move { ra.run(rx_a).await });
    fleet.wait_handled(12).await;
    let rb = b.clone();
    let task_b = tokio::spawn(async move { rb.run(rx_b).await });
    stop_a.send(true).unwrap();
    task_a.await.unwrap();
    // the lease was given back: b need not wait for it to expire
    assert!(
        fleet
            .coordination
            .get(&fleet.config.lease_key)
            .await
            .unwrap()
            .is_none_or(|o| o == "b")
    );
    fleet.write(12, 20).await;
    fleet.wait_handled(20).await;
    let seen = fleet.seen.lock().clone();
    let by_b: Vec<u64> = seen
        .iter()
        .filter(|(o, _)| *o == "b")
        .map(|(_, s)| *s)
        .collect();
    assert_eq!(
        by_b,
        (13..=20).collect::<Vec<u64>>(),
        "b re-read nothing a had done"
    );
    assert_eq!(a.stats().leases_taken, 1);
    assert!(a.stats().checkpoints >= 1);
    stop_b.send(true).unwrap();
    task_b.await.unwrap();
}

#[test]
fn a_lease_shorter_than_three_polls_is_refused() {
    let mut c = LeaseConfig::new("t", &SaleId::parse("s").unwrap(), "expiry", "me");
    assert!(c.check(Duration::from_secs(1)).is_ok());
    c.lease_ttl = Duration::from_secs(3);
    assert!(c.check(Duration::from_secs(1)).is_err());
    assert_eq!(c.renew_every(), Duration::from_secs(1));
    assert!(c.lease_key.contains("{sale:s}") && c.checkpoint_key.contains("{sale:s}"));
}

#[test]
fn a_checkpoint_that_is_not_a_number_is_refused() {
    assert_eq!(parse_checkpoint("k", None).unwrap(), 0);
    assert_eq!(parse_checkpoint("k", Some("42")).unwrap(), 42);
    assert!(parse_checkpoint("k", Some("4x")).is_err());
}
