//! `--mail smtp|ses`: a rehearsal whose confirmation emails go through a
//! real mail server, counted from what that server delivered.
//!
//! - `smtp`: the project's SMTP server, `scripts/smtp-sink` (aiosmtpd from
//!   the venv `scripts/setup` makes), on a free loopback port, delivering
//!   into `maildir/` in the run folder ([`SmtpSink`], killed when dropped).
//!   Every instance gets `[mail] kind = "smtp"` with `readback_maildir`.
//! - `ses`: Amazon SES v2 on the local emulators' moto (`--stack aws`
//!   only): a sender of the run's own is verified in moto first
//!   (`CreateEmailIdentity`), then every instance gets `[mail] kind = "ses"`
//!   with `readback_moto_url`.
//!
//! Either way the audit's `one_email_per_paid` counts what the server
//! delivered, and the rehearsal reads it back once more itself after the
//! audit ([`MailServer::delivered`], [`figures`]) for the report.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use booking_server::config::{AwsStackConfig, MailConfig, MailKind, StackKind};
use booking_smtp::{Delivered, MaildirLog};
use reports::MailFigures;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::profile::Profile;

/// How long the sink may take to say where it listens (a cold venv on a
/// busy machine imports slowly).
pub const SINK_START_MAX: Duration = Duration::from_secs(30);
/// The sink's own bound on its life (`--max-seconds`): it is killed when
/// the rehearsal ends; this only stops one whose rehearsal died without
/// running destructors (SIGKILL), well after any rehearsal would be over.
pub const SINK_LIFETIME_MAX: Duration = Duration::from_secs(6 * 3600);
/// The sink's log in the run folder.
pub const SINK_LOG: &str = "smtp-sink.log";
/// The Maildir's folder in the run folder.
pub const MAILDIR: &str = "maildir";
/// The domain of a rehearsal's SES sender (never a real one).
pub const SES_SENDER_DOMAIN: &str = "sellout.invalid";

/// Where a rehearsal's confirmation emails go (`--mail`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Mail {
    /// The stack's own output log, nothing sent (the default).
    #[default]
    Outputs,
    /// `scripts/smtp-sink`, read back from its Maildir in the run folder.
    Smtp,
    /// SES on moto (`--stack aws`), read back from moto's state document.
    Ses,
}

impl Mail {
    /// `outputs`, `smtp` or `ses`.
    pub fn name(self) -> &'static str {
        match self {
            Mail::Outputs => "outputs",
            Mail::Smtp => "smtp",
            Mail::Ses => "ses",
        }
    }

    /// Why `self` cannot run on `stack` (a remote target when `target`),
    /// or `None` (pure).
    pub fn refusal(self, stack: StackKind, target: bool) -> Option<String> {
        match self {
            Mail::Outputs => None,
            _ if target => Some(format!(
                "--mail {}: a remote target mails as its own booking.toml says ([mail]); rehearse a local fleet, or drop --mail",
                self.name()
            )),
            Mail::Ses if stack != StackKind::Aws => Some(format!(
                "--mail ses needs --stack aws (the stack is {stack:?}): SES is reached and its emails read back on the local emulators' moto (stack.aws.sdk.endpoints.ses); --mail smtp works on every stack"
            )),
            Mail::Smtp | Mail::Ses => None,
        }
    }
}

/// Why the mail server could not start or be read.
#[derive(Debug, thiserror::Error)]
pub enum MailError {
    /// The profile's mail cannot run where it asks to.
    #[error("{0}")]
    Refused(String),
    /// The project's venv (with aiosmtpd) is missing.
    #[error(
        "--mail smtp starts scripts/smtp-sink with the project's venv, and {0} is missing: run scripts/setup (it makes .venv and installs aiosmtpd)"
    )]
    NoVenv(PathBuf),
    /// The sink did not start.
    #[error("smtp-sink: {0}")]
    Sink(String),
    /// SES on moto could not be set up.
    #[error("--mail ses: {0}")]
    Ses(String),
    /// What the server delivered could not be read.
    #[error("reading the emails back from {0}: {1}")]
    ReadBack(String, String),
}

