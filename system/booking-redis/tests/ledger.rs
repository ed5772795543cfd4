//! The Redis ledger's answers, operation by operation, against a
//! `redis-server` of each test's own. The cases are the model's unit tests,
//! written once over `&dyn Ledger` and run against Redis, against a
//! three-shard Redis Cluster (`RedisCluster::shared`) and, as a cross-check,
//! the embedded ledger.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/redis_server.rs"]
mod redis_server;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use booking::ledger::{Admission, Counters, Hold, HoldState, Ledger, LedgerError, Step};
use booking::{CandidateHash, Level, PaymentId, RequestToken, SaleId};
use booking_embedded::ledger::EmbeddedLedger;
use booking_redis::{ConnectError, RedisLedger};
use redis_server::{RedisCluster, RedisServer, unique_prefix};

fn level(s: &str) -> Level {
    Level::parse(s).unwrap()
}
fn token(s: &str) -> RequestToken {
    RequestToken::parse(s).unwrap()
}
fn pay(s: &str) -> PaymentId {
    PaymentId::parse(s).unwrap()
}
fn sale_id() -> SaleId {
    SaleId::parse("launch").unwrap()
}

/// A fresh prefix per ledger, so tests never see each other's keys.
fn prefix() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!("test-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

async fn redis_ledger(server: &RedisServer) -> RedisLedger {
    RedisLedger::connect(&server.url(), 16, &prefix())
        .await
        .unwrap()
}

/// Opens sale "launch" with one level "a" of `cap` seats and these candidates.
async fn open_sale(l: &dyn Ledger, cap: u32, candidates: &[&str]) -> Vec<CandidateHash> {
    let cs: Vec<_> = candidates.iter().map(|c| CandidateHash::of(c)).collect();
    l.reset(&sale_id(), &[(level("a"), cap)]).await.unwrap();
    assert_eq!(
        l.load_candidates(&sale_id(), &cs).await.unwrap(),
        cs.len() as u64
    );
    l.set_open(&sale_id(), true).await.unwrap();
    cs
}

async fn count(l: &dyn Ledger) -> u32 {
    l.counters(&sale_id()).await.unwrap().levels[0].count
}

/// Runs one case against a fresh Redis ledger, a fresh one on the cluster,
/// and a fresh embedded one.
macro_rules! both {
    ($case:ident) => {
        let server = RedisServer::start();
        $case(&redis_ledger(&server).await).await;
        let cluster = RedisCluster::shared();
        $case(
            &RedisLedger::connect(&cluster.url(), 16, &unique_prefix("ledger"))
                .await
                .unwrap(),
        )
        .await;
        $case(&EmbeddedLedger::new()).await;
    };
}

async fn admission_checks_in_order_and_stops_at_the_cap(l: &dyn Ledger) {
    let cs = open_sale(l, 1, &["x", "y"]).await;
    let s = sale_id();
    l.set_open(&s, false).await.unwrap();
    assert_eq!(
        l.admit(&s, &cs[0], &level("a"), &token("t1"), 1)
            .await
            .unwrap(),
        Admission::SaleClosed
    );
    l.set_open(&s, true).await.unwrap();
    assert_eq!(
        l.admit(&s, &cs[0], &level("zz"), &token("t1"), 1)
            .await
            .unwrap(),
        Admission::UnknownLevel
    );
    assert_eq!(
        l.admit(
            &s,
            &CandidateHash::of("stranger"),
            &level("a"),
            &token("t1"),
            1
        )
        .await
        .unwrap(),
        Admission::NotEligible
    );
    assert_eq!(
        l.admit(&s, &cs[0], &level("a"), &token("t1"), 1)
            .await
            .unwrap(),
        Admission::Admitted { count: 1 }
    );
    assert_eq!(
        l.admit(&s, &cs[0], &level("a"), &token("t2"), 2)
            .await
            .unwrap(),
        Admission::AlreadyHolding {
            hold: Hold {
                level: level("a"),
                token: token("t1"),
                state: HoldState::Pending { admitted_ms: 1 },
            }
        }
    );
    assert_eq!(
        l.admit(&s, &cs[1], &level("a"), &token("t3"), 3)
            .await
            .unwrap(),
        Admission::LevelFull
    );
}

#[tokio::test]
async fn admission_checks_in_order_and_stops_at_the_cap_on_redis() {
    both!(admission_checks_in_order_and_stops_at_the_cap);
}

async fn undo_twice_never_goes_below_zero(l: &dyn Ledger) {
    let cs = open_sale(l, 2, &["x"]).await;
    let s = sale_id();
    l.admit(&s, &cs[0], &level("a"), &token("t1"), 1)
        .await
        .unwrap();
    assert_eq!(
        l.undo_admission(&s, &cs[0], &token("other")).await.unwrap(),
        Step::NoMatch
    );
    assert_eq!(
        l.undo_admission(&s, &cs[0], &token("t1")).await.unwrap(),
        Step::Done
    );
    assert_eq!(
        l.undo_admission(&s, &cs[0], &token("t1")).await.unwrap(),
        Step::NoMatch
    );
    assert_eq!(count(l).await, 0);
    assert_eq!(l.hold(&s, &cs[0]).await.unwrap(), None);
    assert!(l.stale_pending(&s, u64::MAX, 10).await.unwrap().is_empty());
}

#[tokio::test]
async fn undo_twice_never_goes_below_zero_on_redis() {
    both!(undo_twice_never_goes_below_zero);
}

async fn releases_are_payment_guarded_and_paid_is_final(l: &dyn Ledger) {
    let cs = open_sale(l, 2, &["x"]).await;
    let (s, c) = (sale_id(), &cs[0]);
    l.admit(&s, c, &level("a"), &token("t1"), 1).await.unwrap();
    assert_eq!(
        l.release(&s, c, &pay("P1")).await.unwrap(),
        Step::NoMatch,
        "pending holds are not released by payment"
    );
    assert_eq!(
        l.extend(&s, c, &pay("P1"), 50).await.unwrap(),
        Step::NoMatch
    );
    assert_eq!(l.mark_paid(&s, c, &pay("P1")).await.unwrap(), Step::NoMatch);
    assert_eq!(
        l.attach_payment(&s, c, &token("t2"), &pay("P1"), 100)
            .await
            .unwrap(),
        Step::NoMatch
    );
    assert_eq!(
        l.attach_payment(&s, c, &token("t1"), &pay("P1"), 100)
            .await
            .unwrap(),
        Step::Done
    );
    assert_eq!(
        l.attach_payment(&s, c, &token("t1"), &pay("P2"), 100)
            .await
            .unwrap(),
        Step::NoMatch,
        "a held hold is not attached again"
    );
    assert!(
        l.stale_pending(&s, u64::MAX, 10).await.unwrap().is_empty(),
        "a held hold is not pending"
    );
    assert_eq!(l.release(&s, c, &pay("P0")).await.unwrap(), Step::NoMatch);
    assert_eq!(
        l.extend(&s, c, &pay("P0"), 200).await.unwrap(),
        Step::NoMatch
    );
    assert_eq!(l.extend(&s, c, &pay("P1"), 200).await.unwrap(), Step::Done);
    assert_eq!(
        l.admit(&s, c, &level("a"), &token("t3"), 7).await.unwrap(),
        Admission::AlreadyHolding {
            hold: Hold {
                level: level("a"),
                token: token("t1"),
                state: HoldState::Held {
                    payment_id: pay("P1"),
                    deadline_ms: 200
                },
            }
        }
    );
    assert_eq!(l.mark_paid(&s, c, &pay("P0")).await.unwrap(), Step::NoMatch);
    assert_eq!(
        l.counters(&s).await.unwrap().paid,
        0,
        "a held seat is not paid"
    );
    assert_eq!(l.mark_paid(&s, c, &pay("P1")).await.unwrap(), Step::Done);
    assert_eq!(l.mark_paid(&s, c, &pay("P1")).await.unwrap(), Step::Paid);
    // the paid mark is counted once, beside the seat it keeps counted
    let counters = l.counters(&s).await.unwrap();
    assert_eq!((counters.paid, counters.levels[0].count), (1, 1));
    assert_eq!(l.release(&s, c, &pay("P1")).await.unwrap(), Step::Paid);
    assert_eq!(
        l.undo_admission(&s, c, &token("t1")).await.unwrap(),
        Step::Paid
    );
    assert_eq!(l.extend(&s, c, &pay("P1"), 300).await.unwrap(), Step::Paid);
    assert_eq!(
        l.attach_payment(&s, c, &token("t1"), &pay("P1"), 300)
            .await
            .unwrap(),
        Step::Paid
    );
    assert_eq!(count(l).await, 1, "a paid seat stays counted");
    assert_eq!(l.hold(&s, c).await.unwrap(), None);
    assert_eq!(l.paid(&s, c).await.unwrap(), Some(pay("P1")));
    assert_eq!(
        l.admit(&s, c, &level("a"), &token("t9"), 5).await.unwrap(),
        Admission::AlreadyPaid {
            payment_id: pay("P1")
        }
    );
}

#[tokio::test]
async fn releases_are_payment_guarded_and_paid_is_final_on_redis() {
    both!(releases_are_payment_guarded_and_paid_is_final);
}

async fn a_released_seat_can_be_booked_again(l: &dyn Ledger) {
    let cs = open_sale(l, 1, &["x", "y"]).await;
    let s = sale_id();
    l.admit(&s, &cs[0], &level("a"), &token("t1"), 1)
        .await
        .unwrap();
    l.attach_payment(&s, &cs[0], &token("t1"), &pay("P1"), 100)
        .await
        .unwrap();
    assert_eq!(
        l.admit(&s, &cs[1], &level("a"), &token("t2"), 2)
            .await
            .unwrap(),
        Admission::LevelFull
    );
    assert_eq!(l.release(&s, &cs[0], &pay("P1")).await.unwrap(), Step::Done);
    assert_eq!(
        l.release(&s, &cs[0], &pay("P1")).await.unwrap(),
        Step::NoMatch
    );
    assert_eq!(
        l.admit(&s, &cs[1], &level("a"), &token("t2"), 3)
            .await
            .unwrap(),
        Admission::Admitted { count: 1 }
    );
    assert_eq!(l.stale_pending(&s, 3, 10).await.unwrap().len(), 1);
    assert_eq!(l.stale_pending(&s, 2, 10).await.unwrap().len(), 0);
}

#[tokio::test]
async fn a_released_seat_can_be_booked_again_on_redis() {
    both!(a_released_seat_can_be_booked_again);
}

async fn stale_pending_is_oldest_first_then_by_candidate_and_limited(l: &dyn Ledger) {
    let cs = open_sale(l, 10, &["a", "b", "c", "d"]).await;
    let s = sale_id();
    for (c, t) in [(&cs[0], 5), (&cs[1], 3), (&cs[2], 5), (&cs[3], 9)] {
        l.admit(&s, c, &level("a"), &token("t"), t).await.unwrap();
    }
    let mut same_time = vec![cs[0].clone(), cs[2].clone()];
    same_time.sort();
    let want: Vec<_> = std::iter::once(cs[1].clone()).chain(same_time).collect();
    let stale = l.stale_pending(&s, 5, 10).await.unwrap();
    assert_eq!(
        stale.iter().map(|(c, _)| c.clone()).collect::<Vec<_>>(),
        want
    );
    assert_eq!(
        stale[0].1,
        Hold {
            level: level("a"),
            token: token("t"),
            state: HoldState::Pending { admitted_ms: 3 }
        }
    );
    let two = l.stale_pending(&s, 5, 2).await.unwrap();
    assert_eq!(two, stale[..2].to_vec());
    assert!(l.stale_pending(&s, 5, 0).await.unwrap().is_empty());
    assert!(l.stale_pending(&s, 2, 10).await.unwrap().is_empty());
    assert_eq!(
        l.stale_pending(&s, u64::MAX, usize::MAX)
            .await
            .unwrap()
            .len(),
        4
    );
}

#[tokio::test]
async fn stale_pending_is_oldest_first_then_by_candidate_and_limited_on_redis() {
    both!(stale_pending_is_oldest_first_then_by_candidate_and_limited);
}

async fn stale_held_is_earliest_deadline_first_and_follows_every_step(l: &dyn Ledger) {
    let cs = open_sale(l, 10, &["a", "b", "c", "d", "e"]).await;
    let s = sale_id();
    for (i, c) in cs.iter().enumerate() {
        l.admit(&s, c, &level("a"), &token("t"), 1).await.unwrap();
        let p = pay(&format!("P{i}"));
        // a: 50, b: 30, c: 50, d: 90, e: 40
        let deadline = [50, 30, 50, 90, 40][i];
        assert_eq!(
            l.attach_payment(&s, c, &token("t"), &p, deadline)
                .await
                .unwrap(),
            Step::Done
        );
    }
    let names = |v: Vec<(CandidateHash, Hold)>| v.into_iter().map(|(c, _)| c).collect::<Vec<_>>();
    let mut ac = vec![cs[0].clone(), cs[2].clone()];
    ac.sort();
    let want: Vec<_> = [cs[1].clone(), cs[4].clone()]
        .into_iter()
        .chain(ac)
        .collect();
    let stale = l.stale_held(&s, 50, 10).await.unwrap();
    assert_eq!(names(stale.clone()), want);
    assert_eq!(
        stale[0].1.state,
        HoldState::Held {
            payment_id: pay("P1"),
            deadline_ms: 30
        }
    );
    assert_eq!(l.stale_held(&s, 50, 2).await.unwrap(), stale[..2].to_vec());
    assert!(l.stale_held(&s, 50, 0).await.unwrap().is_empty());
    assert!(l.stale_held(&s, 29, 10).await.unwrap().is_empty());
    // a pending hold is never listed
    assert!(l.stale_pending(&s, u64::MAX, 10).await.unwrap().is_empty());
    // extend moves b after the others; release drops e; paid drops a
    assert_eq!(
        l.extend(&s, &cs[1], &pay("P1"), 95).await.unwrap(),
        Step::Done
    );
    assert_eq!(l.release(&s, &cs[4], &pay("P4")).await.unwrap(), Step::Done);
    assert_eq!(
        l.mark_paid(&s, &cs[0], &pay("P0")).await.unwrap(),
        Step::Done
    );
    assert_eq!(
        names(l.stale_held(&s, u64::MAX, 10).await.unwrap()),
        vec![cs[2].clone(), cs[3].clone(), cs[1].clone()]
    );
    // a reset forgets them all
    l.reset(&s, &[(level("a"), 10)]).await.unwrap();
    assert!(l.stale_held(&s, u64::MAX, 10).await.unwrap().is_empty());
}

#[tokio::test]
async fn stale_held_is_earliest_deadline_first_and_follows_every_step_on_redis() {
    both!(stale_held_is_earliest_deadline_first_and_follows_every_step);
}

async fn an_unknown_sale_is_closed_and_refuses_every_step(l: &dyn Ledger) {
    let (s, c) = (
        SaleId::parse("never-reset").unwrap(),
        CandidateHash::of("x"),
    );
    assert_eq!(
        l.counters(&s).await.unwrap(),
        Counters {
            open: false,
            levels: vec![],
            paid: 0,
        }
    );
    assert_eq!(
        l.admit(&s, &c, &level("a"), &token("t"), 1).await.unwrap(),
        Admission::SaleClosed
    );
    assert_eq!(
        l.attach_payment(&s, &c, &token("t"), &pay("P"), 9)
            .await
            .unwrap(),
        Step::NoMatch
    );
    assert_eq!(
        l.undo_admission(&s, &c, &token("t")).await.unwrap(),
        Step::NoMatch
    );
    assert_eq!(l.release(&s, &c, &pay("P")).await.unwrap(), Step::NoMatch);
    assert_eq!(l.mark_paid(&s, &c, &pay("P")).await.unwrap(), Step::NoMatch);
    assert_eq!(l.extend(&s, &c, &pay("P"), 9).await.unwrap(), Step::NoMatch);
    assert_eq!(l.hold(&s, &c).await.unwrap(), None);
    assert_eq!(l.paid(&s, &c).await.unwrap(), None);
    assert!(l.stale_pending(&s, u64::MAX, 10).await.unwrap().is_empty());
    // opening a sale that has no levels admits nobody
    l.set_open(&s, true).await.unwrap();
    assert_eq!(
        l.load_candidates(&s, std::slice::from_ref(&c))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        l.admit(&s, &c, &level("a"), &token("t"), 1).await.unwrap(),
        Admission::UnknownLevel
    );
}

#[tokio::test]
async fn an_unknown_sale_is_closed_and_refuses_every_step_on_redis() {
    both!(an_unknown_sale_is_closed_and_refuses_every_step);
}

async fn reset_forgets_and_levels_come_in_order(l: &dyn Ledger) {
    let cs = open_sale(l, 1, &["x", "y"]).await;
    let s = sale_id();
    l.admit(&s, &cs[0], &level("a"), &token("t"), 1)
        .await
        .unwrap();
    l.admit(&s, &cs[1], &level("a"), &token("t"), 1)
        .await
        .unwrap();
    // a level named twice keeps its last cap, as the model's map does
    l.reset(
        &s,
        &[
            (level("b"), 2),
            (level("B"), 1),
            (level("a"), 9),
            (level("a"), 3),
        ],
    )
    .await
    .unwrap();
    let counters = l.counters(&s).await.unwrap();
    assert!(!counters.open);
    assert_eq!(
        counters
            .levels
            .iter()
            .map(|c| (c.level.as_str(), c.cap, c.count))
            .collect::<Vec<_>>(),
        vec![("B", 1, 0), ("a", 3, 0), ("b", 2, 0)]
    );
    assert_eq!(l.hold(&s, &cs[0]).await.unwrap(), None);
    assert!(l.stale_pending(&s, u64::MAX, 10).await.unwrap().is_empty());
    l.set_open(&s, true).await.unwrap();
    assert_eq!(
        l.admit(&s, &cs[0], &level("a"), &token("t"), 1)
            .await
            .unwrap(),
        Admission::NotEligible,
        "reset forgets the list"
    );
    assert_eq!(
        l.load_candidates(&s, &[cs[0].clone(), cs[0].clone(), cs[1].clone()])
            .await
            .unwrap(),
        2,
        "a candidate named twice is new once"
    );
    assert_eq!(l.load_candidates(&s, &cs).await.unwrap(), 0);
    l.reset(&s, &[]).await.unwrap();
    assert_eq!(
        l.counters(&s).await.unwrap(),
        Counters {
            open: false,
            levels: vec![],
            paid: 0,
        }
    );
}

#[tokio::test]
async fn reset_forgets_and_levels_come_in_order_on_redis() {
    both!(reset_forgets_and_levels_come_in_order);
}

#[tokio::test]
async fn sales_and_prefixes_do_not_share_keys() {
    let server = RedisServer::start();
    let one = redis_ledger(&server).await;
    let two = redis_ledger(&server).await;
    let cs = open_sale(&one, 1, &["x"]).await;
    assert_eq!(
        two.admit(&sale_id(), &cs[0], &level("a"), &token("t"), 1)
            .await
            .unwrap(),
        Admission::SaleClosed,
        "another prefix is another ledger"
    );
    let other = SaleId::parse("other").unwrap();
    assert_eq!(
        one.admit(&other, &cs[0], &level("a"), &token("t"), 1)
            .await
            .unwrap(),
        Admission::SaleClosed,
        "another sale is another ledger"
    );
    assert_eq!(
        one.admit(&sale_id(), &cs[0], &level("a"), &token("t"), 1)
            .await
            .unwrap(),
        Admission::Admitted { count: 1 }
    );
}

#[tokio::test]
async fn every_key_of_a_sale_carries_its_hash_tag() {
    let server = RedisServer::start();
    let l = redis_ledger(&server).await;
    let cs = open_sale(&l, 2, &["x", "y"]).await;
    let s = sale_id();
    l.admit(&s, &cs[0], &level("a"), &token("t"), 1)
        .await
        .unwrap();
    l.admit(&s, &cs[1], &level("a"), &token("t"), 1)
        .await
        .unwrap();
    l.attach_payment(&s, &cs[1], &token("t"), &pay("P"), 9)
        .await
        .unwrap();
    l.mark_paid(&s, &cs[1], &pay("P")).await.unwrap();
    let mut conn = raw(&server).await;
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .unwrap();
    keys.sort();
    let p = l.key_prefix();
    let want: Vec<String> = [
        "counts", "eligible", "holds", "levels", "open", "paid", "pending",
    ]
    .iter()
    .map(|name| format!("{p}:{{sale:launch}}:{name}"))
    .collect();
    assert_eq!(keys, want);
}

async fn raw(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

#[tokio::test]
async fn unreadable_records_are_corrupt_and_left_alone() {
    let server = RedisServer::start();
    let l = redis_ledger(&server).await;
    let cs = open_sale(&l, 2, &["x", "y"]).await;
    let s = sale_id();
    l.admit(&s, &cs[1], &level("a"), &token("t"), 1)
        .await
        .unwrap();
    let p = l.key_prefix().to_owned();
    let mut conn = raw(&server).await;
    let holds = format!("{p}:{{sale:launch}}:holds");
    let _: () = redis::cmd("HSET")
        .arg(&holds)
        .arg(cs[0].as_str())
        .arg("garbage")
        .query_async(&mut conn)
        .await
        .unwrap();
    let corrupt = |r: Result<_, LedgerError>| matches!(r, Err(LedgerError::Corrupt(_)));
    assert!(corrupt(l.hold(&s, &cs[0]).await.map(drop)));
    assert!(corrupt(
        l.undo_admission(&s, &cs[0], &token("t")).await.map(drop)
    ));
    assert!(corrupt(l.release(&s, &cs[0], &pay("P")).await.map(drop)));
    assert!(corrupt(l.mark_paid(&s, &cs[0], &pay("P")).await.map(drop)));
    assert!(corrupt(l.extend(&s, &cs[0], &pay("P"), 1).await.map(drop)));
    assert!(corrupt(
        l.attach_payment(&s, &cs[0], &token("t"), &pay("P"), 1)
            .await
            .map(drop)
    ));
    assert!(corrupt(
        l.admit(&s, &cs[0], &level("a"), &token("t"), 1)
            .await
            .map(drop)
    ));
    let left: String = redis::cmd("HGET")
        .arg(&holds)
        .arg(cs[0].as_str())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(left, "garbage", "a refused step writes nothing");
    assert_eq!(count(&l).await, 1, "nothing was given back");

    // a counter that is not a number stops the undo before it writes
    let counts = format!("{p}:{{sale:launch}}:counts");
    let _: () = redis::cmd("HSET")
        .arg(&counts)
        .arg("a")
        .arg("lots")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(corrupt(
        l.undo_admission(&s, &cs[1], &token("t")).await.map(drop)
    ));
    assert!(corrupt(l.counters(&s).await.map(drop)));
    let _: () = redis::cmd("HSET")
        .arg(&counts)
        .arg("a")
        .arg(1)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        l.hold(&s, &cs[1]).await.unwrap().is_some(),
        "the hold is still there"
    );

    // a key of the wrong type
    let _: () = redis::cmd("SET")
        .arg(format!("{p}:{{sale:launch}}:paid"))
        .arg("x")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(corrupt(l.paid(&s, &cs[1]).await.map(drop)));
}

/// A cap or a count that is not a number refuses the admission as a corrupt
/// ledger (an alarm, not a retry) and counts and holds nothing; a hold of
/// the wrong shape (a state that disagrees with its number of fields) is
/// corrupt, never read as a hold of the other state.
#[tokio::test]
async fn an_unreadable_cap_count_or_hold_shape_is_corrupt_and_admits_nothing() {
    let server = RedisServer::start();
    let l = redis_ledger(&server).await;
    let cs = open_sale(&l, 2, &["x", "y"]).await;
    let s = sale_id();
    let p = l.key_prefix().to_owned();
    let mut conn = raw(&server).await;
    let hset = |key: &str, field: &str, value: &str| {
        let mut cmd = redis::cmd("HSET");
        cmd.arg(format!("{p}:{{sale:launch}}:{key}"))
            .arg(field)
            .arg(value);
        cmd
    };
    let corrupt = |r: Result<(), &LedgerError>| matches!(r, Err(LedgerError::Corrupt(_)));

    let _: () = hset("levels", "a", "two")
        .query_async(&mut conn)
        .await
        .unwrap();
    let r = l.admit(&s, &cs[0], &level("a"), &token("t"), 1).await;
    assert!(corrupt(r.as_ref().map(drop)), "an unreadable cap: {r:?}");
    let _: () = hset("levels", "a", "2")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = hset("counts", "a", "lots")
        .query_async(&mut conn)
        .await
        .unwrap();
    let r = l.admit(&s, &cs[0], &level("a"), &token("t"), 1).await;
    assert!(corrupt(r.as_ref().map(drop)), "an unreadable count: {r:?}");
    let _: () = hset("counts", "a", "0")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        l.hold(&s, &cs[0]).await.unwrap(),
        None,
        "no hold was written"
    );
    assert_eq!(count(&l).await, 0, "no seat was counted");

    // pending has 4 fields, held 5: any other pairing is no hold at all
    for shape in [
        "h|a|t|1",
        "p|a|t|P|5",
        "x|a|t|1",
        "x|a|t|P|5",
        "p|a|t",
        "h|a|t|P|5|6",
    ] {
        let _: () = hset("holds", cs[1].as_str(), shape)
            .query_async(&mut conn)
            .await
            .unwrap();
        let r = l.hold(&s, &cs[1]).await;
        assert!(
            corrupt(r.as_ref().map(drop)),
            "hold {shape:?} read as {r:?}"
        );
        // and every step's script refuses it too, rather than reading it as
        // a hold of the other state (token t and payment P fit either one)
        let (t, p) = (token("t"), pay("P"));
        let steps = [
            (
                "attach_payment",
                l.attach_payment(&s, &cs[1], &t, &p, 9).await.map(drop),
            ),
            ("mark_paid", l.mark_paid(&s, &cs[1], &p).await.map(drop)),
            ("release", l.release(&s, &cs[1], &p).await.map(drop)),
            ("extend", l.extend(&s, &cs[1], &p, 9).await.map(drop)),
            (
                "undo_admission",
                l.undo_admission(&s, &cs[1], &t).await.map(drop),
            ),
        ];
        for (step, r) in steps {
            assert!(
                corrupt(r.as_ref().map(drop)),
                "{step} on hold {shape:?}: {r:?}"
            );
        }
    }
}

