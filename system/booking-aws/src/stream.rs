//! The table's DynamoDB stream as the [`ChangeStream`] port:
//! [`DynamoStream`], one reader of every shard.
//!
//! DynamoDB names positions per shard with sequence numbers of 21 to 40
//! digits; the port reads "after a position" in one `u64` sequence. So the
//! reader numbers records itself, 1, 2, … in the order it reads them, and
//! keeps the ones not yet read past in a buffer: a handler that fails part
//! of a batch reads again from the failed record, as the port promises. A
//! shard is read only once its parent is read to its end
//! ([`readable_shards`]), so one item's changes keep their order across a
//! shard split. Each reader starts at `TRIM_HORIZON` (every record the
//! stream still keeps): the positions are the reader's own, and the handlers
//! are idempotent.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodbstreams::types::{Record, ShardIteratorType};
use booking::records::{ChangeStream, RecordError, StreamRecord, UserIdentity};
use booking_streams::event::stream_record;

use crate::convert::from_stream;
use crate::errors::Failure;

/// Records one `GetRecords` returns at most (DynamoDB's limit).
pub const GET_RECORDS_MAX: i32 = 1_000;
/// Between two polls of an idle stream (Lambda polls four times a second).
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// How often the shard list is read again (shards split and close).
pub const SHARDS_REFRESH: Duration = Duration::from_secs(10);
/// Records held for re-reading at most; a reader that falls this far behind
/// what it has read is told records were lost.
pub const BUFFER_MAX: usize = 100_000;

/// The shards to read now, parents first: a shard is readable when it is not
/// read to its end and its parent is read to its end or no longer listed
/// (trimmed from the stream).
pub fn readable_shards(
    shards: &[(String, Option<String>)],
    finished: &BTreeSet<String>,
) -> Vec<String> {
    let listed: BTreeSet<&String> = shards.iter().map(|(id, _)| id).collect();
    shards
        .iter()
        .filter(|(id, _)| !finished.contains(id))
        .filter(|(_, parent)| {
            parent
                .as_ref()
                .is_none_or(|p| finished.contains(p) || !listed.contains(p))
        })
        .map(|(id, _)| id.clone())
        .collect()
}

#[derive(Debug, Default)]
struct Shard {
    parent: Option<String>,
    iterator: Option<String>,
    last_sequence: Option<String>,
}

#[derive(Debug, Default)]
struct Cursor {
    shards: BTreeMap<String, Shard>,
    finished: BTreeSet<String>,
    refreshed: Option<tokio::time::Instant>,
    buffer: VecDeque<StreamRecord>,
    numbered: u64,
    read_past: u64,
}

/// The table's stream, read through DynamoDB Streams.
#[derive(Debug)]
pub struct DynamoStream {
    client: aws_sdk_dynamodbstreams::Client,
    stream_arn: String,
    cursor: tokio::sync::Mutex<Cursor>,
}

fn unavailable(e: impl std::fmt::Display) -> RecordError {
    RecordError::Unavailable(e.to_string())
}

impl DynamoStream {
    /// The stream of `table`, its ARN as the server reports it.
    pub async fn connect(
        dynamodb: &aws_sdk_dynamodb::Client,
        client: aws_sdk_dynamodbstreams::Client,
        table: &str,
    ) -> Result<DynamoStream, RecordError> {
        let described = dynamodb
            .describe_table()
            .table_name(table)
            .send()
            .await
            .map_err(|e| unavailable(Failure::of(&e).message))?;
        let arn = described
            .table()
            .and_then(|t| t.latest_stream_arn())
            .ok_or_else(|| {
                RecordError::Unavailable(format!(
                    "table {table} has no stream (run `booking provision`)"
                ))
            })?;
        Ok(DynamoStream {
            client,
            stream_arn: arn.to_owned(),
            cursor: tokio::sync::Mutex::default(),
        })
    }

    /// The stream's ARN.
    pub fn arn(&self) -> &str {
        &self.stream_arn
    }

    async fn refresh_shards(&self, cursor: &mut Cursor) -> Result<(), RecordError> {
        let mut start: Option<String> = None;
        loop {
            let out = self
                .client
                .describe_stream()
                .stream_arn(&self.stream_arn)
                .set_exclusive_start_shard_id(start.take())
                .send()
                .await
                .map_err(|e| unavailable(Failure::of(&e).message))?;
            let Some(description) = out.stream_description() else {
                break;
            };
            for shard in description.shards() {
                let Some(id) = shard.shard_id() else { continue };
                cursor.shards.entry(id.to_owned()).or_insert_with(|| Shard {
                    parent: shard.parent_shard_id().map(str::to_owned),
                    ..Shard::default()
                });
            }
            match description.last_evaluated_shard_id() {
                Some(last) => start = Some(last.to_owned()),
                None => break,
            }
        }
        cursor.refreshed = Some(tokio::time::Instant::now());
        Ok(())
    }

    async fn iterator(&self, id: &str, after: Option<&str>) -> Result<String, RecordError> {
        let request = self
            .client
            .get_shard_iterator()
            .stream_arn(&self.stream_arn)
            .shard_id(id);
        let request = match after {
            Some(seq) => request
                .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
                .sequence_number(seq),
            None => request.shard_iterator_type(ShardIteratorType::TrimHorizon),
        };
        let out = request
            .send()
            .await
            .map_err(|e| unavailable(Failure::of(&e).message))?;
        out.shard_iterator()
            .map(str::to_owned)
            .ok_or_else(|| RecordError::Unavailable(format!("no iterator for shard {id}")))
    }

