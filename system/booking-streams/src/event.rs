//! The DynamoDB stream event Lambda invokes a function with, and the
//! partial-batch answer it expects (`ReportBatchItemFailures`).
//!
//! The event's `userIdentity` is written `{"type", "principalId"}` (lower
//! case), as Lambda delivers it; the Streams API (and so the SDK) spells the
//! same object `{"Type", "PrincipalId"}`. Both become a
//! [`booking::records::UserIdentity`].
//!
//! Within one invocation the records get sequences 1, 2, … in event order
//! ([`StreamEvent::records`]); [`StreamEvent::failure`] turns the first
//! failed one back into DynamoDB's sequence number for the answer.

use booking::records::{BookingRecord, StreamKind, StreamRecord, UserIdentity};
use serde::{Deserialize, Serialize};

use crate::item::{Item, record_of};

/// A stream event (`{"Records": [...]}`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct StreamEvent {
    /// The records, in stream order.
    #[serde(rename = "Records")]
    pub records: Vec<EventRecord>,
}

/// One record of the event.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct EventRecord {
    /// `INSERT`, `MODIFY` or `REMOVE`.
    #[serde(rename = "eventName")]
    pub event_name: String,
    /// The change.
    pub dynamodb: EventChange,
    /// Set on changes the application did not make (TTL deletions).
    #[serde(rename = "userIdentity", default)]
    pub user_identity: Option<EventIdentity>,
}

/// The change itself.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct EventChange {
    /// Seconds since the epoch (Lambda sends a number).
    #[serde(rename = "ApproximateCreationDateTime", default)]
    pub approximate_creation_date_time: Option<f64>,
    /// DynamoDB's sequence number.
    #[serde(rename = "SequenceNumber")]
    pub sequence_number: String,
    /// The item after.
    #[serde(rename = "NewImage", default)]
    pub new_image: Option<Item>,
    /// The item before.
    #[serde(rename = "OldImage", default)]
    pub old_image: Option<Item>,
}

/// `userIdentity` as Lambda writes it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct EventIdentity {
    /// `Service` for the TTL service.
    #[serde(rename = "type")]
    pub type_: String,
    /// `dynamodb.amazonaws.com` for the TTL service.
    #[serde(rename = "principalId")]
    pub principal_id: String,
}

/// The answer: the first failed record's sequence number, if any (Lambda
/// retries from it; an empty list means the batch is done).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct BatchResponse {
    /// At most one entry: the first failure.
    #[serde(rename = "batchItemFailures")]
    pub batch_item_failures: Vec<ItemFailure>,
}

/// One failed record.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct ItemFailure {
    /// Its sequence number.
    #[serde(rename = "itemIdentifier")]
    pub item_identifier: String,
}

/// A stream record from its parts: the event name, the images, who made the
/// change, a sequence and a time.
pub fn stream_record(
    event_name: &str,
    old: Option<&Item>,
    new: Option<&Item>,
    identity: Option<UserIdentity>,
    sequence: u64,
    at_ms: u64,
) -> Result<StreamRecord, String> {
    let kind = match event_name {
        "INSERT" => StreamKind::Insert,
        "MODIFY" => StreamKind::Modify,
        "REMOVE" => StreamKind::Remove,
        other => return Err(format!("unknown stream event {other:?}")),
    };
    let image = |i: Option<&Item>| i.map(record_of).transpose();
    let (old, new): (Option<BookingRecord>, Option<BookingRecord>) = (image(old)?, image(new)?);
    Ok(StreamRecord {
        kind,
        old,
        new,
        user_identity: identity,
        sequence,
        at_ms,
    })
}

