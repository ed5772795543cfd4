//! Wiring: a [`ServerConfig`] becomes a [`booking_api::Stack`] of ports, plus
//! handles on the embedded parts that the audit and the tests read (the
//! record store's throttles and TTL sweep, the outbox, the status writes).
//!
//! The seat ledger and coordination are embedded or on Redis; records, queue
//! and the status document are embedded, or on AWS (`kind = "aws"`: DynamoDB,
//! SQS, S3), where every status write also lands in the embedded sink, whose
//! history the audit reads. Mail and alerts stay embedded. The gateway is
//! always the bKash client, with its fleet-shared token in coordination.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use booking::{
    Alerts, ChangeStream, Clock, Coordination, Ledger, Level, Mailer, Queue, RecordStore,
    StatusSink, StatusWriter, SystemClock,
};
use booking_api::Stack;
use booking_bkash::{BkashConfig, BkashGateway, Credentials};
use booking_embedded::coordination::EmbeddedCoordination;
use booking_embedded::ledger::EmbeddedLedger;
use booking_embedded::outputs::{AlertLog, ObjectSink, OutboxMailer};
use booking_embedded::queue::{EmbeddedQueue, QueueConfig};
use booking_embedded::records::{EmbeddedRecords, RecordsConfig};
use booking_redis::{RedisCoordination, RedisLedger};

use crate::config::{ConfigError, ServerConfig, StackKind};

