//! [`RedisQueue`]: the adapter. Checks the limits, runs one script per
//! operation on the queue's time ([`QueueTime`]: the server's, or an
//! injected clock's), reads the answer back, and long-polls (see the crate
//! docs for why by polling).

use std::ops::DerefMut;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use booking::clock::Clock;
use booking::queue::{
    Message, Purged, Queue, QueueConfig, QueueDepth, QueueError, RECEIVE_BATCH_MAX,
    RECEIVE_WAIT_MAX, ReceiptHandle, Received, SendOutcome, VISIBILITY_TIMEOUT_MAX,
};
use booking::{Bugs, SaleId};
use booking_redis::keys::{KeyPrefix, sale_key};
use booking_redis::pool::{Connection, Pool, PoolError, PoolOptions};
use redis::{RedisError, Script, ScriptInvocation, Value};
use tokio::sync::Notify;

use crate::scripts::Scripts;
use crate::time::QueueTime;
use crate::wire;

/// The first pause of an empty long poll before it looks again.
pub const POLL_FIRST: Duration = Duration::from_millis(2);
/// The longest pause between two looks of a long poll: what another
/// process's send may wait at most before this one sees it (plus a round
/// trip). A send, delete or visibility change through the same
/// [`RedisQueue`] wakes its own polls at once.
pub const POLL_MAX: Duration = Duration::from_millis(20);

/// The names of the queue's keys under the sale's hash tag, in the order
/// every script takes them as `KEYS[1..10]` (`src/lua/prelude.lua`).
pub const KEY_NAMES: [&str; 10] = [
    "q:ids", "q:msgs", "q:order", "q:groups", "q:ready", "q:vis", "q:held", "q:recv", "q:dedup",
    "q:dead",
];

/// The pause after `pause` of a long poll that found nothing: doubled, at
/// most [`POLL_MAX`].
pub fn next_pause(pause: Duration) -> Duration {
    (pause * 2).clamp(POLL_FIRST, POLL_MAX)
}

/// SQS's limits on a receive: 1..=[`RECEIVE_BATCH_MAX`] messages, a long
/// poll of at most [`RECEIVE_WAIT_MAX`].
pub fn check_receive(max: usize, wait: Duration) -> Result<(), QueueError> {
    if max == 0 || max > RECEIVE_BATCH_MAX {
        return Err(QueueError::Invalid(format!(
            "receive of {max} messages, 1..={RECEIVE_BATCH_MAX}"
        )));
    }
    if wait > RECEIVE_WAIT_MAX {
        return Err(QueueError::Invalid(format!(
            "long poll of {wait:?}, at most {RECEIVE_WAIT_MAX:?}"
        )));
    }
    Ok(())
}

/// SQS's limit on a visibility timeout: at most [`VISIBILITY_TIMEOUT_MAX`].
pub fn check_visibility(timeout: Duration) -> Result<(), QueueError> {
    if timeout > VISIBILITY_TIMEOUT_MAX {
        return Err(QueueError::Invalid(format!(
            "visibility timeout of {timeout:?}, at most {VISIBILITY_TIMEOUT_MAX:?}"
        )));
    }
    Ok(())
}

/// Why [`RedisQueue::connect`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// A pool needs at least one connection.
    #[error("pool size must be at least 1")]
    PoolSize,
    /// The URL is not a Redis URL.
    #[error("invalid redis url: {0}")]
    Url(String),
    /// The pool could not be built.
    #[error("cannot build the connection pool: {0}")]
    Pool(String),
    /// The configuration breaks SQS's limits: a visibility timeout above
    /// [`VISIBILITY_TIMEOUT_MAX`], or no receive before the dead-letter queue.
    #[error("invalid queue configuration: {0}")]
    Config(String),
    /// The server did not answer, or refused the scripts.
    #[error("cannot load the queue's scripts: {0}")]
    Unavailable(QueueError),
}

