//! [`RedisCoordination`]: locks with owner tokens, values with a TTL and
//! once-only latches on Redis, through the crate's connection pool.
//!
//! | call | Redis |
//! | --- | --- |
//! | `try_lock` | `SET key owner NX PX ttl` |
//! | `unlock` | Lua: `GET` = owner → `DEL` (compare-and-delete) |
//! | `extend_lock` | Lua: `GET` = owner → `PEXPIRE` (compare-and-pexpire) |
//! | `get` / `delete` | `GET` / `DEL` |
//! | `set` | `SET key value [PX ttl]` (a set without TTL clears an old one) |
//! | `set_once` | `SET key value NX [PX ttl]` |
//!
//! Keys are taken whole (see [`booking::coordination::keys`]), so they carry
//! their own prefix. TTLs are whole milliseconds, rounded up and at least 1
//! (Redis refuses `PX 0`), as in the embedded store. Every failure (no
//! connection, timeout, server error) is
//! [`CoordinationError::Unavailable`]: the effect of a call that timed out is
//! unknown.

use std::time::Duration;

use async_trait::async_trait;
use booking::coordination::{Coordination, CoordinationError};
use redis::{RedisError, Script};

use crate::pool::Pool;

const UNLOCK: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"#;

const EXTEND: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"#;

/// Why [`RedisCoordination::connect`] failed.
#[derive(Debug, thiserror::Error)]
pub enum CoordinationConnectError {
    /// A pool needs at least one connection.
    #[error("pool size must be at least 1")]
    PoolSize,
    /// The URL is not a Redis URL.
    #[error("invalid redis url: {0}")]
    Url(String),
    /// The pool could not be built.
    #[error("cannot build the connection pool: {0}")]
    Pool(String),
    /// The server did not answer.
    #[error(transparent)]
    Unavailable(#[from] CoordinationError),
}

/// Locks, TTL values and latches on Redis.
pub struct RedisCoordination {
    pool: Pool,
    unlock: Script,
    extend: Script,
}

impl std::fmt::Debug for RedisCoordination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let status = self.pool.status();
        f.debug_struct("RedisCoordination")
            .field("pool_size_max", &status.max_size)
            .field("pool_size", &status.size)
            .finish_non_exhaustive()
    }
}

/// Whole milliseconds, rounded up, at least 1.
fn px(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_nanos().div_ceil(1_000_000).max(1)).unwrap_or(u64::MAX)
}

fn unavailable(e: RedisError) -> CoordinationError {
    CoordinationError::Unavailable(e.to_string())
}

impl RedisCoordination {
    /// Connects with a pool of at most `pool_size` connections, with the
    /// ledger's timeouts, and checks the server answers (`PING`) and has the
    /// two scripts.
    pub async fn connect(
        url: &str,
        pool_size: usize,
    ) -> Result<RedisCoordination, CoordinationConnectError> {
        RedisCoordination::connect_with(url, pool_size, &booking::Bugs::none()).await
    }

    /// [`RedisCoordination::connect`] with the bug zoo's switches: the pool
    /// reads `ignore_lost_redis_connection`
    /// ([`crate::pool::PoolOptions::from_bugs`]).
    pub async fn connect_with(
        url: &str,
        pool_size: usize,
        bugs: &booking::Bugs,
    ) -> Result<RedisCoordination, CoordinationConnectError> {
        let options = crate::pool::PoolOptions::from_bugs(bugs);
        let pool = crate::pool::build_with(url, pool_size, options).map_err(|e| match e {
            crate::pool::PoolError::Size => CoordinationConnectError::PoolSize,
            crate::pool::PoolError::Url(why) => CoordinationConnectError::Url(why),
            crate::pool::PoolError::Build(why) => CoordinationConnectError::Pool(why),
        })?;
        let coordination = RedisCoordination {
            pool,
            unlock: Script::new(UNLOCK),
            extend: Script::new(EXTEND),
        };
        let mut conn = coordination.conn().await?;
        for script in [&coordination.unlock, &coordination.extend] {
            script
                .prepare_invoke()
                .load_async(&mut *conn)
                .await
                .map_err(unavailable)?;
        }
        Ok(coordination)
    }

