//! The records and stream contract suites (booking-contract) on Redis, each
//! case on a `redis-server` of its own, plus what only Redis has to show:
//! the key layout under one hash tag, records that outlive the store that
//! wrote them, the TTL sweep and its delay, the bug zoo's `paid_keeps_ttl`,
//! a trimmed stream, and an unreachable server. Then both contract suites
//! on a three-shard Redis Cluster (`mod cluster`), and the records of sales
//! on every shard each in their own slot.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../booking-redis/tests/support/redis_server.rs"]
mod redis_server;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use booking::clock::ManualClock;
use booking::records::{
    ChangeStream, Condition, ConfirmPath, RecordError, RecordStatus, RecordStore, StreamKind,
    UserIdentity,
};
use booking::{Bug, Bugs, SaleId};
use booking_contract::records::{HOLD_MS, RecordsFixture, cand, held, pay};
use booking_redis::keys::{KeyPrefix, sale_key};
use booking_redis_records::{RedisRecords, RedisRecordsConfig};
use redis_server::RedisServer;

const T0: u64 = 1_700_000_000_000;

fn prefix() -> KeyPrefix {
    KeyPrefix::parse("records-test").unwrap()
}

fn sale() -> SaleId {
    SaleId::parse("launch").unwrap()
}

async fn connect(
    server: &RedisServer,
    clock: &ManualClock,
    config: RedisRecordsConfig,
) -> RedisRecords {
    RedisRecords::connect(
        &server.url(),
        8,
        &prefix(),
        &sale(),
        Arc::new(clock.clone()),
        config,
    )
    .await
    .unwrap()
}

/// A server of the case's own (or the cluster: `G` keeps it up), the
/// store on it, and its manual clock.
struct RedisFixture<G = RedisServer> {
    records: RedisRecords,
    clock: ManualClock,
    _server: G,
}

impl RedisFixture {
    async fn with(config: RedisRecordsConfig) -> RedisFixture {
        let server = RedisServer::start();
        let clock = ManualClock::new(T0);
        RedisFixture {
            records: connect(&server, &clock, config).await,
            clock,
            _server: server,
        }
    }
}

#[async_trait]
impl<G: Send + Sync> RecordsFixture for RedisFixture<G> {
    fn records(&self) -> &dyn RecordStore {
        &self.records
    }

    fn stream(&self) -> &dyn ChangeStream {
        &self.records
    }

    fn now_ms(&self) -> u64 {
        booking::Clock::now_ms(&self.clock)
    }

    async fn run_ttl_service(&self) {
        self.records.sweep_ttl(10_000).await.unwrap();
    }

    // every Redis read is consistent
    async fn settle(&self) {}

    fn rereads_behind(&self) -> bool {
        true
    }
}

async fn fixture() -> RedisFixture {
    RedisFixture::with(RedisRecordsConfig::default()).await
}

async fn trimmed_fixture() -> RedisFixture {
    RedisFixture::with(RedisRecordsConfig {
        stream_retained_max: 2,
        ..RedisRecordsConfig::default()
    })
    .await
}

booking_contract::records_contract!(fixture);
booking_contract::stream_contract!(fixture, trimmed: trimmed_fixture);

