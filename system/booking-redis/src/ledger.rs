//! [`RedisLedger`]: the seat ledger on Redis. Every change is one Lua script
//! (`src/lua/*.lua`); the two multi-key reads (`counters`,
//! `stale_pending`) are scripts too, so they see one moment; `hold` and `paid`
//! are single `HGET`s.

use std::time::Duration;

use async_trait::async_trait;
use booking::ledger::{
    Admission, Counters, Hold, HoldState, Ledger, LedgerError, LevelCount, Step,
};
use booking::{CandidateHash, Level, PaymentId, RequestToken, SaleId};
use redis::{ErrorKind, RedisError, ScriptInvocation, Value};

use crate::codec::{read_hold, read_paid};
use crate::keys::{InvalidKeyPrefix, KeyPrefix, SaleKeys};
use crate::pool::Pool;
use crate::scripts::Scripts;

/// A request waits at most this long for a free pooled connection; past it the
/// ledger is unavailable and the request answers "busy, try again" well
/// within its own deadline instead of queueing behind a burst.
pub const POOL_WAIT_MAX: Duration = Duration::from_secs(2);
/// Opening one connection (TCP + handshake) may take this long.
pub const CONNECT_MAX: Duration = Duration::from_secs(2);
/// One command or script may take this long to answer; past it the
/// connection is dropped and the call is `Unavailable` (its effect unknown).
pub const RESPONSE_MAX: Duration = Duration::from_secs(1);
/// Checking an idle pooled connection before reuse (a `PING`) may take this
/// long.
pub const RECYCLE_MAX: Duration = Duration::from_secs(1);
/// Candidates per `load_candidates` script call: each call is atomic, and a
/// bounded batch keeps one script from blocking the server (and Lua's
/// argument stack) when a list of a million is loaded.
pub const LOAD_BATCH_MAX: usize = 1_000;

/// Why [`RedisLedger::connect`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The key prefix would break the key layout.
    #[error(transparent)]
    KeyPrefix(#[from] InvalidKeyPrefix),
    /// A pool needs at least one connection.
    #[error("pool size must be at least 1")]
    PoolSize,
    /// The URL is not a Redis URL.
    #[error("invalid redis url: {0}")]
    Url(String),
    /// The pool could not be built.
    #[error("cannot build the connection pool: {0}")]
    Pool(String),
    /// The server did not answer, or refused the scripts.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// The seat ledger on Redis, through a pool of connections.
pub struct RedisLedger {
    pool: Pool,
    prefix: KeyPrefix,
    scripts: Scripts,
}

impl std::fmt::Debug for RedisLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let status = self.pool.status();
        f.debug_struct("RedisLedger")
            .field("prefix", &self.prefix.as_str())
            .field("pool_size_max", &status.max_size)
            .field("pool_size", &status.size)
            .finish_non_exhaustive()
    }
}

impl RedisLedger {
    /// Connects with a pool of at most `pool_size` connections (production
    /// uses [`booking::settings::REDIS_POOL_SIZE`], the article's 300) and
    /// keys under `key_prefix`. Loads every script once, so a wrong URL or a
    /// server that refuses scripts fails here, not on the first admission.
    pub async fn connect(
        url: &str,
        pool_size: usize,
        key_prefix: &str,
    ) -> Result<RedisLedger, ConnectError> {
        RedisLedger::connect_with(url, pool_size, key_prefix, &booking::Bugs::none()).await
    }

