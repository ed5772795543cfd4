//! The connection pool: at most N connections (the article's 300), handed
//! out one per ledger call, so the size bounds the calls in flight and a
//! pool too small for the load makes its callers wait ([`PoolFigures`]).
//!
//! The connections are handles on one shared multiplexed socket per pool
//! ([`SOCKETS_PER_POOL`]): calls in flight at once go out in one write and
//! come back in one read (what Lettuce and ioredis call auto-pipelining).
//! With a socket per connection every call paid its own `writev` and `read`
//! on both ends: in a full-rate rehearsal on Redis the client's socket
//! writes were a quarter of the booking process's CPU. A socket that fails
//! (I/O, timeout, dropped) fails every connection on it: each is dropped
//! when it comes back, and the next connection opens a fresh socket in its
//! place.
//!
//! Why not `deadpool-redis`: its manager sends `UNWATCH` + `PING` every time
//! a connection leaves the pool, a second round trip on every ledger call,
//! which on loopback costs about a third of the admission rate. This manager
//! trusts a connection that was used within [`IDLE_CHECK_AFTER`] and has not
//! failed; an idle one is pinged first (it may have died quietly, e.g. in a
//! failover), and one that failed is dropped and replaced.
//!
//! The bug zoo's `ignore_lost_redis_connection` ([`PoolOptions`]) switches
//! the replacing off: a failed connection goes back into the pool and is
//! handed out again. A `MultiplexedConnection` does not reconnect by itself,
//! so after Redis restarts (or the link resets) every call on it fails.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use booking::{Bug, Bugs};
use deadpool::managed::{self, Metrics, RecycleError, RecycleResult};
use redis::aio::ConnectionLike;
use redis::{Cmd, Pipeline, RedisError, RedisFuture, Value};

use crate::cluster::{Link, Opener};

/// A connection unused for longer than this is pinged before it is handed
/// out; a busier one is trusted.
pub const IDLE_CHECK_AFTER: Duration = Duration::from_secs(1);

/// Multiplexed sockets a pool's connections share: one, the fact the tests
/// and the docs count on (not a knob). The more calls share a write, the
/// fewer writes (the default Redis rehearsal's booking
/// p99 was 12.4 and 20.8 ms on seeds 1 and 2 with one, 17.2 and 22.4 ms with
/// two, 62.7 and 80.8 ms with a socket per connection). Each adapter has a
/// pool of its own, so an instance has one socket per adapter.
pub const SOCKETS_PER_POOL: usize = 1;

/// A connection handed out by the [`Pool`]; it goes back when dropped.
pub type Object = managed::Object<Manager>;

/// The pool: deadpool's, with its callers' waits counted ([`PoolFigures`]).
/// Clones share the connections and the counts.
#[derive(Clone)]
pub struct Pool {
    inner: managed::Pool<Manager>,
    waits: Arc<WaitCounts>,
}

/// What the pool's callers went through, since it was built.
#[derive(Debug, Default)]
struct WaitCounts {
    gets: AtomicU64,
    waits: AtomicU64,
    wait_micros: AtomicU64,
    timeouts: AtomicU64,
}

pub use booking::PoolFigures;

impl Pool {
    /// A connection: an idle one, a new one while the pool is below its
    /// size, or the next one given back. A call made while every connection
    /// was open and in use counts as a wait, with how long it took.
    pub async fn get(&self) -> Result<Object, managed::PoolError<RedisError>> {
        let status = self.inner.status();
        let exhausted = status.available == 0 && status.size >= status.max_size;
        let started = Instant::now();
        let answer = self.inner.get().await;
        self.waits.gets.fetch_add(1, Ordering::Relaxed);
        if exhausted {
            let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
            self.waits.waits.fetch_add(1, Ordering::Relaxed);
            self.waits.wait_micros.fetch_add(micros, Ordering::Relaxed);
        }
        if matches!(answer, Err(managed::PoolError::Timeout(_))) {
            self.waits.timeouts.fetch_add(1, Ordering::Relaxed);
        }
        answer
    }

    /// deadpool's status: size, idle connections, waiters.
    pub fn status(&self) -> managed::Status {
        self.inner.status()
    }