impl StreamEvent {
    /// The event's records, numbered 1, 2, … in order. A record that is not
    /// a booking (a malformed image) is an error: the whole invocation fails
    /// and Lambda retries it, then sends it to the on-failure destination.
    pub fn records(&self) -> Result<Vec<StreamRecord>, String> {
        self.records
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let at_ms = r
                    .dynamodb
                    .approximate_creation_date_time
                    .map_or(0, |s| (s * 1_000.0) as u64);
                stream_record(
                    &r.event_name,
                    r.dynamodb.old_image.as_ref(),
                    r.dynamodb.new_image.as_ref(),
                    r.user_identity.as_ref().map(|u| UserIdentity {
                        type_: u.type_.clone(),
                        principal_id: u.principal_id.clone(),
                    }),
                    i as u64 + 1,
                    at_ms,
                )
                .map_err(|e| format!("record {}: {e}", r.dynamodb.sequence_number))
            })
            .collect()
    }

    /// The answer for a handler that failed at local sequence `failed_at`.
    pub fn failure(&self, failed_at: Option<u64>) -> BatchResponse {
        let batch_item_failures = failed_at
            .and_then(|s| usize::try_from(s).ok())
            .and_then(|s| s.checked_sub(1))
            .map(|i| {
                // a sequence past the batch fails it from its first record
                let r = self.records.get(i).or(self.records.first());
                r.map(|r| ItemFailure {
                    item_identifier: r.dynamodb.sequence_number.clone(),
                })
            })
            .into_iter()
            .flatten()
            .collect();
        BatchResponse {
            batch_item_failures,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::item::item_of;
    use booking::{CandidateHash, Level, PaymentId, SaleId};

    fn held() -> BookingRecord {
        BookingRecord::held(
            CandidateHash::of("c1"),
            SaleId::parse("launch").unwrap(),
            Level::parse("gold").unwrap(),
            PaymentId::parse("TR1").unwrap(),
            1_000,
            601_000,
        )
    }

    // The shape Lambda delivers a TTL deletion in (AWS's documented example,
    // with this table's item).
    fn ttl_removal_event() -> serde_json::Value {
        serde_json::json!({"Records": [
            {"eventID": "1", "eventName": "INSERT", "eventVersion": "1.1", "eventSource": "aws:dynamodb",
             "awsRegion": "ap-southeast-1",
             "dynamodb": {"ApproximateCreationDateTime": 1700000000.0, "Keys": {"candidate": {"S": "x"}},
                          "NewImage": item_of(&held()).unwrap(), "SequenceNumber": "400000000000000499660",
                          "SizeBytes": 26, "StreamViewType": "NEW_AND_OLD_IMAGES"}},
            {"eventID": "2", "eventName": "REMOVE", "eventVersion": "1.1", "eventSource": "aws:dynamodb",
             "awsRegion": "ap-southeast-1",
             "dynamodb": {"ApproximateCreationDateTime": 1700000700.5, "Keys": {"candidate": {"S": "x"}},
                          "OldImage": item_of(&held()).unwrap(), "SequenceNumber": "400000000000000499661",
                          "SizeBytes": 26, "StreamViewType": "NEW_AND_OLD_IMAGES"},
             "userIdentity": {"type": "Service", "principalId": "dynamodb.amazonaws.com"}}
        ]})
    }

    #[test]
    fn a_lambda_event_becomes_stream_records_in_order() {
        let event: StreamEvent = serde_json::from_value(ttl_removal_event()).unwrap();
        let records = event.records().unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].kind, StreamKind::Insert);
        assert_eq!(records[0].new.as_ref(), Some(&held()));
        assert!(!records[0].is_ttl_removal());
        assert_eq!(records[1].sequence, 2);
        assert_eq!(records[1].at_ms, 1_700_000_700_500);
        assert!(
            records[1].is_ttl_removal(),
            "{:?}",
            records[1].user_identity
        );
        assert_eq!(records[1].old.as_ref(), Some(&held()));
    }

    #[test]
    fn the_answer_names_the_first_failure_by_dynamodbs_sequence_number() {
        let event: StreamEvent = serde_json::from_value(ttl_removal_event()).unwrap();
        assert_eq!(
            serde_json::to_value(event.failure(None)).unwrap(),
            serde_json::json!({"batchItemFailures": []})
        );
        assert_eq!(
            serde_json::to_value(event.failure(Some(2))).unwrap(),
            serde_json::json!({"batchItemFailures": [{"itemIdentifier": "400000000000000499661"}]})
        );
        assert_eq!(
            event.failure(Some(9)).batch_item_failures[0].item_identifier,
            "400000000000000499660"
        );
    }

    #[test]
    fn a_malformed_image_fails_the_invocation() {
        let mut v = ttl_removal_event();
        v["Records"][1]["dynamodb"]["OldImage"]["status"] = serde_json::json!({"S": "LOST"});
        let event: StreamEvent = serde_json::from_value(v).unwrap();
        assert!(
            event
                .records()
                .unwrap_err()
                .contains("400000000000000499661")
        );
        let mut v = ttl_removal_event();
        v["Records"][0]["eventName"] = serde_json::json!("UPSERT");
        let event: StreamEvent = serde_json::from_value(v).unwrap();
        assert!(event.records().is_err());
    }
}
