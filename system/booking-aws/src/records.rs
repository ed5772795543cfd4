//! The record store on DynamoDB: [`DynamoRecords`], one table.
//!
//! Every write is one conditional request that asks for the item it was
//! checked against when the condition fails
//! (`ReturnValuesOnConditionCheckFailure = ALL_OLD`), so a failed put comes
//! back with the record that blocked it and the worker classifies with a
//! consistent read after it. The condition expressions are built by pure
//! functions ([`condition`], [`held_with`]) and tested as text.
//!
//! - put: `PutItem` under the condition (`attribute_not_exists(candidate)`
//!   for the worker's put);
//! - mark_paid: `UpdateItem SET status = PAID, paid_ms, paid_by REMOVE
//!   expires_at_s, held_bucket` if HELD with the payment: the TTL goes in the
//!   same step as the payment is recorded;
//! - delete: `DeleteItem` under the condition, returning what it deleted;
//! - delete_sale (the ops reset): a consistent `Scan` of the sale's keys
//!   ([`sale_filter`]), deleted by `BatchWriteItem` 25 at a time, the
//!   unprocessed items sent again;
//! - reads: `GetItem` (consistent or not), the `by_payment` GSI, the sparse
//!   `held_due` GSI one bucket at a time, a consistent `Scan` for the audit;
//! - owed_emails: a consistent `Scan` filtered on [`owed_filter`], read to
//!   its last page, sorted and cut to the limit. A FULL-TABLE scan (the
//!   filter drops items after they are read, and every item read is paid
//!   for): tolerable because the email sweep runs once per sweep interval on
//!   the leader only. For later: a sparse GSI keyed on an attribute that only
//!   a PAID record whose email is owed carries (set by HELD→PAID, removed by
//!   the email latch, as `held_bucket` is for `held_due`) would make it a
//!   `Query`.
//!
//! Throttled requests are counted (reads and writes apart) before the error
//! goes back; the client makes one attempt per call, so none is retried away
//! unseen.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeValue, DeleteRequest, ReturnValue, ReturnValuesOnConditionCheckFailure, WriteRequest,
};
use booking::records::{
    BookingRecord, Condition, ConfirmPath, RecordError, RecordStatus, RecordStore, Throttles,
    sort_by_deadline, sort_by_paid, ttl_for_deadline,
};
use booking::{CandidateHash, PaymentId, SaleId};
use booking_streams::item::{
    self, BY_PAYMENT_INDEX, DEADLINE, HELD_BUCKET, HELD_DUE_INDEX, KEY, PAYMENT, TTL_ATTRIBUTE,
};

use crate::convert::{from_sdk, to_sdk};
use crate::errors::{DynamoClass, Failure, classify_dynamodb, record_error};

/// Items per page of the audit's scan (DynamoDB stops at 1 MB anyway).
pub const SCAN_PAGE: i32 = 1_000;
/// Pages one query or scan reads at most: 1 MB each, far above any sale.
pub const PAGES_MAX: usize = 10_000;

/// A condition or update expression with its placeholders.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    /// The expression text.
    pub text: String,
    /// `#name` → attribute.
    pub names: Vec<(String, String)>,
    /// `:value` → value.
    pub values: Vec<(String, AttributeValue)>,
}

impl Expr {
    fn names_map(&self) -> Option<HashMap<String, String>> {
        (!self.names.is_empty()).then(|| self.names.iter().cloned().collect())
    }

    fn values_map(&self) -> Option<HashMap<String, AttributeValue>> {
        (!self.values.is_empty()).then(|| self.values.iter().cloned().collect())
    }

