//! The table's item format: a [`BookingRecord`] as DynamoDB attributes.
//!
//! One attribute per field of the record, named as the field (`candidate`,
//! `payment_id`, `deadline_ms`, …), numbers as `N`, strings as `S`, flags as
//! `BOOL`; an absent option is an absent attribute, so a PAID record has no
//! [`TTL_ATTRIBUTE`] at all. HELD records also carry [`HELD_BUCKET`], the key
//! of the sparse index the reconciler's query reads: paying removes it with
//! the TTL, so only holds are in that index.
//!
//! [`Attr`] is the DynamoDB JSON form (`{"S": "…"}`), which both the SDK
//! adapters and the Lambda stream event convert to and from. Reading an item
//! checks the record's invariants ([`BookingRecord::check`]): an item that
//! breaks them is refused, not carried on.

use std::collections::BTreeMap;

use booking::records::{BookingRecord, RecordStatus};
use serde::{Deserialize, Serialize};

/// The partition key.
pub const KEY: &str = "candidate";
/// The payment ID: the partition key of [`BY_PAYMENT_INDEX`].
pub const PAYMENT: &str = "payment_id";
/// The TTL attribute: the deadline in seconds, on HELD records only.
pub const TTL_ATTRIBUTE: &str = "expires_at_s";
/// The deadline in ms: the sort key of [`HELD_DUE_INDEX`].
pub const DEADLINE: &str = "deadline_ms";
/// The sparse index key of HELD records: `held#<first hex digit>`.
pub const HELD_BUCKET: &str = "held_bucket";
/// The GSI on payment ID (the callback's and webhook's lookup).
pub const BY_PAYMENT_INDEX: &str = "by_payment";
/// The sparse GSI of HELD records by deadline (the reconciler's query).
pub const HELD_DUE_INDEX: &str = "held_due";
/// Buckets of [`HELD_DUE_INDEX`]: one per first hex digit of the candidate
/// hash, so a burst of 2,000 holds a second writes 125 a second to each index
/// partition instead of all to one (an index partition takes about 1,000).
pub const HELD_BUCKETS: usize = 16;

/// One attribute value, in DynamoDB's JSON form. Only the types the record
/// uses; anything else in an item is refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Attr {
    /// A string.
    S(String),
    /// A number, as its decimal string.
    N(String),
    /// A flag.
    #[serde(rename = "BOOL")]
    Bool(bool),
    /// Null.
    #[serde(rename = "NULL")]
    Null(bool),
}

/// An item: attribute name → value.
pub type Item = BTreeMap<String, Attr>;

/// The [`HELD_BUCKET`] value of a candidate hash.
pub fn held_bucket(candidate: &booking::CandidateHash) -> String {
    format!("held#{}", &candidate.as_str()[..1])
}

/// Every [`HELD_BUCKET`] value, in order.
pub fn held_buckets() -> Vec<String> {
    (0..HELD_BUCKETS).map(|d| format!("held#{d:x}")).collect()
}

/// The item of a record. Refuses a record that breaks its invariants (a PAID
/// record with a TTL never reaches the table).
pub fn item_of(record: &BookingRecord) -> Result<Item, String> {
    record.check()?;
    let json = serde_json::to_value(record).map_err(|e| e.to_string())?;
    let serde_json::Value::Object(fields) = json else {
        return Err("a record serialises to an object".into());
    };
    let mut item = Item::new();
    for (name, value) in fields {
        let attr = match value {
            serde_json::Value::Null => continue,
            serde_json::Value::Bool(b) => Attr::Bool(b),
            serde_json::Value::Number(n) => Attr::N(n.to_string()),
            serde_json::Value::String(s) => Attr::S(s),
            other => return Err(format!("field {name}: unexpected {other}")),
        };
        item.insert(name, attr);
    }
    if record.status == RecordStatus::Held {
        item.insert(
            HELD_BUCKET.to_owned(),
            Attr::S(held_bucket(&record.candidate)),
        );
    }
    Ok(item)
}

