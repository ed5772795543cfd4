//! Confirmation emails over Amazon SES (API v2): [`SesMailer`], a
//! [`Mailer`] that sends each confirmation with `SendEmail` as raw content,
//! the very MIME message the SMTP mailer sends (`booking_smtp::compose_with`:
//! the stable Message-ID, the candidate's address, the `X-Sellout-*`
//! headers), so `booking_smtp::read_back` reads either back.
//!
//! SES itself replaces a raw message's `Message-ID` with its own (the
//! `X-Sellout-*` headers, which name the booking, go through unchanged);
//! moto keeps the message as sent. ARCHITECTURE.md lists the gap.
//!
//! Every send has one bound over all its attempts
//! ([`SesConfig::send_timeout_ms`]); a send that fails or runs out of it is
//! `NotifyError::Unavailable`, never a panic. As over SMTP, a send that
//! timed out may still have been accepted: the email is then still owed and
//! the sweep may send it again, which the audit allows once.

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sesv2::primitives::Blob;
use aws_sdk_sesv2::types::{Destination, EmailContent, RawMessage};
use booking::notify::{Confirmation, Mailer, NotifyError};
use booking_smtp::Addressing;
use serde::{Deserialize, Serialize};

use crate::errors::Failure;

/// [`SesConfig::send_timeout_ms`] by default: one send, every attempt
/// included, at most this long (the SMTP mailer's bound).
pub const SES_SEND_TIMEOUT_MS: u64 = 10_000;
/// The longest configuration set name SES takes.
pub const CONFIGURATION_SET_LEN_MAX: usize = 64;

/// The SES mailer's settings (`[mail.ses]` in a server's config).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SesConfig {
    /// The `From` address, e.g. `Tickets <tickets@example.com>`: an
    /// identity verified in SES (the address or its domain). No default:
    /// SES refuses any other sender.
    pub from: String,
    /// A candidate's address is `<candidate hash>@<recipient_domain>`.
    pub recipient_domain: String,
    /// The right-hand side of every Message-ID.
    pub message_id_domain: String,
    /// The SES configuration set each send names (event publishing,
    /// dedicated IPs); none: the identity's default.
    pub configuration_set: Option<String>,
    /// The longest wait for one send, every attempt included, ms.
    pub send_timeout_ms: u64,
}

impl Default for SesConfig {
    fn default() -> SesConfig {
        let smtp = booking_smtp::SmtpConfig::default();
        SesConfig {
            from: String::new(),
            recipient_domain: smtp.recipient_domain,
            message_id_domain: smtp.message_id_domain,
            configuration_set: None,
            send_timeout_ms: SES_SEND_TIMEOUT_MS,
        }
    }
}

/// Settings an SES mailer cannot work with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SesConfigError {
    /// A setting is wrong.
    #[error("ses: {0}")]
    Invalid(String),
}

impl SesConfig {
    /// What composing an email takes of these settings.
    pub fn addressing(&self) -> Addressing<'_> {
        Addressing {
            from: &self.from,
            recipient_domain: &self.recipient_domain,
            message_id_domain: &self.message_id_domain,
        }
    }

    /// The longest wait for one send.
    pub fn send_timeout(&self) -> Duration {
        Duration::from_millis(self.send_timeout_ms)
    }

    /// Checks the settings: a `From` address, domains, a configuration set
    /// name SES takes, a send bound of at least 1 ms.
    pub fn check(&self) -> Result<(), SesConfigError> {
        let invalid = |m: String| Err(SesConfigError::Invalid(m));
        if self.from.trim().is_empty() {
            return invalid("from is empty: set the SES-verified sender address".into());
        }
        self.addressing().check().map_err(SesConfigError::Invalid)?;
        if let Some(set) = &self.configuration_set {
            let ok = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'_';
            if set.is_empty() || set.len() > CONFIGURATION_SET_LEN_MAX || !set.bytes().all(ok) {
                return invalid(format!(
                    "configuration_set {set:?}: 1..={CONFIGURATION_SET_LEN_MAX} of [A-Za-z0-9_-]"
                ));
            }
        }
        if self.send_timeout_ms == 0 {
            return invalid("send_timeout_ms must be at least 1".into());
        }
        Ok(())
    }
}