    /// One `GetRecords` on every readable shard; new records go to the buffer.
    async fn fetch(&self, cursor: &mut Cursor) -> Result<(), RecordError> {
        let stale = cursor
            .refreshed
            .is_none_or(|at| at.elapsed() >= SHARDS_REFRESH);
        if stale {
            self.refresh_shards(cursor).await?;
        }
        let listed: Vec<(String, Option<String>)> = cursor
            .shards
            .iter()
            .map(|(id, s)| (id.clone(), s.parent.clone()))
            .collect();
        for id in readable_shards(&listed, &cursor.finished) {
            let (iterator, after) = {
                let shard = cursor.shards.entry(id.clone()).or_default();
                (shard.iterator.clone(), shard.last_sequence.clone())
            };
            let iterator = match iterator {
                Some(i) => i,
                None => self.iterator(&id, after.as_deref()).await?,
            };
            let out = match self
                .client
                .get_records()
                .shard_iterator(&iterator)
                .limit(GET_RECORDS_MAX)
                .send()
                .await
            {
                Ok(out) => out,
                Err(e) => {
                    // an expired iterator (15 minutes) is fetched anew next time
                    if let Some(shard) = cursor.shards.get_mut(&id) {
                        shard.iterator = None;
                    }
                    return Err(unavailable(Failure::of(&e).message));
                }
            };
            for r in out.records() {
                cursor.numbered += 1;
                let record = convert(r, cursor.numbered)?;
                cursor.buffer.push_back(record);
                if let Some(shard) = cursor.shards.get_mut(&id) {
                    shard.last_sequence = r
                        .dynamodb()
                        .and_then(|d| d.sequence_number())
                        .map(str::to_owned);
                }
            }
            match out.next_shard_iterator() {
                Some(next) => {
                    if let Some(shard) = cursor.shards.get_mut(&id) {
                        shard.iterator = Some(next.to_owned());
                    }
                }
                None => {
                    cursor.finished.insert(id.clone());
                }
            }
        }
        if cursor.buffer.len() > BUFFER_MAX {
            return Err(RecordError::Invalid(format!(
                "more than {BUFFER_MAX} stream records read and not yet handled"
            )));
        }
        Ok(())
    }
}

/// One SDK stream record as the port's, numbered `sequence`.
fn convert(r: &Record, sequence: u64) -> Result<StreamRecord, RecordError> {
    let change = r
        .dynamodb()
        .ok_or_else(|| RecordError::Invalid("stream record without its change".into()))?;
    let image = |i: Option<
        &std::collections::HashMap<String, aws_sdk_dynamodbstreams::types::AttributeValue>,
    >| { i.map(from_stream).transpose() };
    let bad = |e: String| {
        RecordError::Invalid(format!(
            "stream record {}: {e}",
            change.sequence_number().unwrap_or("?")
        ))
    };
    let old = image(change.old_image()).map_err(bad)?;
    let new = image(change.new_image()).map_err(bad)?;
    let identity = r.user_identity().map(|u| UserIdentity {
        type_: u.r#type().unwrap_or_default().to_owned(),
        principal_id: u.principal_id().unwrap_or_default().to_owned(),
    });
    let at_ms = change
        .approximate_creation_date_time()
        .and_then(|t| t.to_millis().ok())
        .and_then(|ms| u64::try_from(ms).ok())
        .unwrap_or(0);
    let name = r.event_name().map(|n| n.as_str()).unwrap_or("");
    stream_record(name, old.as_ref(), new.as_ref(), identity, sequence, at_ms).map_err(bad)
}

#[async_trait]
impl ChangeStream for DynamoStream {
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
        let mut cursor = self.cursor.lock().await;
        if after_sequence < cursor.read_past {
            return Err(RecordError::Invalid(format!(
                "records up to {} were read past and dropped, read after {after_sequence}: records lost",
                cursor.read_past
            )));
        }
        cursor.read_past = after_sequence;
        while cursor
            .buffer
            .front()
            .is_some_and(|r| r.sequence <= after_sequence)
        {
            cursor.buffer.pop_front();
        }
        loop {
            if !cursor.buffer.is_empty() {
                return Ok(cursor.buffer.iter().take(limit).cloned().collect());
            }
            self.fetch(&mut cursor).await?;
            while cursor
                .buffer
                .front()
                .is_some_and(|r| r.sequence <= after_sequence)
            {
                cursor.buffer.pop_front();
            }
            if !cursor.buffer.is_empty() {
                continue;
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(Vec::new());
            }
            tokio::time::sleep(POLL_INTERVAL.min(deadline - now)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(id: &str, parent: Option<&str>) -> (String, Option<String>) {
        (id.to_owned(), parent.map(str::to_owned))
    }

    #[test]
    fn parents_are_read_to_their_end_before_their_children() {
        let shards = [
            shard("a", None),
            shard("b", Some("a")),
            shard("c", Some("b")),
            shard("d", Some("gone")),
        ];
        let none = BTreeSet::new();
        assert_eq!(
            readable_shards(&shards, &none),
            vec!["a", "d"],
            "a trimmed parent does not block"
        );
        let a_done: BTreeSet<String> = ["a".to_owned()].into();
        assert_eq!(readable_shards(&shards, &a_done), vec!["b", "d"]);
        let ab_done: BTreeSet<String> = ["a".to_owned(), "b".to_owned(), "d".to_owned()].into();
        assert_eq!(readable_shards(&shards, &ab_done), vec!["c"]);
    }
}