    /// This expression followed by `other`'s placeholders (for an update's
    /// condition: one request carries both).
    fn with(mut self, other: &Expr) -> Expr {
        for n in &other.names {
            if !self.names.contains(n) {
                self.names.push(n.clone());
            }
        }
        for v in &other.values {
            if !self.values.iter().any(|(k, _)| *k == v.0) {
                self.values.push(v.clone());
            }
        }
        self
    }
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

fn n(v: u64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn status_value(status: RecordStatus) -> AttributeValue {
    s(match status {
        RecordStatus::Held => "HELD",
        RecordStatus::Paid => "PAID",
    })
}

fn path_value(path: ConfirmPath) -> AttributeValue {
    s(match path {
        ConfirmPath::Callback => "callback",
        ConfirmPath::Webhook => "webhook",
        ConfirmPath::Reconciler => "reconciler",
    })
}

/// The condition expression of a [`Condition`].
pub fn condition(c: &Condition) -> Expr {
    match c {
        Condition::NotExists => Expr {
            text: "attribute_not_exists(#k)".into(),
            names: vec![("#k".into(), KEY.into())],
            values: vec![],
        },
        Condition::StatusIsWithPayment(status, payment) => Expr {
            text: "#st = :st AND #p = :p".into(),
            names: vec![
                ("#st".into(), "status".into()),
                ("#p".into(), PAYMENT.into()),
            ],
            values: vec![
                (":st".into(), status_value(*status)),
                (":p".into(), s(payment.as_str())),
            ],
        },
        Condition::PaymentIs(payment) => Expr {
            text: "#p = :p".into(),
            names: vec![("#p".into(), PAYMENT.into())],
            values: vec![(":p".into(), s(payment.as_str()))],
        },
    }
}

/// HELD with `payment`: the guard of every update of a hold.
pub fn held_with(payment: &PaymentId) -> Expr {
    condition(&Condition::StatusIsWithPayment(
        RecordStatus::Held,
        payment.clone(),
    ))
}

/// The HELD→PAID update: status, time and path set, the TTL and the held
/// index key removed, in one step.
pub fn paid_update(path: ConfirmPath, now_ms: u64) -> Expr {
    Expr {
        text: "SET #st = :paid, paid_ms = :t, paid_by = :path REMOVE #ttl, #hb".into(),
        names: vec![
            ("#st".into(), "status".into()),
            ("#ttl".into(), TTL_ATTRIBUTE.into()),
            ("#hb".into(), HELD_BUCKET.into()),
        ],
        values: vec![
            (":paid".into(), status_value(RecordStatus::Paid)),
            (":t".into(), n(now_ms)),
            (":path".into(), path_value(path)),
        ],
    }
}

/// The extension update: the deadline and the TTL moved together, counted,
/// the failures cleared. Its condition also asks that the new deadline is
/// not before the record's creation (a record's invariant).
pub fn extend_update(deadline_ms: u64) -> Expr {
    Expr {
        text: "SET #d = :d, #ttl = :ttl, extensions = extensions + :one, query_failures = :zero"
            .into(),
        names: vec![
            ("#d".into(), DEADLINE.into()),
            ("#ttl".into(), TTL_ATTRIBUTE.into()),
        ],
        values: vec![
            (":d".into(), n(deadline_ms)),
            (":ttl".into(), n(ttl_for_deadline(deadline_ms))),
            (":one".into(), n(1)),
            (":zero".into(), n(0)),
        ],
    }
}

/// The email sweep's filter: PAID, the email not sent, paid strictly before
/// `paid_before_ms`.
pub fn owed_filter(paid_before_ms: u64) -> Expr {
    Expr {
        text: "#st = :paid AND email_sent = :no AND paid_ms < :before".into(),
        names: vec![("#st".into(), "status".into())],
        values: vec![
            (":paid".into(), status_value(RecordStatus::Paid)),
            (":no".into(), AttributeValue::Bool(false)),
            (":before".into(), n(paid_before_ms)),
        ],
    }
}

/// Counts throttled requests, reads and writes apart.
#[derive(Debug, Default)]
pub struct ThrottleCounter {
    reads: AtomicU64,
    writes: AtomicU64,
}

impl ThrottleCounter {
    /// The counts so far.
    pub fn get(&self) -> Throttles {
        Throttles {
            reads: self.reads.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
        }
    }
}

/// A read or a write, for the throttle counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Read,
    Write,
}

/// The record store on one DynamoDB table.
#[derive(Debug, Clone)]
pub struct DynamoRecords {
    client: aws_sdk_dynamodb::Client,
    table: String,
    throttles: Arc<ThrottleCounter>,
}

impl DynamoRecords {
    /// The store on `table` (which `provision` made).
    pub fn new(client: aws_sdk_dynamodb::Client, table: impl Into<String>) -> DynamoRecords {
        DynamoRecords {
            client,
            table: table.into(),
            throttles: Arc::default(),
        }
    }

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    fn key(candidate: &CandidateHash) -> HashMap<String, AttributeValue> {
        HashMap::from([(KEY.to_owned(), s(candidate.as_str()))])
    }