/// Sends each confirmation as one raw email through SES v2 `SendEmail`.
#[derive(Debug, Clone)]
pub struct SesMailer {
    client: aws_sdk_sesv2::Client,
    config: SesConfig,
}

impl SesMailer {
    /// A mailer on `client` (`AwsSettings::ses_client`) with `config`,
    /// checked first. Nothing is sent until the first confirmation.
    pub fn new(
        client: aws_sdk_sesv2::Client,
        config: SesConfig,
    ) -> Result<SesMailer, SesConfigError> {
        config.check()?;
        Ok(SesMailer { client, config })
    }

    /// Its settings.
    pub fn config(&self) -> &SesConfig {
        &self.config
    }
}

fn unavailable(why: impl std::fmt::Display) -> NotifyError {
    NotifyError::Unavailable(format!("ses SendEmail: {why}"))
}

#[async_trait]
impl Mailer for SesMailer {
    async fn send(&self, confirmation: &Confirmation) -> Result<(), NotifyError> {
        let a = self.config.addressing();
        let raw = booking_smtp::compose_with(confirmation, a)
            .map_err(unavailable)?
            .formatted();
        let to = booking_smtp::recipient(confirmation, a.recipient_domain);
        let content = EmailContent::builder()
            .raw(
                RawMessage::builder()
                    .data(Blob::new(raw))
                    .build()
                    .map_err(unavailable)?,
            )
            .build();
        let request = self
            .client
            .send_email()
            .from_email_address(&self.config.from)
            .destination(Destination::builder().to_addresses(to).build())
            .content(content)
            .set_configuration_set_name(self.config.configuration_set.clone());
        match tokio::time::timeout(self.config.send_timeout(), request.send()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => {
                let f = Failure::of(&e);
                Err(unavailable(match f.code {
                    Some(code) => format!("{code}: {}", f.message),
                    None => f.message,
                }))
            }
            Err(_) => Err(unavailable(format!(
                "no answer within send_timeout_ms = {} (it may still have been sent)",
                self.config.send_timeout_ms
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn good() -> SesConfig {
        SesConfig {
            from: "Tickets <tickets@sellout.invalid>".into(),
            ..SesConfig::default()
        }
    }

    #[test]
    fn the_default_has_no_sender_and_is_refused() {
        let e = SesConfig::default().check().unwrap_err().to_string();
        assert!(e.contains("from is empty"), "{e}");
        good().check().unwrap();
    }

    #[test]
    fn nonsense_is_refused_naming_the_setting() {
        let cases = [
            (
                SesConfig {
                    from: "not an address".into(),
                    ..good()
                },
                "from",
            ),
            (
                SesConfig {
                    recipient_domain: "bad domain".into(),
                    ..good()
                },
                "recipient_domain",
            ),
            (
                SesConfig {
                    message_id_domain: String::new(),
                    ..good()
                },
                "message_id_domain",
            ),
            (
                SesConfig {
                    configuration_set: Some("has space".into()),
                    ..good()
                },
                "configuration_set",
            ),
            (
                SesConfig {
                    configuration_set: Some("x".repeat(65)),
                    ..good()
                },
                "configuration_set",
            ),
            (
                SesConfig {
                    send_timeout_ms: 0,
                    ..good()
                },
                "send_timeout_ms",
            ),
        ];
        for (config, setting) in cases {
            let e = config.check().unwrap_err().to_string();
            assert!(e.starts_with("ses: ") && e.contains(setting), "{e}");
        }
        SesConfig {
            configuration_set: Some("sellout-mail_1".into()),
            ..good()
        }
        .check()
        .unwrap();
    }

    #[test]
    fn a_config_file_spells_it_so() {
        let c: SesConfig = serde_json::from_str(
            r#"{"from": "tickets@example.com", "configuration_set": "sale", "send_timeout_ms": 2500}"#,
        )
        .unwrap();
        assert_eq!(c.send_timeout(), Duration::from_millis(2500));
        assert_eq!(c.configuration_set.as_deref(), Some("sale"));
        assert_eq!(c.recipient_domain, SesConfig::default().recipient_domain);
        assert!(serde_json::from_str::<SesConfig>(r#"{"made_up": 1}"#).is_err());
    }
}