/// Why the stack could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The Redis ledger could not connect.
    #[error("redis ledger: {0}")]
    RedisLedger(#[from] booking_redis::ConnectError),
    /// Redis coordination could not connect.
    #[error("redis coordination: {0}")]
    RedisCoordination(#[from] booking_redis::CoordinationConnectError),
    /// The gateway client could not be built.
    #[error("gateway client: {0}")]
    Gateway(#[from] booking_bkash::BuildError),
    /// The AWS resources are missing or unreachable.
    #[error("aws: {0}")]
    Aws(#[from] booking_aws::ConnectError),
    /// The back office could not be reached or migrated.
    #[error("back office: {0}")]
    BackOffice(#[from] booking_postgres::BackOfficeError),
}

/// A status sink that writes to S3 and keeps every write in the embedded
/// sink too (the audit reads that history: no document written since the
/// reset showed a full level open).
#[derive(Debug)]
pub struct RecordedSink {
    /// Where the document lives.
    pub primary: Arc<dyn StatusSink>,
    /// The history of this process's writes.
    pub history: Arc<ObjectSink>,
}

#[async_trait::async_trait]
impl StatusSink for RecordedSink {
    async fn put(&self, document: &[u8]) -> Result<(), booking::NotifyError> {
        self.primary.put(document).await?;
        self.history.put(document).await
    }

    async fn get(&self) -> Result<Option<Vec<u8>>, booking::NotifyError> {
        self.primary.get().await
    }
}

/// The shortest visibility timeout the SQS queue is used with. A scaled
/// rehearsal's timeout (60 s × 0.01 = 0.6 s) is shorter than a receive,
/// a write and a delete over a network take: every batch would come back
/// while it is still being handled. Real sales run at 60 s.
pub const AWS_VISIBILITY_MIN: std::time::Duration = std::time::Duration::from_secs(5);

/// The visibility timeout the AWS queue is provisioned and received with.
pub fn aws_visibility(config: &ServerConfig) -> std::time::Duration {
    config
        .effective_settings()
        .visibility_timeout
        .max(AWS_VISIBILITY_MIN)
}

/// The AWS clients and names of `config` (`kind = "aws"`).
pub async fn aws_adapters(
    config: &ServerConfig,
    clock: Arc<dyn Clock>,
) -> Result<booking_aws::Adapters, BuildError> {
    let aws = &config.stack.aws;
    let resources =
        booking_aws::Resources::named(&aws.prefix).map_err(booking_aws::ConnectError::Names)?;
    let clients = aws.sdk.clients().await;
    Ok(booking_aws::Adapters::connect(clients, resources, aws_visibility(config), clock).await?)
}

/// What `booking provision` did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Provisioned {
    /// Every AWS setting looked at.
    pub aws: booking_aws::ProvisionReport,
    /// The back office's migrations applied now (none: up to date, or no
    /// back office configured).
    pub migrations_applied: Vec<i32>,
}

/// Why provisioning failed.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionFailed {
    /// The configuration is invalid, or not the AWS stack.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// AWS refused.
    #[error(transparent)]
    Aws(#[from] booking_aws::ProvisionError),
    /// The back office refused.
    #[error("back office: {0}")]
    BackOffice(#[from] booking_postgres::BackOfficeError),
}

/// `booking provision`: the AWS resources of `config` made or brought to the
/// design, and the back office migrated. Idempotent.
pub async fn provision(
    config: &ServerConfig,
    allow_unsupported: bool,
) -> Result<Provisioned, ProvisionFailed> {
    config.validate()?;
    if config.stack.kind != StackKind::Aws {
        return Err(
            ConfigError::Invalid("provision is for the AWS stack (--stack aws)".into()).into(),
        );
    }
    let aws = &config.stack.aws;
    let resources = booking_aws::Resources::named(&aws.prefix).map_err(ConfigError::Invalid)?;
    let clients = aws.sdk.clients().await;
    let options = booking_aws::ProvisionOptions {
        visibility_timeout: aws_visibility(config),
        receives_max: config.effective_settings().receives_max,
        allow_unsupported: allow_unsupported || aws.allow_unsupported_settings,
    };
    let report = booking_aws::provision(&clients, &resources, &options).await?;
    let migrations_applied = match &aws.postgres_url {
        Some(url) => {
            booking_postgres::BackOffice::connect(url, &aws.postgres_schema)
                .await?
                .migrate()
                .await?
        }
        None => Vec::new(),
    };
    Ok(Provisioned {
        aws: report,
        migrations_applied,
    })
}

/// The back office of `config`, migrated; `None` without a `postgres_url`.
pub async fn back_office(
    config: &ServerConfig,
) -> Result<Option<Arc<booking_postgres::BackOffice>>, BuildError> {
    let aws = &config.stack.aws;
    let Some(url) = &aws.postgres_url else {
        return Ok(None);
    };
    let office = booking_postgres::BackOffice::connect(url, &aws.postgres_schema).await?;
    office.migrate().await?;
    Ok(Some(Arc::new(office)))
}

/// The embedded parts of a stack, as their concrete types.
#[derive(Debug, Clone)]
pub struct Embedded {
    /// The record store (its TTL sweep and throttle counts).
    pub records: Arc<EmbeddedRecords>,
    /// The queue.
    pub queue: Arc<EmbeddedQueue>,
    /// The confirmation outbox.
    pub mailer: Arc<OutboxMailer>,
    /// The alert log.
    pub alerts: Arc<AlertLog>,
    /// The status document and every version of it.
    pub sink: Arc<ObjectSink>,
}

/// A built server: the API's stack, the embedded handles, the configuration.
#[derive(Debug)]
pub struct Server {
    /// What every handler and service shares.
    pub stack: Arc<Stack>,
    /// The embedded parts.
    pub embedded: Embedded,
    /// The configuration it was built from.
    pub config: ServerConfig,
    /// This instance's id (reconciler lock owner, status writer id).
    pub instance: String,
    /// The status document writer of this instance.
    pub status: Arc<StatusWriter>,
    /// The gateway client of this instance (its token calls for `/metrics`).
    pub bkash: Arc<BkashGateway>,
    /// When the sale was last reset, ms (0: not since start); the audit
    /// looks at status writes from then on.
    pub reset_at_ms: AtomicU64,
}

impl Server {
    /// Levels and caps, as `reset` sets them.
    pub fn caps(&self) -> Vec<(Level, u32)> {
        self.config.caps()
    }
}

/// A random instance id: `<prefix>-<16 hex digits>`.
pub fn instance_id(prefix: &str) -> String {
    format!("{prefix}-{:016x}", rand::random::<u64>())
}

/// Builds the stack `config` describes, serving under `public_url`. Connects
/// to Redis when asked (the gateway is contacted lazily, on the first call).
pub async fn build(config: &ServerConfig, public_url: &str) -> Result<Server, BuildError> {
    build_with(config, public_url, None).await
}

/// Builds another instance of `first`'s fleet, serving under `public_url`:
/// in one process, the embedded parts (ledger and coordination too, on the
/// embedded stack) are `first`'s own, so the instances share one sale as
/// separate processes share one Redis and one AWS account. On Redis, the
/// ledger and coordination are new connections to the same server. Each
/// instance keeps its own id, status writer, gateway client and token cache
/// reader, as separate processes would.
pub async fn build_sharing(
    config: &ServerConfig,
    public_url: &str,
    first: &Server,
) -> Result<Server, BuildError> {
    build_with(config, public_url, Some(first)).await
}

async fn build_with(
    config: &ServerConfig,
    public_url: &str,
    first: Option<&Server>,
) -> Result<Server, BuildError> {
    config.validate()?;
    let settings = config.effective_settings();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let (ledger, coordination): (Arc<dyn Ledger>, Arc<dyn Coordination>) = match config.stack.kind {
        StackKind::Embedded => match first {
            Some(f) => (f.stack.ledger.clone(), f.stack.coordination.clone()),
            None => (
                Arc::new(EmbeddedLedger::with_bugs(&settings.bugs)),
                Arc::new(EmbeddedCoordination::new(clock.clone())),
            ),
        },
        StackKind::Redis | StackKind::Aws => {
            let url = &config.stack.redis_url;
            let pool = config.redis_pool_size();
            let ledger = RedisLedger::connect(url, pool, &config.key_prefix).await?;
            let coordination = RedisCoordination::connect(url, pool).await?;
            // a flash sale starts with its burst: connect before it, not in it
            let (l, c) = tokio::join!(ledger.warm(pool), coordination.warm(pool));
            tracing::info!(ledger = l, coordination = c, "redis pools warmed");
            (Arc::new(ledger), Arc::new(coordination))
        }
    };
    let embedded = match first {
        Some(f) => f.embedded.clone(),
        None => Embedded {
            records: Arc::new(EmbeddedRecords::new(
                clock.clone(),
                RecordsConfig {
                    bugs: settings.bugs.clone(),
                    // late like DynamoDB's: the reconciler, which looks a
                    // sweep window ahead, always decides first
                    ttl_delay_ms: settings.sweep_window.as_millis() as u64,
                    ..RecordsConfig::default()
                },
            )),
            queue: Arc::new(EmbeddedQueue::new(
                clock.clone(),
                QueueConfig::from_settings(&settings),
            )),
            mailer: Arc::new(OutboxMailer::new()),
            alerts: Arc::new(AlertLog::new()),
            sink: Arc::new(ObjectSink::new(clock.clone())),
        },
    };
    let g = &config.gateway;
    let gateway = BkashGateway::connect(
        BkashConfig::new(
            g.base_url.clone(),
            Credentials {
                username: g.username.clone(),
                password: g.password.clone(),
                app_key: g.app_key.clone(),
                app_secret: g.app_secret.clone(),
            },
        ),
        coordination.clone(),
        clock.clone(),
        &settings,
        &config.key_prefix,
    )?;
    let gateway = Arc::new(gateway);
    let webhook_trust = config.webhook.trust()?;
    if config.webhook.topic_arns.is_none() {
        tracing::warn!(
            "no webhook.topic_arns configured: webhooks from any SNS topic are accepted"
        );
    }
    let prices: BTreeMap<Level, String> = config
        .levels
        .iter()
        .map(|l| (l.level.clone(), l.price.clone()))
        .collect();
    let mailer: Arc<dyn Mailer> = embedded.mailer.clone();
    let alerts: Arc<dyn Alerts> = embedded.alerts.clone();
    let mut status_sink: Arc<dyn StatusSink> = embedded.sink.clone();
    let mut records: Arc<dyn RecordStore> = embedded.records.clone();
    let mut stream: Arc<dyn ChangeStream> = embedded.records.clone();
    let mut queue: Arc<dyn Queue> = embedded.queue.clone();
    if config.stack.kind == StackKind::Aws {
        match first {
            // one process's instances share the adapters (stateless clients;
            // the throttle counts and queue ages then cover the whole fleet)
            Some(f) => {
                records = f.stack.records.clone();
                stream = f.stack.stream.clone();
                queue = f.stack.queue.clone();
                status_sink = f.stack.status_sink.clone();
            }
            None => {
                let aws = aws_adapters(config, clock.clone()).await?;
                records = aws.records.clone();
                stream = Arc::new(aws.stream().await?);
                queue = aws.queue.clone();
                status_sink = Arc::new(RecordedSink {
                    primary: aws.status.clone(),
                    history: embedded.sink.clone(),
                });
                // a fresh database gets its schema before the first sync
                back_office(config).await?;
            }
        }
    }
    let stack = Arc::new(Stack {
        sale: config.sale.clone(),
        prefix: config.key_prefix.clone(),
        settings: settings.clone(),
        prices,
        public_url: public_url.trim_end_matches('/').to_owned(),
        ledger: ledger.clone(),
        records,
        stream,
        queue,
        coordination: coordination.clone(),
        gateway: gateway.clone(),
        mailer,
        alerts,
        status_sink: status_sink.clone(),
        clock: clock.clone(),
        entropy: Arc::new(booking::OsEntropy),
        webhook_trust,
    });
    let instance = instance_id("booking");
    let status = Arc::new(
        StatusWriter::new(
            config.sale.clone(),
            &config.key_prefix,
            ledger,
            coordination,
            status_sink,
            clock,
        )
        .with_throttle(settings.status_throttle)
        .with_writer_id(&instance)
        .with_bugs(&settings.bugs),
    );
    Ok(Server {
        stack,
        embedded,
        config: config.clone(),
        instance,
        status,
        bkash: gateway,
        reset_at_ms: AtomicU64::new(0),
    })
}
