//! The Redis queue against the queue contract (`booking_contract::queue`),
//! unchanged, on a private `redis-server` per case and a manual clock (the
//! scripts take their time from the injected clock, so the contract's
//! five-minute deduplication window passes in no time).

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
use redis_server::RedisServer;

const T0: u64 = 1_700_000_000_000;

/// Redis queues on one private server and one manual clock, each under a
/// key prefix of its own.
#[derive(Debug)]
struct Redis {
    server: RedisServer,
    clock: ManualClock,
    queues: AtomicU32,
}

impl Redis {
    fn start() -> Redis {
        Redis {
            server: RedisServer::start(),
            clock: ManualClock::new(T0),
            queues: AtomicU32::new(0),
        }
    }
}

#[async_trait]
impl QueueFixture for Redis {
    async fn queue(&self, config: QueueConfig) -> Arc<dyn Queue> {
        let n = self.queues.fetch_add(1, Ordering::Relaxed);
        let prefix = KeyPrefix::parse(&format!("contract-{n}")).unwrap();
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
