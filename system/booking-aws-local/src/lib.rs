//! Local AWS-protocol servers for the AWS adapters, without Docker:
//!
//! - [`dynamo`]: DynamoDB and DynamoDB Streams from dynoxide, in process, with
//!   a TTL service that runs late and the `userIdentity` spelling fixed in a
//!   front for the Streams API;
//! - [`moto`]: moto's server from the project's venv, for SQS and S3 (and a
//!   second DynamoDB, for what dynoxide lacks: point-in-time recovery).
//!
//! [`LocalAws`] puts them together: its [`AwsSettings`] point each client at
//! the right server, with static test credentials and an explicit region,
//! and [`LocalAws::resources`] names a fresh set of resources, so tests
//! share one moto without seeing each other's queues.

pub mod dynamo;
pub mod moto;

use std::time::Duration;

use booking_aws::{AwsSettings, Endpoints, Resources};

pub use dynamo::Dynoxide;
pub use moto::Moto;

/// The TTL service's lateness by default: long enough that no test's or
/// short rehearsal's hold is deleted by it unless asked, and well inside the
/// stream mappings' max record age (1 h), since dynoxide's lagging clock
/// also makes every stream record look this much older.
pub const TTL_LAG_DEFAULT: Duration = Duration::from_secs(5 * 60);
/// How often the local TTL service sweeps.
pub const TTL_SWEEP_EVERY: Duration = Duration::from_millis(500);

/// dynoxide and moto, and the settings that reach them.
#[derive(Debug)]
pub struct LocalAws {
    /// DynamoDB and Streams.
    pub dynoxide: Dynoxide,
    /// SQS and S3.
    pub moto: &'static Moto,
}

impl LocalAws {
    /// Starts dynoxide in this runtime, with the TTL service `ttl_lag` late;
    /// moto is the process's shared one.
    pub async fn start_with(ttl_lag: Duration) -> Result<LocalAws, String> {
        let moto = Moto::shared()?;
        let dynoxide = Dynoxide::start(ttl_lag, TTL_SWEEP_EVERY)
            .await
            .map_err(|e| format!("dynoxide: {e}"))?;
        Ok(LocalAws { dynoxide, moto })
    }

    /// [`LocalAws::start_with`] the default lateness.
    pub async fn start() -> Result<LocalAws, String> {
        LocalAws::start_with(TTL_LAG_DEFAULT).await
    }

    /// DynamoDB and Streams on dynoxide, SQS and S3 on moto.
    pub fn settings(&self) -> AwsSettings {
        AwsSettings {
            endpoints: Endpoints {
                all: None,
                dynamodb: Some(self.dynoxide.dynamodb_url.clone()),
                dynamodb_streams: Some(self.dynoxide.streams_url.clone()),
                sqs: Some(self.moto.url.clone()),
                s3: Some(self.moto.url.clone()),
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
