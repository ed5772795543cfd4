//! What only the Redis queue has: several processes share one queue. Two
//! `RedisQueue` values on one server (two "processes", here on one manual
//! clock) see one queue: a message in flight at one is not delivered by the
//! other, comes back at the other after its visibility, dead-letters after
//! `receives_max` receives wherever they happened, and is deduplicated
//! whichever instance the duplicate came through; a long poll at one sees a
//! send through the other within the poll bound. And the adapter's own
//! edges: connect errors, a server that lost its scripts or went away, a
//! queue per sale and prefix.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../booking-redis/tests/support/redis_server.rs"]
mod redis_server;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use booking::SaleId;
use booking::clock::{Clock, ManualClock, SystemClock};
use booking::queue::{Queue, QueueConfig, QueueDepth, QueueError, SendOutcome};
use booking_contract::queue::{NO_WAIT, WAIT, bodies, msg};
use booking_redis::KeyPrefix;
use booking_redis_queue::queue::POLL_MAX;
use booking_redis_queue::{ConnectError, RedisQueue};
use redis_server::RedisServer;

const T0: u64 = 1_700_000_000_000;

async fn instance(
    server: &RedisServer,
    prefix: &str,
    sale: &str,
    clock: Arc<dyn Clock>,
    config: QueueConfig,
) -> Arc<RedisQueue> {
    Arc::new(
        RedisQueue::connect(
            &server.url(),
            4,
            &KeyPrefix::parse(prefix).unwrap(),
            &SaleId::parse(sale).unwrap(),
            clock,
            config,
        )
        .await
        .expect("connected"),
    )
}

/// Two instances of one queue on a manual clock.
async fn two(
    server: &RedisServer,
    config: QueueConfig,
) -> (Arc<RedisQueue>, Arc<RedisQueue>, ManualClock) {
    let clock = ManualClock::new(T0);
    let a = instance(
        server,
        "fleet",
        "launch",
        Arc::new(clock.clone()),
        config.clone(),
    )
    .await;
    let b = instance(server, "fleet", "launch", Arc::new(clock.clone()), config).await;
    (a, b, clock)
}

#[tokio::test]
async fn a_message_in_flight_at_one_instance_is_not_delivered_by_the_other() {
    let server = RedisServer::start();
    let (a, b, _) = two(&server, QueueConfig::default()).await;
    a.send(msg("aaaa", "a1")).await.unwrap();
    a.send(msg("aaaa", "a2")).await.unwrap();
    b.send(msg("bbbb", "b1")).await.unwrap();

    let at_a = a.receive(1, NO_WAIT).await.unwrap();
    assert_eq!(bodies(&at_a), ["a1"]);
    assert_eq!(
        bodies(&b.receive(10, NO_WAIT).await.unwrap()),
        ["b1"],
        "a1 is in flight at a, so its group is blocked at b too"
    );
    assert!(b.receive(10, NO_WAIT).await.unwrap().is_empty());
    assert_eq!(
        b.depth().await.unwrap(),
        QueueDepth {
            visible: 1,
            in_flight: 2
        }
    );
    // a receipt is the queue's, not the instance's: b may acknowledge for a
    b.delete(&at_a[0].receipt).await.unwrap();
    assert_eq!(
        a.delete(&at_a[0].receipt).await,
        Err(QueueError::InvalidReceipt),
        "deleted once, whichever instance"
    );
    assert_eq!(bodies(&a.receive(10, NO_WAIT).await.unwrap()), ["a2"]);
}

#[tokio::test]
async fn an_unacknowledged_message_comes_back_at_the_other_instance_after_its_visibility() {
    let server = RedisServer::start();
    let config = QueueConfig::default();
    let (a, b, clock) = two(&server, config.clone()).await;
    a.send(msg("aaaa", "a1")).await.unwrap();
    let first = a.receive(1, NO_WAIT).await.unwrap().remove(0);
    clock.advance(config.visibility_timeout - Duration::from_millis(1));
    assert!(
        b.receive(1, NO_WAIT).await.unwrap().is_empty(),
        "still hidden"
    );
    clock.advance_ms(1);
    let again = b.receive(1, NO_WAIT).await.unwrap().remove(0);
    assert_eq!(
        (again.message.body.as_str(), again.receive_count),
        ("a1", 2)
    );
    assert_eq!(again.sent_ms, T0);
    assert_eq!(
        a.delete(&first.receipt).await,
        Err(QueueError::InvalidReceipt),
        "the process that took too long cannot delete what the other holds"
    );
    assert_eq!(
        a.change_visibility(&first.receipt, Duration::ZERO).await,
        Err(QueueError::InvalidReceipt)
    );
    b.delete(&again.receipt).await.unwrap();
    assert_eq!(a.depth().await.unwrap(), QueueDepth::default());
}

