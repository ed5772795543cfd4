//! The outputs contract suites (status sink, output log) against
//! [`RedisOutputs`] on a `redis-server` of each case's own, unchanged; then
//! what only a shared store can show: two instances (two pools, as two
//! processes would have) see one log, the status document and its history
//! never disagree, the history's bound, sales and prefixes kept apart,
//! `clear`, and a server that is gone. Then both contract suites on a
//! three-shard Redis Cluster (`mod cluster`), and the outputs of sales on
//! every shard each in their own slot.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../booking-redis/tests/support/redis_server.rs"]
mod redis_server;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use booking::SaleId;
use booking::clock::{Clock, ManualClock};
use booking::notify::{Alerts, Mailer, NotifyError, OutputLog, StatusSink, StatusWrite};
use booking_contract::outputs::{
    OutputLogFixture, Outputs, StatusSinkFixture, T0_MS, alert, confirmation,
};
use booking_redis::keys::{KeyPrefix, sale_key};
use booking_redis_outputs::{RedisOutputs, STATUS_WRITES_KEPT_MAX};
use redis_server::{RedisServer, RedisTarget};

/// Connections per instance in these tests.
const POOL: usize = 8;

fn sale(id: &str) -> SaleId {
    SaleId::parse(id).unwrap()
}

fn prefix(p: &str) -> KeyPrefix {
    KeyPrefix::parse(p).unwrap()
}

/// A private server, a manual clock at [`T0_MS`], and a fresh prefix per
/// set of outputs.
struct Fixture {
    server: RedisTarget,
    clock: ManualClock,
    made: AtomicUsize,
}

impl Fixture {
    fn start() -> Fixture {
        Fixture {
            server: RedisTarget::server(),
            clock: ManualClock::new(T0_MS),
            made: AtomicUsize::new(0),
        }
    }

    async fn connect(&self) -> Arc<RedisOutputs> {
        let n = self.made.fetch_add(1, Ordering::SeqCst);
        let clock: Arc<dyn Clock> = Arc::new(self.clock.clone());
        Arc::new(
            RedisOutputs::connect(
                &self.server.url(),
                POOL,
                &prefix(&match &self.server {
                    RedisTarget::Server(_) => format!("contract-{n}"),
                    // a cluster may be shared with other tests and runs
                    RedisTarget::Cluster(_) => self.server.prefix("contract"),
                }),
                &sale("launch"),
                clock,
            )
            .await
            .unwrap(),
        )
    }
}

#[async_trait]
impl StatusSinkFixture for Fixture {
    async fn sink(&self) -> Arc<dyn StatusSink> {
        self.connect().await
    }
}

#[async_trait]
impl OutputLogFixture for Fixture {
    async fn outputs(&self) -> Outputs {
        let o = self.connect().await;
        Outputs {
            mailer: o.clone(),
            alerts: o.clone(),
            status: o.clone(),
            log: o,
        }
    }

    fn advance_ms(&self, ms: u64) {
        self.clock.advance_ms(ms);
    }
}

booking_contract::status_sink_contract!(Fixture::start());
booking_contract::output_log_contract!(Fixture::start());

