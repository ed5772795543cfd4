//! The names of everything the AWS stack uses, from one prefix, checked
//! against each service's rules before any call.

use serde::{Deserialize, Serialize};

/// The prefix when none is given.
pub const PREFIX_DEFAULT: &str = "sellout";
/// The status document's key when none is given.
pub const STATUS_KEY_DEFAULT: &str = "status.json";

/// The table, the queues and the bucket of one deployment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    /// The DynamoDB table.
    pub table: String,
    /// The admission queue (FIFO, `.fifo`).
    pub queue: String,
    /// Its dead-letter queue (FIFO, `.fifo`).
    pub dead_letter_queue: String,
    /// The stream mappings' on-failure queue (standard).
    pub failure_queue: String,
    /// The bucket of the status document.
    pub bucket: String,
    /// The status document's key.
    pub status_key: String,
}

impl Resources {
    /// Every name from `prefix`: `<prefix>-bookings`, `<prefix>-admissions.fifo`,
    /// `<prefix>-admissions-dlq.fifo`, `<prefix>-stream-failures`,
    /// `<prefix>-status`. Refuses a prefix that makes an invalid name.
    pub fn named(prefix: &str) -> Result<Resources, String> {
        let r = Resources {
            table: format!("{prefix}-bookings"),
            queue: format!("{prefix}-admissions.fifo"),
            dead_letter_queue: format!("{prefix}-admissions-dlq.fifo"),
            failure_queue: format!("{prefix}-stream-failures"),
            bucket: format!("{prefix}-status"),
            status_key: STATUS_KEY_DEFAULT.to_owned(),
        };
        r.check()?;
        Ok(r)
    }

    /// Each service's naming rules.
    pub fn check(&self) -> Result<(), String> {
        let table_ok = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.');
        if !(3..=255).contains(&self.table.len()) || !self.table.bytes().all(table_ok) {
            return Err(format!(
                "table name {:?}: 3..=255 of [A-Za-z0-9_.-]",
                self.table
            ));
        }
        let queue_ok = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-');
        for (name, fifo) in [
            (&self.queue, true),
            (&self.dead_letter_queue, true),
            (&self.failure_queue, false),
        ] {
            let stem = if fifo {
                name.strip_suffix(".fifo")
                    .ok_or_else(|| format!("queue {name:?} must end in .fifo"))?
            } else {
                name.as_str()
            };
            if name.len() > 80 || stem.is_empty() || !stem.bytes().all(queue_ok) {
                return Err(format!(
                    "queue name {name:?}: at most 80 of [A-Za-z0-9_-]{}",
                    if fifo { " plus .fifo" } else { "" }
                ));
            }
        }
        let bucket_ok =
            |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'.');
        let b = self.bucket.as_bytes();
        if !(3..=63).contains(&b.len())
            || !b.iter().copied().all(bucket_ok)
            || !b[0].is_ascii_alphanumeric()
            || !b[b.len() - 1].is_ascii_alphanumeric()
        {
            return Err(format!(
                "bucket name {:?}: 3..=63 of [a-z0-9.-], starting and ending with a letter or digit",
                self.bucket
            ));
        }
        if self.status_key.is_empty() || self.status_key.len() > 1024 {
            return Err("status key: 1..=1024 bytes".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_the_prefix_and_bad_ones_are_refused() {
        let r = Resources::named("sellout").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.table, "sellout-bookings");
        assert_eq!(r.queue, "sellout-admissions.fifo");
        assert_eq!(r.dead_letter_queue, "sellout-admissions-dlq.fifo");
        assert_eq!(r.failure_queue, "sellout-stream-failures");
        assert_eq!(r.bucket, "sellout-status");
        for bad in ["Upper", "a b", &"p".repeat(70), "under_score"] {
            assert!(Resources::named(bad).is_err(), "{bad:?}");
        }
        let mut r2 = r.clone();
        r2.queue = "plain".into();
        assert!(r2.check().unwrap_err().contains(".fifo"));
    }
}