    /// The port error of a failure that is not a failed condition, counting
    /// a throttle.
    fn error(&self, f: &Failure, kind: Kind) -> RecordError {
        if classify_dynamodb(f) == DynamoClass::Throttled {
            let counter = match kind {
                Kind::Read => &self.throttles.reads,
                Kind::Write => &self.throttles.writes,
            };
            counter.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(table = %self.table, code = ?f.code, "DynamoDB throttled a request");
        }
        record_error(f, &self.table)
    }

    /// A failed write: the condition's item as the current record, or the
    /// classified error.
    fn write_failed(
        &self,
        f: Failure,
        old: Option<&HashMap<String, AttributeValue>>,
    ) -> RecordError {
        if classify_dynamodb(&f) != DynamoClass::ConditionFailed {
            return self.error(&f, Kind::Write);
        }
        match old.map(read_item).transpose() {
            Ok(current) => RecordError::condition_failed(current),
            Err(e) => e,
        }
    }

    /// An update of a record HELD with `payment` (or under `guard`),
    /// returning the new record.
    async fn update(
        &self,
        candidate: &CandidateHash,
        update: Expr,
        guard: Expr,
    ) -> Result<BookingRecord, RecordError> {
        let expr = update.with(&guard);
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(candidate)))
            .update_expression(&expr.text)
            .condition_expression(&guard.text)
            .set_expression_attribute_names(expr.names_map())
            .set_expression_attribute_values(expr.values_map())
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(out) => read_item(out.attributes().unwrap_or(&HashMap::new())),
            Err(e) => {
                let old = e.as_service_error().and_then(|s| match s {
                    UpdateItemError::ConditionalCheckFailedException(c) => c.item().cloned(),
                    _ => None,
                });
                Err(self.write_failed(Failure::of(&e), old.as_ref()))
            }
        }
    }

    /// A consistent `Scan` of the whole table read to its last page, the
    /// items `filter` keeps (filtered by DynamoDB after reading them: every
    /// item read is paid for either way).
    async fn scan_pages(&self, filter: Option<&Expr>) -> Result<Vec<BookingRecord>, RecordError> {
        let mut out = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        for _ in 0..PAGES_MAX {
            let page = self
                .client
                .scan()
                .table_name(&self.table)
                .consistent_read(true)
                .set_filter_expression(filter.map(|f| f.text.clone()))
                .set_expression_attribute_names(filter.and_then(Expr::names_map))
                .set_expression_attribute_values(filter.and_then(Expr::values_map))
                .limit(SCAN_PAGE)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| self.error(&Failure::of(&e), Kind::Read))?;
            for i in page.items() {
                out.push(read_item(i)?);
            }
            match page.last_evaluated_key() {
                Some(k) if !k.is_empty() => start = Some(k.clone()),
                _ => break,
            }
        }
        Ok(out)
    }

    async fn query_pages(
        &self,
        index: &str,
        expr: &Expr,
        limit: usize,
    ) -> Result<Vec<BookingRecord>, RecordError> {
        let mut out = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        for _ in 0..PAGES_MAX {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(index)
                .key_condition_expression(&expr.text)
                .set_expression_attribute_names(expr.names_map())
                .set_expression_attribute_values(expr.values_map())
                .scan_index_forward(true)
                .limit(i32::try_from(limit.saturating_sub(out.len())).unwrap_or(i32::MAX))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| self.error(&Failure::of(&e), Kind::Read))?;
            for i in page.items() {
                out.push(read_item(i)?);
            }
            match page.last_evaluated_key() {
                Some(k) if out.len() < limit => start = Some(k.clone()),
                _ => return Ok(out),
            }
        }
        Ok(out)
    }
}

/// A record from an SDK item, its invariants checked.
fn read_item(i: &HashMap<String, AttributeValue>) -> Result<BookingRecord, RecordError> {
    from_sdk(i)
        .and_then(|i| item::record_of(&i))
        .map_err(|e| RecordError::Invalid(format!("unreadable item: {e}")))
}

