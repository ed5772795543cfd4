//! The booking system's records on Redis: [`RedisRecords`] is the record
//! store ([`booking::RecordStore`]) and its change stream
//! ([`booking::ChangeStream`]) for one sale, with the semantics of the
//! embedded store (`booking_embedded::records`, the reference) and of the
//! DynamoDB table it stands for.
//!
//! Every conditional write (put, replace, HELD→PAID, the email latch, extend,
//! noting and clearing failed queries, the guarded delete, the TTL service's
//! delete) is ONE Lua script (`src/lua/*.lua`, each the prelude plus its
//! body) that reads the record, checks the condition, and only then writes
//! the record, every index and the change-stream entry: all of it or nothing.
//! A failed condition changes nothing and answers the record it was checked
//! against ([`RecordError::ConditionFailed`]). Times come from the injected
//! [`Clock`] and reach the scripts as arguments, so a test moves them by hand.
//!
//! # Key layout
//!
//! Every key carries the sale's hash tag (`booking_redis::keys::sale_key`),
//! so a Redis Cluster keeps a sale on one slot and each script may touch all
//! of its keys; each script is given every key it touches in `KEYS`.
//!
//! | key | type | content | why |
//! | --- | --- | --- | --- |
//! | `<prefix>:{sale:<id>}:rec:<candidate>` | hash | one field per attribute of the [`BookingRecord`] (`expires_at_s`, `paid_ms`, `paid_by` only when set) | the record; a missing `expires_at_s` field is the PAID record's removed TTL attribute |
//! | `<prefix>:{sale:<id>}:records:payments` | hash | payment ID → candidate | the payment GSI (`by_payment`) |
//! | `<prefix>:{sale:<id>}:records:held` | sorted set | HELD candidates scored by `deadline_ms` | the reconciler's `held_due`: most overdue first, ties by candidate (equal scores order by member) |
//! | `<prefix>:{sale:<id>}:records:ttl` | sorted set | candidates whose record carries a TTL, scored by `expires_at_s` | the TTL service's [`RedisRecords::sweep_ttl`], earliest first, without a scan |
//! | `<prefix>:{sale:<id>}:records:owed` | sorted set | PAID candidates whose confirmation email is owed (`email_sent` false), scored by `paid_ms` | the email sweep's `owed_emails`: oldest paid first, ties by candidate; every write script keeps it exact (HELD→PAID adds, the email latch and deletes remove) |
//! | `<prefix>:{sale:<id>}:records:all` | sorted set | every candidate with a record, all scored 0 | the audit's `scan_all` in candidate order (equal scores order by member, byte-wise, as `CandidateHash` orders) |
//! | `<prefix>:{sale:<id>}:records:stream` | stream | one entry per change, id `<sequence>-0`: `kind`, `at` (ms), `old`/`new` images (JSON of the fields), `who` = `ttl` on the TTL service's removals | the change stream, trimmed to `stream_retained_max` entries in the writing script |
//! | `<prefix>:{sale:<id>}:records:seq` | string | the last sequence written | the stream's positions: `INCR`ed by the writing script, so strictly increasing in write order |
//!
//! The ops reset's `delete_sale` pages through `records:all` and deletes
//! each record of the sale with `lua/sale_delete.lua` (one script per
//! record, pipelined per page): the indexes follow, the stream shows an
//! application REMOVE (no `who`), and the stream and its sequence stay, so
//! a handler's position remains valid.
//!
//! Scores are doubles: times are exact up to 2^53 ms.
//!
//! # What differs from DynamoDB, and why it does not matter
//!
//! - Every read is consistent: `get(.., false)`, `by_payment` and `held_due`
//!   see every completed write (allowed: an eventually consistent read may be
//!   up to date).
//! - Redis does not throttle: [`RecordStore::throttles`] is always zero; an
//!   overloaded server answers slowly, and a call past
//!   [`booking_redis::ledger::RESPONSE_MAX`] is `Unavailable`.
//! - `scan_all`, `held_due` and `owed_emails` read the index, then the
//!   records (a round trip each, `scan_all` by pages of [`READ_BATCH_MAX`]):
//!   each record is read consistently, but the scan is not one snapshot of
//!   the whole table (neither is DynamoDB's paged Scan); a record written in
//!   between is seen as it is now (`held_due` drops one no longer HELD and
//!   due, `owed_emails` one emailed or deleted meanwhile).
//! - A stream entry's `at_ms` is the writing process's clock when it called
//!   the script; its sequence is the server's order. Two processes whose
//!   clocks disagree may write entries whose `at_ms` step back by the skew;
//!   the sequences never do.
//! - The TTL service is [`RedisRecords::sweep_ttl`], run by the owner (the
//!   server, under a leader lock): late by `ttl_delay_ms` at least, each
//!   delete conditional, so two sweepers at once delete each record once.