async fn instance(server: &RedisServer, clock: &ManualClock, p: &str, s: &str) -> RedisOutputs {
    RedisOutputs::connect(
        &server.url(),
        POOL,
        &prefix(p),
        &sale(s),
        Arc::new(clock.clone()),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn two_instances_see_one_log() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0_MS);
    let a = instance(&server, &clock, "fleet", "launch").await;
    let b = instance(&server, &clock, "fleet", "launch").await;

    a.send(&confirmation("TR1", true)).await.unwrap();
    b.send(&confirmation("TR2", true)).await.unwrap();
    a.send(&confirmation("TR2", true)).await.unwrap();
    b.raise(alert("dead_letter", "from b", None)).await.unwrap();
    a.put(b"from a").await.unwrap();
    clock.advance_ms(7);
    b.put(b"from b").await.unwrap();

    for log in [&a, &b] {
        assert_eq!(
            log.sent_mail().await.unwrap(),
            [
                confirmation("TR1", true),
                confirmation("TR2", true),
                confirmation("TR2", true)
            ]
        );
        assert_eq!(
            log.alerts_raised().await.unwrap(),
            [alert("dead_letter", "from b", None)]
        );
        assert_eq!(
            log.status_writes(0).await.unwrap(),
            [
                StatusWrite {
                    at_ms: T0_MS,
                    document: b"from a".to_vec()
                },
                StatusWrite {
                    at_ms: T0_MS + 7,
                    document: b"from b".to_vec()
                }
            ]
        );
        assert_eq!(log.get().await.unwrap().as_deref(), Some(&b"from b"[..]));
    }

    // one instance's reset is everyone's
    b.clear().await.unwrap();
    assert!(a.sent_mail().await.unwrap().is_empty());
    assert!(a.alerts_raised().await.unwrap().is_empty());
    assert!(a.status_writes(0).await.unwrap().is_empty());
    assert_eq!(a.get().await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_current_document_is_always_the_last_write_of_the_history() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0_MS);
    let a = Arc::new(instance(&server, &clock, "race", "launch").await);
    let b = Arc::new(instance(&server, &clock, "race", "launch").await);
    let mut tasks = Vec::new();
    for i in 0..200 {
        let writer = if i % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(async move {
            writer.put(format!("doc-{i}").as_bytes()).await.unwrap();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let writes = a.status_writes(0).await.unwrap();
    assert_eq!(writes.len(), 200);
    let mut seen: Vec<_> = writes.iter().map(|w| w.document.clone()).collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 200, "every write once");
    assert_eq!(
        b.get().await.unwrap().as_ref(),
        writes.last().map(|w| &w.document),
        "SET and RPUSH are one step: the document is the history's last"
    );
}

#[tokio::test]
async fn the_history_keeps_the_newest_writes_up_to_its_bound() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0_MS);
    let o = instance(&server, &clock, "bound", "launch").await;
    // the adapter's own script with a small bound, on the adapter's keys
    let script = redis::Script::new(include_str!("../src/lua/status_put.lua"));
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let (p, s) = (prefix("bound"), sale("launch"));
    for i in 0..5u64 {
        let length: i64 = script
            .key(sale_key(&p, &s, "outputs:status"))
            .key(sale_key(&p, &s, "outputs:status_writes"))
            .arg(T0_MS + i)
            .arg(format!("doc-{i}"))
            .arg(3)
            .invoke_async(&mut conn)
            .await
            .unwrap();
        // the script answers the length after its push, before its trim:
        // from the fourth write on it pushes onto the three kept
        assert_eq!(length, (i as i64 + 1).min(4));
    }
    let writes = o.status_writes(0).await.unwrap();
    assert_eq!(
        writes
            .iter()
            .map(|w| (w.at_ms, String::from_utf8(w.document.clone()).unwrap()))
            .collect::<Vec<_>>(),
        [
            (T0_MS + 2, "doc-2".to_owned()),
            (T0_MS + 3, "doc-3".to_owned()),
            (T0_MS + 4, "doc-4".to_owned())
        ]
    );
    assert_eq!(o.get().await.unwrap().as_deref(), Some(&b"doc-4"[..]));
    // a bound the script cannot use is refused before any write
    let refused = script
        .key(sale_key(&p, &s, "outputs:status"))
        .key(sale_key(&p, &s, "outputs:status_writes"))
        .arg(T0_MS)
        .arg("doc-x")
        .arg(0)
        .invoke_async::<i64>(&mut conn)
        .await;
    assert!(refused.is_err());
    assert_eq!(o.get().await.unwrap().as_deref(), Some(&b"doc-4"[..]));
    // the adapter's own bound is the documented one
    assert_eq!(STATUS_WRITES_KEPT_MAX, 100_000);
}

