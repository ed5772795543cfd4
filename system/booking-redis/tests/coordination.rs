//! Redis coordination against a `redis-server` of each test's own: owner
//! tokens, TTLs, `SET NX` latches under concurrency, the same answers as the
//! embedded store, and the status writer on the Redis stack.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/redis_server.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use booking::clock::SystemClock;
use booking::coordination::{Coordination, CoordinationError};
use booking::ledger::Ledger;
use booking::status::{LevelState, StatusDocument, StatusWriter, Transition};
use booking::{CandidateHash, Level, RequestToken, SaleId};
use booking_embedded::coordination::EmbeddedCoordination;
use booking_embedded::outputs::ObjectSink;
use booking_redis::{RedisCoordination, RedisLedger};
use support::RedisServer;

const SEC: Duration = Duration::from_secs(1);

async fn connect(server: &RedisServer) -> RedisCoordination {
    RedisCoordination::connect(&server.url(), 64).await.unwrap()
}

/// Polls `done` every 10 ms for at most `max`; how long it took, if it did.
async fn within<F, Fut>(max: Duration, mut done: F) -> Option<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while started.elapsed() < max {
        if done().await {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

#[tokio::test]
async fn only_the_owner_unlocks_or_extends() {
    let server = RedisServer::start();
    let c = connect(&server).await;
    assert!(c.try_lock("l", "a", 45 * SEC).await.unwrap());
    assert!(!c.try_lock("l", "b", 45 * SEC).await.unwrap());
    assert!(
        !c.try_lock("l", "a", 45 * SEC).await.unwrap(),
        "not re-entrant"
    );
    assert_eq!(c.get("l").await.unwrap().as_deref(), Some("a"));

    assert!(!c.unlock("l", "b").await.unwrap());
    assert!(!c.extend_lock("l", "b", 60 * SEC).await.unwrap());
    assert_eq!(c.get("l").await.unwrap().as_deref(), Some("a"));

    assert!(c.extend_lock("l", "a", 60 * SEC).await.unwrap());
    let pttl: i64 = pttl(&server, "l").await;
    assert!(pttl > 45_000 && pttl <= 60_000, "{pttl}");

    assert!(c.unlock("l", "a").await.unwrap());
    assert!(
        !c.unlock("l", "a").await.unwrap(),
        "a second unlock is a no-op"
    );
    assert!(
        !c.extend_lock("l", "a", SEC).await.unwrap(),
        "nor can it extend"
    );
    assert!(c.try_lock("l", "b", SEC).await.unwrap());
}

async fn pttl(server: &RedisServer, key: &str) -> i64 {
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("PTTL")
        .arg(key)
        .query_async(&mut conn)
        .await
        .unwrap()
}

#[tokio::test]
async fn locks_values_and_latches_expire_with_their_ttl() {
    let server = RedisServer::start();
    let c = Arc::new(connect(&server).await);
    let ttl = Duration::from_millis(200);
    let started = Instant::now();
    assert!(c.try_lock("lock", "a", ttl).await.unwrap());
    c.set("value", "v", Some(ttl)).await.unwrap();
    assert!(c.set_once("latch", "1", Some(ttl)).await.unwrap());
    assert!(!c.try_lock("lock", "b", ttl).await.unwrap());
    assert!(!c.set_once("latch", "2", Some(ttl)).await.unwrap());
    assert_eq!(c.get("value").await.unwrap().as_deref(), Some("v"));

    let c2 = c.clone();
    let took = within(5 * SEC, || {
        let c = c2.clone();
        async move { c.try_lock("lock", "b", 10 * SEC).await.unwrap() }
    })
    .await
    .expect("the lock expires");
    assert!(
        started.elapsed() >= Duration::from_millis(190),
        "not before its TTL ({took:?})"
    );
    // the value and the latch were set after the lock: each expires on its
    // own clock, a moment later on a loaded machine (a full test run once
    // found the latch still set when the lock had gone)
    let c3 = c.clone();
    within(5 * SEC, || {
        let c = c3.clone();
        async move { c.get("value").await.unwrap().is_none() }
    })
    .await
    .expect("the value expires");
    let c4 = c.clone();
    within(5 * SEC, || {
        let c = c4.clone();
        async move { c.set_once("latch", "3", None).await.unwrap() }
    })
    .await
    .expect("the latch expires, then takes a value with no TTL");
    assert_eq!(
        pttl(&server, "latch").await,
        -1,
        "no TTL when none is given"
    );
    // the former owner can neither extend nor unlock the new owner's lock
    assert!(!c.extend_lock("lock", "a", 10 * SEC).await.unwrap());
    assert!(!c.unlock("lock", "a").await.unwrap());
    assert_eq!(c.get("lock").await.unwrap().as_deref(), Some("b"));
}

#[tokio::test]
async fn extending_keeps_a_lock_past_its_first_ttl_and_set_replaces_the_ttl() {
    let server = RedisServer::start();
    let c = connect(&server).await;
    assert!(
        c.try_lock("l", "a", Duration::from_millis(200))
            .await
            .unwrap()
    );
    assert!(c.extend_lock("l", "a", 10 * SEC).await.unwrap());
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(c.get("l").await.unwrap().as_deref(), Some("a"));

    c.set("v", "1", Some(Duration::from_millis(200)))
        .await
        .unwrap();
    c.set("v", "2", None).await.unwrap();
    assert_eq!(pttl(&server, "v").await, -1, "a set without TTL clears it");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(c.get("v").await.unwrap().as_deref(), Some("2"));
    assert!(c.delete("v").await.unwrap());
    assert!(!c.delete("v").await.unwrap());
    assert_eq!(c.get("v").await.unwrap(), None);
    // a zero TTL is rounded up to 1 ms (Redis refuses PX 0)
    c.set("z", "z", Some(Duration::ZERO)).await.unwrap();
    assert!(c.try_lock("z2", "o", Duration::ZERO).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn set_once_has_exactly_one_winner_among_50_concurrent_callers() {
    let server = RedisServer::start();
    let c = Arc::new(connect(&server).await);
    for round in 0..5 {
        let key = format!("latch-{round}");
        let ttl = (round % 2 == 0).then_some(2 * SEC);
        let mut tasks = Vec::new();
        for i in 0..50 {
            let (c, key) = (c.clone(), key.clone());
            tasks.push(tokio::spawn(async move {
                c.set_once(&key, &format!("w{i}"), ttl).await.unwrap()
            }));
        }
        let mut winners = 0;
        for t in tasks {
            winners += usize::from(t.await.unwrap());
        }
        assert_eq!(winners, 1, "round {round}");
    }
    // and the same for locks
    let mut tasks = Vec::new();
    for i in 0..50 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            c.try_lock("lock", &format!("o{i}"), 10 * SEC)
                .await
                .unwrap()
        }));
    }
    let mut winners = 0;
    for t in tasks {
        winners += usize::from(t.await.unwrap());
    }
    assert_eq!(winners, 1);
}