mod codec;
mod scripts;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use booking::clock::Clock;
use booking::records::{
    BookingRecord, ChangeStream, Condition, ConfirmPath, RecordError, RecordStore, StreamKind,
    StreamRecord, Throttles, UserIdentity, sort_by_deadline, sort_by_paid, ttl_for_deadline,
};
use booking::{Bug, Bugs, CandidateHash, PaymentId, SaleId};
use booking_redis::keys::{KeyPrefix, sale_key};
use booking_redis::pool::{Connection, Pool, PoolError};
use redis::{RedisError, Script, ScriptInvocation};

use crate::codec::{from_fields, from_json, path_text, status_text, to_fields};
use crate::scripts::Scripts;

/// Stream entries kept by default: the embedded store's
/// `STREAM_RETAINED_MAX` (DynamoDB keeps 24 hours' worth).
pub const STREAM_RETAINED_MAX: usize = 1 << 20;
/// Between two looks at an idle stream while a read waits (see
/// [`ChangeStream::read`] on [`RedisRecords`]).
pub const STREAM_POLL_INTERVAL: Duration = Duration::from_millis(20);
/// Records read per round trip by `scan_all`, `held_due` and `owed_emails`.
pub const READ_BATCH_MAX: usize = 500;

/// How the records behave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisRecordsConfig {
    /// Stream entries kept; a reader further behind gets `Invalid`.
    pub stream_retained_max: usize,
    /// How late the TTL service deletes an expired record, ms after its TTL.
    pub ttl_delay_ms: u64,
    /// The bug zoo's switches (`paid_keeps_ttl`: HELD→PAID keeps the TTL;
    /// `ignore_lost_redis_connection`: the pool reuses failed connections).
    pub bugs: Bugs,
}

impl Default for RedisRecordsConfig {
    fn default() -> RedisRecordsConfig {
        RedisRecordsConfig {
            stream_retained_max: STREAM_RETAINED_MAX,
            ttl_delay_ms: 0,
            bugs: Bugs::default(),
        }
    }
}

/// Why [`RedisRecords::connect`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The pool could not be built (size 0, not a Redis URL, settings).
    #[error("cannot build the connection pool: {0}")]
    Pool(#[from] PoolError),
    /// The server did not answer, or refused the scripts.
    #[error("redis did not take the records' scripts: {0}")]
    Unavailable(String),
}

/// The keys of one sale's records, but the per-candidate hash.
#[derive(Debug, Clone)]
struct Keys {
    prefix: KeyPrefix,
    sale: SaleId,
    payments: String,
    held: String,
    ttl: String,
    all: String,
    stream: String,
    seq: String,
    owed: String,
}

impl Keys {
    fn new(prefix: &KeyPrefix, sale: &SaleId) -> Keys {
        let key = |name: &str| sale_key(prefix, sale, name);
        Keys {
            prefix: prefix.clone(),
            sale: sale.clone(),
            payments: key("records:payments"),
            held: key("records:held"),
            ttl: key("records:ttl"),
            all: key("records:all"),
            stream: key("records:stream"),
            seq: key("records:seq"),
            owed: key("records:owed"),
        }
    }

