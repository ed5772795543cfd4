//! Local AWS-protocol servers for the AWS adapters, without Docker:
//!
//! - [`dynamo`]: DynamoDB and DynamoDB Streams from dynoxide, in process, with
//!   a TTL service that runs late and the `userIdentity` spelling fixed in a
//!   front for the Streams API;
//! - [`moto`]: moto's server from the project's venv, for S3 (and a second
//!   DynamoDB, for what dynoxide lacks: point-in-time recovery; and SQS for
//!   the adapter's contract tests);
//! - [`fauxqs`]: an SQS emulator in Node.js, for SQS, or a moto of its own
//!   where fauxqs is not installed ([`LocalSqs`]).
//!
//! [`LocalAws`] puts them together: its [`AwsSettings`] point each client at
//! the right server, with static test credentials and an explicit region,
//! and [`LocalAws::resources`] names a fresh set of resources, so tests
//! share one moto without seeing each other's queues.
//!
//! # No one process serves every service
//!
//! A rehearsal at the `ci` profile's 200 bookings/s makes a few hundred SQS
//! calls a second. moto serves every service from one Python process, and
//! its SQS walks every message of a queue on each call: once the worker
//! falls behind, each call gets slower, which puts it further behind (one
//! moto serving everything held 44 bookings/s, a whole core busy). So each
//! service has a server of its own: DynamoDB and its stream in this
//! process (dynoxide), S3 on moto, SQS on fauxqs (whose calls cost the same
//! whatever the backlog) or, without it, on a moto of its own.

pub mod counting;
pub mod dynamo;
pub mod fauxqs;
pub mod moto;
pub mod server;

use std::time::Duration;

use booking_aws::{AwsSettings, Endpoints, Resources};

pub use dynamo::Dynoxide;
pub use fauxqs::Fauxqs;
pub use moto::Moto;

/// The TTL service's lateness by default: long enough that no test's or
/// short rehearsal's hold is deleted by it unless asked, and well inside the
/// stream mappings' max record age (1 h), since dynoxide's lagging clock
/// also makes every stream record look this much older.
pub const TTL_LAG_DEFAULT: Duration = Duration::from_secs(5 * 60);
/// How often the local TTL service sweeps.
pub const TTL_SWEEP_EVERY: Duration = Duration::from_millis(500);

/// Which server serves SQS locally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqsKind {
    /// fauxqs (Node.js).
    Fauxqs,
    /// A moto of its own (not the one serving S3).
    Moto,
    /// The moto that serves S3 too: one Python process for both, as it was
    /// before each service had a server (for comparisons only).
    SharedMoto,
}

/// The environment variable that picks the local SQS: `fauxqs`, `moto` or
/// `shared-moto`.
pub const LOCAL_SQS_ENV: &str = "SELLOUT_LOCAL_SQS";

/// The local SQS for `SELLOUT_LOCAL_SQS`'s value (pure): as named, else
/// fauxqs where it is installed, else moto.
pub fn sqs_kind(asked: Option<&str>, fauxqs_installed: bool) -> Result<SqsKind, String> {
    match asked.map(str::trim) {
        Some("fauxqs") => Ok(SqsKind::Fauxqs),
        Some("moto") => Ok(SqsKind::Moto),
        Some("shared-moto") => Ok(SqsKind::SharedMoto),
        None | Some("") if fauxqs_installed => Ok(SqsKind::Fauxqs),
        None | Some("") => Ok(SqsKind::Moto),
        Some(other) => Err(format!(
            "{LOCAL_SQS_ENV}={other:?}: `fauxqs`, `moto` or `shared-moto`"
        )),
    }
}