    /// Opens up to `n` pooled connections now (at most the pool size), so
    /// the first burst does not wait for connects; returns how many are open.
    pub async fn warm(&self, n: usize) -> usize {
        crate::pool::warm(&self.pool, n).await
    }

    /// The connection pool (its figures go to `/metrics`).
    pub fn pool(&self) -> &crate::pool::Pool {
        &self.pool
    }

    async fn conn(&self) -> Result<crate::pool::Object, CoordinationError> {
        self.pool
            .get()
            .await
            .map_err(|e| CoordinationError::Unavailable(format!("no redis connection: {e}")))
    }

    async fn query<T: redis::FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
    ) -> Result<T, CoordinationError> {
        let mut conn = self.conn().await?;
        cmd.query_async(&mut *conn).await.map_err(unavailable)
    }

    async fn compare_and(
        &self,
        script: &Script,
        key: &str,
        owner: &str,
        ttl: Option<Duration>,
    ) -> Result<bool, CoordinationError> {
        let mut conn = self.conn().await?;
        let mut call = script.prepare_invoke();
        call.key(key).arg(owner);
        if let Some(ttl) = ttl {
            call.arg(px(ttl));
        }
        let n: i64 = call.invoke_async(&mut *conn).await.map_err(unavailable)?;
        Ok(n == 1)
    }
}

/// `SET key value [NX] [PX ttl]`.
fn set_cmd(key: &str, value: &str, nx: bool, ttl: Option<Duration>) -> redis::Cmd {
    let mut cmd = redis::cmd("SET");
    cmd.arg(key).arg(value);
    if nx {
        cmd.arg("NX");
    }
    if let Some(ttl) = ttl {
        cmd.arg("PX").arg(px(ttl));
    }
    cmd
}

#[async_trait]
impl Coordination for RedisCoordination {
    async fn try_lock(
        &self,
        key: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<bool, CoordinationError> {
        // OK when set, nil when taken
        let answer: Option<String> = self.query(&set_cmd(key, owner, true, Some(ttl))).await?;
        Ok(answer.is_some())
    }

    async fn unlock(&self, key: &str, owner: &str) -> Result<bool, CoordinationError> {
        self.compare_and(&self.unlock, key, owner, None).await
    }

    async fn extend_lock(
        &self,
        key: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<bool, CoordinationError> {
        self.compare_and(&self.extend, key, owner, Some(ttl)).await
    }

    async fn get(&self, key: &str) -> Result<Option<String>, CoordinationError> {
        self.query(redis::cmd("GET").arg(key)).await
    }

    async fn set(
        &self,
        key: &str,
        value: &str,
        ttl: Option<Duration>,
    ) -> Result<(), CoordinationError> {
        self.query(&set_cmd(key, value, false, ttl)).await
    }

    async fn delete(&self, key: &str) -> Result<bool, CoordinationError> {
        let n: i64 = self.query(redis::cmd("DEL").arg(key)).await?;
        Ok(n == 1)
    }

    async fn set_once(
        &self,
        key: &str,
        value: &str,
        ttl: Option<Duration>,
    ) -> Result<bool, CoordinationError> {
        let answer: Option<String> = self.query(&set_cmd(key, value, true, ttl)).await?;
        Ok(answer.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_are_whole_milliseconds_rounded_up_and_at_least_one() {
        assert_eq!(px(Duration::ZERO), 1);
        assert_eq!(px(Duration::from_micros(1)), 1);
        assert_eq!(px(Duration::from_micros(1_001)), 2);
        assert_eq!(px(Duration::from_secs(2)), 2_000);
    }

    #[test]
    fn set_commands_carry_nx_and_px_only_when_asked() {
        let packed = |c: redis::Cmd| String::from_utf8_lossy(&c.get_packed_command()).into_owned();
        let plain = packed(set_cmd("k", "v", false, None));
        assert!(!plain.contains("NX") && !plain.contains("PX"));
        let once = packed(set_cmd("k", "v", true, Some(Duration::from_millis(200))));
        assert!(once.contains("NX") && once.contains("PX") && once.contains("200"));
    }
}
