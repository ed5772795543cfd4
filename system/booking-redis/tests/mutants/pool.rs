//! What the pool does with a connection between two callers, as they see
//! it: a sound one is handed out again (not reopened), a command the server
//! refused leaves its socket sound, a call that timed out leaves it replaced,
//! one that sat idle and died with its server is checked and replaced before
//! anyone gets it, the database the URL names is the connection's, and the
//! sockets to a server are opened without Nagle's delay.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::redis_server;

use std::time::Duration;

use booking_redis::cluster::Opener;
use booking_redis::ledger::RESPONSE_MAX;
use booking_redis::pool;
use deadpool::managed::Object;
use redis::aio::ConnectionLike;
use redis_server::RedisServer;

async fn ping(conn: &mut pool::Object) -> redis::RedisResult<()> {
    redis::cmd("PING").query_async(&mut **conn).await
}

/// How many times the pool handed this connection out again.
fn reuses(conn: &pool::Object) -> usize {
    Object::metrics(conn).recycle_count
}

#[tokio::test]
async fn a_sound_connection_given_back_is_handed_out_again_not_reopened() {
    let server = RedisServer::start();
    let pool = pool::build(&server.url(), 1).unwrap();
    let mut first = pool.get().await.unwrap();
    ping(&mut first).await.unwrap();
    assert!(
        !first.is_broken(),
        "a call that worked leaves its socket sound"
    );
    let id = Object::id(&first);
    drop(first);

    let mut again = pool.get().await.unwrap();
    assert_eq!(
        (Object::id(&again), reuses(&again)),
        (id, 1),
        "the same connection, handed out a second time"
    );
    assert!(!again.is_broken());
    ping(&mut again).await.unwrap();
}

#[tokio::test]
async fn commands_and_transactions_the_server_refused_leave_their_socket_sound() {
    let server = RedisServer::start();
    let pool = pool::build(&server.url(), 1).unwrap();
    let mut c = pool.get().await.unwrap();
    let key = redis_server::unique_prefix("refused");
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("text")
        .query_async(&mut *c)
        .await
        .unwrap();
    let refused: redis::RedisResult<i64> = redis::cmd("INCR").arg(&key).query_async(&mut *c).await;
    assert!(refused.is_err(), "INCR of text is refused: {refused:?}");
    // a transaction with a malformed command: EXEC answers EXECABORT, which
    // the connection reports as a failed call
    let aborted: redis::RedisResult<()> = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg(&key)
        .arg("other")
        .cmd("SET")
        .arg(&key)
        .query_async(&mut *c)
        .await;
    let e = aborted.unwrap_err();
    assert_eq!(e.code(), Some("EXECABORT"), "{e}");
    assert!(
        !c.is_broken(),
        "a refusal is an answer: the socket carries on"
    );
    let id = Object::id(&c);
    drop(c);

    let mut c = pool.get().await.unwrap();
    assert_eq!(
        (Object::id(&c), reuses(&c)),
        (id, 1),
        "the connection is handed out again, not replaced"
    );
    let kept: String = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut *c)
        .await
        .unwrap();
    assert_eq!(kept, "text");
}

#[tokio::test]
async fn a_call_that_timed_out_leaves_its_socket_replaced() {
    let server = RedisServer::start();
    let pool = pool::build(&server.url(), 1).unwrap();
    let mut c = pool.get().await.unwrap();
    // BLPOP on an empty list answers only after its own timeout, well past
    // the client's response bound
    let blocked_secs = RESPONSE_MAX.as_secs() + 10;
    let answer: redis::RedisResult<Option<(String, String)>> = redis::cmd("BLPOP")
        .arg(redis_server::unique_prefix("empty"))
        .arg(blocked_secs)
        .query_async(&mut *c)
        .await;
    let e = answer.unwrap_err();
    assert!(e.is_timeout(), "{e}");
    assert!(
        c.is_broken(),
        "a late answer could still come on that socket: it is not used again"
    );
    let id = Object::id(&c);
    drop(c);

    let mut c = pool.get().await.unwrap();
    assert_ne!(Object::id(&c), id, "a new connection in its place");
    assert!(!c.is_broken());
    ping(&mut c).await.unwrap();
}

#[tokio::test]
async fn an_idle_connection_that_died_with_its_server_is_replaced_before_it_is_handed_out() {
    let mut server = RedisServer::start();
    let pool = pool::build(&server.url(), 1).unwrap();
    assert_eq!(pool::warm(&pool, 1).await, 1);
    server.restart();
    // past the idle bound, so the pool checks the connection before it hands
    // it out (not a timed assertion: only makes it idle)
    tokio::time::sleep(pool::IDLE_CHECK_AFTER + Duration::from_millis(300)).await;

    let mut c = pool.get().await.unwrap();
    let answer = ping(&mut c).await;
    assert!(
        answer.is_ok(),
        "the first call after the restart works: the dead idle connection was found out \
         and replaced before it was handed out ({answer:?})"
    );
    assert_eq!(reuses(&c), 0, "a connection opened in its place");
}

#[tokio::test]
async fn a_connection_is_on_the_database_its_url_names() {
    let server = RedisServer::start();
    let pool = pool::build(&format!("{}/2", server.url()), 1).unwrap();
    let mut c = pool.get().await.unwrap();
    assert_eq!(c.get_db(), 2);
    let _: () = redis::cmd("SET")
        .arg("where")
        .arg("db2")
        .query_async(&mut *c)
        .await
        .unwrap();
    let read = |db: u8| {
        let mut conn = redis::Client::open(format!("{}/{db}", server.url()))
            .unwrap()
            .get_connection()
            .unwrap();
        redis::cmd("GET")
            .arg("where")
            .query::<Option<String>>(&mut conn)
            .unwrap()
    };
    assert_eq!(read(2).as_deref(), Some("db2"));
    assert_eq!(read(0), None);
}

#[test]
fn the_sockets_to_one_server_are_opened_without_nagles_delay() {
    let d = Duration::from_secs(1);
    let opener = Opener::new("redis://127.0.0.1:6379", d, d).unwrap();
    let Opener::Server { client, .. } = &opener else {
        panic!("{opener:?} is one server")
    };
    assert!(
        client.get_connection_info().tcp_settings().nodelay(),
        "TCP_NODELAY: a call's write goes out at once, not after the previous call's ACK"
    );
}
