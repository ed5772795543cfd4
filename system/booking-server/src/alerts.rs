//! `[alerts]` on an instance: with `kind = "sns"` every alert is published
//! to the SNS topic (`booking_aws::SnsAlerts`), and recorded in the stack's
//! own output log too ([`LoggedAlerts`]), so the audit of any deployment
//! still counts every alert raised.

use std::sync::Arc;

use async_trait::async_trait;
use booking::notify::{Alert, Alerts, NotifyError};

use crate::config::{AlertsConfig, AlertsKind, ConfigError};

/// Records each alert in `log`, then raises it through `primary`.
///
/// The record comes first and does not wait on the topic: the audit judges
/// what the system raised (a `paid_after_release` the topic never took is
/// still one), not what the pager received. Either failing is the raise's
/// error (the publish's first), which the caller logs; nobody retries an
/// alert.
#[derive(Debug)]
pub struct LoggedAlerts {
    /// Where alerts reach a human (SNS).
    pub primary: Arc<dyn Alerts>,
    /// The stack's log of alerts, which the audit reads.
    pub log: Arc<dyn Alerts>,
}

#[async_trait]
impl Alerts for LoggedAlerts {
    async fn raise(&self, alert: Alert) -> Result<(), NotifyError> {
        let logged = self.log.raise(alert.clone()).await;
        if let Err(e) = &logged {
            tracing::warn!(kind = %alert.kind, error = %e, "recording an alert for the audit failed");
        }
        let published = self.primary.raise(alert).await;
        published.and(logged)
    }
}

/// The alerts port of an instance under `[alerts]` (checked with the rest
/// of the config, [`AlertsConfig::check`]), from the stack's own (`log`);
/// SNS gets its client from `aws` (the standard configuration, then
/// `[stack.aws.sdk]`).
pub async fn alerts_port(
    alerts: &AlertsConfig,
    aws: &booking_aws::AwsSettings,
    log: Arc<dyn Alerts>,
) -> Result<Arc<dyn Alerts>, ConfigError> {
    match (alerts.kind, &alerts.topic_arn) {
        (AlertsKind::Outputs, _) => Ok(log),
        (AlertsKind::Sns, None) => Err(ConfigError::Invalid(
            "alerts.topic_arn is needed for kind = \"sns\"".into(),
        )),
        (AlertsKind::Sns, Some(arn)) => {
            let sdk = aws.load().await;
            let sns = booking_aws::SnsAlerts::new(aws.sns_client(&sdk), arn)
                .map_err(|e| ConfigError::Invalid(format!("alerts.topic_arn: {e}")))?;
            Ok(Arc::new(LoggedAlerts {
                primary: Arc::new(sns),
                log,
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::Mutex;

    /// Records what it is given; fails when told to (and records nothing).
    #[derive(Debug, Default)]
    struct Recording {
        raised: Mutex<Vec<Alert>>,
        fail: bool,
    }

    #[async_trait]
    impl Alerts for Recording {
        async fn raise(&self, alert: Alert) -> Result<(), NotifyError> {
            if self.fail {
                return Err(NotifyError::Unavailable("down".into()));
            }
            self.raised.lock().unwrap().push(alert);
            Ok(())
        }
    }

    fn alert() -> Alert {
        Alert {
            kind: "paid_after_release".into(),
            detail: "d".into(),
            candidate: None,
            payment_id: None,
        }
    }

    #[tokio::test]
    async fn an_alert_the_topic_refused_is_still_recorded_and_the_raise_fails() {
        let log = Arc::new(Recording::default());
        let down = LoggedAlerts {
            primary: Arc::new(Recording {
                fail: true,
                ..Recording::default()
            }),
            log: log.clone(),
        };
        assert!(down.raise(alert()).await.is_err());
        assert_eq!(*log.raised.lock().unwrap(), vec![alert()]);
    }

    #[tokio::test]
    async fn an_alert_goes_to_both_and_a_failed_record_is_an_error() {
        let (primary, log) = (
            Arc::new(Recording::default()),
            Arc::new(Recording::default()),
        );
        let both = LoggedAlerts {
            primary: primary.clone(),
            log: log.clone(),
        };
        both.raise(alert()).await.unwrap();
        assert_eq!(*primary.raised.lock().unwrap(), vec![alert()]);
        assert_eq!(*log.raised.lock().unwrap(), vec![alert()]);
        let unrecorded = LoggedAlerts {
            primary: primary.clone(),
            log: Arc::new(Recording {
                fail: true,
                ..Recording::default()
            }),
        };
        assert!(unrecorded.raise(alert()).await.is_err());
        assert_eq!(
            primary.raised.lock().unwrap().len(),
            2,
            "published all the same"
        );
    }

    #[tokio::test]
    async fn without_sns_the_stack_s_own_log_is_the_port() {
        let log: Arc<dyn Alerts> = Arc::new(Recording::default());
        let port = alerts_port(
            &AlertsConfig::default(),
            &booking_aws::AwsSettings::default(),
            log.clone(),
        )
        .await
        .unwrap();
        assert!(Arc::ptr_eq(&port, &log));
    }
}