    fn record(&self, candidate: &str) -> String {
        sale_key(&self.prefix, &self.sale, &format!("rec:{candidate}"))
    }
}

/// One sale's booking records and their change stream on Redis.
pub struct RedisRecords {
    pool: Pool,
    keys: Keys,
    scripts: Scripts,
    clock: Arc<dyn Clock>,
    config: RedisRecordsConfig,
}

impl std::fmt::Debug for RedisRecords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let status = self.pool.status();
        f.debug_struct("RedisRecords")
            .field("stream", &self.keys.stream)
            .field("pool_size_max", &status.max_size)
            .field("pool_size", &status.size)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// A Redis failure as the port's error: a script's `INVALID` refusal is a
/// programmer error, everything else (I/O, timeouts, server trouble) leaves
/// the store unavailable.
fn record_error(e: RedisError) -> RecordError {
    match e.code() {
        Some("INVALID") => RecordError::Invalid(e.detail().unwrap_or("").trim().to_owned()),
        _ => RecordError::Unavailable(e.to_string()),
    }
}

fn corrupt(why: String) -> RecordError {
    RecordError::Unavailable(format!("corrupt record in redis: {why}"))
}

/// The condition as the scripts' three arguments.
fn condition_args(c: &Condition) -> [&str; 3] {
    match c {
        Condition::NotExists => ["not_exists", "", ""],
        Condition::StatusIsWithPayment(s, p) => ["status_payment", status_text(*s), p.as_str()],
        Condition::PaymentIs(p) => ["payment", "", p.as_str()],
    }
}

/// A write script's answer: `OK` and the record it wrote (or deleted), or a
/// failed condition with the current record.
fn answer(reply: Vec<String>) -> Result<BookingRecord, RecordError> {
    match reply.as_slice() {
        [ok, json] if ok == "OK" => from_json(json).map_err(corrupt),
        [failed] if failed == "FAILED" => Err(RecordError::condition_failed(None)),
        [failed, json] if failed == "FAILED" => Err(RecordError::condition_failed(Some(
            from_json(json).map_err(corrupt)?,
        ))),
        other => Err(corrupt(format!("unexpected script answer {other:?}"))),
    }
}

/// One stream entry (`XRANGE`'s id and field/value pairs) as the port's record.
fn stream_record(id: &str, fields: &[String]) -> Result<StreamRecord, String> {
    let sequence = id
        .strip_suffix("-0")
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("stream id {id:?} is not <sequence>-0"))?;
    let map: HashMap<&str, &str> = fields
        .chunks_exact(2)
        .map(|kv| (kv[0].as_str(), kv[1].as_str()))
        .collect();
    let kind = match map.get("kind").copied() {
        Some("INSERT") => StreamKind::Insert,
        Some("MODIFY") => StreamKind::Modify,
        Some("REMOVE") => StreamKind::Remove,
        other => return Err(format!("stream entry {id} of kind {other:?}")),
    };
    let image = |name: &str| map.get(name).map(|json| from_json(json)).transpose();
    let at_ms = map
        .get("at")
        .and_then(|at| at.parse().ok())
        .ok_or_else(|| format!("stream entry {id} without its time"))?;
    Ok(StreamRecord {
        kind,
        old: image("old")?,
        new: image("new")?,
        user_identity: match map.get("who").copied() {
            None => None,
            Some("ttl") => Some(UserIdentity::ttl_service()),
            Some(other) => return Err(format!("stream entry {id} by {other:?}")),
        },
        sequence,
        at_ms,
    })
}

/// The latest `expires_at_s` the TTL service deletes at `now_ms`, `delay_ms`
/// late (`None`: nothing yet): `expires_at_s * 1000 + delay_ms <= now_ms`.
pub fn ttl_cutoff_s(now_ms: u64, delay_ms: u64) -> Option<u64> {
    now_ms.checked_sub(delay_ms).map(|due| due / 1_000)
}

