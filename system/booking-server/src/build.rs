//! Wiring: a [`ServerConfig`] becomes a [`booking_api::Stack`] of ports, the
//! [`OutputLog`] the audit reads the outputs back from, and the TTL service
//! the instance runs.
//!
//! Where each piece of state lives, per stack (ARCHITECTURE.md has the table):
//! - `embedded`: everything in this process (in-process instances of one
//!   fleet share it through [`build_sharing`]);
//! - `redis`: everything on Redis: ledger and coordination
//!   (`booking-redis`), records and their change stream
//!   (`booking-redis-records`), the queue (`booking-redis-queue`), the
//!   sent-mail log, alerts and the status document
//!   (`booking-redis-outputs`); the back office on PostgreSQL. Nothing in a
//!   process that another instance needs: a kill -9 loses nothing
//!   acknowledged;
//! - `aws`: ledger and coordination on Redis, records and stream on
//!   DynamoDB, the queue on SQS FIFO, the status document on S3 (every write
//!   also kept in this process's history for the audit), mail and alerts in
//!   this process.
//!
//! On every stack, `[mail]` may send through SMTP or SES and `[alerts]`
//! publish to SNS in front of the stack's own logs ([`crate::mail`],
//! [`crate::alerts`]), which the audit reads.
//!
//! The gateway is always the bKash client, with its fleet-shared token in
//! coordination.
//!
//! With `[faults]` (rehearsals), every port of the stack, the gateway and
//! the clock included, is wrapped with the instance's fault injector
//! ([`crate::armed`]); the status writer and the gateway client's token
//! cache get the wrapped ports too. Without it nothing is wrapped.

use std::collections::BTreeMap;
use std::sync::Arc;

use booking::records::{BookingRecord, RecordError};
use booking::{
    Alerts, ChangeStream, Clock, Coordination, Ledger, Level, Mailer, OutputLog, PaymentGateway,
    Queue, RecordStore, StatusSink, StatusWriter, SystemClock,
};
use booking_api::Stack;
use booking_bkash::{BkashConfig, BkashGateway, Credentials};
use booking_embedded::coordination::EmbeddedCoordination;
use booking_embedded::ledger::EmbeddedLedger;
use booking_embedded::outputs::{AlertLog, EmbeddedOutputs, ObjectSink, OutboxMailer};
use booking_embedded::queue::{EmbeddedQueue, QueueConfig};
use booking_embedded::records::{EmbeddedRecords, RecordsConfig};
use booking_redis::persistence::{self, Persistence};
use booking_redis::pool::Pool as RedisPool;
use booking_redis::{KeyPrefix, RedisCoordination, RedisLedger};
use booking_redis_outputs::RedisOutputs;
use booking_redis_queue::RedisQueue;
use booking_redis_records::{RedisRecords, RedisRecordsConfig};
use faults::{Injector, Killer};

use crate::armed::{self, Ports};
use crate::config::{ConfigError, Environment, PersistenceCheck, ServerConfig, StackKind};

/// Connections of each Redis adapter beside the ledger (records, queue,
/// outputs) at most: multiplexed, each carries many calls at once, and the
/// ledger's pool (the article's 300) is the one the rush waits on.
pub const ADAPTER_POOL_MAX: usize = 64;

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
    /// A Redis adapter (records, queue, outputs) could not connect.
    #[error("redis {0}: {1}")]
    RedisAdapter(&'static str, String),
    /// The Redis server does not keep what it acknowledges, for a
    /// production sale (or its persistence cannot be read).
    #[error("redis persistence: {0}")]
    Persistence(String),
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
    /// Every AWS setting looked at (`--stack aws`).
    pub aws: Option<booking_aws::ProvisionReport>,
    /// The Redis server's persistence and what it can lose (`--stack redis`).
    pub redis: Option<RedisProvisioned>,
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
    /// The Redis server does not keep what it acknowledges (production), or
    /// its persistence cannot be read.
    #[error("redis persistence: {0}")]
    Persistence(String),
}

/// The Redis side of `booking provision`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RedisProvisioned {
    /// `appendonly`, `appendfsync`, `save` as the server reports them
    /// (`None`: checked out of band).
    pub persistence: Option<Persistence>,
    /// What the operator should know (e.g. what `everysec` can lose).
    pub warnings: Vec<String>,
}