/// A corrupt ledger's error names what is corrupt (the operator's first
/// question): the level whose count is missing, the candidate in a deadline
/// or admission index with no hold behind it.
#[tokio::test]
async fn a_corrupt_ledger_error_names_the_level_or_candidate() {
    let server = RedisServer::start();
    let l = redis_ledger(&server).await;
    let cs = open_sale(&l, 2, &["x", "y"]).await;
    let s = sale_id();
    let p = l.key_prefix().to_owned();
    let mut conn = raw(&server).await;
    let message = |r: Result<(), LedgerError>| match r {
        Err(LedgerError::Corrupt(m)) => m,
        other => panic!("not corrupt: {other:?}"),
    };

    let _: () = redis::cmd("HDEL")
        .arg(format!("{p}:{{sale:launch}}:counts"))
        .arg("a")
        .query_async(&mut conn)
        .await
        .unwrap();
    let m = message(l.counters(&s).await.map(drop));
    assert!(m.contains("level a"), "{m}");

    for (index, who) in [("held", &cs[0]), ("pending", &cs[1])] {
        let _: () = redis::cmd("ZADD")
            .arg(format!("{p}:{{sale:launch}}:{index}"))
            .arg(1)
            .arg(who.as_str())
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let m = message(l.stale_held(&s, 10, 5).await.map(drop));
    assert!(m.contains(cs[0].as_str()), "{m}");
    let m = message(l.stale_pending(&s, 10, 5).await.map(drop));
    assert!(m.contains(cs[1].as_str()), "{m}");
}

#[tokio::test]
async fn an_undo_below_zero_is_a_corrupt_ledger_and_writes_nothing() {
    let server = RedisServer::start();
    let l = redis_ledger(&server).await;
    let cs = open_sale(&l, 2, &["x", "y"]).await;
    let s = sale_id();
    l.admit(&s, &cs[0], &level("a"), &token("t"), 1)
        .await
        .unwrap();
    l.admit(&s, &cs[1], &level("a"), &token("u"), 1)
        .await
        .unwrap();
    l.attach_payment(&s, &cs[1], &token("u"), &pay("P"), 9)
        .await
        .unwrap();
    let p = l.key_prefix().to_owned();
    let mut conn = raw(&server).await;
    let counts = format!("{p}:{{sale:launch}}:counts");
    let underflow = |c: &CandidateHash| {
        Err(LedgerError::CounterUnderflow {
            level: level("a"),
            candidate: c.clone(),
        })
    };

    // the count lost its seats: an undo would take it below zero
    let _: () = redis::cmd("HSET")
        .arg(&counts)
        .arg("a")
        .arg(0)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        l.undo_admission(&s, &cs[0], &token("t")).await,
        underflow(&cs[0])
    );
    assert_eq!(l.release(&s, &cs[1], &pay("P")).await, underflow(&cs[1]));
    assert_eq!(count(&l).await, 0, "not below zero");
    assert!(
        l.hold(&s, &cs[0]).await.unwrap().is_some(),
        "nothing written"
    );
    assert!(
        l.hold(&s, &cs[1]).await.unwrap().is_some(),
        "nothing written"
    );
    let pending: Vec<String> = redis::cmd("ZRANGE")
        .arg(format!("{p}:{{sale:launch}}:pending"))
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(pending, vec![cs[0].as_str().to_owned()], "still pending");

    // a hold counted in a level that has no counter at all
    let _: () = redis::cmd("HDEL")
        .arg(&counts)
        .arg("a")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        l.undo_admission(&s, &cs[0], &token("t")).await,
        underflow(&cs[0])
    );
    assert!(
        l.hold(&s, &cs[0]).await.unwrap().is_some(),
        "nothing written"
    );
    // guards come first: a miss is a miss
    assert_eq!(
        l.undo_admission(&s, &cs[0], &token("other")).await,
        Ok(Step::NoMatch)
    );
}