    /// The gauges now and the counts so far.
    pub fn figures(&self) -> PoolFigures {
        let s = self.inner.status();
        PoolFigures {
            max_size: s.max_size as u64,
            open: s.size as u64,
            in_use: s.size.saturating_sub(s.available) as u64,
            waiting: s.waiting as u64,
            gets: self.waits.gets.load(Ordering::Relaxed),
            waits: self.waits.waits.load(Ordering::Relaxed),
            wait_micros: self.waits.wait_micros.load(Ordering::Relaxed),
            timeouts: self.waits.timeouts.load(Ordering::Relaxed),
        }
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("figures", &self.figures())
            .finish_non_exhaustive()
    }
}

/// How a pool treats its connections, beyond its size and timeouts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolOptions {
    /// The bug zoo's `ignore_lost_redis_connection`: a connection whose
    /// command failed (I/O error, timeout, dropped link) is handed out again
    /// instead of replaced, and an idle one is not checked first. Off by
    /// default.
    pub keep_failed_connections: bool,
}

impl PoolOptions {
    /// The options the bug zoo's switches ask for (none: the defaults).
    pub fn from_bugs(bugs: &Bugs) -> PoolOptions {
        PoolOptions {
            keep_failed_connections: bugs.on(Bug::IgnoreLostRedisConnection),
        }
    }
}

/// A pooled connection: a handle on one of the pool's shared sockets (to
/// one server, or to a cluster: [`crate::cluster`]), which knows whether the
/// socket failed.
pub struct Connection {
    inner: Link,
    /// Set, for every connection on the socket, when a command failed in a
    /// way that leaves the socket unusable (I/O, timeout, closed): the pool
    /// replaces the socket instead of reusing it.
    broken: Arc<AtomicBool>,
}

impl Connection {
    fn note(&mut self, e: &RedisError) {
        if failed_socket(e) {
            self.broken.store(true, Ordering::Relaxed);
        }
    }

    /// Whether its socket failed.
    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Relaxed)
    }
}

/// Whether `e` leaves the socket it came on unusable: an I/O error (in
/// redis-rs a timeout, a dropped connection and a refused one are all I/O
/// errors), or one the client recovers from only by reconnecting (a reply
/// that does not parse, say). A refusal by the server (`WRONGTYPE`,
/// `EXECABORT`) is an answer: the socket carries on.
pub(crate) fn failed_socket(e: &RedisError) -> bool {
    e.is_io_error() || e.is_unrecoverable_error()
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("broken", &self.is_broken())
            .finish_non_exhaustive()
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let answer = self.inner.req_packed_command(cmd).await;
            if let Err(e) = &answer {
                self.note(e);
            }
            answer
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let answer = self.inner.req_packed_commands(cmd, offset, count).await;
            if let Err(e) = &answer {
                self.note(e);
            }
            answer
        })
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

/// One shared socket and whether it failed.
struct Socket {
    link: Link,
    broken: Arc<AtomicBool>,
}

/// Opens and checks connections for the pool: each new connection is a
/// handle on its shared socket, opened when there is none yet or the one
/// there failed.
pub struct Manager {
    client: Opener,
    options: PoolOptions,
    socket: tokio::sync::Mutex<Option<Socket>>,
}

impl Manager {
    /// A manager for connections to `url` (one server, or a cluster:
    /// `redis+cluster://host:port,…`, see [`crate::cluster`]) with these
    /// timeouts, replacing failed connections.
    pub fn new(
        url: &str,
        connect_max: Duration,
        response_max: Duration,
    ) -> Result<Manager, RedisError> {
        Manager::with_options(url, connect_max, response_max, PoolOptions::default())
    }