#[tokio::test]
async fn receives_at_either_instance_count_toward_the_dead_letter_queue() {
    let server = RedisServer::start();
    let config = QueueConfig::default();
    let (a, b, clock) = two(&server, config.clone()).await;
    a.send(msg("aaaa", "poison")).await.unwrap();
    b.send(msg("aaaa", "next")).await.unwrap();
    for n in 1..=config.receives_max {
        let at = if n % 2 == 1 { &a } else { &b };
        let got = at.receive(1, NO_WAIT).await.unwrap();
        assert_eq!(bodies(&got), ["poison"]);
        assert_eq!(got[0].receive_count, n, "counted across instances");
        clock.advance(config.visibility_timeout);
    }
    assert_eq!(a.dead_letters().await.unwrap(), vec![msg("aaaa", "poison")]);
    assert_eq!(b.dead_letters().await.unwrap(), vec![msg("aaaa", "poison")]);
    let got = b.receive(10, NO_WAIT).await.unwrap();
    assert_eq!(bodies(&got), ["next"]);
    assert_eq!(got[0].receive_count, 1);
}

#[tokio::test]
async fn a_duplicate_through_the_other_instance_is_deduplicated_even_after_the_delete() {
    let server = RedisServer::start();
    let config = QueueConfig::default();
    let (a, b, clock) = two(&server, config.clone()).await;
    assert_eq!(
        a.send(msg("aaaa", "a1")).await.unwrap(),
        SendOutcome::Queued
    );
    assert_eq!(
        b.send(msg("aaaa", "a1")).await.unwrap(),
        SendOutcome::Deduplicated
    );
    let got = b.receive(10, NO_WAIT).await.unwrap();
    assert_eq!(bodies(&got), ["a1"]);
    b.delete(&got[0].receipt).await.unwrap();
    clock.advance(config.deduplication_window - Duration::from_millis(1));
    assert_eq!(
        b.send(msg("aaaa", "a1")).await.unwrap(),
        SendOutcome::Deduplicated
    );
    clock.advance_ms(1);
    assert_eq!(
        b.send(msg("aaaa", "a1")).await.unwrap(),
        SendOutcome::Queued
    );
}