#[tokio::test]
async fn an_unreachable_server_is_unavailable() {
    let mut server = RedisServer::start();
    let l = redis_ledger(&server).await;
    let cs = open_sale(&l, 2, &["x"]).await;
    server.kill();
    let s = sale_id();
    assert!(matches!(
        l.admit(&s, &cs[0], &level("a"), &token("t"), 1).await,
        Err(LedgerError::Unavailable(_))
    ));
    assert!(matches!(
        l.counters(&s).await,
        Err(LedgerError::Unavailable(_))
    ));
    assert!(matches!(
        l.hold(&s, &cs[0]).await,
        Err(LedgerError::Unavailable(_))
    ));
    let url = server.url();
    assert!(matches!(
        RedisLedger::connect(&url, 4, "p").await,
        Err(ConnectError::Ledger(LedgerError::Unavailable(_)))
    ));
}

#[tokio::test]
async fn the_ledger_comes_back_with_the_server() {
    let mut server = RedisServer::start();
    let l = redis_ledger(&server).await;
    open_sale(&l, 2, &["x"]).await;
    server.restart();
    // the pooled connection died with the old server: this call either says
    // so (and the pool drops the connection), or, if the connection sat idle
    // long enough to be pinged first, already runs on a fresh one
    match l.counters(&sale_id()).await {
        Err(LedgerError::Unavailable(_)) | Ok(_) => {}
        Err(other) => panic!("unexpected {other:?}"),
    }
    // from here on every call works: the new server has lost the scripts (and
    // the sale: it keeps nothing), and they are loaded again on NOSCRIPT
    let cs = open_sale(&l, 2, &["x"]).await;
    assert_eq!(
        l.admit(&sale_id(), &cs[0], &level("a"), &token("t"), 1)
            .await
            .unwrap(),
        Admission::Admitted { count: 1 }
    );
}