async fn raw(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Every key the records write is under the sale's hash tag: one Cluster
/// slot, as each script needs.
#[tokio::test]
async fn every_key_of_the_records_shares_the_sales_hash_tag() {
    let f = fixture().await;
    let s = &f.records;
    s.put(held("x", "P1", T0), Condition::NotExists)
        .await
        .unwrap();
    s.put(held("y", "P2", T0), Condition::NotExists)
        .await
        .unwrap();
    s.mark_paid(&cand("y"), &pay("P2"), ConfirmPath::Callback, T0)
        .await
        .unwrap();
    let mut conn = raw(&f._server).await;
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .unwrap();
    keys.sort();
    let named = |name: &str| sale_key(&prefix(), &sale(), name);
    let mut want = vec![
        named(&format!("rec:{}", cand("x"))),
        named(&format!("rec:{}", cand("y"))),
        named("records:payments"),
        named("records:held"),
        named("records:ttl"),
        named("records:all"),
        named("records:stream"),
        named("records:seq"),
        named("records:owed"),
    ];
    want.sort();
    assert_eq!(keys, want);
    // Redis Cluster's rule: the slot is CRC16 of the hash tag (the text
    // between the first `{` and the next `}`, if not empty), mod 16384
    let slot = |key: &str| {
        let tag = key
            .split_once('{')
            .and_then(|(_, rest)| rest.split_once('}'))
            .map(|(tag, _)| tag)
            .filter(|tag| !tag.is_empty())
            .unwrap_or(key);
        crc16_xmodem(tag.as_bytes()) % 16_384
    };
    for key in &keys {
        assert_eq!(slot(key), slot("{sale:launch}"), "{key}");
    }
    assert_ne!(
        slot("records-test:{sale:other}:records:all"),
        slot("{sale:launch}"),
        "another sale is elsewhere"
    );
    // the record is a hash of its attributes; the PAID one has no TTL field
    let fields: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
        .arg(named(&format!("rec:{}", cand("y"))))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(fields["status"], "PAID");
    assert_eq!(fields["payment_id"], "P2");
    assert!(!fields.contains_key("expires_at_s"));
    let ttl: Vec<String> = redis::cmd("ZRANGE")
        .arg(named("records:ttl"))
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(ttl, vec![cand("x").to_string()], "only the hold has a TTL");
}

/// CRC-16/XMODEM, the checksum Redis Cluster maps keys to slots with.
fn crc16_xmodem(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[test]
fn crc16_is_the_clusters() {
    // the check value of CRC-16/XMODEM, and the slot Redis's docs give for "foo"
    assert_eq!(crc16_xmodem(b"123456789"), 0x31c3);
    assert_eq!(crc16_xmodem(b"foo") % 16_384, 12_182);
}

/// Records, indexes and stream live on the server: a second store (another
/// process, a restarted server process) sees them and carries on the
/// sequence.
#[tokio::test]
async fn a_record_outlives_the_store_that_wrote_it() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let first = connect(&server, &clock, RedisRecordsConfig::default()).await;
    let r = held("x", "P1", T0);
    first.put(r.clone(), Condition::NotExists).await.unwrap();
    drop(first);

    let second = connect(&server, &clock, RedisRecordsConfig::default()).await;
    assert_eq!(second.get(&cand("x"), true).await.unwrap(), Some(r.clone()));
    assert_eq!(
        second.by_payment(&pay("P1")).await.unwrap(),
        Some(r.clone())
    );
    assert_eq!(
        second.held_due(u64::MAX, 10).await.unwrap(),
        vec![r.clone()]
    );
    let paid = second
        .mark_paid(&cand("x"), &pay("P1"), ConfirmPath::Webhook, T0 + 1)
        .await
        .unwrap();
    let stream = second.read(0, 10, Duration::ZERO).await.unwrap();
    assert_eq!(
        stream.iter().map(|r| r.sequence).collect::<Vec<_>>(),
        vec![1, 2]
    );
    assert_eq!(stream[1].new.as_ref(), Some(&paid));

    // another sale on the same server and prefix sees none of it
    let other = RedisRecords::connect(
        &server.url(),
        2,
        &prefix(),
        &SaleId::parse("other").unwrap(),
        Arc::new(clock.clone()),
        RedisRecordsConfig::default(),
    )
    .await
    .unwrap();
    assert_eq!(other.get(&cand("x"), true).await.unwrap(), None);
    assert!(other.read(0, 10, Duration::ZERO).await.unwrap().is_empty());
}

/// The sweep: late, earliest first, at most `limit`, ttl identity on each
/// REMOVE, PAID records skipped, nothing twice, and two sweepers at once
/// delete each record once.
#[tokio::test]
async fn the_ttl_sweep_is_late_limited_and_skips_paid_records() {
    let f = fixture().await;
    let s = &f.records;
    // TTLs in whole seconds: T0+HOLD+{20,10,0,30} s; c paid
    for (c, p, offset) in [
        ("a", "P1", 20_000),
        ("b", "P2", 10_000),
        ("c", "P3", 0),
        ("d", "P4", 30_000),
    ] {
        s.put(held(c, p, T0 + offset), Condition::NotExists)
            .await
            .unwrap();
    }
    let paid = s
        .mark_paid(&cand("c"), &pay("P3"), ConfirmPath::Callback, T0)
        .await
        .unwrap();
    assert!(s.sweep_ttl(10).await.unwrap().is_empty(), "nothing due yet");
    f.clock.advance(Duration::from_millis(HOLD_MS + 40_000));
    assert_eq!(
        s.get(&cand("a"), true).await.unwrap().map(|r| r.status),
        Some(RecordStatus::Held),
        "expired, but the TTL service has not come yet"
    );
    let first = s.sweep_ttl(2).await.unwrap();
    assert_eq!(
        first
            .iter()
            .map(|r| r.candidate.clone())
            .collect::<Vec<_>>(),
        vec![cand("b"), cand("a")],
        "earliest first, at most the limit"
    );
    // two sweepers at once: d is deleted once
    let (one, two) = tokio::join!(s.sweep_ttl(10), s.sweep_ttl(10));
    let (one, two) = (one.unwrap(), two.unwrap());
    assert_eq!(one.len() + two.len(), 1, "{one:?} {two:?}");
    assert!(s.sweep_ttl(10).await.unwrap().is_empty(), "nothing twice");
    assert_eq!(s.scan_all().await.unwrap(), vec![paid]);

    let removals: Vec<_> = s
        .read(0, 100, Duration::ZERO)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.kind == StreamKind::Remove)
        .collect();
    assert_eq!(removals.len(), 3);
    assert!(
        removals
            .iter()
            .all(|r| r.user_identity == Some(UserIdentity::ttl_service()))
    );
    assert!(removals.iter().all(|r| r.at_ms == T0 + HOLD_MS + 40_000));
}