#[tokio::test]
async fn a_long_poll_at_one_instance_sees_a_send_through_the_other_within_the_poll_bound() {
    let server = RedisServer::start();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let a = instance(
        &server,
        "fleet",
        "launch",
        Arc::clone(&clock),
        QueueConfig::default(),
    )
    .await;
    let b = instance(&server, "fleet", "launch", clock, QueueConfig::default()).await;
    for round in 0..3 {
        let poll = {
            let b = Arc::clone(&b);
            tokio::spawn(async move { b.receive(10, Duration::from_secs(5)).await.unwrap() })
        };
        // long enough for the poll to have backed off to its longest pause
        tokio::time::sleep(Duration::from_millis(200)).await;
        let sent = Instant::now();
        a.send(msg("aaaa", &format!("m{round}"))).await.unwrap();
        let got = poll.await.unwrap();
        let lag = sent.elapsed();
        assert_eq!(bodies(&got), [format!("m{round}").as_str()]);
        assert!(
            lag < POLL_MAX + Duration::from_millis(150),
            "seen {lag:?} after the send, the poll pauses {POLL_MAX:?} at most"
        );
        b.delete(&got[0].receipt).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn receivers_at_two_instances_keep_every_group_in_order() {
    const GROUPS: usize = 6;
    const PER_GROUP: usize = 30;
    let server = RedisServer::start();
    let (a, b, _) = two(&server, QueueConfig::default()).await;
    for i in 0..PER_GROUP {
        for g in 0..GROUPS {
            a.send(msg(&format!("g{g}"), &i.to_string())).await.unwrap();
        }
    }
    let seen: Arc<std::sync::Mutex<HashMap<String, Vec<usize>>>> = Arc::default();
    let mut receivers = Vec::new();
    for k in 0..6 {
        let q = if k % 2 == 0 {
            Arc::clone(&a)
        } else {
            Arc::clone(&b)
        };
        let seen = Arc::clone(&seen);
        receivers.push(tokio::spawn(async move {
            loop {
                let batch = q.receive(3, Duration::from_millis(100)).await.unwrap();
                if batch.is_empty() {
                    break;
                }
                for r in batch {
                    seen.lock()
                        .unwrap()
                        .entry(r.message.group_id.clone())
                        .or_default()
                        .push(r.message.body.parse().unwrap());
                    tokio::task::yield_now().await;
                    q.delete(&r.receipt).await.unwrap();
                }
            }
        }));
    }
    for r in receivers {
        r.await.unwrap();
    }
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    assert_eq!(seen.len(), GROUPS);
    for (group, order) in &seen {
        assert_eq!(*order, (0..PER_GROUP).collect::<Vec<_>>(), "group {group}");
    }
    assert_eq!(b.depth().await.unwrap(), QueueDepth::default());
}

#[tokio::test]
async fn each_sale_and_prefix_has_a_queue_of_its_own() {
    let server = RedisServer::start();
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(T0));
    let config = QueueConfig::default();
    let one = instance(
        &server,
        "fleet",
        "launch",
        Arc::clone(&clock),
        config.clone(),
    )
    .await;
    let other_sale = instance(
        &server,
        "fleet",
        "encore",
        Arc::clone(&clock),
        config.clone(),
    )
    .await;
    let other_prefix = instance(&server, "rehearsal", "launch", clock, config).await;
    one.send(msg("aaaa", "a1")).await.unwrap();
    for q in [&other_sale, &other_prefix] {
        assert_eq!(q.depth().await.unwrap(), QueueDepth::default());
        assert!(q.receive(10, NO_WAIT).await.unwrap().is_empty());
        assert_eq!(
            q.send(msg("aaaa", "a1")).await.unwrap(),
            SendOutcome::Queued
        );
    }
    assert_eq!(one.depth().await.unwrap().visible, 1);
}

#[tokio::test]
async fn connect_refuses_bad_settings_and_an_unreachable_server() {
    let mut server = RedisServer::start();
    let prefix = KeyPrefix::parse("fleet").unwrap();
    let sale = SaleId::parse("launch").unwrap();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let connect = |url: String, pool: usize, config: QueueConfig| {
        let (prefix, sale, clock) = (prefix.clone(), sale.clone(), Arc::clone(&clock));
        async move { RedisQueue::connect(&url, pool, &prefix, &sale, clock, config).await }
    };
    assert!(matches!(
        connect(server.url(), 0, QueueConfig::default()).await,
        Err(ConnectError::PoolSize)
    ));
    assert!(matches!(
        connect("http://nope".into(), 1, QueueConfig::default()).await,
        Err(ConnectError::Url(_))
    ));
    for config in [
        QueueConfig {
            receives_max: 0,
            ..QueueConfig::default()
        },
        QueueConfig {
            visibility_timeout: Duration::from_secs(13 * 3600),
            ..QueueConfig::default()
        },
    ] {
        assert!(matches!(
            connect(server.url(), 1, config).await,
            Err(ConnectError::Config(_))
        ));
    }
    let q = connect(server.url(), 2, QueueConfig::default())
        .await
        .unwrap();
    assert_eq!(q.warm(2).await, 2);
    server.kill();
    assert!(matches!(
        q.send(msg("aaaa", "a1")).await,
        Err(QueueError::Unavailable(_))
    ));
    assert!(matches!(
        connect(server.url(), 1, QueueConfig::default()).await,
        Err(ConnectError::Unavailable(_))
    ));
}

#[tokio::test]
async fn a_server_that_lost_its_scripts_gets_them_again() {
    let server = RedisServer::start();
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(T0));
    let q = instance(&server, "fleet", "launch", clock, QueueConfig::default()).await;
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        q.send(msg("aaaa", "a1")).await.unwrap(),
        SendOutcome::Queued
    );
    assert_eq!(bodies(&q.receive(1, WAIT).await.unwrap()), ["a1"]);
}

#[tokio::test]
async fn a_stored_message_it_cannot_read_is_unavailable_not_a_panic() {
    let server = RedisServer::start();
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(T0));
    let q = instance(&server, "fleet", "launch", clock, QueueConfig::default()).await;
    q.send(msg("aaaa", "a1")).await.unwrap();
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("HSET")
        .arg("fleet:{sale:launch}:q:msgs")
        .arg("0000000000000001")
        .arg("garbage")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(matches!(
        q.receive(1, NO_WAIT).await,
        Err(QueueError::Unavailable(_))
    ));
}
