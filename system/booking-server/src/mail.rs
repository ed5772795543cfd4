//! `[mail]` on an instance: with `kind = "smtp"` the confirmation emails go
//! to the SMTP server, with `kind = "ses"` to Amazon SES (the same raw
//! message), and each one the server took is logged in the stack's own
//! output log too ([`LoggedMailer`]), so an audit of any deployment counts
//! what was sent; with `readback_maildir` (SMTP) or `readback_moto_url`
//! (SES on moto), the audit reads the emails the server delivered instead
//! (`booking_smtp::MaildirOutputs`, `booking_aws::SesMotoOutputs`).

use std::sync::Arc;

use async_trait::async_trait;
use booking::notify::{Confirmation, Mailer, NotifyError, OutputLog};

use crate::config::{ConfigError, MailConfig, MailKind};

/// Sends through `primary`; once it took the email, records it in `log`.
/// A send that failed is not logged (it is still owed, and retried). A log
/// that fails after the send does not make the send fail: the email went
/// out, and sending it again would be the repeat the design avoids.
#[derive(Debug)]
pub struct LoggedMailer {
    /// The mailer that delivers (SMTP, SES).
    pub primary: Arc<dyn Mailer>,
    /// The stack's log of sent emails.
    pub log: Arc<dyn Mailer>,
}

#[async_trait]
impl Mailer for LoggedMailer {
    async fn send(&self, confirmation: &Confirmation) -> Result<(), NotifyError> {
        self.primary.send(confirmation).await?;
        if let Err(e) = self.log.send(confirmation).await {
            tracing::warn!(payment = %confirmation.payment_id, error = %e,
                "email sent; logging it for the audit failed");
        }
        Ok(())
    }
}

/// An instance's mailer and the output log its audit reads.
pub type MailPorts = (Arc<dyn Mailer>, Arc<dyn OutputLog>);

/// The mailer and the output log of an instance under `[mail]` (checked
/// with the rest of the config, [`MailConfig::check`]), from the stack's
/// own (`log`, `outputs`); SES gets its client from `aws` (the standard
/// configuration, then `[stack.aws.sdk]`).
pub async fn mail_ports(
    mail: &MailConfig,
    aws: &booking_aws::AwsSettings,
    log: Arc<dyn Mailer>,
    outputs: Arc<dyn OutputLog>,
) -> Result<MailPorts, ConfigError> {
    match mail.kind {
        MailKind::Ses => {
            let sdk = aws.load().await;
            let ses = booking_aws::SesMailer::new(aws.ses_client(&sdk), mail.ses.clone())
                .map_err(|e| ConfigError::Invalid(format!("mail.{e}")))?;
            let mailer: Arc<dyn Mailer> = Arc::new(LoggedMailer {
                primary: Arc::new(ses),
                log,
            });
            let outputs: Arc<dyn OutputLog> = match &mail.readback_moto_url {
                Some(url) => Arc::new(booking_aws::SesMotoOutputs {
                    base: outputs,
                    moto: booking_aws::SesMotoLog::new(url, &mail.ses.from).map_err(|e| {
                        ConfigError::Invalid(format!("mail.readback_moto_url: {e}"))
                    })?,
                }),
                None => outputs,
            };
            Ok((mailer, outputs))
        }
        MailKind::Outputs => Ok((log, outputs)),
        MailKind::Smtp => {
            let smtp = booking_smtp::SmtpMailer::new(mail.smtp.clone())
                .map_err(|e| ConfigError::Invalid(format!("mail.{e}")))?;
            let mailer: Arc<dyn Mailer> = Arc::new(LoggedMailer {
                primary: Arc::new(smtp),
                log,
            });
            let outputs: Arc<dyn OutputLog> = match &mail.readback_maildir {
                Some(dir) => Arc::new(booking_smtp::MaildirOutputs {
                    base: outputs,
                    maildir: booking_smtp::MaildirLog::new(dir),
                }),
                None => outputs,
            };
            Ok((mailer, outputs))
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use booking::{CandidateHash, Level, PaymentId, SaleId};
    use recording::Recording;

    /// A recording mailer that fails when told to.
    mod recording {
        use super::*;
        use std::sync::Mutex;

        #[derive(Debug, Default)]
        pub struct Recording {
            pub sent: Mutex<Vec<Confirmation>>,
            pub fail: bool,
        }

        #[async_trait]
        impl Mailer for Recording {
            async fn send(&self, c: &Confirmation) -> Result<(), NotifyError> {
                if self.fail {
                    return Err(NotifyError::Unavailable("down".into()));
                }
                self.sent.lock().unwrap().push(c.clone());
                Ok(())
            }
        }
    }

    fn confirmation() -> Confirmation {
        Confirmation {
            sale: SaleId::parse("launch").unwrap(),
            candidate: CandidateHash::of("a"),
            level: Level::parse("floor").unwrap(),
            payment_id: PaymentId::parse("P1").unwrap(),
            trx_id: None,
            recovered: false,
        }
    }

    #[tokio::test]
    async fn only_what_the_server_took_is_logged() {
        let log = Arc::new(Recording::default());
        let down = LoggedMailer {
            primary: Arc::new(Recording {
                fail: true,
                ..Recording::default()
            }),
            log: log.clone(),
        };
        assert!(down.send(&confirmation()).await.is_err());
        assert!(log.sent.lock().unwrap().is_empty());
        let up = LoggedMailer {
            primary: Arc::new(Recording::default()),
            log: log.clone(),
        };
        up.send(&confirmation()).await.unwrap();
        assert_eq!(*log.sent.lock().unwrap(), vec![confirmation()]);
    }

    #[tokio::test]
    async fn a_log_that_fails_after_the_send_does_not_fail_the_send() {
        let primary = Arc::new(Recording::default());
        let m = LoggedMailer {
            primary: primary.clone(),
            log: Arc::new(Recording {
                fail: true,
                ..Recording::default()
            }),
        };
        m.send(&confirmation()).await.unwrap();
        assert_eq!(primary.sent.lock().unwrap().len(), 1);
    }

    #[test]
    fn a_readback_maildir_without_smtp_is_refused() {
        let c = MailConfig {
            readback_maildir: Some("/tmp/x".into()),
            ..MailConfig::default()
        };
        assert!(c.check().is_err());
        let smtp_bad = MailConfig {
            kind: MailKind::Smtp,
            smtp: booking_smtp::SmtpConfig {
                port: 0,
                ..booking_smtp::SmtpConfig::default()
            },
            ..MailConfig::default()
        };
        assert!(
            smtp_bad
                .check()
                .unwrap_err()
                .to_string()
                .contains("mail.smtp")
        );
    }
}