#[tokio::test]
async fn sales_and_prefixes_are_kept_apart() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0_MS);
    let one = instance(&server, &clock, "deploy-a", "launch").await;
    let other_sale = instance(&server, &clock, "deploy-a", "encore").await;
    let other_prefix = instance(&server, &clock, "deploy-b", "launch").await;
    one.send(&confirmation("TR1", true)).await.unwrap();
    one.raise(alert("dead_letter", "x", None)).await.unwrap();
    one.put(b"doc").await.unwrap();
    for o in [&other_sale, &other_prefix] {
        assert!(o.sent_mail().await.unwrap().is_empty());
        assert!(o.alerts_raised().await.unwrap().is_empty());
        assert!(o.status_writes(0).await.unwrap().is_empty());
        assert_eq!(o.get().await.unwrap(), None);
    }
    other_sale.clear().await.unwrap();
    assert_eq!(one.sent_mail().await.unwrap().len(), 1, "clear is per sale");
}

#[tokio::test]
async fn a_server_that_is_gone_is_unavailable() {
    let mut server = RedisServer::start();
    let clock = ManualClock::new(T0_MS);
    let o = instance(&server, &clock, "gone", "launch").await;
    server.kill();
    let unavailable = |r: Result<(), NotifyError>| matches!(r, Err(NotifyError::Unavailable(_)));
    assert!(unavailable(o.send(&confirmation("TR1", true)).await));
    assert!(unavailable(o.raise(alert("dead_letter", "x", None)).await));
    assert!(unavailable(o.put(b"doc").await));
    assert!(matches!(o.get().await, Err(NotifyError::Unavailable(_))));
    assert!(matches!(
        o.sent_mail().await,
        Err(NotifyError::Unavailable(_))
    ));
    assert!(matches!(
        o.status_writes(0).await,
        Err(NotifyError::Unavailable(_))
    ));
    assert!(
        RedisOutputs::connect(
            &server.url(),
            POOL,
            &prefix("gone"),
            &sale("launch"),
            Arc::new(clock.clone())
        )
        .await
        .is_err(),
        "connect checks the server"
    );
}

#[tokio::test]
async fn warm_opens_connections_up_to_the_pool_size() {
    let server = RedisServer::start();
    let o = instance(&server, &ManualClock::new(T0_MS), "warm", "launch").await;
    assert_eq!(o.warm(3).await, 3);
    assert_eq!(o.warm(100).await, POOL);
}

mod cluster {
    use super::*;
    use redis_server::{RedisCluster, unique_prefix};

    impl Fixture {
        fn on_cluster() -> Fixture {
            Fixture {
                server: RedisTarget::cluster(),
                clock: ManualClock::new(T0_MS),
                made: AtomicUsize::new(0),
            }
        }
    }

    booking_contract::status_sink_contract!(Fixture::on_cluster());
    booking_contract::output_log_contract!(Fixture::on_cluster());

    /// Sales on every shard write mail, alerts and status (the status
    /// script's two keys) and clear (a `DEL` of four keys): each sale's keys
    /// in its own slot on its node, and a clear empties its sale only.
    #[tokio::test]
    async fn each_sales_outputs_stay_in_its_slot_on_its_node() {
        let cluster = RedisCluster::shared();
        let p = unique_prefix("outputs-slots");
        let clock = ManualClock::new(T0_MS);
        let sales = cluster.sales_on_every_shard("outputs");
        let mut all = Vec::new();
        for s in &sales {
            let o = RedisOutputs::connect(
                &cluster.url(),
                POOL,
                &prefix(&p),
                &sale(s),
                Arc::new(clock.clone()),
            )
            .await
            .unwrap();
            o.send(&confirmation("TR1", true)).await.unwrap();
            o.raise(alert("dead_letter", s, None)).await.unwrap();
            o.put(s.as_bytes()).await.unwrap();
            assert_eq!(o.get().await.unwrap().as_deref(), Some(s.as_bytes()));
            all.push(o);
        }
        let by_tag = cluster.keys_by_tag(&p);
        let mut want: Vec<String> = sales.iter().map(|s| format!("sale:{s}")).collect();
        want.sort();
        assert_eq!(by_tag.keys().cloned().collect::<Vec<_>>(), want);
        assert!(by_tag.values().all(|n| *n == 4), "{by_tag:?}");
        all[0].clear().await.unwrap();
        assert_eq!(all[0].sent_mail().await.unwrap(), []);
        assert_eq!(
            all[1].sent_mail().await.unwrap(),
            [confirmation("TR1", true)]
        );
        assert_eq!(cluster.keys_by_tag(&p).len(), sales.len() - 1);
    }
}
