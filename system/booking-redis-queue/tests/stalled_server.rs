//! A `redis-server` that stalls (SIGSTOP, then SIGCONT, as the rehearsal's
//! `redis-pause` fault does) while receives are issued: the kernel still
//! takes their commands, and they all run when the server resumes. On the
//! real clock a visibility timeout counts from when the server ran the
//! receive, not from when the client issued it, so:
//!
//! - a receive that waited out the stall hides its message for the whole
//!   timeout from when it ran (a time read when it was issued would hide it
//!   until a deadline already past, and the next poller would take it again
//!   at once);
//! - a backlog of receives issued over the stall delivers a message once
//!   (times read at each issue, spaced wider than the timeout, would each
//!   take it again, up to the dead-letter queue, within milliseconds).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../booking-redis/tests/support/redis_server.rs"]
mod redis_server;

use std::sync::Arc;
use std::time::Duration;

use booking::SaleId;
use booking::clock::{Clock, SystemClock};
use booking::queue::{Queue, QueueConfig, Received};
use booking_contract::queue::{NO_WAIT, WAIT, bodies, msg};
use booking_redis::KeyPrefix;
use booking_redis_queue::{QueueTime, RedisQueue};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use redis_server::RedisServer;

/// Connections per instance, opened before the stall (as an instance warms
/// its pools before the burst).
const POOL: usize = 8;

/// The server stopped (SIGSTOP) until [`Stall::end`] or drop (SIGCONT).
struct Stall(Pid);

impl Stall {
    async fn start(server: &RedisServer) -> Stall {
        let pid = Pid::from_raw(server_pid(server).await);
        kill(pid, Signal::SIGSTOP).unwrap();
        Stall(pid)
    }

    fn end(self) {}
}

impl Drop for Stall {
    fn drop(&mut self) {
        let _ = kill(self.0, Signal::SIGCONT);
    }
}

/// The server's process id, as it reports it (`INFO server`).
async fn server_pid(server: &RedisServer) -> i32 {
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .expect("INFO server names the process id")
        .trim()
        .parse()
        .unwrap()
}

/// An instance of the queue on the system clock, its pool open.
async fn instance(server: &RedisServer, config: QueueConfig) -> Arc<RedisQueue> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let queue = RedisQueue::connect(
        &server.url(),
        POOL,
        &KeyPrefix::parse("stall").unwrap(),
        &SaleId::parse("launch").unwrap(),
        clock,
        config,
    )
    .await
    .expect("connected");
    assert!(matches!(queue.time(), QueueTime::Server));
    assert_eq!(queue.warm(POOL).await, POOL);
    Arc::new(queue)
}

/// A one-look receive, issued now, answered whenever the server runs it.
fn issue_receive(queue: &Arc<RedisQueue>) -> tokio::task::JoinHandle<Vec<Received>> {
    let queue = Arc::clone(queue);
    tokio::spawn(async move { queue.receive(1, NO_WAIT).await.unwrap_or_default() })
}

#[tokio::test]
async fn a_receive_that_waited_out_a_stall_hides_its_message_for_the_timeout_from_when_it_ran() {
    // shorter than the pool's response timeout (1 s): the receive is answered
    let visibility = Duration::from_millis(500);
    let config = QueueConfig {
        visibility_timeout: visibility,
        ..QueueConfig::default()
    };
    let server = RedisServer::start();
    let (a, b) = (
        instance(&server, config.clone()).await,
        instance(&server, config).await,
    );
    a.send(msg("aaaa", "a1")).await.unwrap();

    let stall = Stall::start(&server).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let waiting = issue_receive(&b);
    // longer than the visibility after the receive was issued
    tokio::time::sleep(visibility + Duration::from_millis(150)).await;
    stall.end();
    let got = waiting.await.unwrap();
    assert_eq!(bodies(&got), ["a1"]);
    assert_eq!(got[0].receive_count, 1);

    assert!(
        a.receive(1, NO_WAIT).await.unwrap().is_empty(),
        "received a moment ago: hidden for {visibility:?} from then"
    );
    b.delete(&got[0].receipt).await.unwrap();
}

#[tokio::test]
async fn a_backlog_of_receives_over_a_stall_delivers_a_message_once_not_to_the_dead_letters() {
    let visibility = Duration::from_millis(200);
    // wider than the visibility: each receive of the backlog was issued
    // after the previous one's deadline, on the client's clock
    let step = Duration::from_millis(300);
    let config = QueueConfig {
        visibility_timeout: visibility,
        receives_max: 3,
        ..QueueConfig::default()
    };
    let server = RedisServer::start();
    let (a, b) = (
        instance(&server, config.clone()).await,
        instance(&server, config).await,
    );
    a.send(msg("aaaa", "a1")).await.unwrap();
    let first = a.receive(1, NO_WAIT).await.unwrap();
    assert_eq!(first[0].receive_count, 1);

    // its worker stalls with the server: no delete; the backlog's first
    // receive waits 3 steps + 50 ms, under the pool's response timeout
    let stall = Stall::start(&server).await;
    let mut backlog = Vec::new();
    for _ in 0..3 {
        tokio::time::sleep(step).await;
        backlog.push(issue_receive(&b));
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    stall.end();
    let mut delivered = Vec::new();
    for receive in backlog {
        delivered.extend(receive.await.unwrap());
    }
    // its visibility ran out during the stall: one receive of the backlog
    // takes it, the others find it in flight
    assert_eq!(
        delivered
            .iter()
            .map(|r| r.receive_count)
            .collect::<Vec<_>>(),
        [2],
        "the backlog ran at one moment of the server's clock"
    );

    tokio::time::sleep(visibility + Duration::from_millis(100)).await;
    let last = b.receive(1, WAIT).await.unwrap();
    assert_eq!(bodies(&last), ["a1"], "not dead-lettered");
    assert_eq!(last[0].receive_count, 3);
    assert!(a.dead_letters().await.unwrap().is_empty());
    b.delete(&last[0].receipt).await.unwrap();
}

#[tokio::test]
async fn the_oldest_age_counts_on_the_servers_clock() {
    let server = RedisServer::start();
    let q = instance(&server, QueueConfig::default()).await;
    assert_eq!(q.oldest_age().await.unwrap(), None);
    q.send(msg("aaaa", "a1")).await.unwrap();
    let sent = q.receive(1, NO_WAIT).await.unwrap()[0].sent_ms;
    let wall = SystemClock.now_ms();
    assert!(
        sent.abs_diff(wall) < 5_000,
        "sent at {sent}, the server's time, near this host's {wall}"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    let age = q.oldest_age().await.unwrap().unwrap();
    assert!(
        age >= Duration::from_millis(50) && age < Duration::from_secs(5),
        "{age:?}"
    );
}