/// The sequence every entry up to which the stream no longer holds, from its
/// first retained entry's sequence (`None`: the stream is empty) and the last
/// sequence written.
fn trimmed_through(first: Option<u64>, last: u64) -> u64 {
    first.map_or(last, |f| f.saturating_sub(1))
}

impl RedisRecords {
    /// Connects with a pool of at most `pool_size` connections, for sale
    /// `sale`'s records under `prefix`. Loads every script once, so a wrong
    /// URL or a server that refuses scripts fails here.
    pub async fn connect(
        url: &str,
        pool_size: usize,
        prefix: &KeyPrefix,
        sale: &SaleId,
        clock: Arc<dyn Clock>,
        config: RedisRecordsConfig,
    ) -> Result<RedisRecords, ConnectError> {
        // the zoo's `ignore_lost_redis_connection` lives in the pool
        let options = booking_redis::pool::PoolOptions::from_bugs(&config.bugs);
        let pool = booking_redis::pool::build_with(url, pool_size, options)?;
        let records = RedisRecords {
            pool,
            keys: Keys::new(prefix, sale),
            scripts: Scripts::new(),
            clock,
            config,
        };
        {
            let mut conn = records
                .conn()
                .await
                .map_err(|e| ConnectError::Unavailable(e.to_string()))?;
            for script in records.scripts.all() {
                script
                    .prepare_invoke()
                    .load_async(&mut *conn)
                    .await
                    .map_err(|e| ConnectError::Unavailable(e.to_string()))?;
            }
        }
        Ok(records)
    }

    /// Opens up to `n` pooled connections now (at most the pool size);
    /// returns how many are open.
    pub async fn warm(&self, n: usize) -> usize {
        booking_redis::pool::warm(&self.pool, n).await
    }

    /// The connection pool (its figures go to `/metrics`).
    pub fn pool(&self) -> &booking_redis::pool::Pool {
        &self.pool
    }

    /// The configuration.
    pub fn config(&self) -> &RedisRecordsConfig {
        &self.config
    }

