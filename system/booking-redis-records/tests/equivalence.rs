//! The Redis records against the embedded store, the reference: the same
//! pseudo-random sequences of every operation (conditional puts and
//! replaces, every update, guarded deletes, the TTL sweep, every read, the
//! clock moving) on both, on one manual clock; every answer must be the
//! same, and so must the whole change stream at the end. With and without
//! the zoo's `paid_keeps_ttl`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../booking-redis/tests/support/redis_server.rs"]
mod redis_server;

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use booking::clock::{Clock, ManualClock};
use booking::records::{
    BookingRecord, ChangeStream, Condition, ConfirmPath, RecordError, RecordStatus, RecordStore,
};
use booking::{Bug, Bugs, SaleId};
use booking_contract::records::{HOLD_MS, cand, held, pay};
use booking_embedded::records::{EmbeddedRecords, RecordsConfig};
use booking_redis::keys::{KeyPrefix, sale_key};
use booking_redis_records::{RedisRecords, RedisRecordsConfig};
use redis_server::RedisServer;

const T0: u64 = 1_700_000_000_000;
const OPS: usize = 1_000;

/// A small deterministic generator (PCG's LCG step): no dependency, and a
/// failing seed replays.
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<T: Clone>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize].clone()
    }
}

/// An answer with `Invalid`'s wording left out (each store words it its own way).
fn same<T: PartialEq + Debug>(
    step: usize,
    what: &str,
    embedded: Result<T, RecordError>,
    redis: Result<T, RecordError>,
) {
    match (&embedded, &redis) {
        (Err(RecordError::Invalid(_)), Err(RecordError::Invalid(_))) => {}
        _ => assert_eq!(embedded, redis, "step {step}: {what}"),
    }
}

/// A condition, on `p` (the candidate's current payment, mostly) two times
/// in three; `NotExists` (which a put may carry, and a replace or a delete
/// is refused) one time in `1 + others`.
fn condition(d: &mut Draw, c: &str, p: &str, others: u64) -> Condition {
    let p = if d.below(3) == 0 {
        pay(&format!("{c}{}", d.below(3)))
    } else {
        pay(p)
    };
    if d.below(1 + others) == 0 {
        return Condition::NotExists;
    }
    match d.below(3) {
        0 => Condition::PaymentIs(p),
        1 => Condition::StatusIsWithPayment(RecordStatus::Held, p),
        _ => Condition::StatusIsWithPayment(RecordStatus::Paid, p),
    }
}

