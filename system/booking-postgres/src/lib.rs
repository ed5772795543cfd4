//! The back office on PostgreSQL.
//!
//! - [`MIGRATIONS`]: the schema, as numbered SQL files in `migrations/`,
//!   applied in order by [`BackOffice::migrate`] under an advisory lock (so
//!   several instances starting at once apply each exactly once), each in
//!   its own transaction with its row in `schema_migrations`.
//! - [`BackOffice::upsert_paid`]: one statement per record, insert or
//!   update, idempotent and order-proof: a replayed older image cannot take
//!   back an email flag (`email_sent` is OR-ed).
//! - [`SyncHandler`]: the stream handler that copies every PAID record
//!   ([`decide`] is its whole policy) and stops at the first failed upsert,
//!   which is what a partial-batch answer reports.
//!
//! Everything lives in one schema of the caller's choice (tests make their
//! own, uniquely named).

use std::sync::Arc;

use async_trait::async_trait;
use booking::records::{BookingRecord, RecordStatus, StreamRecord};
use booking::{PaymentId, SaleId};
use booking_streams::BatchHandler;
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;
use tokio_postgres::{Client, NoTls};

/// The migrations, in order: (version, name, SQL).
pub const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "paid_bookings",
        include_str!("../migrations/0001_paid_bookings.sql"),
    ),
    (
        2,
        "paid_bookings_by_sale_level",
        include_str!("../migrations/0002_paid_bookings_by_sale_level.sql"),
    ),
];

/// The schema when none is given.
pub const SCHEMA_DEFAULT: &str = "back_office";
/// The advisory lock every migrating instance takes (an arbitrary constant:
/// "sellout" in ASCII).
pub const MIGRATION_LOCK: i64 = 0x73_656c_6c6f_7574;

/// Why the back office could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum BackOfficeError {
    /// The database refused or failed.
    #[error("postgres: {0}")]
    Db(#[from] tokio_postgres::Error),
    /// A bad schema name or record.
    #[error("invalid: {0}")]
    Invalid(String),
}

/// A schema name: a lower-case SQL identifier, so it can be spliced in.
pub fn check_schema(schema: &str) -> Result<(), BackOfficeError> {
    let ok = !schema.is_empty()
        && schema.len() <= 63
        && schema
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && schema
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(BackOfficeError::Invalid(format!(
            "schema {schema:?}: 1..=63 of [a-z0-9_], not starting with a digit"
        )))
    }
}

/// One row of `paid_bookings`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaidRow {
    /// The payment.
    pub payment_id: String,
    /// The sale.
    pub sale: String,
    /// The candidate hash.
    pub candidate: String,
    /// The level.
    pub level: String,
    /// When paid, ms.
    pub paid_ms: u64,
    /// Which confirm path.
    pub paid_by: String,
    /// Whether the email went out.
    pub email_sent: bool,
}

/// What the sync handler does with one stream record (pure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyncAction {
    /// The record is PAID after the change: copy it.
    Upsert(BookingRecord),
    /// Anything else (holds, deletions of holds).
    Ignore,
}

/// The decision for one stream record: every change that leaves a PAID
/// record (the HELD→PAID update, the fast payer's PAID insert, the email
/// flag) is copied; a PAID record is never deleted, so a REMOVE has nothing
/// to copy.
pub fn decide(record: &StreamRecord) -> SyncAction {
    match &record.new {
        Some(new) if new.status == RecordStatus::Paid => SyncAction::Upsert(new.clone()),
        _ => SyncAction::Ignore,
    }
}

/// A connection to the back office, in one schema.
#[derive(Debug)]
pub struct BackOffice {
    url: String,
    schema: String,
    client: Mutex<Option<Client>>,
}

fn paid_by(record: &BookingRecord) -> Result<&'static str, BackOfficeError> {
    match record.paid_by {
        Some(booking::ConfirmPath::Callback) => Ok("callback"),
        Some(booking::ConfirmPath::Webhook) => Ok("webhook"),
        Some(booking::ConfirmPath::Reconciler) => Ok("reconciler"),
        None => Err(BackOfficeError::Invalid(format!(
            "PAID record of {} without its confirm path",
            record.candidate
        ))),
    }
}

/// A row of `SELECT payment_id, sale, candidate, level, paid_ms, paid_by, email_sent`.
fn row_of(r: &tokio_postgres::Row) -> PaidRow {
    PaidRow {
        payment_id: r.get(0),
        sale: r.get(1),
        candidate: r.get(2),
        level: r.get(3),
        paid_ms: u64::try_from(r.get::<_, i64>(4)).unwrap_or(0),
        paid_by: r.get(5),
        email_sent: r.get(6),
    }
}

fn as_i64(v: u64, what: &str) -> Result<i64, BackOfficeError> {
    i64::try_from(v).map_err(|_| BackOfficeError::Invalid(format!("{what} {v} out of range")))
}