/// The admission queue on Redis, shared by every process that connects with
/// the same server, key prefix and sale.
pub struct RedisQueue {
    pool: Pool,
    keys: [String; 10],
    scripts: Scripts,
    time: QueueTime,
    config: QueueConfig,
    /// Something this instance did may have made a message receivable.
    changed: Notify,
}

impl std::fmt::Debug for RedisQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let status = self.pool.status();
        f.debug_struct("RedisQueue")
            .field("keys", &self.keys[0])
            .field("time", &self.time)
            .field("config", &self.config)
            .field("pool_size_max", &status.max_size)
            .field("pool_size", &status.size)
            .field("scripts", &self.scripts)
            .finish_non_exhaustive()
    }
}

fn unavailable(e: RedisError) -> QueueError {
    QueueError::Unavailable(format!("redis: {e}"))
}

impl RedisQueue {
    /// Connects with a pool of at most `pool_size` connections, to the queue
    /// of `sale` under `prefix`, on the time of `clock` ([`QueueTime::of`]:
    /// the system clock means the server's `TIME`, read when each script
    /// runs; another clock is read when a call is issued). Loads every
    /// script once, so a wrong URL or a server that refuses scripts fails
    /// here. Every process of a fleet connects with the same configuration
    /// (it is passed with each call, not stored on the server).
    pub async fn connect(
        url: &str,
        pool_size: usize,
        prefix: &KeyPrefix,
        sale: &SaleId,
        clock: Arc<dyn Clock>,
        config: QueueConfig,
    ) -> Result<RedisQueue, ConnectError> {
        RedisQueue::connect_with(url, pool_size, prefix, sale, clock, config, &Bugs::none()).await
    }

    /// [`RedisQueue::connect`] with the bug zoo's switches: the pool reads
    /// `ignore_lost_redis_connection` ([`PoolOptions::from_bugs`]).
    pub async fn connect_with(
        url: &str,
        pool_size: usize,
        prefix: &KeyPrefix,
        sale: &SaleId,
        clock: Arc<dyn Clock>,
        config: QueueConfig,
        bugs: &Bugs,
    ) -> Result<RedisQueue, ConnectError> {
        check_visibility(config.visibility_timeout)
            .map_err(|e| ConnectError::Config(e.to_string()))?;
        if config.receives_max == 0 {
            return Err(ConnectError::Config(
                "receives_max must be at least 1".into(),
            ));
        }
        let options = PoolOptions::from_bugs(bugs);
        let pool =
            booking_redis::pool::build_with(url, pool_size, options).map_err(|e| match e {
                PoolError::Size => ConnectError::PoolSize,
                PoolError::Url(why) => ConnectError::Url(why),
                PoolError::Build(why) => ConnectError::Pool(why),
            })?;
        let queue = RedisQueue {
            pool,
            keys: KEY_NAMES.map(|name| sale_key(prefix, sale, name)),
            scripts: Scripts::new(),
            time: QueueTime::of(clock),
            config,
            changed: Notify::new(),
        };
        {
            let mut conn = queue.conn().await.map_err(ConnectError::Unavailable)?;
            for script in queue.scripts.all() {
                script
                    .prepare_invoke()
                    .load_async(&mut *conn)
                    .await
                    .map_err(|e| ConnectError::Unavailable(unavailable(e)))?;
            }
        }
        Ok(queue)
    }

    /// Opens up to `n` pooled connections now (at most the pool size), so
    /// the first burst does not wait for connects; returns how many are open.
    pub async fn warm(&self, n: usize) -> usize {
        booking_redis::pool::warm(&self.pool, n).await
    }

    /// The connection pool (its figures go to `/metrics`).
    pub fn pool(&self) -> &booking_redis::pool::Pool {
        &self.pool
    }