/// Reads the Redis server's persistence and judges it for this sale: a
/// production sale refuses a server that does not keep what it
/// acknowledged; a rehearsal is warned. `out_of_band` skips the read (a
/// managed server with `CONFIG` disabled).
pub async fn redis_persistence(config: &ServerConfig) -> Result<RedisProvisioned, String> {
    if config.stack.redis_persistence == PersistenceCheck::OutOfBand {
        return Ok(RedisProvisioned {
            persistence: None,
            warnings: vec![
                "redis persistence checked out of band (stack.redis_persistence = \"out_of_band\")"
                    .into(),
            ],
        });
    }
    let production = config.environment == Environment::Production;
    let found = persistence::read(&config.stack.redis_url)
        .await
        .map_err(|e| e.to_string())?;
    let warnings = persistence::check(&found, production).map_err(|e| e.to_string())?;
    Ok(RedisProvisioned {
        persistence: Some(found),
        warnings: warnings.iter().map(ToString::to_string).collect(),
    })
}

/// `booking provision`: on AWS, the resources of `config` made or brought
/// to the design and the status page (`GET /status`'s) uploaded beside
/// `status.json`; on both shared stacks, the Redis server's persistence
/// checked (the seat ledger lives there) and the
/// back office migrated. Idempotent.
pub async fn provision(
    config: &ServerConfig,
    allow_unsupported: bool,
) -> Result<Provisioned, ProvisionFailed> {
    config.validate()?;
    let migrate = || async {
        Ok::<_, ProvisionFailed>(match &config.stack.postgres_url {
            Some(url) => {
                booking_postgres::BackOffice::connect(url, &config.stack.postgres_schema)
                    .await?
                    .migrate()
                    .await?
            }
            None => Vec::new(),
        })
    };
    if config.stack.kind == StackKind::Embedded {
        return Err(ConfigError::Invalid(
            "provision is for a shared stack (--stack redis or --stack aws)".into(),
        )
        .into());
    }
    // both shared stacks keep the seat ledger on Redis
    let redis = redis_persistence(config)
        .await
        .map_err(ProvisionFailed::Persistence)?;
    if config.stack.kind == StackKind::Redis {
        return Ok(Provisioned {
            aws: None,
            redis: Some(redis),
            migrations_applied: migrate().await?,
        });
    }
    let aws = &config.stack.aws;
    let resources = booking_aws::Resources::named(&aws.prefix).map_err(ConfigError::Invalid)?;
    let clients = aws.sdk.clients().await;
    let options = booking_aws::ProvisionOptions {
        visibility_timeout: aws_visibility(config),
        receives_max: config.effective_settings().receives_max,
        allow_unsupported: allow_unsupported || aws.allow_unsupported_settings,
    };
    let mut report = booking_aws::provision(&clients, &resources, &options).await?;
    // the status page beside status.json, which it reads
    booking_aws::provision::status_page(
        &clients,
        &resources,
        booking_api::status_page::STATUS_PAGE.as_bytes(),
        booking_api::status_page::STATUS_PAGE_CONTENT_TYPE,
        &mut report,
    )
    .await?;
    Ok(Provisioned {
        aws: Some(report),
        redis: Some(redis),
        migrations_applied: migrate().await?,
    })
}

/// The back office of `config`, migrated; `None` without a `postgres_url`.
pub async fn back_office(
    config: &ServerConfig,
) -> Result<Option<Arc<booking_postgres::BackOffice>>, BuildError> {
    let Some(url) = &config.stack.postgres_url else {
        return Ok(None);
    };
    let office = booking_postgres::BackOffice::connect(url, &config.stack.postgres_schema).await?;
    office.migrate().await?;
    Ok(Some(Arc::new(office)))
}

/// The embedded stack's in-process backends, as their concrete types (the
/// tests reach into them; in-process instances of one fleet share them).
#[derive(Debug, Clone)]
pub struct Embedded {
    /// The record store (its TTL sweep and throttle counts).
    pub records: Arc<EmbeddedRecords>,
    /// The queue.
    pub queue: Arc<EmbeddedQueue>,
}