#[tokio::test]
async fn an_unreachable_server_is_unavailable() {
    let mut server = RedisServer::start();
    let c = connect(&server).await;
    c.set("k", "v", None).await.unwrap();
    server.kill();
    let started = Instant::now();
    assert!(matches!(
        c.get("k").await,
        Err(CoordinationError::Unavailable(_))
    ));
    assert!(matches!(
        c.try_lock("l", "a", SEC).await,
        Err(CoordinationError::Unavailable(_))
    ));
    assert!(started.elapsed() < 10 * SEC, "bounded by the timeouts");
    assert!(
        RedisCoordination::connect(&server.url(), 1).await.is_err(),
        "connect checks the server"
    );
}

/// One operation of the equivalence run.
#[derive(Debug, Clone)]
enum Op {
    TryLock(usize, usize),
    Unlock(usize, usize),
    Extend(usize, usize),
    Get(usize),
    Set(usize, usize, bool),
    Delete(usize),
    SetOnce(usize, usize, bool),
}

/// The same answers, step by step, from Redis and the embedded store (TTLs
/// long enough not to run out during the run).
#[tokio::test]
async fn redis_and_embedded_coordination_give_the_same_answers() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let embedded = EmbeddedCoordination::new(Arc::new(SystemClock));
    let stores: [&dyn Coordination; 2] = [&redis, &embedded];

    // a fixed pseudo-random sequence (xorshift) over 3 keys and 3 owners
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n) as usize
    };
    let ttl = Some(60 * SEC);
    for step in 0..600 {
        let (k, o, t) = (next(3), next(3), next(2) == 0);
        let op = match next(7) {
            0 => Op::TryLock(k, o),
            1 => Op::Unlock(k, o),
            2 => Op::Extend(k, o),
            3 => Op::Get(k),
            4 => Op::Set(k, o, t),
            5 => Op::Delete(k),
            _ => Op::SetOnce(k, o, t),
        };
        let mut answers = Vec::new();
        for store in stores {
            let key = |k: usize| format!("key-{k}");
            let owner = |o: usize| format!("owner-{o}");
            let answer = match &op {
                Op::TryLock(k, o) => {
                    format!("{:?}", store.try_lock(&key(*k), &owner(*o), 60 * SEC).await)
                }
                Op::Unlock(k, o) => format!("{:?}", store.unlock(&key(*k), &owner(*o)).await),
                Op::Extend(k, o) => format!(
                    "{:?}",
                    store.extend_lock(&key(*k), &owner(*o), 60 * SEC).await
                ),
                Op::Get(k) => format!("{:?}", store.get(&key(*k)).await),
                Op::Set(k, o, t) => format!(
                    "{:?}",
                    store.set(&key(*k), &owner(*o), ttl.filter(|_| *t)).await
                ),
                Op::Delete(k) => format!("{:?}", store.delete(&key(*k)).await),
                Op::SetOnce(k, o, t) => format!(
                    "{:?}",
                    store
                        .set_once(&key(*k), &owner(*o), ttl.filter(|_| *t))
                        .await
                ),
            };
            answers.push(answer);
        }
        assert_eq!(answers[0], answers[1], "step {step}: {op:?}");
    }
    for k in 0..3 {
        let key = format!("key-{k}");
        assert_eq!(
            redis.get(&key).await.unwrap(),
            embedded.get(&key).await.unwrap()
        );
        let redis_ttl = pttl(&server, &key).await;
        match embedded.ttl(&key) {
            None => assert_eq!(redis_ttl, -2, "{key}"),
            Some(None) => assert_eq!(redis_ttl, -1, "{key}"),
            Some(Some(_)) => assert!(redis_ttl > 0, "{key}"),
        }
    }
}

