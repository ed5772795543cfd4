//! The booking system's outputs on Redis, shared by every instance of a
//! deployment: the confirmation emails sent ([`Mailer`]), the alerts raised
//! ([`Alerts`]), the live status document ([`StatusSink`]) and all three read
//! back for the audit ([`OutputLog`]). [`RedisOutputs`] is all four.
//!
//! A process that dies takes none of them with it: the audit run against
//! any instance sees every email, alert and status write of the whole fleet.
//!
//! # Key layout
//!
//! Every key of one sale carries the sale's hash tag, so the status script's
//! two keys live on one Redis Cluster slot (see
//! [`booking_redis::keys::sale_key`]).
//!
//! | key | type | content |
//! | --- | --- | --- |
//! | `<prefix>:{sale:<id>}:outputs:mail` | list | every confirmation sent, JSON [`Confirmation`], send order, duplicates kept |
//! | `<prefix>:{sale:<id>}:outputs:alerts` | list | every alert raised, JSON [`Alert`], oldest first |
//! | `<prefix>:{sale:<id>}:outputs:status` | string | the current status document, whole |
//! | `<prefix>:{sale:<id>}:outputs:status_writes` | list | `<at_ms>\|<document>` per write, landing order, the newest [`STATUS_WRITES_KEPT_MAX`] |
//!
//! # How each call maps
//!
//! | call | Redis |
//! | --- | --- |
//! | `Mailer::send` | `RPUSH mail <json>` |
//! | `Alerts::raise` | `RPUSH alerts <json>` |
//! | `StatusSink::put` | `lua/status_put.lua`: `SET status`, `RPUSH status_writes`, `LTRIM` to the bound, one atomic step |
//! | `StatusSink::get` | `GET status` |
//! | `OutputLog::sent_mail` / `alerts_raised` | `LRANGE 0 -1`, decoded |
//! | `OutputLog::status_writes` | `LRANGE status_writes 0 -1`, filtered on `at_ms` |
//! | [`RedisOutputs::clear`] | `DEL` of the four keys |
//!
//! A write is stamped with the writing instance's clock (`at_ms`), and the
//! history keeps the order the writes landed in on the server, which is the
//! order the audit checks (`status_writes_in_read_order`).
//!
//! # Bounds
//!
//! The status history keeps the newest [`STATUS_WRITES_KEPT_MAX`] writes: the
//! writers are throttled to one write per two seconds plus one per
//! transition, so the bound is days of a sale, while a runaway writer cannot
//! grow the key without limit. Mail and alerts are not trimmed: the audit's
//! "exactly one email per PAID booking" must see every duplicate, and both
//! grow with bookings and incidents, not with time.
//!
//! Every failure (no connection, timeout, server error, an entry that does
//! not decode) is [`NotifyError::Unavailable`]; the effect of a call that
//! timed out is unknown.

use std::ops::DerefMut;
use std::sync::Arc;

use async_trait::async_trait;
use booking::clock::Clock;
use booking::notify::{
    Alert, Alerts, Confirmation, Mailer, NotifyError, OutputLog, OutputsCleared, StatusSink,
    StatusWrite,
};
use booking::{Bugs, SaleId};
use booking_redis::keys::{KeyPrefix, sale_key};
use booking_redis::pool::{self, Pool, PoolError, PoolOptions};
use redis::{RedisError, Script};

/// How many status writes the history keeps (the newest). A status document
/// is a few hundred bytes per level; 100,000 writes are about 55 hours of
/// writes at the 2 s throttle, and at most some tens of MB of Redis memory.
pub const STATUS_WRITES_KEPT_MAX: usize = 100_000;

/// Why [`RedisOutputs::connect`] failed.
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
    /// The server did not answer, or refused the script.
    #[error(transparent)]
    Unavailable(#[from] NotifyError),
}

/// The four keys of one sale's outputs.
#[derive(Debug, Clone)]
struct Keys {
    sale: SaleId,
    mail: String,
    alerts: String,
    status: String,
    status_writes: String,
}

impl Keys {
    fn new(prefix: &KeyPrefix, sale: &SaleId) -> Keys {
        Keys {
            sale: sale.clone(),
            mail: sale_key(prefix, sale, "outputs:mail"),
            alerts: sale_key(prefix, sale, "outputs:alerts"),
            status: sale_key(prefix, sale, "outputs:status"),
            status_writes: sale_key(prefix, sale, "outputs:status_writes"),
        }
    }
}

/// Sent mail, alerts and the status document of one sale, on Redis, shared
/// by every instance that connects with the same prefix and sale.
pub struct RedisOutputs {
    pool: Pool,
    keys: Keys,
    clock: Arc<dyn Clock>,
    status_put: Script,
}

