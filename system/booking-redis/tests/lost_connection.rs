//! What the pool does with connections that died with the server: a
//! `redis-server` of each test's own is killed (SIGKILL) and started again on
//! its port, so every pooled `MultiplexedConnection` is dead (they do not
//! reconnect by themselves). The pool replaces them; with the bug zoo's
//! `ignore_lost_redis_connection` it keeps handing them out, and every call
//! fails from then on.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/redis_server.rs"]
mod redis_server;

use std::future::Future;

use booking::coordination::{Coordination, CoordinationError};
use booking::ledger::{Ledger, LedgerError};
use booking::{Bug, Bugs, SaleId};
use booking_redis::{RedisCoordination, RedisLedger};
use redis_server::RedisServer;

/// The pool's size, every connection opened before the restart (an
/// instance warms its pools before the burst).
const POOL_SIZE: usize = 4;
/// Calls made after the restart.
const CALLS: usize = 20;

fn bugged() -> Bugs {
    Bugs::of([Bug::IgnoreLostRedisConnection])
}

/// Restarts `server`, then makes [`CALLS`] calls one after the other:
/// whether each worked, in order.
async fn after_restart<F, Fut>(server: &mut RedisServer, mut call: F) -> Vec<bool>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    assert!(call().await, "a call before the restart works");
    server.restart();
    let mut worked = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        worked.push(call().await);
    }
    worked
}

/// Without the bug: each dead connection fails at most one call, then the
/// pool opens fresh ones and every later call works.
fn assert_reconnected(worked: &[bool]) {
    let failed = worked.iter().filter(|w| !**w).count();
    assert!(failed <= POOL_SIZE, "{failed} calls failed: {worked:?}");
    assert!(
        worked[POOL_SIZE..].iter().all(|w| *w),
        "every call after the dead connections works: {worked:?}"
    );
}

async fn ledger(server: &RedisServer, bugs: &Bugs) -> RedisLedger {
    let l = RedisLedger::connect_with(&server.url(), POOL_SIZE, "lost", bugs)
        .await
        .unwrap();
    assert_eq!(l.warm(POOL_SIZE).await, POOL_SIZE);
    l
}

/// One ledger call (a script, so it also loads the scripts the new server
/// lost): whether it worked. Only a connection failure is allowed.
async fn ledger_call(l: &RedisLedger) -> bool {
    match l.counters(&SaleId::parse("launch").unwrap()).await {
        Ok(_) => true,
        Err(LedgerError::Unavailable(_)) => false,
        Err(other) => panic!("unexpected {other:?}"),
    }
}

async fn coordination(server: &RedisServer, bugs: &Bugs) -> RedisCoordination {
    let c = RedisCoordination::connect_with(&server.url(), POOL_SIZE, bugs)
        .await
        .unwrap();
    assert_eq!(c.warm(POOL_SIZE).await, POOL_SIZE);
    c
}

/// One coordination call: whether it worked (its only error is
/// `Unavailable`).
async fn coordination_call(c: &RedisCoordination) -> bool {
    let answer: Result<_, CoordinationError> = c.get("lost-key").await;
    answer.is_ok()
}

#[tokio::test]
async fn the_ledger_reconnects_after_a_redis_restart() {
    let mut server = RedisServer::start();
    let l = ledger(&server, &Bugs::none()).await;
    let worked = after_restart(&mut server, || ledger_call(&l)).await;
    assert_reconnected(&worked);
}

#[tokio::test]
async fn with_ignore_lost_redis_connection_the_ledger_keeps_failing() {
    let mut server = RedisServer::start();
    let l = ledger(&server, &bugged()).await;
    let worked = after_restart(&mut server, || ledger_call(&l)).await;
    assert!(
        worked.iter().all(|w| !*w),
        "every call fails on a dead connection: {worked:?}"
    );
    // the server itself is fine: a fresh ledger works
    assert!(ledger_call(&ledger(&server, &Bugs::none()).await).await);
}

#[tokio::test]
async fn the_coordination_store_reconnects_after_a_redis_restart() {
    let mut server = RedisServer::start();
    let c = coordination(&server, &Bugs::none()).await;
    let worked = after_restart(&mut server, || coordination_call(&c)).await;
    assert_reconnected(&worked);
}

#[tokio::test]
async fn with_ignore_lost_redis_connection_the_coordination_store_keeps_failing() {
    let mut server = RedisServer::start();
    let c = coordination(&server, &bugged()).await;
    let worked = after_restart(&mut server, || coordination_call(&c)).await;
    assert!(
        worked.iter().all(|w| !*w),
        "every call fails on a dead connection: {worked:?}"
    );
}

#[tokio::test]
async fn connect_keeps_its_bug_free_default() {
    // `connect` is `connect_with` and no bug: it reconnects
    let mut server = RedisServer::start();
    let l = RedisLedger::connect(&server.url(), POOL_SIZE, "lost")
        .await
        .unwrap();
    l.warm(POOL_SIZE).await;
    let worked = after_restart(&mut server, || ledger_call(&l)).await;
    assert_reconnected(&worked);
}