/// The TTL service a stack runs in its instances: the embedded store's
/// late sweep, or Redis's sorted set of deadlines swept by one leader at a
/// time. DynamoDB runs its own (none here).
#[async_trait::async_trait]
pub trait TtlService: Send + Sync + std::fmt::Debug {
    /// Deletes up to `limit` expired HELD records with the TTL service's
    /// identity on their stream records; returns them.
    async fn sweep(&self, limit: usize) -> Result<Vec<BookingRecord>, RecordError>;
}

#[async_trait::async_trait]
impl TtlService for EmbeddedRecords {
    async fn sweep(&self, limit: usize) -> Result<Vec<BookingRecord>, RecordError> {
        Ok(self.sweep_ttl(limit))
    }
}

#[async_trait::async_trait]
impl TtlService for RedisRecords {
    async fn sweep(&self, limit: usize) -> Result<Vec<BookingRecord>, RecordError> {
        self.sweep_ttl(limit).await
    }
}

/// The Redis pools of an instance on Redis, by the adapter that owns each
/// (`/metrics`: `booking_redis_pool_*{pool=…}`).
pub const REDIS_POOLS: [&str; 5] = ["ledger", "coordination", "records", "queue", "outputs"];

/// A built server: the API's stack, where its outputs are read back, its
/// TTL service, the configuration.
#[derive(Debug)]
pub struct Server {
    /// What every handler and service shares.
    pub stack: Arc<Stack>,
    /// Mail, alerts and status writes read back (the whole deployment's on
    /// Redis; this process's on the embedded and AWS stacks).
    pub outputs: Arc<dyn OutputLog>,
    /// This process's outputs, on the stacks that keep them in process
    /// (embedded, AWS): tests make them fail on purpose.
    pub local_outputs: Option<EmbeddedOutputs>,
    /// The TTL service this instance runs (none on AWS).
    pub ttl: Option<Arc<dyn TtlService>>,
    /// The embedded stack's backends (none on Redis and AWS).
    pub embedded: Option<Embedded>,
    /// The AWS adapters and their clients (on AWS only; the instances of
    /// one process share them, and so their call counts).
    pub aws: Option<booking_aws::Adapters>,
    /// The Redis pools of this instance, by adapter ([`REDIS_POOLS`]; only
    /// the adapters on Redis): their waits and connections go to `/metrics`.
    pub redis_pools: Vec<(&'static str, RedisPool)>,
    /// The configuration it was built from.
    pub config: ServerConfig,
    /// This instance's id (reconciler lock owner, status writer id).
    pub instance: String,
    /// The status document writer of this instance.
    pub status: Arc<StatusWriter>,
    /// The gateway client of this instance (its token calls for `/metrics`).
    pub bkash: Arc<BkashGateway>,
    /// The fault injector every port of `stack` goes through (with
    /// `[faults]` only): started by `POST /ops/faults/start`, read by
    /// `GET /ops/faults` and `/metrics`.
    pub faults: Option<Arc<Injector>>,
    /// The same stack without the fault wrappers (with `[faults]` only):
    /// what another instance of the fleet shares ([`build_sharing`]), to
    /// wrap with an injector of its own.
    pub bare: Option<Arc<Stack>>,
}

impl Server {
    /// Levels and caps, as `reset` sets them.
    pub fn caps(&self) -> Vec<(Level, u32)> {
        self.config.caps()
    }

    /// The coordination key where the sale's last reset time lives: shared
    /// by every instance, so the audit of any of them reads status writes
    /// from the same moment.
    pub fn reset_key(&self) -> String {
        booking::coordination::keys::reset_at(&self.stack.prefix, &self.stack.sale)
    }

    /// The stack's ports without the fault wrappers (the stack itself when
    /// the instance is not armed).
    pub fn bare_stack(&self) -> &Stack {
        self.bare.as_deref().unwrap_or(&self.stack)
    }