/// The status writer on Redis: two writers race while admissions fill a
/// level; every document is self-consistent, writes land in read order, and
/// the last one shows the level full.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_status_writer_on_redis_never_shows_a_full_level_open() {
    let server = RedisServer::start();
    let ledger = Arc::new(RedisLedger::connect(&server.url(), 32, "st").await.unwrap());
    let coordination = Arc::new(connect(&server).await);
    let sink = Arc::new(ObjectSink::default());
    let sale = SaleId::parse("launch").unwrap();
    let gold = Level::parse("gold").unwrap();
    ledger.reset(&sale, &[(gold.clone(), 40)]).await.unwrap();
    let cs: Vec<_> = (0..120)
        .map(|i| CandidateHash::of(&format!("c{i}")))
        .collect();
    ledger.load_candidates(&sale, &cs).await.unwrap();
    ledger.set_open(&sale, true).await.unwrap();
    let writers = Arc::new([0, 1].map(|i| {
        StatusWriter::new(
            sale.clone(),
            "st",
            ledger.clone(),
            coordination.clone(),
            sink.clone(),
            Arc::new(SystemClock),
        )
        .with_throttle(Duration::from_millis(1))
        .with_writer_id(&format!("w{i}"))
    }));
    let mut tasks = Vec::new();
    for (i, c) in cs.into_iter().enumerate() {
        let (ledger, writers, sale, gold) =
            (ledger.clone(), writers.clone(), sale.clone(), gold.clone());
        tasks.push(tokio::spawn(async move {
            let token = RequestToken::parse(&format!("r{i}")).unwrap();
            ledger.admit(&sale, &c, &gold, &token, 0).await.unwrap();
            writers[i % 2].poke().await.unwrap()
        }));
    }
    let mut fills = 0;
    for t in tasks {
        fills += t
            .await
            .unwrap()
            .transitions
            .iter()
            .filter(|t| **t == Transition::LevelFull(gold.clone()))
            .count();
    }
    assert_eq!(fills, 1);
    let mut last = 0;
    for w in sink.writes() {
        let d = StatusDocument::from_json(&w.document).unwrap();
        assert!(d.shows_full_level_open().is_empty(), "{d:?}");
        let g = d.level(&gold).unwrap();
        assert_eq!(g.state == LevelState::Full, g.taken >= g.cap);
        assert!(g.taken >= last, "older read overwrote a newer one");
        last = g.taken;
    }
    let d = StatusDocument::from_json(&sink.current().unwrap()).unwrap();
    let g = d.level(&gold).unwrap();
    assert_eq!((g.taken, g.state), (40, LevelState::Full));
}

#[tokio::test]
async fn warming_opens_the_pool_up_to_its_size() {
    let server = RedisServer::start();
    let c = booking_redis::RedisCoordination::connect(&server.url(), 12)
        .await
        .unwrap();
    assert_eq!(c.warm(5).await, 5);
    assert_eq!(c.warm(100).await, 12, "never past the pool size");
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let info: String = redis::cmd("INFO")
        .arg("clients")
        .query_async(&mut conn)
        .await
        .unwrap();
    let clients: usize = info
        .lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap();
    // the 12 connections are handles on the pool's shared socket(s)
    assert_eq!(
        clients,
        booking_redis::pool::SOCKETS_PER_POOL + 1,
        "redis sees {clients} clients: the pool's socket(s) and ours"
    );
}

/// The token lock's margin (`booking::settings::TOKEN_LOCK_MARGIN`) covers the
/// two coordination calls the refresher makes around its grant while it must
/// hold the lock, each at its longest on this client: a pool wait, a connect
/// and a response.
#[test]
fn two_redis_calls_at_their_longest_fit_the_token_lock_margin() {
    use booking_redis::ledger::{CONNECT_MAX, POOL_WAIT_MAX, RESPONSE_MAX};
    let one_call = POOL_WAIT_MAX + CONNECT_MAX + RESPONSE_MAX;
    assert!(
        one_call * 2 <= booking::settings::TOKEN_LOCK_MARGIN,
        "{one_call:?} a call"
    );
}

/// A scaled visibility timeout (`booking::settings::SCALED_VISIBILITY_MIN`)
/// leaves the worker's heartbeat, sent half a timeout after the receive,
/// the other half for its answer: at least one response at its longest.
#[test]
fn one_redis_answer_fits_half_the_shortest_scaled_visibility() {
    use booking_redis::ledger::RESPONSE_MAX;
    assert!(
        RESPONSE_MAX * 2 <= booking::settings::SCALED_VISIBILITY_MIN,
        "{RESPONSE_MAX:?} an answer"
    );
}