#[async_trait]
impl RecordStore for DynamoRecords {
    async fn put(&self, record: BookingRecord, condition_: Condition) -> Result<(), RecordError> {
        // asserted before the write: a PAID record with a TTL never lands
        let item = item::item_of(&record).map_err(RecordError::Invalid)?;
        let c = condition(&condition_);
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(to_sdk(&item)))
            .condition_expression(&c.text)
            .set_expression_attribute_names(c.names_map())
            .set_expression_attribute_values(c.values_map())
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        result.map(|_| ()).map_err(|e| {
            let old = e.as_service_error().and_then(|s| match s {
                PutItemError::ConditionalCheckFailedException(c) => c.item().cloned(),
                _ => None,
            });
            self.write_failed(Failure::of(&e), old.as_ref())
        })
    }

    async fn mark_paid(
        &self,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
        path: ConfirmPath,
        now_ms: u64,
    ) -> Result<BookingRecord, RecordError> {
        self.update(candidate, paid_update(path, now_ms), held_with(payment_id))
            .await
    }

    async fn mark_emailed(
        &self,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
    ) -> Result<BookingRecord, RecordError> {
        let guard = condition(&Condition::StatusIsWithPayment(
            RecordStatus::Paid,
            payment_id.clone(),
        ));
        let guard = Expr {
            text: format!("{} AND email_sent = :no", guard.text),
            values: [
                guard.values,
                vec![(":no".into(), AttributeValue::Bool(false))],
            ]
            .concat(),
            ..guard
        };
        let update = Expr {
            text: "SET email_sent = :yes".into(),
            names: vec![],
            values: vec![(":yes".into(), AttributeValue::Bool(true))],
        };
        self.update(candidate, update, guard).await
    }

    async fn extend(
        &self,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
        deadline_ms: u64,
    ) -> Result<BookingRecord, RecordError> {
        let held = held_with(payment_id);
        let guard = Expr {
            text: format!("{} AND created_ms <= :d", held.text),
            values: [held.values, vec![(":d".into(), n(deadline_ms))]].concat(),
            ..held
        };
        match self
            .update(candidate, extend_update(deadline_ms), guard)
            .await
        {
            // HELD with the payment, and still refused: the deadline was
            // before the creation. A programmer error, not a lost race.
            Err(RecordError::ConditionFailed { current: Some(r) })
                if r.status == RecordStatus::Held && r.payment_id == *payment_id =>
            {
                Err(RecordError::Invalid(format!(
                    "extension of {candidate} to {deadline_ms}, before its creation {}",
                    r.created_ms
                )))
            }
            other => other,
        }
    }

    async fn note_query_failure(
        &self,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
    ) -> Result<BookingRecord, RecordError> {
        let update = Expr {
            text: "SET query_failures = query_failures + :one".into(),
            names: vec![],
            values: vec![(":one".into(), n(1))],
        };
        self.update(candidate, update, held_with(payment_id)).await
    }

    async fn clear_query_failures(
        &self,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
    ) -> Result<BookingRecord, RecordError> {
        let update = Expr {
            text: "SET query_failures = :zero".into(),
            names: vec![],
            values: vec![(":zero".into(), n(0))],
        };
        self.update(candidate, update, held_with(payment_id)).await
    }

    async fn delete(
        &self,
        candidate: &CandidateHash,
        condition_: Condition,
    ) -> Result<BookingRecord, RecordError> {
        if condition_ == Condition::NotExists {
            return Err(RecordError::Invalid(
                "delete needs a condition on the existing record".into(),
            ));
        }
        let c = condition(&condition_);
        let result = self
            .client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(candidate)))
            .condition_expression(&c.text)
            .set_expression_attribute_names(c.names_map())
            .set_expression_attribute_values(c.values_map())
            .return_values(ReturnValue::AllOld)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(out) => match out.attributes() {
                Some(old) => read_item(old),
                // the condition held, so there was an item: a server that
                // does not return it broke the contract
                None => Err(RecordError::Unavailable(
                    "DeleteItem returned no old item".into(),
                )),
            },
            Err(e) => {
                let old = e.as_service_error().and_then(|s| match s {
                    DeleteItemError::ConditionalCheckFailedException(c) => c.item().cloned(),
                    _ => None,
                });
                Err(self.write_failed(Failure::of(&e), old.as_ref()))
            }
        }
    }

    async fn get(
        &self,
        candidate: &CandidateHash,
        consistent: bool,
    ) -> Result<Option<BookingRecord>, RecordError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(candidate)))
            .consistent_read(consistent)
            .send()
            .await
            .map_err(|e| self.error(&Failure::of(&e), Kind::Read))?;
        out.item().map(read_item).transpose()
    }

    async fn by_payment(
        &self,
        payment_id: &PaymentId,
    ) -> Result<Option<BookingRecord>, RecordError> {
        let expr = Expr {
            text: "#p = :p".into(),
            names: vec![("#p".into(), PAYMENT.into())],
            values: vec![(":p".into(), s(payment_id.as_str()))],
        };
        let found = self.query_pages(BY_PAYMENT_INDEX, &expr, 1).await?;
        Ok(found.into_iter().find(|r| r.payment_id == *payment_id))
    }

    async fn held_due(
        &self,
        deadline_before_ms: u64,
        limit: usize,
    ) -> Result<Vec<BookingRecord>, RecordError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut due = Vec::new();
        for bucket in item::held_buckets() {
            let expr = Expr {
                text: "#hb = :b AND #d < :x".into(),
                names: vec![
                    ("#hb".into(), HELD_BUCKET.into()),
                    ("#d".into(), DEADLINE.into()),
                ],
                values: vec![
                    (":b".into(), s(&bucket)),
                    (":x".into(), n(deadline_before_ms)),
                ],
            };
            due.extend(self.query_pages(HELD_DUE_INDEX, &expr, limit).await?);
        }
        due.retain(|r| r.is_held_due(deadline_before_ms));
        // most overdue first; ties by candidate, so the order is reproducible
        sort_by_deadline(&mut due);
        due.truncate(limit);
        Ok(due)
    }

    /// A full-table consistent `Scan` filtered on [`owed_filter`] (see the
    /// module's notes: a sparse GSI would make it a query).
    async fn owed_emails(
        &self,
        paid_before_ms: u64,
        limit: usize,
    ) -> Result<Vec<BookingRecord>, RecordError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut owed = self.scan_pages(Some(&owed_filter(paid_before_ms))).await?;
        owed.retain(|r| r.owes_email(paid_before_ms));
        sort_by_paid(&mut owed);
        owed.truncate(limit);
        Ok(owed)
    }

    async fn scan_all(&self) -> Result<Vec<BookingRecord>, RecordError> {
        let mut out = self.scan_pages(None).await?;
        out.sort_by(|a, b| a.candidate.cmp(&b.candidate));
        Ok(out)
    }

    async fn throttles(&self) -> Result<Throttles, RecordError> {
        Ok(self.throttles.get())
    }

    /// A consistent `Scan` filtered on the sale ([`sale_filter`]), reading
    /// the keys only, page by page; each page's keys deleted by
    /// `BatchWriteItem`, [`BATCH_WRITE_MAX`] a call, its unprocessed items
    /// sent again after a growing pause (at most [`UNPROCESSED_TRIES_MAX`]
    /// tries). DynamoDB streams each as a REMOVE without `userIdentity`
    /// (only its TTL service sets one), which the expiry handler ignores.
    /// Logs its progress per page.
    async fn delete_sale(&self, sale: &SaleId) -> Result<u64, RecordError> {
        let filter = sale_filter(sale);
        let mut removed = 0u64;
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        for _ in 0..PAGES_MAX {
            let page = self
                .client
                .scan()
                .table_name(&self.table)
                .consistent_read(true)
                .filter_expression(&filter.text)
                .projection_expression("#k")
                .set_expression_attribute_names(filter.names_map())
                .set_expression_attribute_values(filter.values_map())
                .limit(SCAN_PAGE)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| self.error(&Failure::of(&e), Kind::Read))?;
            let keys: Vec<HashMap<String, AttributeValue>> = page
                .items()
                .iter()
                .filter_map(|i| {
                    i.get(KEY)
                        .map(|k| HashMap::from([(KEY.to_owned(), k.clone())]))
                })
                .collect();
            for chunk in keys.chunks(BATCH_WRITE_MAX) {
                self.delete_keys(chunk).await?;
                removed += chunk.len() as u64;
            }
            if !keys.is_empty() {
                tracing::info!(table = %self.table, %sale, removed, "deleting the sale's records");
            }
            match page.last_evaluated_key() {
                Some(k) if !k.is_empty() => start = Some(k.clone()),
                _ => break,
            }
        }
        Ok(removed)
    }
}