impl BackOffice {
    /// Connects to `url` (a libpq URL or key=value string) and uses
    /// `schema`, creating it if needed. Call [`BackOffice::migrate`] before
    /// the first upsert.
    pub async fn connect(url: &str, schema: &str) -> Result<BackOffice, BackOfficeError> {
        check_schema(schema)?;
        let office = BackOffice {
            url: url.to_owned(),
            schema: schema.to_owned(),
            client: Mutex::new(None),
        };
        drop(office.client().await?);
        Ok(office)
    }

    /// The schema.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    async fn open(&self) -> Result<Client, BackOfficeError> {
        let (client, connection) = tokio_postgres::connect(&self.url, NoTls).await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!(error = %e, "back-office connection ended");
            }
        });
        client
            .batch_execute(&format!(
                "CREATE SCHEMA IF NOT EXISTS {s}; SET search_path TO {s}",
                s = self.schema
            ))
            .await?;
        Ok(client)
    }

    /// The connection, opened again if it was lost.
    async fn client(&self) -> Result<tokio::sync::MappedMutexGuard<'_, Client>, BackOfficeError> {
        let mut slot = self.client.lock().await;
        if slot.as_ref().is_none_or(Client::is_closed) {
            *slot = Some(self.open().await?);
        }
        tokio::sync::MutexGuard::try_map(slot, Option::as_mut)
            .map_err(|_| BackOfficeError::Invalid("no connection".into()))
    }

    /// Applies the migrations not yet applied, in order; returns the
    /// versions it applied (none when up to date).
    pub async fn migrate(&self) -> Result<Vec<i32>, BackOfficeError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .await?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (
                version integer PRIMARY KEY,
                name text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now())",
        )
        .await?;
        let done: Vec<i32> = tx
            .query("SELECT version FROM schema_migrations", &[])
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let mut applied = Vec::new();
        for (version, name, sql) in MIGRATIONS {
            if done.contains(version) {
                continue;
            }
            tx.batch_execute(sql).await?;
            tx.execute(
                "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                &[version, name],
            )
            .await?;
            tracing::info!(version, name, schema = %self.schema, "back-office migration applied");
            applied.push(*version);
        }
        tx.commit().await?;
        Ok(applied)
    }

    /// The versions applied so far.
    pub async fn applied(&self) -> Result<Vec<i32>, BackOfficeError> {
        let client = self.client().await?;
        Ok(client
            .query(
                "SELECT version FROM schema_migrations ORDER BY version",
                &[],
            )
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect())
    }

    /// Inserts or updates one PAID record, in one statement. Refuses a
    /// record that is not PAID.
    pub async fn upsert_paid(&self, record: &BookingRecord) -> Result<(), BackOfficeError> {
        if record.status != RecordStatus::Paid {
            return Err(BackOfficeError::Invalid(format!(
                "only PAID records are copied, not {:?} of {}",
                record.status, record.candidate
            )));
        }
        record.check().map_err(BackOfficeError::Invalid)?;
        let paid_ms = record.paid_ms.unwrap_or_default();
        let client = self.client().await?;
        client
            .execute(
                "INSERT INTO paid_bookings (payment_id, sale, candidate, level, created_ms,
                     deadline_ms, paid_ms, paid_by, extensions, email_sent)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
                 ON CONFLICT (payment_id) DO UPDATE SET
                     sale = EXCLUDED.sale, candidate = EXCLUDED.candidate,
                     level = EXCLUDED.level, created_ms = EXCLUDED.created_ms,
                     deadline_ms = EXCLUDED.deadline_ms, paid_ms = EXCLUDED.paid_ms,
                     paid_by = EXCLUDED.paid_by, extensions = EXCLUDED.extensions,
                     email_sent = paid_bookings.email_sent OR EXCLUDED.email_sent,
                     synced_at = now()",
                &[
                    &record.payment_id.as_str(),
                    &record.sale.as_str(),
                    &record.candidate.as_str(),
                    &record.level.as_str(),
                    &as_i64(record.created_ms, "created_ms")?,
                    &as_i64(record.deadline_ms, "deadline_ms")?,
                    &as_i64(paid_ms, "paid_ms")?,
                    &paid_by(record)?,
                    &i32::try_from(record.extensions).unwrap_or(i32::MAX),
                    &record.email_sent,
                ],
            )
            .await?;
        Ok(())
    }

    /// Every paid booking of `sale`, by payment.
    pub async fn paid(&self, sale: &SaleId) -> Result<Vec<PaidRow>, BackOfficeError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT payment_id, sale, candidate, level, paid_ms, paid_by, email_sent
                 FROM paid_bookings WHERE sale = $1 ORDER BY payment_id",
                &[&sale.as_str()],
            )
            .await?;
        Ok(rows.iter().map(row_of).collect())
    }

    /// The row of one payment.
    pub async fn paid_by_payment(
        &self,
        payment: &PaymentId,
    ) -> Result<Option<PaidRow>, BackOfficeError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT payment_id, sale, candidate, level, paid_ms, paid_by, email_sent
                 FROM paid_bookings WHERE payment_id = $1",
                &[&payment.as_str()],
            )
            .await?;
        Ok(row.as_ref().map(row_of))
    }

    /// Deletes every row of `sale` (a reset: the records they copy are
    /// deleted too); how many.
    pub async fn delete_sale(&self, sale: &SaleId) -> Result<u64, BackOfficeError> {
        let client = self.client().await?;
        Ok(client
            .execute(
                "DELETE FROM paid_bookings WHERE sale = $1",
                &[&sale.as_str()],
            )
            .await?)
    }

    /// Drops the schema and everything in it (tests clean up with it).
    pub async fn drop_schema(&self) -> Result<(), BackOfficeError> {
        let client = self.client().await?;
        client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema))
            .await?;
        Ok(())
    }
}

