//! [`SmtpMailer`]: the confirmation emails over SMTP.

use async_trait::async_trait;
use booking::notify::{Confirmation, Mailer, NotifyError};
use lettre::transport::smtp::PoolConfig;
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};

use crate::compose::compose;
use crate::config::{ConfigError, SmtpConfig, SmtpTls};

/// Sends each confirmation as one email over SMTP ([`compose`]).
pub struct SmtpMailer {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    config: SmtpConfig,
}

impl std::fmt::Debug for SmtpMailer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmtpMailer")
            .field("host", &self.config.host)
            .field("port", &self.config.port)
            .field("tls", &self.config.tls)
            .field("username", &self.config.username)
            .finish_non_exhaustive()
    }
}

fn invalid(why: impl std::fmt::Display) -> ConfigError {
    ConfigError::Invalid(why.to_string())
}

impl SmtpMailer {
    /// A mailer on `config`, its password read from `password_env`.
    /// Nothing connects until the first send.
    pub fn new(config: SmtpConfig) -> Result<SmtpMailer, ConfigError> {
        let password = config.password()?;
        SmtpMailer::with_password(config, password)
    }

    /// A mailer on `config` with the password given (tests; a caller that
    /// reads it from a secret store).
    pub fn with_password(
        config: SmtpConfig,
        password: Option<String>,
    ) -> Result<SmtpMailer, ConfigError> {
        config.check()?;
        let mut builder =
            AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(config.host.clone())
                .port(config.port)
                .timeout(Some(config.timeout()))
                .pool_config(PoolConfig::new().max_size(config.pool_max));
        if config.tls != SmtpTls::None {
            let mut params = TlsParameters::builder(config.host.clone());
            if let Some(path) = &config.ca_file {
                let pem = std::fs::read(path)
                    .map_err(|e| invalid(format!("ca_file {}: {e}", path.display())))?;
                let cert = Certificate::from_pem(&pem)
                    .map_err(|e| invalid(format!("ca_file {}: {e}", path.display())))?;
                params = params.add_root_certificate(cert);
            }
            let params = params.build().map_err(invalid)?;
            builder = builder.tls(match config.tls {
                SmtpTls::Starttls => Tls::Required(params),
                _ => Tls::Wrapper(params),
            });
        }
        match (&config.username, password) {
            (Some(user), Some(password)) => {
                builder = builder.credentials(Credentials::new(user.clone(), password));
            }
            (Some(_), None) => return Err(invalid("a username and no password")),
            (None, _) => {}
        }
        Ok(SmtpMailer {
            transport: builder.build(),
            config,
        })
    }

    /// The settings.
    pub fn config(&self) -> &SmtpConfig {
        &self.config
    }
}

#[async_trait]
impl Mailer for SmtpMailer {
    async fn send(&self, confirmation: &Confirmation) -> Result<(), NotifyError> {
        let message = compose(confirmation, &self.config)
            .map_err(|e| NotifyError::Unavailable(e.to_string()))?;
        // one bound on the whole send (connect, TLS, AUTH, envelope, data):
        // lettre's timeout covers each read, not a server that trickles
        let why =
            match tokio::time::timeout(self.config.timeout(), self.transport.send(message)).await {
                Ok(Ok(_)) => return Ok(()),
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!(
                    "no answer within {} ms (the server may still deliver it)",
                    self.config.timeout_ms
                ),
            };
        tracing::warn!(host = %self.config.host, port = self.config.port,
            payment = %confirmation.payment_id, error = %why, "smtp send failed");
        Err(NotifyError::Unavailable(format!(
            "smtp {}:{}: {why}",
            self.config.host, self.config.port
        )))
    }
}
