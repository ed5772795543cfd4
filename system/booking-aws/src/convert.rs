//! The SDKs' attribute values to and from the table's item format
//! ([`booking_streams::item`]). DynamoDB and DynamoDB Streams each have their
//! own `AttributeValue` type; both convert here, and only the types an item
//! uses are accepted.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodbstreams::types::AttributeValue as StreamValue;
use booking_streams::item::{Attr, Item};

/// An SDK item as ours; refuses attribute types an item never has.
pub fn from_sdk(item: &HashMap<String, AttributeValue>) -> Result<Item, String> {
    item.iter()
        .map(|(k, v)| {
            let a = match v {
                AttributeValue::S(s) => Attr::S(s.clone()),
                AttributeValue::N(n) => Attr::N(n.clone()),
                AttributeValue::Bool(b) => Attr::Bool(*b),
                AttributeValue::Null(b) => Attr::Null(*b),
                other => return Err(format!("attribute {k}: unexpected {other:?}")),
            };
            Ok((k.clone(), a))
        })
        .collect()
}

/// Ours as an SDK item.
pub fn to_sdk(item: &Item) -> HashMap<String, AttributeValue> {
    item.iter().map(|(k, v)| (k.clone(), value(v))).collect()
}

/// One value for the SDK.
pub fn value(v: &Attr) -> AttributeValue {
    match v {
        Attr::S(s) => AttributeValue::S(s.clone()),
        Attr::N(n) => AttributeValue::N(n.clone()),
        Attr::Bool(b) => AttributeValue::Bool(*b),
        Attr::Null(b) => AttributeValue::Null(*b),
    }
}

/// A stream image as ours.
pub fn from_stream(item: &HashMap<String, StreamValue>) -> Result<Item, String> {
    item.iter()
        .map(|(k, v)| {
            let a = match v {
                StreamValue::S(s) => Attr::S(s.clone()),
                StreamValue::N(n) => Attr::N(n.clone()),
                StreamValue::Bool(b) => Attr::Bool(*b),
                StreamValue::Null(b) => Attr::Null(*b),
                other => return Err(format!("attribute {k}: unexpected {other:?}")),
            };
            Ok((k.clone(), a))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn items_go_both_ways_and_foreign_types_are_refused() {
        let mut ours = Item::new();
        ours.insert("a".into(), Attr::S("x".into()));
        ours.insert("b".into(), Attr::N("12".into()));
        ours.insert("c".into(), Attr::Bool(true));
        let sdk = to_sdk(&ours);
        assert_eq!(from_sdk(&sdk).unwrap(), ours);
        let mut bad = sdk.clone();
        bad.insert("l".into(), AttributeValue::L(vec![]));
        assert!(from_sdk(&bad).unwrap_err().contains("attribute l"));
        let stream: HashMap<String, StreamValue> = [
            ("a".to_owned(), StreamValue::S("x".into())),
            ("b".to_owned(), StreamValue::N("12".into())),
            ("c".to_owned(), StreamValue::Bool(true)),
        ]
        .into();
        assert_eq!(from_stream(&stream).unwrap(), ours);
        let bad: HashMap<String, StreamValue> = [("m".to_owned(), StreamValue::Ss(vec![]))].into();
        assert!(from_stream(&bad).is_err());
    }
}