impl std::fmt::Debug for RedisOutputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let status = self.pool.status();
        f.debug_struct("RedisOutputs")
            .field("status_key", &self.keys.status)
            .field("pool_size_max", &status.max_size)
            .field("pool_size", &status.size)
            .finish_non_exhaustive()
    }
}

fn unavailable(e: RedisError) -> NotifyError {
    NotifyError::Unavailable(e.to_string())
}

impl RedisOutputs {
    /// Connects with a pool of at most `pool_size` connections (the ledger's
    /// timeouts) to the outputs of `sale` under `prefix`; status writes are
    /// stamped with `clock`. Loads the status script once, so a wrong URL or
    /// a server that refuses scripts fails here, not on the first write.
    pub async fn connect(
        url: &str,
        pool_size: usize,
        prefix: &KeyPrefix,
        sale: &SaleId,
        clock: Arc<dyn Clock>,
    ) -> Result<RedisOutputs, ConnectError> {
        RedisOutputs::connect_with(url, pool_size, prefix, sale, clock, &Bugs::none()).await
    }

    /// [`RedisOutputs::connect`] with the bug zoo's switches: the pool reads
    /// `ignore_lost_redis_connection` ([`PoolOptions::from_bugs`]).
    pub async fn connect_with(
        url: &str,
        pool_size: usize,
        prefix: &KeyPrefix,
        sale: &SaleId,
        clock: Arc<dyn Clock>,
        bugs: &Bugs,
    ) -> Result<RedisOutputs, ConnectError> {
        let options = PoolOptions::from_bugs(bugs);
        let pool = pool::build_with(url, pool_size, options).map_err(|e| match e {
            PoolError::Size => ConnectError::PoolSize,
            PoolError::Url(why) => ConnectError::Url(why),
            PoolError::Build(why) => ConnectError::Pool(why),
        })?;
        let outputs = RedisOutputs {
            pool,
            keys: Keys::new(prefix, sale),
            clock,
            status_put: Script::new(include_str!("lua/status_put.lua")),
        };
        {
            let mut conn = outputs.conn().await?;
            outputs
                .status_put
                .prepare_invoke()
                .load_async(&mut *conn)
                .await
                .map_err(unavailable)?;
        }
        Ok(outputs)
    }

    /// Opens up to `n` pooled connections now (at most the pool size);
    /// returns how many are open.
    pub async fn warm(&self, n: usize) -> usize {
        pool::warm(&self.pool, n).await
    }

    /// The connection pool (its figures go to `/metrics`).
    pub fn pool(&self) -> &pool::Pool {
        &self.pool
    }

    /// Forgets every sent mail, alert and status write of the sale, and the
    /// current document (the ops reset before a new run).
    pub async fn clear(&self) -> Result<(), NotifyError> {
        let mut conn = self.conn().await?;
        redis::cmd("DEL")
            .arg(&self.keys.mail)
            .arg(&self.keys.alerts)
            .arg(&self.keys.status)
            .arg(&self.keys.status_writes)
            .query_async::<()>(&mut *conn)
            .await
            .map_err(unavailable)
    }

    async fn conn(&self) -> Result<impl DerefMut<Target = pool::Connection>, NotifyError> {
        self.pool
            .get()
            .await
            .map_err(|e| NotifyError::Unavailable(format!("no redis connection: {e}")))
    }

    async fn push(&self, key: &str, entry: String) -> Result<(), NotifyError> {
        let mut conn = self.conn().await?;
        redis::cmd("RPUSH")
            .arg(key)
            .arg(entry)
            .query_async::<()>(&mut *conn)
            .await
            .map_err(unavailable)
    }

    async fn all(&self, key: &str) -> Result<Vec<Vec<u8>>, NotifyError> {
        let mut conn = self.conn().await?;
        redis::cmd("LRANGE")
            .arg(key)
            .arg(0)
            .arg(-1)
            .query_async(&mut *conn)
            .await
            .map_err(unavailable)
    }

    async fn all_json<T: serde::de::DeserializeOwned>(
        &self,
        key: &str,
    ) -> Result<Vec<T>, NotifyError> {
        self.all(key)
            .await?
            .iter()
            .map(|entry| {
                serde_json::from_slice(entry)
                    .map_err(|e| NotifyError::Unavailable(format!("corrupt entry in {key}: {e}")))
            })
            .collect()
    }
}

fn json<T: serde::Serialize>(value: &T) -> Result<String, NotifyError> {
    serde_json::to_string(value).map_err(|e| NotifyError::Unavailable(e.to_string()))
}

/// Reads a history entry back (`<at_ms>|<document>`, as
/// `lua/status_put.lua` writes it); `None` if it is not `<digits>|<bytes>`.
fn decode_write(entry: &[u8]) -> Option<StatusWrite> {
    let bar = entry.iter().position(|b| *b == b'|')?;
    let digits = std::str::from_utf8(&entry[..bar]).ok()?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(StatusWrite {
        at_ms: digits.parse().ok()?,
        document: entry[bar + 1..].to_vec(),
    })
}