/// The TTL service is late by `ttl_delay_ms`: nothing goes before.
#[tokio::test]
async fn the_ttl_service_deletes_only_after_its_delay() {
    let f = RedisFixture::with(RedisRecordsConfig {
        ttl_delay_ms: 30_000,
        ..RedisRecordsConfig::default()
    })
    .await;
    f.records
        .put(held("x", "P1", T0), Condition::NotExists)
        .await
        .unwrap();
    f.clock.advance(Duration::from_millis(HOLD_MS + 29_000));
    assert!(f.records.sweep_ttl(10).await.unwrap().is_empty());
    f.clock.advance(Duration::from_millis(1_000));
    assert_eq!(f.records.sweep_ttl(10).await.unwrap().len(), 1);
}

/// The zoo's bug `paid_keeps_ttl`: the PAID record keeps the hold's TTL, and
/// the TTL service deletes a paid booking later. Without it, never.
#[tokio::test]
async fn the_paid_keeps_ttl_bug_lets_the_ttl_service_delete_a_paid_booking() {
    for (bugs, deleted) in [(Bugs::none(), 0), (Bugs::of([Bug::PaidKeepsTtl]), 1)] {
        let f = RedisFixture::with(RedisRecordsConfig {
            bugs: bugs.clone(),
            ..RedisRecordsConfig::default()
        })
        .await;
        let s = &f.records;
        s.put(held("x", "P1", T0), Condition::NotExists)
            .await
            .unwrap();
        let paid = s
            .mark_paid(&cand("x"), &pay("P1"), ConfirmPath::Callback, T0)
            .await
            .unwrap();
        assert_eq!(paid.status, RecordStatus::Paid);
        assert_eq!(paid.expires_at_s.is_some(), deleted == 1, "{bugs:?}");
        assert_eq!(
            s.get(&cand("x"), true).await.unwrap(),
            Some(paid.clone()),
            "read back as written"
        );
        assert!(s.held_due(u64::MAX, 10).await.unwrap().is_empty(), "PAID");
        f.clock.advance(Duration::from_millis(2 * HOLD_MS));
        assert_eq!(s.sweep_ttl(10).await.unwrap().len(), deleted, "{bugs:?}");
        assert_eq!(
            s.get(&cand("x"), true).await.unwrap().is_none(),
            deleted == 1
        );
    }
}