    /// [`RedisLedger::connect`] with the bug zoo's switches: the pool reads
    /// `ignore_lost_redis_connection` ([`crate::pool::PoolOptions::from_bugs`]).
    pub async fn connect_with(
        url: &str,
        pool_size: usize,
        key_prefix: &str,
        bugs: &booking::Bugs,
    ) -> Result<RedisLedger, ConnectError> {
        let prefix = KeyPrefix::parse(key_prefix)?;
        let options = crate::pool::PoolOptions::from_bugs(bugs);
        let pool = crate::pool::build_with(url, pool_size, options).map_err(|e| match e {
            crate::pool::PoolError::Size => ConnectError::PoolSize,
            crate::pool::PoolError::Url(why) => ConnectError::Url(why),
            crate::pool::PoolError::Build(why) => ConnectError::Pool(why),
        })?;
        let ledger = RedisLedger {
            pool,
            prefix,
            scripts: Scripts::new(),
        };
        let mut conn = ledger.conn().await?;
        for script in ledger.scripts.all() {
            script
                .prepare_invoke()
                .load_async(&mut *conn)
                .await
                .map_err(ledger_error)?;
        }
        Ok(ledger)
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

    /// [`RedisLedger::connect`] with the article's pool size.
    pub async fn connect_default(url: &str, key_prefix: &str) -> Result<RedisLedger, ConnectError> {
        RedisLedger::connect(url, booking::settings::REDIS_POOL_SIZE, key_prefix).await
    }

    /// The key prefix.
    pub fn key_prefix(&self) -> &str {
        self.prefix.as_str()
    }

    fn keys(&self, sale: &SaleId) -> SaleKeys {
        SaleKeys::new(&self.prefix, sale)
    }

    async fn conn(&self) -> Result<crate::pool::Object, LedgerError> {
        self.pool
            .get()
            .await
            .map_err(|e| LedgerError::Unavailable(format!("no redis connection: {e}")))
    }

    /// A script call on one sale: its eight keys, no arguments yet.
    fn call<'a>(&self, script: &'a redis::Script, sale: &SaleId) -> ScriptInvocation<'a> {
        let mut invocation = script.prepare_invoke();
        for key in self.keys(sale).all() {
            invocation.key(key);
        }
        invocation
    }

    async fn run(&self, invocation: &ScriptInvocation<'_>) -> Result<Value, LedgerError> {
        let mut conn = self.conn().await?;
        invocation
            .invoke_async(&mut *conn)
            .await
            .map_err(ledger_error)
    }

    async fn step(&self, invocation: &ScriptInvocation<'_>) -> Result<Step, LedgerError> {
        step_answer(self.run(invocation).await?)
    }

    /// An undo script's step (`undo_admission`, `release`): its `UNDERFLOW`
    /// refusal is [`LedgerError::CounterUnderflow`] of `candidate`, logged at
    /// error level.
    async fn undo(
        &self,
        invocation: &ScriptInvocation<'_>,
        candidate: &CandidateHash,
    ) -> Result<Step, LedgerError> {
        let mut conn = self.conn().await?;
        match invocation.invoke_async(&mut *conn).await {
            Ok(answer) => step_answer(answer),
            Err(e) => {
                let error = underflow(&e, candidate).unwrap_or_else(|| ledger_error(e));
                if matches!(error, LedgerError::CounterUnderflow { .. }) {
                    tracing::error!(error = %error, "corrupt ledger: an undo would take a counter below zero");
                }
                Err(error)
            }
        }
    }

    async fn hget(
        &self,
        key: &str,
        candidate: &CandidateHash,
    ) -> Result<Option<String>, LedgerError> {
        let mut conn = self.conn().await?;
        redis::cmd("HGET")
            .arg(key)
            .arg(candidate.as_str())
            .query_async(&mut *conn)
            .await
            .map_err(ledger_error)
    }
}

#[async_trait]
impl Ledger for RedisLedger {
    async fn reset(&self, sale: &SaleId, levels: &[(Level, u32)]) -> Result<(), LedgerError> {
        let mut call = self.call(&self.scripts.reset, sale);
        for (level, cap) in levels {
            call.arg(level.as_str()).arg(*cap);
        }
        self.run(&call).await.map(drop)
    }