/// The repository's root (this crate's parent folder).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `scripts/smtp-sink` on a free loopback port, delivering into a Maildir;
/// SIGKILLed when dropped (the end of the rehearsal, a failure, Ctrl-C).
#[derive(Debug)]
pub struct SmtpSink {
    child: Child,
    /// Where it listens.
    pub port: u16,
    /// Where it delivers.
    pub maildir: PathBuf,
}

impl SmtpSink {
    /// Starts the sink delivering into `maildir` (made a Maildir), its
    /// stderr appended to `log`; waits for its `listening on` line.
    pub async fn start(maildir: &Path, log: &Path) -> Result<SmtpSink, MailError> {
        SmtpSink::start_with(&root().join(".venv/bin/python"), maildir, log).await
    }

    /// [`SmtpSink::start`] with the venv's `python`.
    async fn start_with(python: &Path, maildir: &Path, log: &Path) -> Result<SmtpSink, MailError> {
        let python = python.to_owned();
        if !python.is_file() {
            return Err(MailError::NoVenv(python));
        }
        let sink = |m: String| MailError::Sink(m);
        std::fs::create_dir_all(maildir)
            .map_err(|e| sink(format!("creating {}: {e}", maildir.display())))?;
        let err = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| sink(format!("opening {}: {e}", log.display())))?;
        let mut child = Command::new(&python)
            .arg(root().join("scripts/smtp-sink"))
            .arg("--maildir")
            .arg(maildir)
            .args(["--max-seconds", &SINK_LIFETIME_MAX.as_secs().to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(err))
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| sink(format!("starting {}: {e}", python.display())))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| sink("no stdout".into()))?;
        let mut line = String::new();
        let mut reader = BufReader::new(stdout);
        let read = reader.read_line(&mut line);
        // on any error below, dropping `child` kills it
        match tokio::time::timeout(SINK_START_MAX, read).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(sink(format!("reading its first line: {e}"))),
            Err(_) => {
                return Err(sink(format!(
                    "said nothing within {SINK_START_MAX:?}; see {}",
                    log.display()
                )));
            }
        }
        let port = listening_port(&line).ok_or_else(|| {
            sink(format!(
                "printed {:?} instead of where it listens (is aiosmtpd installed? run scripts/setup); see {}",
                line.trim(),
                log.display()
            ))
        })?;
        tracing::info!(port, maildir = %maildir.display(), "smtp-sink listens");
        Ok(SmtpSink {
            child,
            port,
            maildir: maildir.to_owned(),
        })
    }

    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.try_wait();
    }
}

/// The port of the sink's `smtp-sink listening on 127.0.0.1:<port>` line
/// (pure).
pub fn listening_port(line: &str) -> Option<u16> {
    line.trim()
        .strip_prefix("smtp-sink listening on ")?
        .rsplit_once(':')?
        .1
        .parse()
        .ok()
        .filter(|p| *p != 0)
}

/// The moto server SES goes to: `stack.aws.sdk.endpoints.ses`, else
/// `.all`, else `AWS_ENDPOINT_URL_SESV2`, else `AWS_ENDPOINT_URL` (the
/// order the SDK client picks them in).
pub fn ses_endpoint(aws: &AwsStackConfig) -> Option<String> {
    let e = &aws.sdk.endpoints;
    e.ses
        .clone()
        .or_else(|| e.all.clone())
        .or_else(|| std::env::var("AWS_ENDPOINT_URL_SESV2").ok())
        .or_else(|| std::env::var("AWS_ENDPOINT_URL").ok())
        .filter(|u| !u.trim().is_empty())
}

/// An error and its sources, on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        next = cause.source();
    }
    s
}

/// The mail server of a rehearsal.
#[derive(Debug)]
pub enum MailServer {
    /// `scripts/smtp-sink`.
    Smtp(SmtpSink),
    /// SES on moto, a sender of the run's own.
    Ses {
        /// moto's base URL.
        moto_url: String,
        /// The verified sender.
        from: String,
    },
}