    /// [`Manager::new`] with `options`.
    pub fn with_options(
        url: &str,
        connect_max: Duration,
        response_max: Duration,
        options: PoolOptions,
    ) -> Result<Manager, RedisError> {
        Ok(Manager {
            client: Opener::new(url, connect_max, response_max)?,
            options,
            socket: tokio::sync::Mutex::new(None),
        })
    }
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("server", &self.client)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl managed::Manager for Manager {
    type Type = Connection;
    type Error = RedisError;

    async fn create(&self) -> Result<Connection, RedisError> {
        let mut slot = self.socket.lock().await;
        if let Some(socket) = slot.as_ref() {
            // the zoo's trap reuses a failed socket too
            if self.options.keep_failed_connections || !socket.broken.load(Ordering::Relaxed) {
                return Ok(Connection {
                    inner: socket.link.clone(),
                    broken: Arc::clone(&socket.broken),
                });
            }
            tracing::debug!("a failed redis socket replaced");
        }
        let link = self.client.open().await?;
        let broken = Arc::new(AtomicBool::new(false));
        *slot = Some(Socket {
            link: link.clone(),
            broken: Arc::clone(&broken),
        });
        Ok(Connection {
            inner: link,
            broken,
        })
    }

    async fn recycle(&self, conn: &mut Connection, metrics: &Metrics) -> RecycleResult<RedisError> {
        if self.options.keep_failed_connections {
            // the zoo's trap: every connection is trusted, a dead one too
            if conn.is_broken() {
                tracing::debug!("bug ignore_lost_redis_connection: a failed connection reused");
            }
            return Ok(());
        }
        if conn.is_broken() {
            return Err(RecycleError::message("the connection failed"));
        }
        if metrics.last_used() > IDLE_CHECK_AFTER {
            let _: () = redis::cmd("PING").query_async(conn).await?;
        }
        Ok(())
    }
}

/// Opens connections until `n` are open (or one fails), holding them all at
/// once so each is a new one, then gives them back to the pool: a burst then
/// finds them ready instead of paying a connect each. Returns how many are
/// open in the pool now.
pub async fn warm(pool: &Pool, n: usize) -> usize {
    let mut held = Vec::with_capacity(n.min(pool.status().max_size));
    while held.len() < n.min(pool.status().max_size) {
        match pool.get().await {
            Ok(conn) => held.push(conn),
            Err(e) => {
                tracing::warn!(error = %e, opened = held.len(), "warming the pool stopped");
                break;
            }
        }
    }
    drop(held);
    pool.status().size
}

/// Why a pool could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    /// A pool needs at least one connection.
    #[error("a pool needs at least one connection")]
    Size,
    /// The URL is not a Redis URL.
    #[error("not a Redis URL: {0}")]
    Url(String),
    /// deadpool refused the settings.
    #[error("pool settings refused: {0}")]
    Build(String),
}

/// A pool of at most `pool_size` connections to `url`, with the crate's
/// timeouts: what the ledger and the coordination backend both connect with.
/// Failed connections are replaced ([`build_with`] and the default options).
pub fn build(url: &str, pool_size: usize) -> Result<Pool, PoolError> {
    build_with(url, pool_size, PoolOptions::default())
}

/// [`build`] with `options` (the bug zoo's: [`PoolOptions::from_bugs`]).
pub fn build_with(url: &str, pool_size: usize, options: PoolOptions) -> Result<Pool, PoolError> {
    use crate::ledger::{CONNECT_MAX, POOL_WAIT_MAX, RECYCLE_MAX, RESPONSE_MAX};
    if pool_size == 0 {
        return Err(PoolError::Size);
    }
    let manager = Manager::with_options(url, CONNECT_MAX, RESPONSE_MAX, options)
        .map_err(|e| PoolError::Url(e.to_string()))?;
    let inner = managed::Pool::builder(manager)
        .max_size(pool_size)
        .wait_timeout(Some(POOL_WAIT_MAX))
        .create_timeout(Some(CONNECT_MAX))
        .recycle_timeout(Some(RECYCLE_MAX))
        .runtime(deadpool::Runtime::Tokio1)
        .build()
        .map_err(|e| PoolError::Build(e.to_string()))?;
    Ok(Pool {
        inner,
        waits: Arc::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_zoos_switch_keeps_failed_connections() {
        assert!(!PoolOptions::default().keep_failed_connections);
        assert_eq!(
            PoolOptions::from_bugs(&Bugs::none()),
            PoolOptions::default()
        );
        let others = Bugs::of(
            Bug::ALL
                .into_iter()
                .filter(|b| *b != Bug::IgnoreLostRedisConnection),
        );
        assert!(!PoolOptions::from_bugs(&others).keep_failed_connections);
        assert!(
            PoolOptions::from_bugs(&Bugs::of([Bug::IgnoreLostRedisConnection]))
                .keep_failed_connections
        );
    }
}
