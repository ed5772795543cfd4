//! The SMTP mailer's settings, checked before anything connects.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::compose::Addressing;

/// How the connection is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SmtpTls {
    /// Plain text (a local relay on loopback).
    None,
    /// Plain, then `STARTTLS`, required: a server that does not offer it is
    /// an error (port 587).
    Starttls,
    /// TLS from the first byte (port 465).
    Tls,
}

/// The SMTP mailer's settings (`[mail.smtp]` in a server's config).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SmtpConfig {
    /// The server's host name (checked against its certificate under TLS).
    pub host: String,
    /// The server's port.
    pub port: u16,
    /// How the connection is secured.
    pub tls: SmtpTls,
    /// AUTH user name; none: no AUTH.
    pub username: Option<String>,
    /// The name of the environment variable that holds the password (a
    /// password is never written in a config file).
    pub password_env: Option<String>,
    /// A PEM file of extra root certificates (a private CA), trusted beside
    /// the webpki roots.
    pub ca_file: Option<PathBuf>,
    /// The `From` address, e.g. `Tickets <tickets@example.com>`.
    pub from: String,
    /// A candidate's address is `<candidate hash>@<recipient_domain>` (the
    /// system keeps no address of its own: the hash is the identity).
    pub recipient_domain: String,
    /// The right-hand side of every Message-ID.
    pub message_id_domain: String,
    /// The longest wait for one send, ms.
    pub timeout_ms: u64,
    /// Connections kept open at most.
    pub pool_max: u32,
}

/// [`SmtpConfig::port`] by default: the submission port.
pub const SMTP_PORT: u16 = 587;
/// [`SmtpConfig::timeout_ms`] by default.
pub const SMTP_TIMEOUT_MS: u64 = 10_000;
/// [`SmtpConfig::pool_max`] by default.
pub const SMTP_POOL_MAX: u32 = 8;

impl Default for SmtpConfig {
    fn default() -> SmtpConfig {
        SmtpConfig {
            host: "127.0.0.1".into(),
            port: SMTP_PORT,
            tls: SmtpTls::Starttls,
            username: None,
            password_env: None,
            ca_file: None,
            from: "Tickets <tickets@sellout.invalid>".into(),
            recipient_domain: "candidates.sellout.invalid".into(),
            message_id_domain: "sellout.invalid".into(),
            timeout_ms: SMTP_TIMEOUT_MS,
            pool_max: SMTP_POOL_MAX,
        }
    }
}

/// Settings that cannot work, or would leak a password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A setting is wrong.
    #[error("smtp: {0}")]
    Invalid(String),
}

fn invalid(why: impl Into<String>) -> ConfigError {
    ConfigError::Invalid(why.into())
}

impl SmtpConfig {
    /// What composing an email takes of these settings.
    pub fn addressing(&self) -> Addressing<'_> {
        Addressing {
            from: &self.from,
            recipient_domain: &self.recipient_domain,
            message_id_domain: &self.message_id_domain,
        }
    }

    /// The longest wait for one send.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    /// Whether the server is on this machine (a name or address of loopback).
    pub fn loopback(&self) -> bool {
        self.host == "localhost"
            || self
                .host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }

    /// Checks the settings: a host, a port, domains, a `From` address, a
    /// password source with a username and none without, and no credentials
    /// over plain text to another host.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.host.trim().is_empty() {
            return Err(invalid("host is empty"));
        }
        if self.port == 0 {
            return Err(invalid("port 0"));
        }
        self.addressing().check().map_err(invalid)?;
        if self.timeout_ms == 0 || self.pool_max == 0 {
            return Err(invalid("timeout_ms and pool_max must be at least 1"));
        }
        match (&self.username, &self.password_env) {
            (Some(_), None) => {
                return Err(invalid(
                    "a username needs password_env (the variable holding the password)",
                ));
            }
            (None, Some(_)) => return Err(invalid("password_env without a username")),
            _ => {}
        }
        if self.username.is_some() && self.tls == SmtpTls::None && !self.loopback() {
            return Err(invalid(format!(
                "credentials over plain text to {}: set tls = \"starttls\" or \"tls\"",
                self.host
            )));
        }
        Ok(())
    }

    /// The password, read from [`SmtpConfig::password_env`].
    pub fn password(&self) -> Result<Option<String>, ConfigError> {
        match &self.password_env {
            None => Ok(None),
            Some(var) => std::env::var(var).map(Some).map_err(|_| {
                invalid(format!(
                    "the environment variable {var} (password_env) is not set"
                ))
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_default_is_valid_and_secured() {
        let c = SmtpConfig::default();
        c.check().unwrap();
        assert_eq!(c.tls, SmtpTls::Starttls);
        assert_eq!(c.port, 587);
    }

    #[test]
    fn credentials_never_go_plain_to_another_host() {
        let c = SmtpConfig {
            host: "smtp.example.com".into(),
            tls: SmtpTls::None,
            username: Some("u".into()),
            password_env: Some("P".into()),
            ..SmtpConfig::default()
        };
        assert!(c.check().unwrap_err().to_string().contains("plain text"));
        let local = SmtpConfig {
            host: "127.0.0.1".into(),
            ..c.clone()
        };
        local.check().unwrap();
        let secured = SmtpConfig {
            tls: SmtpTls::Starttls,
            ..c
        };
        secured.check().unwrap();
    }

    #[test]
    fn bad_settings_are_named() {
        let bad = [
            SmtpConfig {
                host: " ".into(),
                ..SmtpConfig::default()
            },
            SmtpConfig {
                port: 0,
                ..SmtpConfig::default()
            },
            SmtpConfig {
                recipient_domain: "a b".into(),
                ..SmtpConfig::default()
            },
            SmtpConfig {
                message_id_domain: "".into(),
                ..SmtpConfig::default()
            },
            SmtpConfig {
                from: "not an address".into(),
                ..SmtpConfig::default()
            },
            SmtpConfig {
                username: Some("u".into()),
                ..SmtpConfig::default()
            },
            SmtpConfig {
                password_env: Some("P".into()),
                ..SmtpConfig::default()
            },
            SmtpConfig {
                timeout_ms: 0,
                ..SmtpConfig::default()
            },
        ];
        for c in bad {
            assert!(c.check().is_err(), "{c:?}");
        }
    }

    #[test]
    fn a_missing_password_variable_is_an_error() {
        let c = SmtpConfig {
            username: Some("u".into()),
            password_env: Some("SELLOUT_TEST_NO_SUCH_VARIABLE_9F3A".into()),
            ..SmtpConfig::default()
        };
        assert!(c.password().is_err());
        assert_eq!(SmtpConfig::default().password().unwrap(), None);
    }
}