impl MailServer {
    /// The mail server `profile.mail` asks for, started (SMTP) or set up
    /// (SES), its files in `dir` (the run folder); `None` for `outputs`.
    pub async fn start(profile: &Profile, dir: &Path) -> Result<Option<MailServer>, MailError> {
        if let Some(why) = profile
            .mail
            .refusal(profile.stack.kind, profile.target.is_some())
        {
            return Err(MailError::Refused(why));
        }
        match profile.mail {
            Mail::Outputs => Ok(None),
            Mail::Smtp => {
                let sink = SmtpSink::start(&dir.join(MAILDIR), &dir.join(SINK_LOG)).await?;
                Ok(Some(MailServer::Smtp(sink)))
            }
            Mail::Ses => {
                let moto_url = ses_endpoint(&profile.stack.aws).ok_or_else(|| {
                    MailError::Ses(
                        "the emails are read back from moto's SES, and SES points nowhere local: set stack.aws.sdk.endpoints.ses (or .all) to moto's URL, or AWS_ENDPOINT_URL_SESV2 / AWS_ENDPOINT_URL (real SES has no API that lists what it sent)"
                            .into(),
                    )
                })?;
                booking_aws::ses_readback::check_moto_url(&moto_url)
                    .map_err(|e| MailError::Ses(format!("moto's URL: {e}")))?;
                let from = format!(
                    "rehearsal-{:x}-{:08x}@{SES_SENDER_DOMAIN}",
                    profile.seed,
                    rand::random::<u32>()
                );
                let sdk = &profile.stack.aws.sdk;
                sdk.ses_client(&sdk.load().await)
                    .create_email_identity()
                    .email_identity(&from)
                    .send()
                    .await
                    .map_err(|e| {
                        MailError::Ses(format!(
                            "verifying the sender {from} at {moto_url}: {}",
                            chain(&e)
                        ))
                    })?;
                tracing::info!(%from, %moto_url, "SES sender verified in moto");
                Ok(Some(MailServer::Ses { moto_url, from }))
            }
        }
    }

    /// `smtp` or `ses`.
    pub fn kind(&self) -> &'static str {
        match self {
            MailServer::Smtp(_) => Mail::Smtp.name(),
            MailServer::Ses { .. } => Mail::Ses.name(),
        }
    }

    /// Points an instance's `[mail]` at this server, the audit's read-back
    /// included.
    pub fn configure(&self, mail: &mut MailConfig) {
        match self {
            MailServer::Smtp(sink) => {
                *mail = MailConfig {
                    kind: MailKind::Smtp,
                    smtp: booking_smtp::SmtpConfig {
                        host: "127.0.0.1".into(),
                        port: sink.port,
                        tls: booking_smtp::SmtpTls::None,
                        ..booking_smtp::SmtpConfig::default()
                    },
                    readback_maildir: Some(sink.maildir.clone()),
                    ..MailConfig::default()
                };
            }
            MailServer::Ses { moto_url, from } => {
                *mail = MailConfig {
                    kind: MailKind::Ses,
                    ses: booking_aws::SesConfig {
                        from: from.clone(),
                        ..booking_aws::SesConfig::default()
                    },
                    readback_moto_url: Some(moto_url.clone()),
                    ..MailConfig::default()
                };
            }
        }
    }

    /// Where the emails are read from: the Maildir, or moto's state
    /// document (and the sender).
    pub fn read_from(&self) -> String {
        match self {
            MailServer::Smtp(sink) => format!("smtp-sink Maildir {}", sink.maildir.display()),
            MailServer::Ses { moto_url, from } => format!(
                "moto SES {}{} (sent from {from})",
                moto_url.trim_end_matches('/'),
                booking_aws::ses_readback::MOTO_DATA_PATH
            ),
        }
    }

    /// The run folder's files it writes, by name.
    pub fn files(&self) -> Vec<String> {
        match self {
            MailServer::Smtp(_) => vec![SINK_LOG.to_owned()],
            MailServer::Ses { .. } => Vec::new(),
        }
    }

    /// Every email the server delivered, repeats included.
    pub async fn delivered(&self) -> Result<Vec<Delivered>, MailError> {
        let failed = |e: String| MailError::ReadBack(self.read_from(), e);
        match self {
            MailServer::Smtp(sink) => {
                let log = MaildirLog::new(&sink.maildir);
                tokio::task::spawn_blocking(move || log.delivered())
                    .await
                    .map_err(|e| failed(e.to_string()))?
                    .map_err(failed)
            }
            MailServer::Ses { moto_url, from } => booking_aws::SesMotoLog::new(moto_url, from)
                .map_err(failed)?
                .delivered()
                .await
                .map_err(|e| failed(e.to_string())),
        }
    }
}