/// The record of an item, its invariants checked.
pub fn record_of(item: &Item) -> Result<BookingRecord, String> {
    let mut fields = serde_json::Map::new();
    for (name, attr) in item {
        if name == HELD_BUCKET {
            continue;
        }
        let value = match attr {
            Attr::S(s) => serde_json::Value::String(s.clone()),
            Attr::N(n) => serde_json::Value::Number(
                n.parse::<u64>()
                    .map_err(|_| format!("attribute {name}: {n:?} is not a whole number"))?
                    .into(),
            ),
            Attr::Bool(b) => serde_json::Value::Bool(*b),
            Attr::Null(_) => serde_json::Value::Null,
        };
        fields.insert(name.clone(), value);
    }
    let record: BookingRecord = serde_json::from_value(serde_json::Value::Object(fields))
        .map_err(|e| format!("not a booking record: {e}"))?;
    record.check()?;
    if record.status == RecordStatus::Held
        && item.get(HELD_BUCKET) != Some(&Attr::S(held_bucket(&record.candidate)))
    {
        return Err(format!(
            "HELD record of {} outside the held index",
            record.candidate
        ));
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use booking::records::ConfirmPath;
    use booking::{CandidateHash, Level, PaymentId, SaleId};

    fn held() -> BookingRecord {
        BookingRecord::held(
            CandidateHash::of("c1"),
            SaleId::parse("launch").unwrap(),
            Level::parse("gold").unwrap(),
            PaymentId::parse("TR0001").unwrap(),
            1_700_000_000_000,
            1_700_000_600_000,
        )
    }

    #[test]
    fn a_hold_has_its_ttl_and_bucket_and_reads_back() {
        let r = held();
        let item = item_of(&r).unwrap();
        assert_eq!(item[KEY], Attr::S(r.candidate.to_string()));
        assert_eq!(item[TTL_ATTRIBUTE], Attr::N("1700000600".into()));
        assert_eq!(item[DEADLINE], Attr::N("1700000600000".into()));
        assert_eq!(item["status"], Attr::S("HELD".into()));
        assert_eq!(item["email_sent"], Attr::Bool(false));
        assert_eq!(item[HELD_BUCKET], Attr::S(held_bucket(&r.candidate)));
        assert!(!item.contains_key("paid_ms"), "absent, not null");
        assert_eq!(record_of(&item).unwrap(), r);
    }

    #[test]
    fn a_paid_record_has_no_ttl_and_no_bucket() {
        let r = held().into_paid(ConfirmPath::Webhook, 1_700_000_100_000);
        let item = item_of(&r).unwrap();
        assert!(!item.contains_key(TTL_ATTRIBUTE));
        assert!(!item.contains_key(HELD_BUCKET));
        assert_eq!(item["paid_by"], Attr::S("webhook".into()));
        assert_eq!(record_of(&item).unwrap(), r);
    }

    #[test]
    fn broken_items_are_refused() {
        let paid = held().into_paid(ConfirmPath::Callback, 1_700_000_100_000);
        let mut item = item_of(&paid).unwrap();
        item.insert(TTL_ATTRIBUTE.into(), Attr::N("1700000600".into()));
        assert!(record_of(&item).unwrap_err().contains("TTL"));
        let mut item = item_of(&held()).unwrap();
        item.remove(HELD_BUCKET);
        assert!(record_of(&item).unwrap_err().contains("held index"));
        let mut item = item_of(&held()).unwrap();
        item.insert(DEADLINE.into(), Attr::N("1.5".into()));
        assert!(record_of(&item).is_err());
        let mut item = item_of(&held()).unwrap();
        item.remove(PAYMENT);
        assert!(record_of(&item).is_err());
        let bad = BookingRecord {
            expires_at_s: Some(1),
            ..paid
        };
        assert!(item_of(&bad).is_err(), "never written");
    }

    #[test]
    fn attributes_are_dynamodb_json() {
        let json = serde_json::json!({"a": {"S": "x"}, "b": {"N": "1"}, "c": {"BOOL": true}, "d": {"NULL": true}});
        let item: Item = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(item["c"], Attr::Bool(true));
        assert_eq!(serde_json::to_value(&item).unwrap(), json);
        assert!(serde_json::from_value::<Item>(serde_json::json!({"m": {"M": {}}})).is_err());
    }

    #[test]
    fn buckets_cover_every_first_digit() {
        let buckets = held_buckets();
        assert_eq!(buckets.len(), HELD_BUCKETS);
        for i in 0..200 {
            let c = CandidateHash::of(&format!("c{i}"));
            assert!(buckets.contains(&held_bucket(&c)));
        }
    }
}
