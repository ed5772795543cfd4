//! Alerts to a human over Amazon SNS: [`SnsAlerts`], an [`Alerts`] that
//! publishes each [`Alert`] as JSON (the message) with a short subject
//! ([`subject`]) to one topic, which fans it out (email, chat, a pager, an
//! SQS queue).
//!
//! A publish has one bound over all its attempts ([`PUBLISH_TIMEOUT`]):
//! alerts are raised on the request path too. A publish that fails is
//! `NotifyError::Unavailable`, never a panic; the server also records
//! every alert in the stack's own log, which the audit reads.

use std::time::Duration;

use async_trait::async_trait;
use booking::notify::{Alert, Alerts, NotifyError};

use crate::errors::Failure;

/// One publish, every attempt included, at most this long.
pub const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);
/// SNS's limit on a subject: ASCII, no control characters, under 100.
pub const SUBJECT_LEN_MAX: usize = 99;
/// What every subject starts with.
pub const SUBJECT_PREFIX: &str = "sellout alert: ";

/// The subject of `alert`'s message: [`SUBJECT_PREFIX`] and its kind, as
/// SNS takes it (printable ASCII, at most [`SUBJECT_LEN_MAX`]; anything
/// else becomes `?`). Pure.
pub fn subject(alert: &Alert) -> String {
    let kind: String = alert
        .kind
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect();
    let mut s = format!("{SUBJECT_PREFIX}{kind}");
    s.truncate(SUBJECT_LEN_MAX);
    s
}

/// Checks a topic ARN: `arn:<partition>:sns:<region>:<12-digit
/// account>:<name>` (name: letters, digits, `-`, `_`, an optional `.fifo`).
pub fn check_topic_arn(arn: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("topic ARN {arn:?}: {why}"));
    let parts: Vec<&str> = arn.split(':').collect();
    let [scheme, partition, service, region, account, name] = parts.as_slice() else {
        return bad("expected arn:<partition>:sns:<region>:<account>:<name>");
    };
    if *scheme != "arn" || !partition.starts_with("aws") || *service != "sns" {
        return bad("expected arn:<partition>:sns:…");
    }
    if region.is_empty() {
        return bad("no region");
    }
    if account.len() != 12 || !account.bytes().all(|b| b.is_ascii_digit()) {
        return bad("the account is 12 digits");
    }
    let base = name.strip_suffix(".fifo").unwrap_or(name);
    let ok = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'_';
    if base.is_empty() || name.len() > 256 || !base.bytes().all(ok) {
        return bad("the topic name is 1..=256 of [A-Za-z0-9_-] (and .fifo)");
    }
    Ok(())
}

/// Publishes each alert to one SNS topic.
#[derive(Debug, Clone)]
pub struct SnsAlerts {
    client: aws_sdk_sns::Client,
    topic_arn: String,
    timeout: Duration,
}

impl SnsAlerts {
    /// Alerts to `topic_arn` (checked) on `client` (`AwsSettings::sns_client`),
    /// each publish bounded by [`PUBLISH_TIMEOUT`].
    pub fn new(client: aws_sdk_sns::Client, topic_arn: &str) -> Result<SnsAlerts, String> {
        check_topic_arn(topic_arn)?;
        Ok(SnsAlerts {
            client,
            topic_arn: topic_arn.to_owned(),
            timeout: PUBLISH_TIMEOUT,
        })
    }

    /// The same with another bound on each publish.
    pub fn with_timeout(self, timeout: Duration) -> SnsAlerts {
        SnsAlerts { timeout, ..self }
    }

    /// The topic.
    pub fn topic_arn(&self) -> &str {
        &self.topic_arn
    }
}

fn unavailable(why: impl std::fmt::Display) -> NotifyError {
    NotifyError::Unavailable(format!("sns Publish: {why}"))
}

#[async_trait]
impl Alerts for SnsAlerts {
    async fn raise(&self, alert: Alert) -> Result<(), NotifyError> {
        let message = serde_json::to_string(&alert).map_err(unavailable)?;
        let request = self
            .client
            .publish()
            .topic_arn(&self.topic_arn)
            .subject(subject(&alert))
            .message(message);
        match tokio::time::timeout(self.timeout, request.send()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => {
                let f = Failure::of(&e);
                Err(unavailable(match f.code {
                    Some(code) => format!("{code}: {} ({})", f.message, self.topic_arn),
                    None => format!("{} ({})", f.message, self.topic_arn),
                }))
            }
            Err(_) => Err(unavailable(format!(
                "no answer within {} ms ({})",
                self.timeout.as_millis(),
                self.topic_arn
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn alert(kind: &str) -> Alert {
        Alert {
            kind: kind.into(),
            detail: "d".into(),
            candidate: None,
            payment_id: None,
        }
    }

    #[test]
    fn a_subject_is_short_printable_ascii() {
        assert_eq!(
            subject(&alert("paid_after_release")),
            "sellout alert: paid_after_release"
        );
        let s = subject(&alert(&format!("line\nbreak é {}", "x".repeat(200))));
        assert_eq!(s.len(), SUBJECT_LEN_MAX);
        assert!(s.starts_with("sellout alert: line?break ? x"), "{s}");
        assert!(s.bytes().all(|b| b.is_ascii_graphic() || b == b' '));
    }

    #[test]
    fn topic_arns_are_checked() {
        for good in [
            "arn:aws:sns:ap-southeast-1:123456789012:sellout-alerts",
            "arn:aws-cn:sns:cn-north-1:123456789012:a_b.fifo",
        ] {
            check_topic_arn(good).unwrap();
        }
        for bad in [
            "",
            "sellout-alerts",
            "arn:aws:sqs:us-east-1:123456789012:q",
            "arn:aws:sns::123456789012:t",
            "arn:aws:sns:us-east-1:1234:t",
            "arn:aws:sns:us-east-1:123456789012:",
            "arn:aws:sns:us-east-1:123456789012:has space",
            "arn:aws:sns:us-east-1:123456789012:t:extra",
        ] {
            assert!(check_topic_arn(bad).is_err(), "{bad:?} accepted");
        }
    }
}