    /// The TTL service: deletes up to `limit` records whose TTL
    /// (`expires_at_s`, plus `ttl_delay_ms`) has passed, earliest first, each
    /// with a REMOVE stream record carrying [`UserIdentity::ttl_service`];
    /// returns them. A PAID record carries no TTL and is never deleted (but
    /// under the zoo's `paid_keeps_ttl`, as in DynamoDB). Run by one leader at
    /// a time (the server holds a lock); safe if two run anyway: each delete
    /// is a script that checks the TTL again.
    pub async fn sweep_ttl(&self, limit: usize) -> Result<Vec<BookingRecord>, RecordError> {
        let Some(cutoff) = ttl_cutoff_s(self.clock.now_ms(), self.config.ttl_delay_ms) else {
            return Ok(Vec::new());
        };
        if limit == 0 {
            return Ok(Vec::new());
        }
        let due: Vec<String> = {
            let mut conn = self.conn().await?;
            redis::cmd("ZRANGEBYSCORE")
                .arg(&self.keys.ttl)
                .arg("-inf")
                .arg(cutoff)
                .arg("LIMIT")
                .arg(0)
                .arg(limit)
                .query_async(&mut *conn)
                .await
                .map_err(record_error)?
        };
        let mut deleted = Vec::with_capacity(due.len());
        for candidate in due {
            let mut call = self.write(&self.scripts.ttl_delete, &candidate);
            call.arg(cutoff);
            match self.run(&call).await {
                Ok(record) => deleted.push(record),
                // paid, extended or deleted since it was listed
                Err(RecordError::ConditionFailed { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        if !deleted.is_empty() {
            tracing::debug!(deleted = deleted.len(), "TTL sweep");
        }
        Ok(deleted)
    }

    async fn conn(&self) -> Result<impl std::ops::DerefMut<Target = Connection>, RecordError> {
        self.pool
            .get()
            .await
            .map_err(|e| RecordError::Unavailable(format!("no redis connection: {e}")))
    }

    /// A write script on `candidate`'s record: its eight keys and first three
    /// arguments (candidate, now, stream entries kept).
    fn write<'a>(&self, script: &'a Script, candidate: &str) -> ScriptInvocation<'a> {
        let mut call = script.prepare_invoke();
        call.key(self.keys.record(candidate))
            .key(&self.keys.payments)
            .key(&self.keys.held)
            .key(&self.keys.ttl)
            .key(&self.keys.all)
            .key(&self.keys.stream)
            .key(&self.keys.seq)
            .key(&self.keys.owed)
            .arg(candidate)
            .arg(self.clock.now_ms())
            .arg(self.config.stream_retained_max.max(1));
        call
    }

    async fn run(&self, call: &ScriptInvocation<'_>) -> Result<BookingRecord, RecordError> {
        let mut conn = self.conn().await?;
        let reply: Vec<String> = call.invoke_async(&mut *conn).await.map_err(record_error)?;
        answer(reply)
    }

    /// A guarded update of a record HELD with `payment` (`note` or `clear`
    /// its failed queries).
    async fn query_failures(
        &self,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
        mode: &str,
    ) -> Result<BookingRecord, RecordError> {
        let mut call = self.write(&self.scripts.query_failures, candidate.as_str());
        call.arg(payment_id.as_str()).arg(mode);
        self.run(&call).await
    }

    /// An index query: the candidates of the sorted set `index` scored
    /// strictly before `before` (at most `limit`), their records read in
    /// one round trip, those `keep` still takes (a record may have moved on
    /// since the index was read), in `order`.
    async fn indexed(
        &self,
        index: &str,
        before: u64,
        limit: usize,
        keep: impl Fn(&BookingRecord) -> bool,
        order: fn(&mut [BookingRecord]),
    ) -> Result<Vec<BookingRecord>, RecordError> {
        if limit == 0 || before == 0 {
            return Ok(Vec::new());
        }
        // strictly before: the exclusive bound `(<before>`
        let candidates: Vec<String> = {
            let mut conn = self.conn().await?;
            redis::cmd("ZRANGEBYSCORE")
                .arg(index)
                .arg("-inf")
                .arg(format!("({before}"))
                .arg("LIMIT")
                .arg(0)
                .arg(i64::try_from(limit).unwrap_or(i64::MAX))
                .query_async(&mut *conn)
                .await
                .map_err(record_error)?
        };
        let mut found: Vec<BookingRecord> = self
            .records_of(&candidates)
            .await?
            .into_iter()
            .filter(|r| keep(r))
            .collect();
        order(&mut found);
        Ok(found)
    }

    /// The next page of candidates by name: at most [`READ_BATCH_MAX`]
    /// after `after` (from the first when `None`), by `ZRANGEBYLEX`, so a
    /// record deleted meanwhile shifts no page.
    async fn candidates_after(
        &self,
        conn: &mut Connection,
        after: Option<&str>,
    ) -> Result<Vec<String>, RecordError> {
        redis::cmd("ZRANGEBYLEX")
            .arg(&self.keys.all)
            .arg(after.map_or_else(|| "-".to_owned(), |c| format!("({c}")))
            .arg("+")
            .arg("LIMIT")
            .arg(0)
            .arg(READ_BATCH_MAX)
            .query_async(conn)
            .await
            .map_err(record_error)
    }

    /// The records of these candidates, read in batches (`HGETALL` each, one
    /// round trip per batch); absent ones are left out.
    async fn records_of(&self, candidates: &[String]) -> Result<Vec<BookingRecord>, RecordError> {
        let mut records = Vec::with_capacity(candidates.len());
        for batch in candidates.chunks(READ_BATCH_MAX) {
            let mut pipe = redis::pipe();
            for c in batch {
                pipe.cmd("HGETALL").arg(self.keys.record(c));
            }
            let maps: Vec<HashMap<String, String>> = {
                let mut conn = self.conn().await?;
                pipe.query_async(&mut *conn).await.map_err(record_error)?
            };
            for map in maps.iter().filter(|m| !m.is_empty()) {
                records.push(from_fields(map).map_err(corrupt)?);
            }
        }
        Ok(records)
    }

    /// One look at the stream, in one `MULTI`: the first retained entry, the
    /// last sequence written, and up to `limit` entries after `after`.
    async fn stream_batch(
        &self,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StreamRecord>, RecordError> {
        type Entries = Vec<(String, Vec<String>)>;
        let start = format!("{}-0", after.saturating_add(1));
        let (first, last, entries): (Entries, Option<u64>, Entries) = {
            let mut conn = self.conn().await?;
            redis::pipe()
                .atomic()
                .cmd("XRANGE")
                .arg(&self.keys.stream)
                .arg("-")
                .arg("+")
                .arg("COUNT")
                .arg(1)
                .cmd("GET")
                .arg(&self.keys.seq)
                .cmd("XRANGE")
                .arg(&self.keys.stream)
                .arg(&start)
                .arg("+")
                .arg("COUNT")
                .arg(limit)
                .query_async(&mut *conn)
                .await
                .map_err(record_error)?
        };
        let first = match first.first() {
            None => None,
            Some((id, fields)) => Some(stream_record(id, fields).map_err(corrupt)?.sequence),
        };
        let trimmed = trimmed_through(first, last.unwrap_or(0));
        if after < trimmed {
            return Err(RecordError::Invalid(format!(
                "stream trimmed through {trimmed}, read after {after}: records lost"
            )));
        }
        entries
            .iter()
            .map(|(id, fields)| stream_record(id, fields).map_err(corrupt))
            .collect()
    }
}

#[async_trait]
impl RecordStore for RedisRecords {
    async fn put(&self, record: BookingRecord, condition: Condition) -> Result<(), RecordError> {
        // asserted before the write: a PAID record with a TTL never lands
        record.check().map_err(RecordError::Invalid)?;
        let mut call = self.write(&self.scripts.put, record.candidate.as_str());
        call.arg(&condition_args(&condition)[..]);
        for (name, value) in to_fields(&record) {
            call.arg(name).arg(value);
        }
        self.run(&call).await.map(drop)
    }

    async fn mark_paid(
        &self,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
        path: ConfirmPath,
        now_ms: u64,
    ) -> Result<BookingRecord, RecordError> {
        // the zoo's bug: the update without `REMOVE expiresAt`
        let keep_ttl = self.config.bugs.on(Bug::PaidKeepsTtl);
        let mut call = self.write(&self.scripts.mark_paid, candidate.as_str());
        call.arg(payment_id.as_str())
            .arg(path_text(path))
            .arg(now_ms)
            .arg(if keep_ttl { "1" } else { "0" });
        self.run(&call).await
    }

    async fn mark_emailed(
        &self,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
    ) -> Result<BookingRecord, RecordError> {
        let mut call = self.write(&self.scripts.mark_emailed, candidate.as_str());
        call.arg(payment_id.as_str());
        self.run(&call).await
    }

    async fn extend(
        &self,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
        deadline_ms: u64,
    ) -> Result<BookingRecord, RecordError> {
        let mut call = self.write(&self.scripts.extend, candidate.as_str());
        call.arg(payment_id.as_str())
            .arg(deadline_ms)
            .arg(ttl_for_deadline(deadline_ms));
        self.run(&call).await
    }

    async fn note_query_failure(
        &self,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
    ) -> Result<BookingRecord, RecordError> {
        self.query_failures(candidate, payment_id, "note").await
    }

    async fn clear_query_failures(
        &self,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
    ) -> Result<BookingRecord, RecordError> {
        self.query_failures(candidate, payment_id, "clear").await
    }

    async fn delete(
        &self,
        candidate: &CandidateHash,
        condition: Condition,
    ) -> Result<BookingRecord, RecordError> {
        if condition == Condition::NotExists {
            return Err(RecordError::Invalid(
                "delete needs a condition on the existing record".into(),
            ));
        }
        let mut call = self.write(&self.scripts.delete, candidate.as_str());
        call.arg(&condition_args(&condition)[..]);
        self.run(&call).await
    }

    /// Always consistent: Redis has one copy to read (`consistent` is moot).
    async fn get(
        &self,
        candidate: &CandidateHash,
        _consistent: bool,
    ) -> Result<Option<BookingRecord>, RecordError> {
        let mut conn = self.conn().await?;
        let map: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(self.keys.record(candidate.as_str()))
            .query_async(&mut *conn)
            .await
            .map_err(record_error)?;
        if map.is_empty() {
            return Ok(None);
        }
        from_fields(&map).map(Some).map_err(corrupt)
    }

    async fn by_payment(
        &self,
        payment_id: &PaymentId,
    ) -> Result<Option<BookingRecord>, RecordError> {
        let candidate: Option<String> = {
            let mut conn = self.conn().await?;
            redis::cmd("HGET")
                .arg(&self.keys.payments)
                .arg(payment_id.as_str())
                .query_async(&mut *conn)
                .await
                .map_err(record_error)?
        };
        let Some(candidate) = candidate else {
            return Ok(None);
        };
        // the record may have moved on between the two reads
        Ok(self
            .records_of(&[candidate])
            .await?
            .into_iter()
            .find(|r| r.payment_id == *payment_id))
    }

    async fn held_due(
        &self,
        deadline_before_ms: u64,
        limit: usize,
    ) -> Result<Vec<BookingRecord>, RecordError> {
        self.indexed(
            &self.keys.held,
            deadline_before_ms,
            limit,
            |r| r.is_held_due(deadline_before_ms),
            sort_by_deadline,
        )
        .await
    }

    async fn owed_emails(
        &self,
        paid_before_ms: u64,
        limit: usize,
    ) -> Result<Vec<BookingRecord>, RecordError> {
        self.indexed(
            &self.keys.owed,
            paid_before_ms,
            limit,
            |r| r.owes_email(paid_before_ms),
            sort_by_paid,
        )
        .await
    }

    /// Pages through the candidates by name (`ZRANGEBYLEX` after the last
    /// one seen, so a record deleted meanwhile shifts no page), reading each
    /// page's records in one round trip.
    async fn scan_all(&self) -> Result<Vec<BookingRecord>, RecordError> {
        let mut records = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = {
                let mut conn = self.conn().await?;
                self.candidates_after(&mut conn, after.as_deref()).await?
            };
            records.extend(self.records_of(&page).await?);
            if page.len() < READ_BATCH_MAX {
                return Ok(records);
            }
            after = page.last().cloned();
        }
    }

    /// Pages through the candidates by name as `scan_all` does; each page is
    /// one pipeline of `lua/sale_delete.lua` calls, one per candidate (each
    /// its own atomic script, given all its keys: cluster-safe), which
    /// delete the records of `sale` with their index entries and stream an
    /// application REMOVE for each. Logs its progress per page.
    async fn delete_sale(&self, sale: &SaleId) -> Result<u64, RecordError> {
        let script = &self.scripts.sale_delete;
        let mut removed = 0u64;
        let mut after: Option<String> = None;
        loop {
            let mut conn = self.conn().await?;
            let page = self.candidates_after(&mut conn, after.as_deref()).await?;
            if page.is_empty() {
                return Ok(removed);
            }
            // a server that lost its scripts gets this one again first
            script
                .prepare_invoke()
                .load_async(&mut *conn)
                .await
                .map_err(record_error)?;
            let now_ms = self.clock.now_ms();
            let mut pipe = redis::pipe();
            for c in &page {
                pipe.cmd("EVALSHA")
                    .arg(script.get_hash())
                    .arg(8)
                    .arg(self.keys.record(c))
                    .arg(&self.keys.payments)
                    .arg(&self.keys.held)
                    .arg(&self.keys.ttl)
                    .arg(&self.keys.all)
                    .arg(&self.keys.stream)
                    .arg(&self.keys.seq)
                    .arg(&self.keys.owed)
                    .arg(c)
                    .arg(now_ms)
                    .arg(self.config.stream_retained_max.max(1))
                    .arg(sale.as_str());
            }
            let replies: Vec<Vec<String>> =
                pipe.query_async(&mut *conn).await.map_err(record_error)?;
            drop(conn);
            removed += replies
                .iter()
                .filter(|r| r.first().is_some_and(|ok| ok == "OK"))
                .count() as u64;
            tracing::info!(%sale, removed, "deleting the sale's records");
            if page.len() < READ_BATCH_MAX {
                return Ok(removed);
            }
            after = page.last().cloned();
        }
    }

    /// Always zero: Redis does not throttle (an overloaded server is slow,
    /// and a call past the response timeout is `Unavailable`).
    async fn throttles(&self) -> Result<Throttles, RecordError> {
        Ok(Throttles::default())
    }
}

/// Reads wait by polling every [`STREAM_POLL_INTERVAL`] rather than with
/// `XREAD BLOCK`: a blocking command would hold a multiplexed pooled
/// connection (and every call queued behind it) for the whole wait, or need
/// a dedicated connection per waiting reader; each look is one atomic
/// `MULTI` that also tells a trimmed position from an empty one, which
/// `XREAD` cannot. An idle reader costs 50 cheap round trips a second.
#[async_trait]
impl ChangeStream for RedisRecords {
    async fn read(
        &self,
        after_sequence: u64,
        limit: usize,
        wait: Duration,
    ) -> Result<Vec<StreamRecord>, RecordError> {
        if limit == 0 {
            return Err(RecordError::Invalid("a stream read of 0 records".into()));
        }
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let batch = self.stream_batch(after_sequence, limit).await?;
            if !batch.is_empty() {
                return Ok(batch);
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(batch);
            }
            tokio::time::sleep(STREAM_POLL_INTERVAL.min(deadline - now)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ttl_service_deletes_only_whole_seconds_past_its_delay() {
        assert_eq!(ttl_cutoff_s(1_700_000_600_999, 0), Some(1_700_000_600));
        assert_eq!(ttl_cutoff_s(1_700_000_630_000, 30_000), Some(1_700_000_600));
        assert_eq!(ttl_cutoff_s(1_700_000_629_999, 30_000), Some(1_700_000_599));
        assert_eq!(ttl_cutoff_s(10, 30_000), None);
    }

    #[test]
    fn a_stream_is_trimmed_through_the_entry_before_its_first() {
        assert_eq!(trimmed_through(None, 0), 0, "never written");
        assert_eq!(trimmed_through(Some(1), 5), 0, "nothing trimmed");
        assert_eq!(trimmed_through(Some(4), 5), 3);
        assert_eq!(trimmed_through(None, 5), 5, "every entry trimmed");
    }

    #[test]
    fn stream_entries_decode_with_their_identity() {
        let entry = |who: Option<&str>| {
            let mut f: Vec<String> = ["kind", "REMOVE", "at", "17"].map(str::to_owned).to_vec();
            if let Some(w) = who {
                f.extend(["who".to_owned(), w.to_owned()]);
            }
            f
        };
        let ttl = stream_record("7-0", &entry(Some("ttl"))).unwrap_or_else(|e| panic!("{e}"));
        assert!(ttl.is_ttl_removal());
        assert_eq!((ttl.sequence, ttl.at_ms), (7, 17));
        let app = stream_record("8-0", &entry(None)).unwrap_or_else(|e| panic!("{e}"));
        assert!(!app.is_ttl_removal());
        assert!(stream_record("8-1", &entry(None)).is_err());
        assert!(stream_record("9-0", &entry(Some("someone"))).is_err());
    }

    #[test]
    fn a_script_refusal_is_invalid_and_anything_else_unavailable() {
        let refused = redis::make_extension_error(
            "INVALID".to_owned(),
            Some("deadline before creation".to_owned()),
        );
        let e = record_error(refused);
        assert_eq!(e, RecordError::Invalid("deadline before creation".into()));
        let io = RedisError::from(std::io::Error::other("reset"));
        assert!(matches!(record_error(io), RecordError::Unavailable(_)));
    }
}