/// The report's mail figures: what the server delivered against the PAID
/// bookings (pure).
pub fn figures(kind: &str, read_from: String, delivered: &[Delivered], paid: u64) -> MailFigures {
    let mut per_payment: BTreeMap<&str, u64> = BTreeMap::new();
    for d in delivered {
        *per_payment
            .entry(d.confirmation.payment_id.as_str())
            .or_default() += 1;
    }
    let message_ids: BTreeSet<&str> = delivered.iter().map(|d| d.message_id.as_str()).collect();
    MailFigures {
        kind: kind.to_owned(),
        read_from,
        delivered: delivered.len() as u64,
        bookings: per_payment.len() as u64,
        message_ids: message_ids.len() as u64,
        paid,
        recovered: delivered
            .iter()
            .filter(|d| d.confirmation.recovered)
            .count() as u64,
        repeats: per_payment.values().map(|n| n.saturating_sub(1)).sum(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use booking::notify::Confirmation;
    use booking::{CandidateHash, Level, PaymentId, SaleId};

    fn delivered(payment: &str, recovered: bool) -> Delivered {
        Delivered {
            message_id: format!("<{payment}.launch@m.invalid>"),
            confirmation: Confirmation {
                sale: SaleId::parse("launch").unwrap(),
                candidate: CandidateHash::of(payment),
                level: Level::parse("floor").unwrap(),
                payment_id: PaymentId::parse(payment).unwrap(),
                trx_id: None,
                recovered,
            },
        }
    }

    #[test]
    fn a_repeat_counts_once_per_email_beyond_the_first() {
        let d = [
            delivered("P1", false),
            delivered("P2", false),
            delivered("P2", true),
            delivered("P3", true),
        ];
        let f = figures("smtp", "here".into(), &d, 3);
        assert_eq!(
            (
                f.delivered,
                f.bookings,
                f.message_ids,
                f.recovered,
                f.repeats,
                f.paid
            ),
            (4, 3, 3, 2, 1, 3)
        );
    }

    #[test]
    fn ses_is_refused_off_aws_and_any_mail_on_a_target() {
        let why = Mail::Ses.refusal(StackKind::Embedded, false).unwrap();
        assert!(why.contains("--mail ses needs --stack aws"), "{why}");
        assert!(Mail::Ses.refusal(StackKind::Aws, false).is_none());
        assert!(Mail::Smtp.refusal(StackKind::Embedded, false).is_none());
        assert!(Mail::Smtp.refusal(StackKind::Redis, true).is_some());
        assert!(Mail::Outputs.refusal(StackKind::Redis, true).is_none());
    }

    #[tokio::test]
    async fn without_the_venv_the_sink_says_to_run_setup() {
        let dir =
            std::env::temp_dir().join(format!("sellout-novenv-{:016x}", rand::random::<u64>()));
        let e = SmtpSink::start_with(
            &dir.join("bin/python"),
            &dir.join(MAILDIR),
            &dir.join(SINK_LOG),
        )
        .await
        .unwrap_err();
        assert!(matches!(e, MailError::NoVenv(_)), "{e}");
        assert!(e.to_string().contains("run scripts/setup"), "{e}");
        assert!(!dir.exists(), "nothing made before the venv is found");
    }

    #[test]
    fn the_sinks_line_gives_its_port() {
        assert_eq!(
            listening_port("smtp-sink listening on 127.0.0.1:2525\n"),
            Some(2525)
        );
        assert_eq!(listening_port("Traceback (most recent call last):"), None);
        assert_eq!(listening_port("smtp-sink listening on 127.0.0.1:0"), None);
    }
}