async fn run(seed: u64, bugs: Bugs) {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let embedded = EmbeddedRecords::new(
        Arc::new(clock.clone()),
        RecordsConfig {
            bugs: bugs.clone(),
            ..RecordsConfig::default()
        },
    );
    let redis = RedisRecords::connect(
        &server.url(),
        4,
        &KeyPrefix::parse("equivalence").unwrap(),
        &SaleId::parse("launch").unwrap(),
        Arc::new(clock.clone()),
        RedisRecordsConfig {
            bugs,
            ..RedisRecordsConfig::default()
        },
    )
    .await
    .unwrap();
    let (e, r): (&dyn RecordStore, &dyn RecordStore) = (&embedded, &redis);
    let mut conn = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let owed_key = sale_key(
        &KeyPrefix::parse("equivalence").unwrap(),
        &SaleId::parse("launch").unwrap(),
        "records:owed",
    );
    let mut steps_owing = 0;
    let mut d = Draw(seed);
    let paths = [
        ConfirmPath::Callback,
        ConfirmPath::Webhook,
        ConfirmPath::Reconciler,
    ];
    for step in 0..OPS {
        let now = clock.now_ms();
        let c = d.pick(&["a", "b", "c", "d", "e", "f", "g", "h"]);
        // a payment belongs to one candidate, as the gateway's do; half the
        // time the one its record carries, so conditions hold often enough
        let current = embedded.get(&cand(c), true).await.unwrap();
        let p = match current {
            Some(r) if d.below(2) == 0 => r.payment_id.to_string(),
            _ => format!("{c}{}", d.below(3)),
        };
        let (cc, pp) = (cand(c), pay(&p));
        match d.below(18) {
            0 | 1 | 15 => {
                let created = now - d.below(2 * HOLD_MS);
                let mut record = held(c, &p, created);
                if d.below(4) == 0 {
                    record = record.into_paid(d.pick(&paths), now);
                }
                let cond = condition(&mut d, c, &p, 1);
                same(
                    step,
                    &format!("put {record:?} {cond:?}"),
                    e.put(record.clone(), cond.clone()).await,
                    r.put(record, cond).await,
                );
            }
            2 => {
                let record = held(c, &p, now - d.below(HOLD_MS));
                let cond = condition(&mut d, c, &p, 6);
                same(
                    step,
                    "replace",
                    e.replace(record.clone(), cond.clone()).await,
                    r.replace(record, cond).await,
                );
            }
            3 => {
                let path = d.pick(&paths);
                same(
                    step,
                    "mark_paid",
                    e.mark_paid(&cc, &pp, path, now).await,
                    r.mark_paid(&cc, &pp, path, now).await,
                );
            }
            4 => same(
                step,
                "mark_emailed",
                e.mark_emailed(&cc, &pp).await,
                r.mark_emailed(&cc, &pp).await,
            ),
            5 | 6 => {
                // sometimes before the creation: Invalid on both
                let deadline = now + d.below(HOLD_MS) - d.below(2) * 2 * HOLD_MS;
                same(
                    step,
                    "extend",
                    e.extend(&cc, &pp, deadline).await,
                    r.extend(&cc, &pp, deadline).await,
                );
            }
            7 => same(
                step,
                "note_query_failure",
                e.note_query_failure(&cc, &pp).await,
                r.note_query_failure(&cc, &pp).await,
            ),
            8 => same(
                step,
                "clear_query_failures",
                e.clear_query_failures(&cc, &pp).await,
                r.clear_query_failures(&cc, &pp).await,
            ),
            9 | 16 => {
                let cond = condition(&mut d, c, &p, 6);
                same(
                    step,
                    "delete",
                    e.delete(&cc, cond.clone()).await,
                    r.delete(&cc, cond).await,
                );
            }
            10 => {
                let limit = d.below(3) as usize;
                same(
                    step,
                    "sweep_ttl",
                    Ok(embedded.sweep_ttl(limit)),
                    redis.sweep_ttl(limit).await,
                );
            }
            11 => {
                same(step, "get", e.get(&cc, true).await, r.get(&cc, true).await);
                same(
                    step,
                    "by_payment",
                    e.by_payment(&pp).await,
                    r.by_payment(&pp).await,
                );
            }
            12 => {
                let before = now + d.below(2 * HOLD_MS) - HOLD_MS;
                let limit = d.below(4) as usize;
                same(
                    step,
                    "held_due",
                    e.held_due(before, limit).await,
                    r.held_due(before, limit).await,
                );
            }
            13 => {
                same(step, "scan_all", e.scan_all().await, r.scan_all().await);
                // paid_ms is the clock at HELD→PAID: bounds around now
                let before = (now + 1).saturating_sub(d.below(HOLD_MS / 2));
                let limit = d.below(4) as usize;
                same(
                    step,
                    "owed_emails",
                    e.owed_emails(before, limit).await,
                    r.owed_emails(before, limit).await,
                );
            }
            _ => clock.advance_ms(d.below(HOLD_MS / 5)),
        }
        // the owed index is exact after every step, not only filtered on
        // the way out: the owed candidates, oldest paid first, and no other
        let owed = e.owed_emails(u64::MAX, usize::MAX).await.unwrap();
        let index: Vec<String> = redis::cmd("ZRANGE")
            .arg(&owed_key)
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await
            .unwrap();
        let want: Vec<String> = owed.iter().map(|r| r.candidate.to_string()).collect();
        assert_eq!(index, want, "step {step}: the owed index");
        steps_owing += usize::from(!owed.is_empty());
    }
    assert!(
        steps_owing > OPS / 10,
        "a sequence that rarely owes an email"
    );
    let stream_e = embedded.read(0, 100_000, Duration::ZERO).await.unwrap();
    let stream_r = redis.read(0, 100_000, Duration::ZERO).await.unwrap();
    assert!(stream_e.len() > OPS / 10, "a sequence that changes little");
    assert_eq!(stream_e, stream_r, "the change streams");
    let all: Vec<BookingRecord> = embedded.scan_all().await.unwrap();
    assert_eq!(all, redis.scan_all().await.unwrap());
}

#[tokio::test]
async fn redis_answers_as_the_embedded_store_does() {
    for seed in [1, 2, 3, 4] {
        run(seed, Bugs::none()).await;
    }
}

#[tokio::test]
async fn and_so_it_does_with_paid_keeps_ttl() {
    for seed in [5, 6] {
        run(seed, Bugs::of([Bug::PaidKeepsTtl])).await;
    }
}