/// A stream trimmed to its last entries: a reader behind them is told, and
/// the sequence carries on across the trim.
#[tokio::test]
async fn a_trimmed_stream_answers_invalid_behind_what_it_keeps() {
    let f = RedisFixture::with(RedisRecordsConfig {
        stream_retained_max: 3,
        ..RedisRecordsConfig::default()
    })
    .await;
    for i in 0..10 {
        f.records
            .put(
                held(&format!("c{i}"), &format!("P{i}"), T0),
                Condition::NotExists,
            )
            .await
            .unwrap();
    }
    let kept = f.records.read(7, 100, Duration::ZERO).await.unwrap();
    assert_eq!(
        kept.iter().map(|r| r.sequence).collect::<Vec<_>>(),
        vec![8, 9, 10]
    );
    for behind in [0, 3, 6] {
        match f.records.read(behind, 100, Duration::ZERO).await {
            Err(RecordError::Invalid(why)) => assert!(why.contains("lost"), "{why}"),
            other => panic!("read after {behind}: {other:?}"),
        }
    }
    assert!(
        f.records
            .read(10, 100, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        f.records.scan_all().await.unwrap().len(),
        10,
        "records are not trimmed"
    );
}

/// A server that is gone: every call is `Unavailable`, none hangs; a server
/// that never was fails the connect.
#[tokio::test]
async fn an_unreachable_server_is_unavailable() {
    let mut f = fixture().await;
    f.records
        .put(held("x", "P1", T0), Condition::NotExists)
        .await
        .unwrap();
    f._server.kill();
    assert!(matches!(
        f.records.get(&cand("x"), true).await,
        Err(RecordError::Unavailable(_))
    ));
    assert!(matches!(
        f.records
            .mark_paid(&cand("x"), &pay("P1"), ConfirmPath::Callback, T0)
            .await,
        Err(RecordError::Unavailable(_))
    ));
    assert!(matches!(
        f.records.read(0, 10, Duration::ZERO).await,
        Err(RecordError::Unavailable(_))
    ));
    assert!(matches!(
        f.records.sweep_ttl(10).await,
        Err(RecordError::Unavailable(_))
    ));
    let clock = ManualClock::new(T0);
    let refused = RedisRecords::connect(
        &f._server.url(),
        1,
        &prefix(),
        &sale(),
        Arc::new(clock),
        RedisRecordsConfig::default(),
    )
    .await;
    assert!(refused.is_err());
}

#[tokio::test]
async fn warm_opens_connections_up_to_the_pool_size() {
    let f = fixture().await;
    assert_eq!(f.records.warm(4).await, 4);
    assert_eq!(f.records.warm(100).await, 8, "never more than the pool");
}

/// The audit's scan pages through more records than one page holds, in
/// candidate order, none twice.
#[tokio::test]
async fn scan_all_pages_through_every_record() {
    let f = fixture().await;
    let n = booking_redis_records::READ_BATCH_MAX * 2 + 7;
    for i in 0..n {
        f.records
            .put(
                held(&format!("c{i}"), &format!("P{i}"), T0),
                Condition::NotExists,
            )
            .await
            .unwrap();
    }
    let scanned = f.records.scan_all().await.unwrap();
    assert_eq!(scanned.len(), n);
    assert!(
        scanned.windows(2).all(|w| w[0].candidate < w[1].candidate),
        "candidate order, no duplicates"
    );
}

/// The defaults are the embedded store's: the same stream retention, no
/// TTL delay, no bug.
#[test]
fn the_defaults_are_the_embedded_stores() {
    let redis = RedisRecordsConfig::default();
    let embedded = booking_embedded::records::RecordsConfig::default();
    assert_eq!(
        booking_redis_records::STREAM_RETAINED_MAX,
        booking_embedded::records::STREAM_RETAINED_MAX
    );
    assert_eq!(
        (redis.stream_retained_max, redis.ttl_delay_ms, redis.bugs),
        (
            embedded.stream_retained_max,
            embedded.ttl_delay_ms,
            embedded.bugs
        )
    );
}

mod cluster {
    use super::*;
    use redis_server::{RedisCluster, unique_prefix};

    /// A store on the shared cluster, under a prefix of its own.
    async fn on_cluster(
        config: RedisRecordsConfig,
        sale: &SaleId,
        prefix: &str,
    ) -> RedisFixture<Arc<RedisCluster>> {
        let cluster = RedisCluster::shared();
        let clock = ManualClock::new(T0);
        let records = RedisRecords::connect(
            &cluster.url(),
            8,
            &KeyPrefix::parse(prefix).unwrap(),
            sale,
            Arc::new(clock.clone()),
            config,
        )
        .await
        .unwrap();
        RedisFixture {
            records,
            clock,
            _server: cluster,
        }
    }

    async fn fixture() -> RedisFixture<Arc<RedisCluster>> {
        on_cluster(
            RedisRecordsConfig::default(),
            &sale(),
            &unique_prefix("records"),
        )
        .await
    }

    async fn trimmed_fixture() -> RedisFixture<Arc<RedisCluster>> {
        let config = RedisRecordsConfig {
            stream_retained_max: 2,
            ..RedisRecordsConfig::default()
        };
        on_cluster(config, &sale(), &unique_prefix("records")).await
    }

    booking_contract::records_contract!(fixture);
    booking_contract::stream_contract!(fixture, trimmed: trimmed_fixture);

    /// Sales on every shard, each written through every script, paged
    /// (`scan_all`, `held_due`: pipelines of one slot) and streamed (one
    /// `MULTI` of one slot): each sale's keys in its slot on its node.
    #[tokio::test]
    async fn each_sales_records_stay_in_its_slot_on_its_node() {
        let cluster = RedisCluster::shared();
        let prefix = unique_prefix("records-slots");
        let sales = cluster.sales_on_every_shard("records");
        for sale in &sales {
            let f = on_cluster(
                RedisRecordsConfig::default(),
                &SaleId::parse(sale).unwrap(),
                &prefix,
            )
            .await;
            let s = &f.records;
            s.put(held("x", "P1", T0), Condition::NotExists)
                .await
                .unwrap();
            s.put(held("y", "P2", T0), Condition::NotExists)
                .await
                .unwrap();
            s.put(held("z", "P3", T0), Condition::NotExists)
                .await
                .unwrap();
            s.mark_paid(&cand("y"), &pay("P2"), ConfirmPath::Callback, T0)
                .await
                .unwrap();
            s.mark_emailed(&cand("y"), &pay("P2")).await.unwrap();
            s.extend(&cand("z"), &pay("P3"), T0 + 2 * HOLD_MS)
                .await
                .unwrap();
            s.delete(&cand("z"), Condition::PaymentIs(pay("P3")))
                .await
                .unwrap();
            assert_eq!(s.scan_all().await.unwrap().len(), 2, "{sale}");
            assert_eq!(s.held_due(u64::MAX, 10).await.unwrap().len(), 1, "{sale}");
            assert_eq!(
                s.by_payment(&pay("P2")).await.unwrap().map(|r| r.status),
                Some(RecordStatus::Paid)
            );
            let changes = s.read(0, 100, Duration::ZERO).await.unwrap();
            assert_eq!(changes.len(), 7, "{sale}");
            f.clock.advance(Duration::from_millis(HOLD_MS * 10));
            let swept = s.sweep_ttl(10).await.unwrap();
            assert_eq!(swept.len(), 1, "{sale}: the hold of x");
        }
        let by_tag = cluster.keys_by_tag(&prefix);
        let mut want: Vec<String> = sales.iter().map(|s| format!("sale:{s}")).collect();
        want.sort();
        assert_eq!(by_tag.keys().cloned().collect::<Vec<_>>(), want);
    }
}