    async fn conn(&self) -> Result<impl DerefMut<Target = Connection>, QueueError> {
        self.pool
            .get()
            .await
            .map_err(|e| QueueError::Unavailable(format!("no redis connection: {e}")))
    }

    /// Where the scripts read the time.
    pub fn time(&self) -> &QueueTime {
        &self.time
    }

    /// A script call: the ten keys, then the time (the client's now, or the
    /// server's), the window and the receive limit (`ARGV[1..3]`); the
    /// caller adds its own arguments.
    fn call<'a>(&self, script: &'a Script) -> ScriptInvocation<'a> {
        let mut call = script.prepare_invoke();
        for key in &self.keys {
            call.key(key);
        }
        call.arg(self.time.arg())
            .arg(self.config.deduplication_window.as_millis() as u64)
            .arg(self.config.receives_max);
        call
    }

    async fn run(&self, call: &ScriptInvocation<'_>) -> Result<Value, QueueError> {
        let mut conn = self.conn().await?;
        call.invoke_async(&mut *conn).await.map_err(unavailable)
    }

    /// One look: up to `max` messages, now.
    async fn receive_now(&self, max: usize) -> Result<Vec<Received>, QueueError> {
        let mut call = self.call(&self.scripts.receive);
        call.arg(max)
            .arg(self.config.visibility_timeout.as_millis() as u64);
        let batch = wire::read_batch(self.run(&call).await?)?;
        for r in &batch {
            if r.receive_count >= self.config.receives_max {
                // the move itself happens inside whichever script next
                // settles the queue, where nothing can log it
                tracing::warn!(
                    group = %r.message.group_id,
                    receive_count = r.receive_count,
                    "last delivery: unless deleted, the message moves to the dead-letter queue"
                );
            } else if r.receive_count > 1 {
                tracing::debug!(
                    group = %r.message.group_id,
                    receive_count = r.receive_count,
                    "message delivered again"
                );
            }
        }
        Ok(batch)
    }

    /// The delete or change_visibility answer: 1 done, 0 the receipt is not
    /// the latest receive in flight.
    fn receipt_answer(answer: Value) -> Result<(), QueueError> {
        match wire::int(answer)? {
            1 => Ok(()),
            _ => Err(QueueError::InvalidReceipt),
        }
    }
}

#[async_trait]
impl Queue for RedisQueue {
    async fn send(&self, message: Message) -> Result<SendOutcome, QueueError> {
        message.check()?;
        let json = wire::message_json(&message)?;
        let mut call = self.call(&self.scripts.send);
        call.arg(&message.group_id)
            .arg(&message.deduplication_id)
            .arg(json);
        match wire::int(self.run(&call).await?)? {
            1 => {
                self.changed.notify_waiters();
                Ok(SendOutcome::Queued)
            }
            _ => Ok(SendOutcome::Deduplicated),
        }
    }

    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<Received>, QueueError> {
        check_receive(max, wait)?;
        let deadline = tokio::time::Instant::now() + wait;
        let mut pause = POLL_FIRST;
        loop {
            // registered before looking, so a local send in between wakes us
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let batch = self.receive_now(max).await?;
            let now = tokio::time::Instant::now();
            if !batch.is_empty() || now >= deadline {
                return Ok(batch);
            }
            let until = (now + pause).min(deadline);
            pause = match tokio::time::timeout_at(until, changed).await {
                Ok(()) => POLL_FIRST,
                Err(_) => next_pause(pause),
            };
        }
    }

    async fn delete(&self, receipt: &ReceiptHandle) -> Result<(), QueueError> {
        let mut call = self.call(&self.scripts.delete);
        call.arg(&receipt.0);
        RedisQueue::receipt_answer(self.run(&call).await?)?;
        // the group's next message may be deliverable now
        self.changed.notify_waiters();
        Ok(())
    }