/// Deletes one `BatchWriteItem` takes at most (DynamoDB's limit).
pub const BATCH_WRITE_MAX: usize = 25;
/// Tries of one batch's unprocessed items before `delete_sale` gives up.
pub const UNPROCESSED_TRIES_MAX: u32 = 8;

/// `delete_sale`'s scan filter: the sale's items.
pub fn sale_filter(sale: &SaleId) -> Expr {
    Expr {
        text: "#s = :sale".into(),
        names: vec![("#s".into(), "sale".into()), ("#k".into(), KEY.into())],
        values: vec![(":sale".into(), s(sale.as_str()))],
    }
}

impl DynamoRecords {
    /// Deletes these keys (at most [`BATCH_WRITE_MAX`]) in one
    /// `BatchWriteItem`, sending its unprocessed items again after 50 ms,
    /// 100 ms, … (throttled partitions answer with unprocessed items).
    async fn delete_keys(
        &self,
        keys: &[HashMap<String, AttributeValue>],
    ) -> Result<(), RecordError> {
        let mut requests = Vec::with_capacity(keys.len());
        for k in keys {
            let delete = DeleteRequest::builder()
                .set_key(Some(k.clone()))
                .build()
                .map_err(|e| RecordError::Invalid(format!("delete request: {e}")))?;
            requests.push(WriteRequest::builder().delete_request(delete).build());
        }
        let mut pause = std::time::Duration::from_millis(50);
        for _ in 0..UNPROCESSED_TRIES_MAX {
            if requests.is_empty() {
                return Ok(());
            }
            let out = self
                .client
                .batch_write_item()
                .request_items(&self.table, std::mem::take(&mut requests))
                .send()
                .await
                .map_err(|e| self.error(&Failure::of(&e), Kind::Write))?;
            requests = out
                .unprocessed_items()
                .and_then(|u| u.get(&self.table))
                .cloned()
                .unwrap_or_default();
            if !requests.is_empty() {
                tracing::debug!(table = %self.table, unprocessed = requests.len(), "batch delete: unprocessed items again");
                tokio::time::sleep(pause).await;
                pause = pause.saturating_mul(2);
            }
        }
        if requests.is_empty() {
            return Ok(());
        }
        Err(RecordError::Unavailable(format!(
            "{} deletes of table {} still unprocessed after {UNPROCESSED_TRIES_MAX} tries",
            requests.len(),
            self.table
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_name_every_attribute_through_placeholders() {
        let p = PaymentId::parse("TR1").unwrap_or_else(|_| unreachable!());
        assert_eq!(
            condition(&Condition::NotExists).text,
            "attribute_not_exists(#k)"
        );
        let held = held_with(&p);
        assert_eq!(held.text, "#st = :st AND #p = :p");
        assert!(held.values.contains(&(":st".into(), s("HELD"))));
        assert!(held.values.contains(&(":p".into(), s("TR1"))));
        assert_eq!(
            condition(&Condition::PaymentIs(p.clone())).names,
            vec![("#p".to_owned(), PAYMENT.to_owned())]
        );
    }

    #[test]
    fn paying_removes_the_ttl_and_the_held_index_key_in_the_same_update() {
        let u = paid_update(ConfirmPath::Webhook, 7);
        assert!(u.text.contains("REMOVE #ttl, #hb"), "{}", u.text);
        assert!(u.names.contains(&("#ttl".into(), TTL_ATTRIBUTE.into())));
        assert!(u.names.contains(&("#hb".into(), HELD_BUCKET.into())));
        assert!(u.values.contains(&(":path".into(), s("webhook"))));
        // the update's placeholders and its guard's travel together once
        let both = u.with(&held_with(
            &PaymentId::parse("TR1").unwrap_or_else(|_| unreachable!()),
        ));
        let st = both.names.iter().filter(|(k, _)| k == "#st").count();
        assert_eq!(st, 1);
        assert!(both.values.iter().any(|(k, _)| k == ":p"));
    }

    #[test]
    fn the_owed_filter_asks_for_paid_unsent_and_strictly_earlier() {
        let f = owed_filter(1_234);
        assert_eq!(
            f.text,
            "#st = :paid AND email_sent = :no AND paid_ms < :before"
        );
        assert_eq!(f.names, vec![("#st".to_owned(), "status".to_owned())]);
        assert!(f.values.contains(&(":paid".into(), s("PAID"))));
        assert!(
            f.values
                .contains(&(":no".into(), AttributeValue::Bool(false)))
        );
        assert!(f.values.contains(&(":before".into(), n(1_234))));
    }

    #[test]
    fn an_extension_moves_the_ttl_with_the_deadline() {
        let u = extend_update(600_001);
        assert!(
            u.values.contains(&(":ttl".into(), n(601))),
            "rounded up, never early"
        );
        assert!(u.values.contains(&(":d".into(), n(600_001))));
    }
}