#[tokio::test]
async fn connect_refuses_bad_settings() {
    assert!(matches!(
        RedisLedger::connect("redis://127.0.0.1:1", 4, "a{b}").await,
        Err(ConnectError::KeyPrefix(_))
    ));
    assert!(matches!(
        RedisLedger::connect("redis://127.0.0.1:1", 0, "p").await,
        Err(ConnectError::PoolSize)
    ));
    assert!(matches!(
        RedisLedger::connect("http://nope", 4, "p").await,
        Err(ConnectError::Url(_))
    ));
}

#[tokio::test]
async fn scripts_come_back_after_a_script_flush() {
    let server = RedisServer::start();
    let l = redis_ledger(&server).await;
    let cs = open_sale(&l, 2, &["x"]).await;
    let mut conn = raw(&server).await;
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        l.admit(&sale_id(), &cs[0], &level("a"), &token("t"), 1)
            .await
            .unwrap(),
        Admission::Admitted { count: 1 }
    );
}

#[tokio::test]
async fn a_large_list_loads_in_batches() {
    let server = RedisServer::start();
    let l = redis_ledger(&server).await;
    let s = sale_id();
    l.reset(&s, &[(level("a"), 1)]).await.unwrap();
    let cs: Vec<_> = (0..2_500)
        .map(|i| CandidateHash::of(&i.to_string()))
        .collect();
    assert_eq!(l.load_candidates(&s, &cs[..1_200]).await.unwrap(), 1_200);
    assert_eq!(l.load_candidates(&s, &cs).await.unwrap(), 1_300);
    l.set_open(&s, true).await.unwrap();
    assert_eq!(
        l.admit(&s, &cs[2_499], &level("a"), &token("t"), 1)
            .await
            .unwrap(),
        Admission::Admitted { count: 1 }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_admissions_stop_exactly_at_the_cap() {
    let server = RedisServer::start();
    let l = Arc::new(redis_ledger(&server).await);
    let names: Vec<String> = (0..200).map(|i| format!("c{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let cs = open_sale(l.as_ref(), 50, &refs).await;
    let tasks: Vec<_> = cs
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let l = l.clone();
            tokio::spawn(async move {
                l.admit(&sale_id(), &c, &level("a"), &token(&format!("t{i}")), 1)
                    .await
                    .unwrap()
            })
        })
        .collect();
    let (mut admitted, mut full, mut counts) = (0, 0, Vec::new());
    for t in tasks {
        match t.await.unwrap() {
            Admission::Admitted { count } => {
                admitted += 1;
                counts.push(count);
            }
            Admission::LevelFull => full += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!((admitted, full), (50, 150));
    counts.sort_unstable();
    assert_eq!(
        counts,
        (1..=50).collect::<Vec<u32>>(),
        "each seat counted once"
    );
    assert_eq!(count(l.as_ref()).await, 50);
    assert_eq!(
        l.stale_pending(&sale_id(), 1, 1_000).await.unwrap().len(),
        50
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_undos_of_one_admission_give_one_seat_back() {
    let server = RedisServer::start();
    let l = Arc::new(redis_ledger(&server).await);
    let cs = open_sale(l.as_ref(), 5, &["x", "y"]).await;
    let s = sale_id();
    l.admit(&s, &cs[0], &level("a"), &token("t1"), 1)
        .await
        .unwrap();
    l.admit(&s, &cs[1], &level("a"), &token("t2"), 1)
        .await
        .unwrap();
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let (l, c) = (l.clone(), cs[0].clone());
            tokio::spawn(async move {
                l.undo_admission(&sale_id(), &c, &token("t1"))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.unwrap());
    }
    assert_eq!(answers.iter().filter(|a| **a == Step::Done).count(), 1);
    assert_eq!(answers.iter().filter(|a| **a == Step::NoMatch).count(), 49);
    assert_eq!(
        count(l.as_ref()).await,
        1,
        "one seat back, the other hold untouched"
    );
    assert!(l.hold(&s, &cs[1]).await.unwrap().is_some());
}