/// A snapshot of the sync handler's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncCounts {
    /// PAID records upserted.
    pub upserted: u64,
    /// Records ignored.
    pub ignored: u64,
    /// Upserts that failed (retried from that record).
    pub failures: u64,
}

/// The stream handler that keeps the back office in step with the table.
#[derive(Debug)]
pub struct SyncHandler {
    office: Arc<BackOffice>,
    counts: std::sync::Mutex<SyncCounts>,
}

impl SyncHandler {
    /// A handler writing to `office`.
    pub fn new(office: Arc<BackOffice>) -> SyncHandler {
        SyncHandler {
            office,
            counts: std::sync::Mutex::default(),
        }
    }

    /// The counters.
    pub fn stats(&self) -> SyncCounts {
        self.counts.lock().map(|c| *c).unwrap_or_default()
    }

    fn count(&self, f: impl FnOnce(&mut SyncCounts)) {
        if let Ok(mut c) = self.counts.lock() {
            f(&mut c);
        }
    }
}

#[async_trait]
impl BatchHandler for SyncHandler {
    fn name(&self) -> &'static str {
        "sync"
    }

    async fn handle_batch(&self, records: &[StreamRecord]) -> Option<u64> {
        for r in records {
            match decide(r) {
                SyncAction::Ignore => self.count(|c| c.ignored += 1),
                SyncAction::Upsert(paid) => match self.office.upsert_paid(&paid).await {
                    Ok(()) => self.count(|c| c.upserted += 1),
                    Err(e) => {
                        tracing::warn!(sequence = r.sequence, error = %e, "back-office upsert failed; retried from here");
                        self.count(|c| c.failures += 1);
                        return Some(r.sequence);
                    }
                },
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use booking::records::{ConfirmPath, StreamKind};
    use booking::{CandidateHash, Level};

    fn held() -> BookingRecord {
        BookingRecord::held(
            CandidateHash::of("c"),
            SaleId::parse("s").unwrap(),
            Level::parse("a").unwrap(),
            PaymentId::parse("P1").unwrap(),
            1,
            2,
        )
    }

    fn change(
        kind: StreamKind,
        old: Option<BookingRecord>,
        new: Option<BookingRecord>,
    ) -> StreamRecord {
        StreamRecord {
            kind,
            old,
            new,
            user_identity: None,
            sequence: 1,
            at_ms: 1,
        }
    }

    #[test]
    fn only_changes_that_leave_a_paid_record_are_copied() {
        let paid = held().into_paid(ConfirmPath::Callback, 3);
        assert_eq!(
            decide(&change(
                StreamKind::Modify,
                Some(held()),
                Some(paid.clone())
            )),
            SyncAction::Upsert(paid.clone())
        );
        assert_eq!(
            decide(&change(StreamKind::Insert, None, Some(paid.clone()))),
            SyncAction::Upsert(paid.clone()),
            "the fast payer's PAID record"
        );
        assert_eq!(
            decide(&change(StreamKind::Insert, None, Some(held()))),
            SyncAction::Ignore
        );
        assert_eq!(
            decide(&change(StreamKind::Remove, Some(held()), None)),
            SyncAction::Ignore
        );
        let emailed = BookingRecord {
            email_sent: true,
            ..paid.clone()
        };
        assert_eq!(
            decide(&change(
                StreamKind::Modify,
                Some(paid),
                Some(emailed.clone())
            )),
            SyncAction::Upsert(emailed)
        );
    }

    #[test]
    fn schema_names_are_identifiers() {
        check_schema("back_office").unwrap();
        check_schema("t_0123abcd").unwrap();
        for bad in ["", "Upper", "1st", "a-b", "x; drop", &"a".repeat(64)] {
            assert!(check_schema(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn migrations_are_numbered_in_order() {
        let versions: Vec<i32> = MIGRATIONS.iter().map(|m| m.0).collect();
        assert_eq!(versions, (1..=MIGRATIONS.len() as i32).collect::<Vec<_>>());
    }
}
