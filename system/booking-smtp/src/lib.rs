//! Confirmation emails over SMTP, and what a mail server received read back.
//!
//! - [`SmtpMailer`] is a [`booking::notify::Mailer`] on `lettre`'s async
//!   SMTP transport: plain, STARTTLS or implicit TLS (rustls, the webpki
//!   roots plus an optional CA file), AUTH when a username is set, a pool of
//!   connections, one bound on each whole send. Every failure is
//!   `NotifyError::Unavailable`; a failure after the message's data was sent
//!   leaves its outcome unknown (the server may have delivered it), which is
//!   why each email carries a stable Message-ID.
//! - [`compose`] (pure) turns a [`Confirmation`] into the message: the
//!   stable Message-ID ([`Confirmation::message_id`]), the candidate's
//!   address (`<hash>@<recipient_domain>`), a text body, and `X-Sellout-*`
//!   headers that say which booking it confirms, so [`read_back`] (pure)
//!   recovers the [`Confirmation`] from the raw message a server stored.
//!   [`compose_with`] is the same message for another transport (SES in
//!   `booking-aws` sends it raw), from an [`Addressing`].
//! - [`MaildirLog`] reads every message delivered into a Maildir (the one
//!   `scripts/smtp-sink` writes), for a rehearsal's audit.
//!
//! Credentials never cross a plain connection to another host:
//! [`SmtpConfig::check`] refuses a username without TLS unless the server
//! is on loopback.
//!
//! [`Confirmation`]: booking::notify::Confirmation
//! [`Confirmation::message_id`]: booking::notify::Confirmation::message_id

mod compose;
mod config;
mod maildir;
mod mailer;

pub use compose::{
    Addressing, ComposeError, Delivered, HEADER_CANDIDATE, HEADER_LEVEL, HEADER_PAYMENT,
    HEADER_RECOVERED, HEADER_SALE, HEADER_TRX, compose, compose_with, read_back, recipient,
};
pub use config::{ConfigError, SmtpConfig, SmtpTls};
pub use maildir::{MaildirLog, MaildirOutputs};
pub use mailer::SmtpMailer;