    async fn load_candidates(
        &self,
        sale: &SaleId,
        candidates: &[CandidateHash],
    ) -> Result<u64, LedgerError> {
        let mut new = 0;
        for batch in candidates.chunks(LOAD_BATCH_MAX) {
            let mut call = self.call(&self.scripts.load_candidates, sale);
            for candidate in batch {
                call.arg(candidate.as_str());
            }
            new += count(self.run(&call).await?)?;
        }
        Ok(new)
    }

    async fn set_open(&self, sale: &SaleId, open: bool) -> Result<(), LedgerError> {
        let mut call = self.call(&self.scripts.set_open, sale);
        call.arg(if open { "1" } else { "0" });
        self.run(&call).await.map(drop)
    }

    async fn admit(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        level: &Level,
        token: &RequestToken,
        now_ms: u64,
    ) -> Result<Admission, LedgerError> {
        let mut call = self.call(&self.scripts.admit, sale);
        call.arg(candidate.as_str())
            .arg(level.as_str())
            .arg(token.as_str())
            .arg(now_ms);
        let answer = array(self.run(&call).await?)?;
        let mut answer = answer.into_iter();
        let outcome = text(answer.next().unwrap_or(Value::Nil))?;
        let detail = answer.next();
        let admission = match (outcome.as_str(), detail) {
            ("admitted", Some(n)) => Admission::Admitted {
                count: u32::try_from(count(n)?)
                    .map_err(|_| LedgerError::Corrupt("count above u32".into()))?,
            },
            ("closed", None) => Admission::SaleClosed,
            ("unknown_level", None) => Admission::UnknownLevel,
            ("not_eligible", None) => Admission::NotEligible,
            ("paid", Some(raw)) => Admission::AlreadyPaid {
                payment_id: read_paid(&text(raw)?)?.1,
            },
            ("holding", Some(raw)) => Admission::AlreadyHolding {
                hold: read_hold(&text(raw)?)?,
            },
            ("full", None) => Admission::LevelFull,
            (other, _) => {
                return Err(LedgerError::Corrupt(format!(
                    "unexpected admission answer {other:?}"
                )));
            }
        };
        Ok(admission)
    }

    async fn attach_payment(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        token: &RequestToken,
        payment_id: &PaymentId,
        deadline_ms: u64,
    ) -> Result<Step, LedgerError> {
        let mut call = self.call(&self.scripts.attach_payment, sale);
        call.arg(candidate.as_str())
            .arg(token.as_str())
            .arg(payment_id.as_str())
            .arg(deadline_ms);
        self.step(&call).await
    }

    async fn undo_admission(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        token: &RequestToken,
    ) -> Result<Step, LedgerError> {
        let mut call = self.call(&self.scripts.undo_admission, sale);
        call.arg(candidate.as_str()).arg(token.as_str());
        self.undo(&call, candidate).await
    }

    async fn release(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
    ) -> Result<Step, LedgerError> {
        let mut call = self.call(&self.scripts.release, sale);
        call.arg(candidate.as_str()).arg(payment_id.as_str());
        self.undo(&call, candidate).await
    }

    async fn mark_paid(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
    ) -> Result<Step, LedgerError> {
        let mut call = self.call(&self.scripts.mark_paid, sale);
        call.arg(candidate.as_str()).arg(payment_id.as_str());
        self.step(&call).await
    }

    async fn extend(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
        deadline_ms: u64,
    ) -> Result<Step, LedgerError> {
        let mut call = self.call(&self.scripts.extend, sale);
        call.arg(candidate.as_str())
            .arg(payment_id.as_str())
            .arg(deadline_ms);
        self.step(&call).await
    }

    async fn hold(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
    ) -> Result<Option<Hold>, LedgerError> {
        self.hget(self.keys(sale).holds(), candidate)
            .await?
            .map(|raw| read_hold(&raw))
            .transpose()
    }