    /// When the sale was last reset, ms (0: never).
    pub async fn reset_at_ms(&self) -> Result<u64, booking::CoordinationError> {
        let v = self.stack.coordination.get(&self.reset_key()).await?;
        Ok(v.and_then(|v| v.parse().ok()).unwrap_or(0))
    }
}

/// A random instance id: `<prefix>-<16 hex digits>`.
pub fn instance_id(prefix: &str) -> String {
    format!("{prefix}-{:016x}", rand::random::<u64>())
}

/// Builds the stack `config` describes, serving under `public_url`. Connects
/// to Redis when asked (the gateway is contacted lazily, on the first call).
pub async fn build(config: &ServerConfig, public_url: &str) -> Result<Server, BuildError> {
    build_with(config, public_url, None, None).await
}

/// [`build`] for `booking serve`: with `[faults]`, `killer` runs at the
/// schedule's armed kill points ([`crate::kill::sigkill_self`] takes the
/// process down there). Without `[faults]` it is not used.
pub async fn build_with_killer(
    config: &ServerConfig,
    public_url: &str,
    killer: Killer,
) -> Result<Server, BuildError> {
    build_with(config, public_url, None, Some(killer)).await
}

/// Builds another instance of `first`'s fleet, serving under `public_url`.
/// On the embedded stack, in one process, the backends are `first`'s own,
/// so the instances share one sale as separate processes share one Redis.
/// On Redis, every part is new connections to the same server, as another
/// process would open; on AWS, the stateless clients are shared. Each
/// instance keeps its own id, status writer, gateway client and token cache
/// reader, as separate processes would.
pub async fn build_sharing(
    config: &ServerConfig,
    public_url: &str,
    first: &Server,
) -> Result<Server, BuildError> {
    build_with(config, public_url, Some(first), None).await
}

/// The ports that differ per stack.
struct Parts {
    records: Arc<dyn RecordStore>,
    stream: Arc<dyn ChangeStream>,
    queue: Arc<dyn Queue>,
    mailer: Arc<dyn Mailer>,
    alerts: Arc<dyn Alerts>,
    status_sink: Arc<dyn StatusSink>,
    outputs: Arc<dyn OutputLog>,
    local_outputs: Option<EmbeddedOutputs>,
    ttl: Option<Arc<dyn TtlService>>,
    embedded: Option<Embedded>,
    aws: Option<booking_aws::Adapters>,
    /// The Redis adapters' pools, by adapter (on Redis only).
    redis_pools: Vec<(&'static str, RedisPool)>,
}

fn local_outputs(clock: &Arc<dyn Clock>) -> EmbeddedOutputs {
    EmbeddedOutputs {
        mailer: Arc::new(OutboxMailer::new()),
        alerts: Arc::new(AlertLog::new()),
        sink: Arc::new(ObjectSink::new(clock.clone())),
    }
}

fn embedded_parts(config: &ServerConfig, clock: &Arc<dyn Clock>, first: Option<&Server>) -> Parts {
    let settings = config.effective_settings();
    let (embedded, outputs) =
        match first.and_then(|f| f.embedded.clone().zip(f.local_outputs.clone())) {
            Some(shared) => shared,
            None => (
                Embedded {
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
                },
                local_outputs(clock),
            ),
        };
    Parts {
        records: embedded.records.clone(),
        stream: embedded.records.clone(),
        queue: embedded.queue.clone(),
        mailer: outputs.mailer.clone(),
        alerts: outputs.alerts.clone(),
        status_sink: outputs.sink.clone(),
        outputs: Arc::new(outputs.clone()),
        local_outputs: Some(outputs),
        ttl: Some(embedded.records.clone()),
        embedded: Some(embedded),
        aws: None,
        redis_pools: Vec::new(),
    }
}

async fn redis_parts(config: &ServerConfig, clock: &Arc<dyn Clock>) -> Result<Parts, BuildError> {
    let settings = config.effective_settings();
    let url = &config.stack.redis_url;
    let pool = config.redis_pool_size().min(ADAPTER_POOL_MAX);
    let prefix =
        KeyPrefix::parse(&config.key_prefix).map_err(|e| ConfigError::Invalid(e.to_string()))?;
    let sale = &config.sale;
    let records = RedisRecords::connect(
        url,
        pool,
        &prefix,
        sale,
        clock.clone(),
        RedisRecordsConfig {
            bugs: settings.bugs.clone(),
            // late like DynamoDB's, as the embedded store's
            ttl_delay_ms: settings.sweep_window.as_millis() as u64,
            ..RedisRecordsConfig::default()
        },
    )
    .await
    .map_err(|e| BuildError::RedisAdapter("records", e.to_string()))?;
    let queue = RedisQueue::connect_with(
        url,
        pool,
        &prefix,
        sale,
        clock.clone(),
        QueueConfig::from_settings(&settings),
        &settings.bugs,
    )
    .await
    .map_err(|e| BuildError::RedisAdapter("queue", e.to_string()))?;
    let outputs =
        RedisOutputs::connect_with(url, pool, &prefix, sale, clock.clone(), &settings.bugs)
            .await
            .map_err(|e| BuildError::RedisAdapter("outputs", e.to_string()))?;
    let (r, q, o) = tokio::join!(records.warm(pool), queue.warm(pool), outputs.warm(pool));
    tracing::info!(
        records = r,
        queue = q,
        outputs = o,
        "redis adapter pools warmed"
    );
    let redis_pools = vec![
        ("records", records.pool().clone()),
        ("queue", queue.pool().clone()),
        ("outputs", outputs.pool().clone()),
    ];
    let records = Arc::new(records);
    let outputs = Arc::new(outputs);
    Ok(Parts {
        records: records.clone(),
        stream: records.clone(),
        queue: Arc::new(queue),
        mailer: outputs.clone(),
        alerts: outputs.clone(),
        status_sink: outputs.clone(),
        outputs,
        local_outputs: None,
        ttl: Some(records),
        embedded: None,
        aws: None,
        redis_pools,
    })
}

async fn aws_parts(
    config: &ServerConfig,
    clock: &Arc<dyn Clock>,
    first: Option<&Server>,
) -> Result<Parts, BuildError> {
    // one process's instances share the adapters (stateless clients; the
    // throttle counts and queue ages then cover the whole fleet) and the
    // process's outputs
    if let Some(f) = first {
        if let Some(outputs) = f.local_outputs.clone() {
            // its ports as they are under its fault wrappers, if any; mail
            // and alerts the process's own logs, which `[mail]` and
            // `[alerts]` put this instance's SMTP, SES or SNS in front of
            // (its bare mailer already has the first's: each email would go
            // out twice)
            let s = f.bare_stack();
            return Ok(Parts {
                records: s.records.clone(),
                stream: s.stream.clone(),
                queue: s.queue.clone(),
                mailer: outputs.mailer.clone(),
                alerts: outputs.alerts.clone(),
                status_sink: s.status_sink.clone(),
                outputs: Arc::new(outputs.clone()),
                local_outputs: Some(outputs),
                ttl: None,
                embedded: None,
                aws: f.aws.clone(),
                redis_pools: Vec::new(),
            });
        }
    }
    let outputs = local_outputs(clock);
    let aws = aws_adapters(config, clock.clone()).await?;
    let stream = Arc::new(aws.stream().await?);
    // a fresh database gets its schema before the first sync
    back_office(config).await?;
    Ok(Parts {
        records: aws.records.clone(),
        stream,
        queue: aws.queue.clone(),
        mailer: outputs.mailer.clone(),
        alerts: outputs.alerts.clone(),
        status_sink: Arc::new(RecordedSink {
            primary: aws.status.clone(),
            history: outputs.sink.clone(),
        }),
        outputs: Arc::new(outputs.clone()),
        local_outputs: Some(outputs),
        ttl: None,
        embedded: None,
        aws: Some(aws),
        redis_pools: Vec::new(),
    })
}

async fn build_with(
    config: &ServerConfig,
    public_url: &str,
    first: Option<&Server>,
    killer: Option<Killer>,
) -> Result<Server, BuildError> {
    config.validate()?;
    let settings = config.effective_settings();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let mut redis_pools = Vec::new();
    let (ledger, coordination): (Arc<dyn Ledger>, Arc<dyn Coordination>) = match config.stack.kind {
        StackKind::Embedded => match first {
            Some(f) => (
                f.bare_stack().ledger.clone(),
                f.bare_stack().coordination.clone(),
            ),
            None => (
                Arc::new(EmbeddedLedger::with_bugs(&settings.bugs)),
                Arc::new(EmbeddedCoordination::new(clock.clone())),
            ),
        },
        StackKind::Redis | StackKind::Aws => {
            let url = &config.stack.redis_url;
            let pool = config.redis_pool_size();
            let ledger =
                RedisLedger::connect_with(url, pool, &config.key_prefix, &settings.bugs).await?;
            let coordination = RedisCoordination::connect_with(url, pool, &settings.bugs).await?;
            // a flash sale starts with its burst: connect before it, not in it
            let (l, c) = tokio::join!(ledger.warm(pool), coordination.warm(pool));
            tracing::info!(ledger = l, coordination = c, "redis pools warmed");
            redis_pools.push(("ledger", ledger.pool().clone()));
            redis_pools.push(("coordination", coordination.pool().clone()));
            (Arc::new(ledger), Arc::new(coordination))
        }
    };
    if config.stack.kind != StackKind::Embedded {
        // both shared stacks keep the seat ledger on Redis
        let judged = redis_persistence(config)
            .await
            .map_err(BuildError::Persistence)?;
        for warning in &judged.warnings {
            tracing::warn!(%warning, "redis persistence");
        }
    }
    let parts = match config.stack.kind {
        StackKind::Embedded => embedded_parts(config, &clock, first),
        StackKind::Redis => {
            if config.stack.postgres_url.is_some() {
                // a fresh database gets its schema before the first sync
                back_office(config).await?;
            }
            redis_parts(config, &clock).await?
        }
        StackKind::Aws => aws_parts(config, &clock, first).await?,
    };
    // `[mail]`: SMTP or SES in front of the stack's own log, and `[alerts]`:
    // SNS in front of it, if configured (the SDK as `[stack.aws.sdk]` says)
    let sdk = &config.stack.aws.sdk;
    let (mailer, outputs) = crate::mail::mail_ports(
        &config.mail,
        sdk,
        parts.mailer.clone(),
        parts.outputs.clone(),
    )
    .await?;
    let alerts = crate::alerts::alerts_port(&config.alerts, sdk, parts.alerts.clone()).await?;
    let bare = Ports {
        ledger,
        records: parts.records,
        stream: parts.stream,
        queue: parts.queue,
        coordination,
        mailer,
        alerts,
        status_sink: parts.status_sink,
        clock,
    };
    // armed: the instance's ports (and its clock) behind the injector
    let armed = config.faults.as_ref().map(|f| {
        let injector = armed::injector(f, killer);
        let ports = armed::wrap(&bare, &injector, &f.instance);
        (injector, ports, f.instance.as_str())
    });
    let ports = armed.as_ref().map_or(&bare, |(_, p, _)| p);
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
        ports.coordination.clone(),
        ports.clock.clone(),
        &settings,
        &config.key_prefix,
    )?;
    let bkash = Arc::new(gateway);
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
    let stack_of = |ports: &Ports, gateway: Arc<dyn PaymentGateway>| Stack {
        sale: config.sale.clone(),
        prefix: config.key_prefix.clone(),
        settings: settings.clone(),
        prices: prices.clone(),
        public_url: public_url.trim_end_matches('/').to_owned(),
        ledger: ports.ledger.clone(),
        records: ports.records.clone(),
        stream: ports.stream.clone(),
        queue: ports.queue.clone(),
        coordination: ports.coordination.clone(),
        gateway,
        mailer: ports.mailer.clone(),
        alerts: ports.alerts.clone(),
        status_sink: ports.status_sink.clone(),
        clock: ports.clock.clone(),
        entropy: Arc::new(booking::OsEntropy),
        webhook_trust: webhook_trust.clone(),
    };
    let (stack, injector, bare_stack) = match &armed {
        None => (stack_of(&bare, bkash.clone()), None, None),
        Some((injector, wrapped, instance)) => (
            stack_of(wrapped, armed::gateway(bkash.clone(), injector, instance)),
            Some(injector.clone()),
            Some(Arc::new(stack_of(&bare, bkash.clone()))),
        ),
    };
    let stack = Arc::new(stack);
    let instance = instance_id("booking");
    let status = Arc::new(
        StatusWriter::new(
            config.sale.clone(),
            &config.key_prefix,
            ports.ledger.clone(),
            ports.coordination.clone(),
            ports.status_sink.clone(),
            ports.clock.clone(),
        )
        .with_throttle(settings.status_throttle)
        .with_writer_id(&instance)
        .with_bugs(&settings.bugs),
    );
    Ok(Server {
        stack,
        outputs,
        local_outputs: parts.local_outputs,
        ttl: parts.ttl,
        embedded: parts.embedded,
        aws: parts.aws,
        redis_pools: redis_pools.into_iter().chain(parts.redis_pools).collect(),
        config: config.clone(),
        instance,
        status,
        bkash,
        faults: injector,
        bare: bare_stack,
    })
}
