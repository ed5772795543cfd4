//! The stored encoding and the scripts' answers, read back: pure functions.

use booking::queue::{Message, QueueError, ReceiptHandle, Received};
use redis::Value;

/// A stored message that cannot be read: the queue's keys were written by
/// something else.
fn corrupt(what: impl std::fmt::Display) -> QueueError {
    let why = format!("corrupt queue entry: {what}");
    tracing::error!(error = %why, "the redis queue holds what it did not write");
    QueueError::Unavailable(why)
}

/// The message JSON stored and dead-lettered: the [`Message`] as sent.
pub(crate) fn message_json(message: &Message) -> Result<String, QueueError> {
    serde_json::to_string(message)
        .map_err(|e| QueueError::Invalid(format!("message not serializable: {e}")))
}

/// A stored message JSON, read back.
pub(crate) fn read_message_json(json: &[u8]) -> Result<Message, QueueError> {
    serde_json::from_slice(json).map_err(|e| corrupt(format!("message json: {e}")))
}

/// `<sent_ms> <group> <message json>`, the stored form of a message: its send
/// time and the message.
pub(crate) fn read_stored(raw: &[u8]) -> Result<(u64, Message), QueueError> {
    let mut parts = raw.splitn(3, |b| *b == b' ');
    let (Some(sent), Some(_group), Some(json)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(corrupt("a message without its three fields"));
    };
    Ok((read_ms(sent)?, read_message_json(json)?))
}

fn read_ms(raw: &[u8]) -> Result<u64, QueueError> {
    std::str::from_utf8(raw)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| corrupt(format!("a time of {:?}", String::from_utf8_lossy(raw))))
}

/// The bytes of a bulk or simple string.
pub(crate) fn bytes(value: Value) -> Result<Vec<u8>, QueueError> {
    match value {
        Value::BulkString(b) => Ok(b),
        Value::SimpleString(s) => Ok(s.into_bytes()),
        other => Err(corrupt(format!("expected a string, got {other:?}"))),
    }
}

/// An integer answer.
pub(crate) fn int(value: Value) -> Result<i64, QueueError> {
    match value {
        Value::Int(n) => Ok(n),
        other => Err(corrupt(format!("expected an integer, got {other:?}"))),
    }
}

/// An array answer.
pub(crate) fn array(value: Value) -> Result<Vec<Value>, QueueError> {
    match value {
        Value::Array(items) => Ok(items),
        Value::Nil => Ok(Vec::new()),
        other => Err(corrupt(format!("expected an array, got {other:?}"))),
    }
}

/// The receive script's answer: `{receipt, receive count, stored message}`
/// per message.
pub(crate) fn read_batch(value: Value) -> Result<Vec<Received>, QueueError> {
    array(value)?
        .into_iter()
        .map(|item| {
            let mut fields = array(item)?.into_iter();
            let (Some(receipt), Some(count), Some(raw)) =
                (fields.next(), fields.next(), fields.next())
            else {
                return Err(corrupt("a received message without its three fields"));
            };
            let receipt = String::from_utf8(bytes(receipt)?)
                .map_err(|_| corrupt("a receipt that is not UTF-8"))?;
            let receive_count =
                u32::try_from(int(count)?).map_err(|_| corrupt("a receive count out of range"))?;
            let (sent_ms, message) = read_stored(&bytes(raw)?)?;
            Ok(Received {
                message,
                receipt: ReceiptHandle(receipt),
                receive_count,
                sent_ms,
            })
        })
        .collect()
}

/// The stats script's answer, read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stats {
    /// Messages not in flight.
    pub(crate) visible: u64,
    /// Messages in flight.
    pub(crate) in_flight: u64,
    /// When the oldest message not deleted was sent, if there is one.
    pub(crate) oldest_ms: Option<u64>,
    /// The script's time: what the oldest message's age is counted to.
    pub(crate) now_ms: u64,
}

/// The stats script's answer: `{visible, in flight, oldest sent ms or '',
/// now ms}`.
pub(crate) fn read_stats(value: Value) -> Result<Stats, QueueError> {
    let mut fields = array(value)?.into_iter();
    let (Some(visible), Some(in_flight), Some(oldest), Some(now)) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return Err(corrupt("stats without their four fields"));
    };
    let count =
        |v: Value| u64::try_from(int(v)?).map_err(|_| corrupt("a negative count of messages"));
    let oldest = bytes(oldest)?;
    let oldest_ms = if oldest.is_empty() {
        None
    } else {
        Some(read_ms(&oldest)?)
    };
    Ok(Stats {
        visible: count(visible)?,
        in_flight: count(in_flight)?,
        oldest_ms,
        now_ms: read_ms(&bytes(now)?)?,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn message() -> Message {
        Message {
            body: "{\"a\": \"x y\"}".into(),
            group_id: "ab12".into(),
            deduplication_id: "d-1".into(),
        }
    }

    #[test]
    fn a_stored_message_reads_back_with_its_send_time_spaces_in_the_body_and_all() {
        let raw = format!("1700000000123 ab12 {}", message_json(&message()).unwrap());
        assert_eq!(
            read_stored(raw.as_bytes()).unwrap(),
            (1_700_000_000_123, message())
        );
        for bad in ["", "12 ab12", "x ab12 {}", "12 ab12 {not json"] {
            assert!(
                matches!(read_stored(bad.as_bytes()), Err(QueueError::Unavailable(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_batch_answer_reads_as_received_messages() {
        let raw = format!("5 ab12 {}", message_json(&message()).unwrap());
        let answer = Value::Array(vec![Value::Array(vec![
            Value::BulkString(b"0000000000000001-7".to_vec()),
            Value::Int(2),
            Value::BulkString(raw.into_bytes()),
        ])]);
        assert_eq!(
            read_batch(answer).unwrap(),
            vec![Received {
                message: message(),
                receipt: ReceiptHandle("0000000000000001-7".into()),
                receive_count: 2,
                sent_ms: 5,
            }]
        );
        assert!(read_batch(Value::Array(vec![Value::Array(vec![Value::Int(1)])])).is_err());
        assert_eq!(read_batch(Value::Array(vec![])).unwrap(), vec![]);
    }

    #[test]
    fn stats_read_with_and_without_an_oldest_message() {
        let answer = |oldest: &str| {
            Value::Array(vec![
                Value::Int(3),
                Value::Int(1),
                Value::BulkString(oldest.as_bytes().to_vec()),
                Value::BulkString(b"50".to_vec()),
            ])
        };
        let stats = |oldest_ms| Stats {
            visible: 3,
            in_flight: 1,
            oldest_ms,
            now_ms: 50,
        };
        assert_eq!(read_stats(answer("42")).unwrap(), stats(Some(42)));
        assert_eq!(read_stats(answer("")).unwrap(), stats(None));
        assert!(
            read_stats(Value::Array(vec![
                Value::Int(-1),
                Value::Int(0),
                Value::BulkString(vec![]),
                Value::BulkString(b"50".to_vec()),
            ]))
            .is_err()
        );
        assert!(
            read_stats(Value::Array(vec![
                Value::Int(3),
                Value::Int(1),
                Value::BulkString(vec![]),
            ]))
            .is_err(),
            "the script's time is part of the answer"
        );
    }
}