    async fn paid(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
    ) -> Result<Option<PaymentId>, LedgerError> {
        Ok(self
            .hget(self.keys(sale).paid(), candidate)
            .await?
            .map(|raw| read_paid(&raw))
            .transpose()?
            .map(|(_, payment_id)| payment_id))
    }

    async fn stale_pending(
        &self,
        sale: &SaleId,
        admitted_before_ms: u64,
        limit: usize,
    ) -> Result<Vec<(CandidateHash, Hold)>, LedgerError> {
        if limit == 0 {
            // `LIMIT 0 0` would mean the same, but say it without a round trip
            return Ok(Vec::new());
        }
        let mut call = self.call(&self.scripts.stale_pending, sale);
        call.arg(admitted_before_ms)
            .arg(i64::try_from(limit).unwrap_or(i64::MAX));
        let flat = array(self.run(&call).await?)?;
        if flat.len() % 2 != 0 || flat.len() / 2 > limit {
            return Err(LedgerError::Corrupt(format!(
                "stale pending answer of {} items for a limit of {limit}",
                flat.len()
            )));
        }
        let mut stale = Vec::with_capacity(flat.len() / 2);
        let mut flat = flat.into_iter();
        while let (Some(candidate), Some(hold)) = (flat.next(), flat.next()) {
            let candidate = text(candidate)?;
            let candidate = CandidateHash::parse(&candidate)
                .map_err(|_| LedgerError::Corrupt(format!("unreadable candidate {candidate:?}")))?;
            let hold = read_hold(&text(hold)?)?;
            // the pending set lists pending holds only: assert after the read
            match hold.state {
                HoldState::Pending { admitted_ms } if admitted_ms <= admitted_before_ms => {}
                _ => {
                    return Err(LedgerError::Corrupt(format!(
                        "pending set lists {candidate} whose hold is {hold:?}"
                    )));
                }
            }
            stale.push((candidate, hold));
        }
        Ok(stale)
    }

    async fn stale_held(
        &self,
        sale: &SaleId,
        deadline_before_ms: u64,
        limit: usize,
    ) -> Result<Vec<(CandidateHash, Hold)>, LedgerError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut call = self.call(&self.scripts.stale_held, sale);
        call.arg(deadline_before_ms)
            .arg(i64::try_from(limit).unwrap_or(i64::MAX));
        let flat = array(self.run(&call).await?)?;
        if flat.len() % 2 != 0 || flat.len() / 2 > limit {
            return Err(LedgerError::Corrupt(format!(
                "stale held answer of {} items for a limit of {limit}",
                flat.len()
            )));
        }
        let mut stale = Vec::with_capacity(flat.len() / 2);
        let mut flat = flat.into_iter();
        while let (Some(candidate), Some(hold)) = (flat.next(), flat.next()) {
            let candidate = text(candidate)?;
            let candidate = CandidateHash::parse(&candidate)
                .map_err(|_| LedgerError::Corrupt(format!("unreadable candidate {candidate:?}")))?;
            let hold = read_hold(&text(hold)?)?;
            // the held set lists held holds only: assert after the read
            match hold.state {
                HoldState::Held { deadline_ms, .. } if deadline_ms <= deadline_before_ms => {}
                _ => {
                    return Err(LedgerError::Corrupt(format!(
                        "held set lists {candidate} whose hold is {hold:?}"
                    )));
                }
            }
            stale.push((candidate, hold));
        }
        Ok(stale)
    }

    async fn counters(&self, sale: &SaleId) -> Result<Counters, LedgerError> {
        let call = self.call(&self.scripts.counters, sale);
        let answer = array(self.run(&call).await?)?;
        let [open, figures, paid] = <[Value; 3]>::try_from(answer)
            .map_err(|v| LedgerError::Corrupt(format!("unexpected counters answer {v:?}")))?;
        let open = count(open)? == 1;
        let figures = array(figures)?;
        if figures.len() % 4 != 0 {
            return Err(LedgerError::Corrupt(format!(
                "counters answer of {} figures",
                figures.len()
            )));
        }
        let mut levels = Vec::with_capacity(figures.len() / 4);
        let mut figures = figures.into_iter();
        while let (Some(level), Some(cap), Some(n), Some(peak)) = (
            figures.next(),
            figures.next(),
            figures.next(),
            figures.next(),
        ) {
            let level = text(level)?;
            let level = Level::parse(&level)
                .map_err(|_| LedgerError::Corrupt(format!("unreadable level {level:?}")))?;
            levels.push(LevelCount {
                level,
                cap: small(cap)?,
                count: small(n)?,
                peak: small(peak)?,
            });
        }
        // in level order, as the model's map
        levels.sort_by(|a, b| a.level.cmp(&b.level));
        Ok(Counters {
            open,
            levels,
            paid: count(paid)?,
        })
    }
}

