//! The Redis queue against the queue contract (`booking_contract::queue`),
//! unchanged, on a private `redis-server` per case and a manual clock (the
//! scripts take their time from the injected clock, so the contract's
//! five-minute deduplication window passes in no time); then the same cases
//! on a three-shard Redis Cluster (`mod cluster`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../booking-redis/tests/support/redis_server.rs"]
mod redis_server;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use booking::SaleId;
use booking::clock::{Clock, ManualClock};
use booking::queue::{Queue, QueueConfig};
use booking_contract::queue::{Capabilities, QueueFixture};
use booking_redis::KeyPrefix;
use booking_redis_queue::RedisQueue;
use redis_server::RedisTarget;

const T0: u64 = 1_700_000_000_000;

/// Redis queues on one private server (or the cluster) and one manual clock,
/// each under a key prefix of its own.
#[derive(Debug)]
struct Redis {
    server: RedisTarget,
    clock: ManualClock,
    queues: AtomicU32,
}

impl Redis {
    fn start() -> Redis {
        Redis::on(RedisTarget::server())
    }

    fn on_cluster() -> Redis {
        Redis::on(RedisTarget::cluster())
    }

    fn on(server: RedisTarget) -> Redis {
        Redis {
            server,
            clock: ManualClock::new(T0),
            queues: AtomicU32::new(0),
        }
    }
}

#[async_trait]
impl QueueFixture for Redis {
    async fn queue(&self, config: QueueConfig) -> Arc<dyn Queue> {
        let n = self.queues.fetch_add(1, Ordering::Relaxed);
        let prefix = match &self.server {
            RedisTarget::Server(_) => format!("contract-{n}"),
            // a cluster may be shared with other tests and runs
            RedisTarget::Cluster(_) => self.server.prefix("contract"),
        };
        let prefix = KeyPrefix::parse(&prefix).unwrap();
        let queue = RedisQueue::connect(
            &self.server.url(),
            8,
            &prefix,
            &SaleId::parse("launch").unwrap(),
            Arc::new(self.clock.clone()),
            config,
        )
        .await
        .expect("connected");
        Arc::new(queue)
    }

    async fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::FULL
    }
}

booking_contract::queue_contract!(Redis::start());

mod cluster {
    use super::*;
    use booking::queue::Message;
    use redis_server::RedisCluster;

    booking_contract::queue_contract!(Redis::on_cluster());

    /// Queues of sales on every shard, used at once: each sale's ten keys
    /// (the dead-letter list too) land in its own slot on its own node.
    #[tokio::test]
    async fn each_sales_queue_keys_stay_in_its_slot_on_its_node() {
        let cluster = RedisCluster::shared();
        let prefix = redis_server::unique_prefix("queue-slots");
        let clock = ManualClock::new(T0);
        let config = QueueConfig {
            receives_max: 1,
            ..QueueConfig::default()
        };
        let sales = cluster.sales_on_every_shard("queue");
        for sale in &sales {
            let queue = RedisQueue::connect(
                &cluster.url(),
                4,
                &KeyPrefix::parse(&prefix).unwrap(),
                &SaleId::parse(sale).unwrap(),
                Arc::new(clock.clone()),
                config.clone(),
            )
            .await
            .unwrap();
            for (group, id) in [("g1", "a"), ("g2", "b")] {
                let message = Message {
                    body: "{}".into(),
                    group_id: group.into(),
                    deduplication_id: id.into(),
                };
                queue.send(message).await.unwrap();
            }
            let got = queue.receive(10, Duration::ZERO).await.unwrap();
            assert_eq!(got.len(), 2, "{sale}");
            queue.delete(&got[0].receipt).await.unwrap();
            // the other's visibility runs out after its last receive
            clock.advance(config.visibility_timeout + Duration::from_secs(1));
            assert_eq!(queue.dead_letters().await.unwrap().len(), 1, "{sale}");
        }
        let by_tag = cluster.keys_by_tag(&prefix);
        let mut want: Vec<String> = sales.iter().map(|s| format!("sale:{s}")).collect();
        want.sort();
        assert_eq!(by_tag.keys().cloned().collect::<Vec<_>>(), want);
    }
}
