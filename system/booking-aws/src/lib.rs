//! The booking system's AWS adapters, thin, behind the ports of `booking`:
//!
//! - [`records`]: [`DynamoRecords`], the record store on one DynamoDB table
//!   (conditional puts, updates and deletes; consistent reads; the payment
//!   GSI; the sparse index of holds by deadline; throttles counted);
//! - [`stream`]: [`DynamoStream`], the table's DynamoDB stream as the
//!   change-stream port;
//! - [`queue`]: [`SqsQueue`], the admission queue on SQS FIFO with its
//!   dead-letter queue, and [`SqsDestination`], the stream mappings'
//!   on-failure queue;
//! - [`status`]: [`S3Status`], `status.json` on S3 with cache headers;
//! - [`ses`]: [`SesMailer`], confirmation emails through SES v2 as the raw
//!   message `booking_smtp` composes, and [`ses_readback`]:
//!   [`SesMotoOutputs`], what moto's SES recorded, read back for the audit;
//! - [`alerts`]: [`SnsAlerts`], each alert as JSON to an SNS topic;
//! - [`provision`]: everything above made or checked, idempotently (not
//!   SES identities nor SNS topics: those are the account's, made once);
//! - [`sdk`]: the SDK's standard configuration and each client's retry and
//!   timeouts, and [`calls`]: every call counted per service and
//!   operation; [`errors`]: how an SDK error becomes a port error (pure);
//!   [`resources`]: the names; [`convert`]: attribute values.
//!
//! The decisions are pure and unit-tested here; the adapters are tested
//! against local AWS-protocol servers (`booking-aws-local`).

pub mod alerts;
pub mod calls;
pub mod convert;
pub mod errors;
pub mod provision;
pub mod queue;
pub mod records;
pub mod resources;
pub mod sdk;
pub mod ses;
pub mod ses_readback;
pub mod status;
pub mod stream;

use std::sync::Arc;
use std::time::Duration;

use booking::Clock;

pub use alerts::SnsAlerts;
pub use calls::{AwsCalls, CallCount};
pub use provision::{ProvisionError, ProvisionOptions, ProvisionReport, StepState, provision};
pub use queue::{SqsDestination, SqsQueue};
pub use records::DynamoRecords;
pub use resources::Resources;
pub use sdk::{AwsSettings, Clients, Endpoints};
pub use ses::{SesConfig, SesConfigError, SesMailer};
pub use ses_readback::{SesMotoLog, SesMotoOutputs};
pub use status::S3Status;
pub use stream::DynamoStream;

/// Why the adapters could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The names are invalid.
    #[error("invalid names: {0}")]
    Names(String),
    /// The table or its stream is missing or unreachable.
    #[error("table: {0}")]
    Table(#[from] booking::RecordError),
    /// A queue is missing or unreachable.
    #[error("queue: {0}")]
    Queue(#[from] booking::QueueError),
}

/// Every adapter of one deployment.
#[derive(Debug, Clone)]
pub struct Adapters {
    /// The clients they share.
    pub clients: Clients,
    /// The names.
    pub resources: Resources,
    /// The record store.
    pub records: Arc<DynamoRecords>,
    /// The admission queue.
    pub queue: Arc<SqsQueue>,
    /// `status.json`.
    pub status: Arc<S3Status>,
    /// The stream mappings' on-failure queue.
    pub failures: Arc<SqsDestination>,
}

impl Adapters {
    /// Connects to what `provision` made under `resources`; the queue is
    /// received with `visibility_timeout`.
    pub async fn connect(
        clients: Clients,
        resources: Resources,
        visibility_timeout: Duration,
        clock: Arc<dyn Clock>,
    ) -> Result<Adapters, ConnectError> {
        resources.check().map_err(ConnectError::Names)?;
        let records = Arc::new(DynamoRecords::new(
            clients.dynamodb.clone(),
            &resources.table,
        ));
        let queue = Arc::new(
            SqsQueue::connect(
                clients.sqs.clone(),
                &resources.queue,
                &resources.dead_letter_queue,
                visibility_timeout,
                clock,
            )
            .await?,
        );
        let failures =
            Arc::new(SqsDestination::connect(clients.sqs.clone(), &resources.failure_queue).await?);
        let status = Arc::new(S3Status::new(
            clients.s3.clone(),
            &resources.bucket,
            &resources.status_key,
        ));
        Ok(Adapters {
            clients,
            resources,
            records,
            queue,
            status,
            failures,
        })
    }

    /// A new reader of the table's stream (one per stream mapping, as each
    /// Lambda function reads the stream on its own).
    pub async fn stream(&self) -> Result<DynamoStream, ConnectError> {
        Ok(DynamoStream::connect(
            &self.clients.dynamodb,
            self.clients.streams.clone(),
            &self.resources.table,
        )
        .await?)
    }
}