/// A connection failure, timeout or server trouble is `Unavailable`; an answer
/// the adapter cannot read (or a script's `CORRUPT` refusal, an `UNDERFLOW`
/// one whose level does not parse, or a key of the wrong type) is `Corrupt`.
fn ledger_error(e: RedisError) -> LedgerError {
    match (e.kind(), e.code()) {
        (ErrorKind::Parse | ErrorKind::UnexpectedReturnType, _)
        | (_, Some("CORRUPT" | "WRONGTYPE" | "UNDERFLOW")) => LedgerError::Corrupt(e.to_string()),
        _ => LedgerError::Unavailable(e.to_string()),
    }
}

/// A guarded step's answer.
fn step_answer(v: Value) -> Result<Step, LedgerError> {
    let answer = text(v)?;
    match answer.as_str() {
        "done" => Ok(Step::Done),
        "no_match" => Ok(Step::NoMatch),
        "paid" => Ok(Step::Paid),
        _ => Err(LedgerError::Corrupt(format!(
            "unexpected step answer {answer:?}"
        ))),
    }
}

/// An undo script's `UNDERFLOW <level>` refusal as the corrupt ledger error;
/// `None` for any other error.
fn underflow(e: &RedisError, candidate: &CandidateHash) -> Option<LedgerError> {
    if e.code() != Some("UNDERFLOW") {
        return None;
    }
    let level = Level::parse(e.detail()?.trim()).ok()?;
    Some(LedgerError::CounterUnderflow {
        level,
        candidate: candidate.clone(),
    })
}

fn text(v: Value) -> Result<String, LedgerError> {
    match v {
        Value::BulkString(bytes) => String::from_utf8(bytes)
            .map_err(|e| LedgerError::Corrupt(format!("answer is not UTF-8: {e}"))),
        Value::SimpleString(s) | Value::VerbatimString { text: s, .. } => Ok(s),
        Value::Okay => Ok("OK".into()),
        other => Err(LedgerError::Corrupt(format!(
            "expected text, got {other:?}"
        ))),
    }
}

fn array(v: Value) -> Result<Vec<Value>, LedgerError> {
    match v {
        Value::Array(items) | Value::Set(items) => Ok(items),
        other => Err(LedgerError::Corrupt(format!(
            "expected an array, got {other:?}"
        ))),
    }
}

/// A count: an integer reply, or a decimal string from a hash, never negative.
fn count(v: Value) -> Result<u64, LedgerError> {
    let n = match v {
        Value::Int(n) => n,
        other => {
            let s = text(other)?;
            s.parse()
                .map_err(|_| LedgerError::Corrupt(format!("expected a number, got {s:?}")))?
        }
    };
    u64::try_from(n).map_err(|_| LedgerError::Corrupt(format!("negative count {n}")))
}

/// A cap or a level's count.
fn small(v: Value) -> Result<u32, LedgerError> {
    let n = count(v)?;
    u32::try_from(n).map_err(|_| LedgerError::Corrupt(format!("{n} is above u32")))
}