    async fn change_visibility(
        &self,
        receipt: &ReceiptHandle,
        timeout: Duration,
    ) -> Result<(), QueueError> {
        check_visibility(timeout)?;
        let mut call = self.call(&self.scripts.change_visibility);
        call.arg(&receipt.0).arg(timeout.as_millis() as u64);
        RedisQueue::receipt_answer(self.run(&call).await?)?;
        self.changed.notify_waiters();
        Ok(())
    }

    async fn oldest_age(&self) -> Result<Option<Duration>, QueueError> {
        let stats = wire::read_stats(self.run(&self.call(&self.scripts.stats)).await?)?;
        Ok(stats
            .oldest_ms
            .map(|sent_ms| Duration::from_millis(stats.now_ms.saturating_sub(sent_ms))))
    }

    async fn depth(&self) -> Result<QueueDepth, QueueError> {
        let stats = wire::read_stats(self.run(&self.call(&self.scripts.stats)).await?)?;
        Ok(QueueDepth {
            visible: stats.visible,
            in_flight: stats.in_flight,
        })
    }

    async fn dead_letters(&self) -> Result<Vec<Message>, QueueError> {
        let answer = self.run(&self.call(&self.scripts.dead_letters)).await?;
        wire::array(answer)?
            .into_iter()
            .map(|json| wire::read_message_json(&wire::bytes(json)?))
            .collect()
    }

    /// One script (`lua/purge.lua`): the sale's queue is its own keys, so
    /// all of it goes, and no other sale's.
    async fn purge(&self) -> Result<Option<Purged>, QueueError> {
        let answer = self.run(&self.call(&self.scripts.purge)).await?;
        let mut counts = Vec::with_capacity(3);
        for v in wire::array(answer)? {
            counts.push(u64::try_from(wire::int(v)?).unwrap_or(0));
        }
        let [visible, in_flight, dead_letters] = counts[..] else {
            return Err(QueueError::Unavailable(format!(
                "purge answered {} counts, not 3",
                counts.len()
            )));
        };
        Ok(Some(Purged {
            visible,
            in_flight,
            dead_letters,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_poll_backs_off_to_the_bound_and_no_further() {
        let mut pause = POLL_FIRST;
        let mut seen = vec![pause];
        for _ in 0..10 {
            pause = next_pause(pause);
            seen.push(pause);
        }
        assert_eq!(seen[1], POLL_FIRST * 2);
        assert!(seen.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(*seen.last().unwrap_or(&Duration::ZERO), POLL_MAX);
    }

    #[test]
    fn limits_are_sqs_limits() {
        assert!(check_receive(1, Duration::ZERO).is_ok());
        assert!(check_receive(RECEIVE_BATCH_MAX, RECEIVE_WAIT_MAX).is_ok());
        for (max, wait) in [
            (0, Duration::ZERO),
            (RECEIVE_BATCH_MAX + 1, Duration::ZERO),
            (1, RECEIVE_WAIT_MAX + Duration::from_millis(1)),
        ] {
            assert!(matches!(
                check_receive(max, wait),
                Err(QueueError::Invalid(_))
            ));
        }
        assert!(check_visibility(VISIBILITY_TIMEOUT_MAX).is_ok());
        assert!(check_visibility(VISIBILITY_TIMEOUT_MAX + Duration::from_secs(1)).is_err());
    }

    #[test]
    fn every_key_is_under_the_sale_hash_tag_and_distinct() {
        let prefix = KeyPrefix::parse("sellout").unwrap_or_else(|e| panic!("{e}"));
        let sale = SaleId::parse("launch-1").unwrap_or_else(|e| panic!("{e}"));
        let keys = KEY_NAMES.map(|name| sale_key(&prefix, &sale, name));
        assert_eq!(keys[0], "sellout:{sale:launch-1}:q:ids");
        let distinct: std::collections::HashSet<_> = keys.iter().collect();
        assert_eq!(distinct.len(), keys.len());
        assert!(keys.iter().all(|k| k.contains("{sale:launch-1}")));
    }
}