#[async_trait]
impl Mailer for RedisOutputs {
    async fn send(&self, confirmation: &Confirmation) -> Result<(), NotifyError> {
        self.push(&self.keys.mail, json(confirmation)?).await
    }
}

#[async_trait]
impl Alerts for RedisOutputs {
    async fn raise(&self, alert: Alert) -> Result<(), NotifyError> {
        self.push(&self.keys.alerts, json(&alert)?).await
    }
}

#[async_trait]
impl StatusSink for RedisOutputs {
    async fn put(&self, document: &[u8]) -> Result<(), NotifyError> {
        let at_ms = self.clock.now_ms();
        let mut conn = self.conn().await?;
        self.status_put
            .key(&self.keys.status)
            .key(&self.keys.status_writes)
            .arg(at_ms)
            .arg(document)
            .arg(STATUS_WRITES_KEPT_MAX)
            .invoke_async::<i64>(&mut *conn)
            .await
            .map(drop)
            .map_err(unavailable)
    }

    async fn get(&self) -> Result<Option<Vec<u8>>, NotifyError> {
        let mut conn = self.conn().await?;
        redis::cmd("GET")
            .arg(&self.keys.status)
            .query_async(&mut *conn)
            .await
            .map_err(unavailable)
    }
}

#[async_trait]
impl OutputLog for RedisOutputs {
    async fn sent_mail(&self) -> Result<Vec<Confirmation>, NotifyError> {
        self.all_json(&self.keys.mail).await
    }

    async fn alerts_raised(&self) -> Result<Vec<Alert>, NotifyError> {
        self.all_json(&self.keys.alerts).await
    }

    async fn status_writes(&self, since_ms: u64) -> Result<Vec<StatusWrite>, NotifyError> {
        let key = &self.keys.status_writes;
        let mut writes = Vec::new();
        for entry in self.all(key).await? {
            let write = decode_write(&entry).ok_or_else(|| {
                NotifyError::Unavailable(format!("corrupt status write in {key}"))
            })?;
            if write.at_ms >= since_ms {
                writes.push(write);
            }
        }
        Ok(writes)
    }

    /// [`RedisOutputs::clear`], counted, in one `MULTI`: the keys are the
    /// sale's own. Another sale's outputs live under other keys: nothing
    /// of theirs is here to clear.
    async fn clear_sale(&self, sale: &SaleId) -> Result<Option<OutputsCleared>, NotifyError> {
        if *sale != self.keys.sale {
            return Ok(Some(OutputsCleared::default()));
        }
        let mut conn = self.conn().await?;
        let (mail, alerts, status_writes, _): (u64, u64, u64, u64) = redis::pipe()
            .atomic()
            .cmd("LLEN")
            .arg(&self.keys.mail)
            .cmd("LLEN")
            .arg(&self.keys.alerts)
            .cmd("LLEN")
            .arg(&self.keys.status_writes)
            .cmd("DEL")
            .arg(&self.keys.mail)
            .arg(&self.keys.alerts)
            .arg(&self.keys.status)
            .arg(&self.keys.status_writes)
            .query_async(&mut *conn)
            .await
            .map_err(unavailable)?;
        Ok(Some(OutputsCleared {
            mail,
            alerts,
            status_writes,
        }))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_history_entry_reads_back_byte_for_byte() {
        let document = b"{\"a\":1}|\x00\xff|tail";
        let entry = [&b"1700000000123|"[..], document].concat();
        assert_eq!(
            decode_write(&entry),
            Some(StatusWrite {
                at_ms: 1_700_000_000_123,
                document: document.to_vec()
            })
        );
        assert_eq!(
            decode_write(b"0|"),
            Some(StatusWrite {
                at_ms: 0,
                document: Vec::new()
            })
        );
    }

    #[test]
    fn entries_that_are_not_time_bar_document_are_refused() {
        for bad in [
            &b"no bar"[..],
            b"|doc",
            b"12a|doc",
            b"-1|doc",
            b"99999999999999999999|x",
        ] {
            assert_eq!(
                decode_write(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn every_key_of_a_sale_is_under_its_hash_tag() {
        let keys = Keys::new(
            &KeyPrefix::parse("sellout").unwrap(),
            &SaleId::parse("launch-1").unwrap(),
        );
        assert_eq!(keys.mail, "sellout:{sale:launch-1}:outputs:mail");
        assert_eq!(keys.alerts, "sellout:{sale:launch-1}:outputs:alerts");
        assert_eq!(keys.status, "sellout:{sale:launch-1}:outputs:status");
        assert_eq!(
            keys.status_writes,
            "sellout:{sale:launch-1}:outputs:status_writes"
        );
    }
}