/// The process's local SQS server.
#[derive(Debug, Clone, Copy)]
pub enum LocalSqs {
    /// fauxqs.
    Fauxqs(&'static Fauxqs),
    /// A moto serving SQS only.
    Moto(&'static Moto),
}

impl LocalSqs {
    /// The process-wide one of the kind [`sqs_kind`] picks from the
    /// environment, started on first use.
    pub fn shared() -> Result<LocalSqs, String> {
        let asked = std::env::var(LOCAL_SQS_ENV).ok();
        match sqs_kind(asked.as_deref(), fauxqs::installed())? {
            SqsKind::Fauxqs => Ok(LocalSqs::Fauxqs(Fauxqs::shared()?)),
            SqsKind::SharedMoto => Ok(LocalSqs::Moto(Moto::shared()?)),
            SqsKind::Moto => {
                static SQS_MOTO: std::sync::OnceLock<Result<Moto, String>> =
                    std::sync::OnceLock::new();
                SQS_MOTO
                    .get_or_init(Moto::start)
                    .as_ref()
                    .map(LocalSqs::Moto)
                    .map_err(Clone::clone)
            }
        }
    }

    /// Its URL.
    pub fn url(&self) -> &str {
        match self {
            LocalSqs::Fauxqs(f) => &f.url,
            LocalSqs::Moto(m) => &m.url,
        }
    }

    /// Stops its process (see [`LocalAws::stop_servers`]).
    pub fn stop(&self) {
        match self {
            LocalSqs::Fauxqs(f) => f.stop(),
            LocalSqs::Moto(m) => m.stop(),
        }
    }

    /// `fauxqs` or `moto`.
    pub fn kind(&self) -> &'static str {
        match self {
            LocalSqs::Fauxqs(_) => "fauxqs",
            LocalSqs::Moto(_) => "moto",
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        match self {
            LocalSqs::Fauxqs(f) => f.pid(),
            LocalSqs::Moto(m) => m.pid(),
        }
    }
}

/// dynoxide, moto and the local SQS, and the settings that reach them.
#[derive(Debug)]
pub struct LocalAws {
    /// DynamoDB and Streams.
    pub dynoxide: Dynoxide,
    /// S3 (and everything, for [`LocalAws::moto_settings`]).
    pub moto: &'static Moto,
    /// SQS.
    pub sqs: LocalSqs,
}

impl LocalAws {
    /// Starts dynoxide in this runtime, with the TTL service `ttl_lag` late;
    /// moto and the SQS server are the process's shared ones.
    pub async fn start_with(ttl_lag: Duration) -> Result<LocalAws, String> {
        let moto = Moto::shared()?;
        let sqs = LocalSqs::shared()?;
        let dynoxide = Dynoxide::start(ttl_lag, TTL_SWEEP_EVERY)
            .await
            .map_err(|e| format!("dynoxide: {e}"))?;
        Ok(LocalAws {
            dynoxide,
            moto,
            sqs,
        })
    }

    /// Stops the local SQS and moto processes and waits for them. They are
    /// the process's shared ones, never dropped: a binary that owns them
    /// (`aws-local`) calls this before it exits; after it, every other
    /// `LocalAws` of this process has lost them too.
    pub fn stop_servers(&self) {
        self.sqs.stop();
        self.moto.stop();
    }

    /// [`LocalAws::start_with`] the default lateness.
    pub async fn start() -> Result<LocalAws, String> {
        LocalAws::start_with(TTL_LAG_DEFAULT).await
    }

    /// DynamoDB and Streams on dynoxide, SQS on its own server, S3 (and
    /// SES and SNS, for mail and alerts) on moto.
    pub fn settings(&self) -> AwsSettings {
        AwsSettings {
            endpoints: Endpoints {
                all: None,
                dynamodb: Some(self.dynoxide.dynamodb_url.clone()),
                dynamodb_streams: Some(self.dynoxide.streams_url.clone()),
                sqs: Some(self.sqs.url().to_owned()),
                s3: Some(self.moto.url.clone()),
                ses: Some(self.moto.url.clone()),
                sns: Some(self.moto.url.clone()),
            },
            local_credentials: true,
            region: None,
            s3_path_style: Some(true),
        }
    }

    /// Every service on moto.
    pub fn moto_settings(&self) -> AwsSettings {
        moto_settings(self.moto)
    }

    /// A fresh set of names (`t<16 hex digits>-…`).
    pub fn resources() -> Resources {
        let prefix = format!("t{:016x}", rand::random::<u64>());
        Resources::named(&prefix).unwrap_or_else(|e| unreachable!("a valid prefix: {e}"))
    }
}

/// Every service on `moto`, with test credentials.
pub fn moto_settings(moto: &Moto) -> AwsSettings {
    AwsSettings {
        endpoints: Endpoints {
            all: Some(moto.url.clone()),
            ..Endpoints::default()
        },
        local_credentials: true,
        region: None,
        s3_path_style: Some(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqs_is_fauxqs_where_installed_unless_asked_otherwise() {
        assert_eq!(sqs_kind(None, true), Ok(SqsKind::Fauxqs));
        assert_eq!(sqs_kind(None, false), Ok(SqsKind::Moto));
        assert_eq!(sqs_kind(Some(""), false), Ok(SqsKind::Moto));
        assert_eq!(sqs_kind(Some("moto"), true), Ok(SqsKind::Moto));
        assert_eq!(sqs_kind(Some("shared-moto"), true), Ok(SqsKind::SharedMoto));
        assert_eq!(sqs_kind(Some("fauxqs"), false), Ok(SqsKind::Fauxqs));
        assert!(sqs_kind(Some("elasticmq"), true).is_err());
    }
}
