//! The pool counts its callers' waits: a call made while every connection
//! is handed out waits for one to come back, and a caller that waits past
//! the pool's bound gives up. The figures `/metrics` shows
//! (`booking_redis_pool_*`) and the rehearsal judges (`redis_pool_waits`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/redis_server.rs"]
mod redis_server;

use std::time::Duration;

use booking_redis::ledger::POOL_WAIT_MAX;
use booking_redis::pool;
use redis_server::RedisServer;

async fn ping(conn: &mut pool::Object) {
    let _: () = redis::cmd("PING").query_async(&mut **conn).await.unwrap();
}

#[tokio::test]
async fn a_call_that_finds_every_connection_in_use_counts_as_a_wait() {
    let server = RedisServer::start();
    let pool = pool::build(&server.url(), 2).unwrap();
    assert_eq!(pool::warm(&pool, 2).await, 2);
    let warmed = pool.figures();
    assert_eq!((warmed.max_size, warmed.open, warmed.in_use), (2, 2, 0));
    assert_eq!(warmed.waits, 0, "opening connections is not a wait");

    // two callers at once on two connections: no wait
    let (mut a, mut b) = (pool.get().await.unwrap(), pool.get().await.unwrap());
    ping(&mut a).await;
    ping(&mut b).await;
    let busy = pool.figures();
    assert_eq!((busy.in_use, busy.waits), (2, 0));

    // a third waits until one comes back
    let third = {
        let pool = pool.clone();
        tokio::spawn(async move {
            let mut c = pool.get().await.unwrap();
            ping(&mut c).await;
        })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(pool.figures().waiting, 1, "{:?}", pool.figures());
    drop(a);
    third.await.unwrap();
    let waited = pool.figures();
    assert_eq!(waited.waits, 1, "{waited:?}");
    assert!(
        waited.wait_micros >= 100_000,
        "it waited about 150 ms: {waited:?}"
    );
    assert_eq!(waited.timeouts, 0);
    assert_eq!(
        waited.gets,
        2 + 2 + 1,
        "warming's two, the two callers, the third"
    );

    // with both held past the pool's bound, a caller gives up
    let mut a = pool.get().await.unwrap();
    ping(&mut a).await;
    let started = std::time::Instant::now();
    assert!(pool.get().await.is_err(), "no connection came back");
    assert!(started.elapsed() >= POOL_WAIT_MAX);
    let gave_up = pool.figures();
    assert_eq!((gave_up.waits, gave_up.timeouts), (2, 1), "{gave_up:?}");
    drop((a, b));
    assert_eq!(pool.figures().in_use, 0);
}
