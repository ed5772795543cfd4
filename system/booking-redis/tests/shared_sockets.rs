//! The pool's connections share its sockets: a pool of the article's size
//! opens [`pool::SOCKETS_PER_POOL`] sockets to Redis however many calls are
//! in flight, so calls made at once go out together (one write for many
//! calls) instead of one write per call; a socket that fails is replaced
//! for every connection on it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/redis_server.rs"]
mod redis_server;

use booking_redis::pool;
use redis_server::RedisServer;

/// Clients the server has now, this test's own `INFO` connection included.
fn clients(server: &RedisServer) -> usize {
    let mut conn = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let info: String = redis::cmd("INFO").arg("clients").query(&mut conn).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Read calls processed by the server so far (`total_commands_processed`
/// counts each call once, pipelined or not), and reads from its sockets.
fn processed(server: &RedisServer) -> (u64, u64) {
    let mut conn = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let info: String = redis::cmd("INFO").arg("stats").query(&mut conn).unwrap();
    let field = |name: &str| -> u64 {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    (
        field("total_commands_processed:"),
        field("total_reads_processed:"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_pool_opens_its_sockets_only_and_calls_in_flight_share_reads() {
    const SIZE: usize = 64;
    let server = RedisServer::start();
    let before = clients(&server);
    let pool = pool::build(&server.url(), SIZE).unwrap();
    assert_eq!(
        pool::warm(&pool, SIZE).await,
        SIZE,
        "every connection handed out at once"
    );
    assert_eq!(pool.figures().open, SIZE as u64);
    assert_eq!(
        clients(&server) - before,
        pool::SOCKETS_PER_POOL,
        "{SIZE} connections on {} socket(s)",
        pool::SOCKETS_PER_POOL
    );

    // SIZE callers at once, each with its own connection, many calls each
    let (commands0, reads0) = processed(&server);
    let calls_each = 50;
    let mut tasks = Vec::new();
    for i in 0..SIZE {
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            let mut c = pool.get().await.unwrap();
            for j in 0..calls_each {
                let _: () = redis::cmd("SET")
                    .arg(format!("k{i}"))
                    .arg(j)
                    .query_async(&mut *c)
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let (commands1, reads1) = processed(&server);
    let calls = (SIZE * calls_each) as u64;
    // the two INFO calls of `processed` count too
    assert!(
        commands1 - commands0 >= calls,
        "{} of {calls}",
        commands1 - commands0
    );
    let reads = reads1 - reads0;
    assert!(
        reads * 4 <= calls,
        "{calls} calls in flight together came in {reads} reads: a read per call or so \
         means each call had a write of its own"
    );
    assert_eq!(
        clients(&server) - before,
        pool::SOCKETS_PER_POOL,
        "the load opened no socket"
    );
}

#[tokio::test]
async fn a_failed_socket_is_replaced_for_every_connection_on_it() {
    let mut server = RedisServer::start();
    let pool = pool::build(&server.url(), 4).unwrap();
    assert_eq!(pool::warm(&pool, 4).await, 4);
    server.restart();
    // the first call on the dead socket fails and marks it; the connections
    // handed out after it are on a fresh socket
    let mut failures = 0;
    for _ in 0..8 {
        let mut c = pool.get().await.unwrap();
        let answer: Result<(), _> = redis::cmd("PING").query_async(&mut *c).await;
        if answer.is_err() {
            failures += 1;
            assert!(c.is_broken(), "a failed call marks its socket");
        }
    }
    assert!(
        failures <= pool::SOCKETS_PER_POOL,
        "{failures} calls failed after the restart: each dead socket fails one call"
    );
    let mut c = pool.get().await.unwrap();
    let _: () = redis::cmd("PING").query_async(&mut *c).await.unwrap();
}
