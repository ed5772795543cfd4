//! What one server runs with: a TOML file ([`ServerConfig`], every field
//! optional, the defaults are a local rehearsal against the mock gateway),
//! then command-line overrides ([`ServeArgs`]).
//!
//! ```toml
//! sale = "launch"
//! listen = "127.0.0.1:8080"
//! public_url = "http://127.0.0.1:8080"
//! key_prefix = "sellout"
//! time_scale = 1.0            # 1/30: a 10-minute hold becomes 20 s
//!
//! [[levels]]
//! level = "gold"
//! cap = 100
//! price = "1500.00"
//!
//! [stack]
//! kind = "embedded"           # or "redis", or "aws"
//! redis_url = "redis://127.0.0.1:6379"   # or "redis+cluster://h1:6379,h2:6379" (a Redis Cluster)
//! redis_pool_size = 300
//! postgres_url = "host=127.0.0.1 user=postgres dbname=sellout"   # the back office (redis, aws)
//! redis_persistence = "checked"  # or "out_of_band" where CONFIG is disabled (managed Redis)
//!
//! [stack.aws]                 # kind = "aws"
//! prefix = "sellout"          # sellout-bookings, sellout-admissions.fifo, …
//! stream_mappings = true      # false when the Lambda functions run the handlers
//! [stack.aws.sdk]
//! region = "ap-southeast-1"   # else the SDK's standard configuration
//!
//! [gateway]
//! base_url = "http://127.0.0.1:9090"
//! username = "sellout"        # the mock's defaults
//! mock_ledger = true          # the mock: /ops/audit reads its /__mock/ledger (no URL from a request)
//!
//! [webhook]
//! aws_cert_urls = true        # the real SNS pattern
//! loopback_sns_port = 9090    # also trust the mock's certificate on loopback
//! topic_arns = ["arn:aws:sns:ap-southeast-1:000000000000:bkash-ipn"]
//!
//! [mail]
//! kind = "outputs"            # or "smtp" ([mail.smtp]), or "ses" ([mail.ses])
//!
//! [alerts]
//! kind = "outputs"            # or "sns", with topic_arn
//!
//! [faults]                    # rehearsals only (environment = "rehearsal")
//! instance = "instance-1"     # this instance's label: the schedule's `instances` name it
//! seed = 7                    # the run's seed (the label is mixed in: instances toss their own coins)
//! [[faults.schedule.fault]]   # a `faults::Schedule`, inline
//! name = "ledger-down"
//! target = "ledger"
//! ops = ["admit"]
//! instances = ["instance-1"]
//! start_ms = 0                # from `POST /ops/faults/start`
//! duration_ms = 60_000
//! kind = { type = "error" }
//! ```
//!
//! `[faults]` ([`FaultsConfig`]) arms this instance with a fault schedule:
//! every port of its stack is wrapped (`faults::wrappers`) and the faults
//! stay dormant until `POST /ops/faults/start` says when the run started
//! (see [`crate::faults_routes`]). The server carries out the port faults
//! (`Scope::Port`: ledger, records, stream, queue, coordination, gateway,
//! mailer, alerts, status sink, clock) and the kill points (`target =
//! "instance"`, `kind = { type = "kill", point = ".." }`: `booking serve`
//! SIGKILLs itself there). Every other fault of the schedule (a kill
//! without a point, pause, restart, `redis_server`, the links, the gateway's
//! rules) is the fleet's fault conductor's, and the server ignores it.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use booking::{Level, SaleId, Settings};
use serde::{Deserialize, Serialize};

/// The key prefix when none is given.
pub const KEY_PREFIX_DEFAULT: &str = "sellout";
/// The address the server listens on when none is given.
pub const LISTEN_DEFAULT: &str = "127.0.0.1:8080";
/// The mock gateway's default address.
pub const GATEWAY_URL_DEFAULT: &str = "http://127.0.0.1:9090";

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// Which file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML for a [`ServerConfig`].
    #[error("parsing {path}: {source}")]
    Parse {
        /// Which file.
        path: PathBuf,
        /// Why.
        source: Box<toml::de::Error>,
    },
    /// A value is out of range or malformed.
    #[error("invalid configuration: {0}")]
    Invalid(String),
    /// The settings the services would run with (scaled by `time_scale`)
    /// break a relation the design relies on ([`Settings::check`]).
    #[error("invalid configuration: {0}")]
    Settings(#[from] booking::BrokenRelation),
}

/// One seat level: its cap and its price (the gateway's amount string).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LevelConfig {
    /// The level's name.
    pub level: Level,
    /// Seats in it.
    pub cap: u32,
    /// Price of a seat, e.g. `"1500.00"`.
    pub price: String,
}

impl std::str::FromStr for LevelConfig {
    type Err = String;

    /// `NAME:CAP:PRICE`, e.g. `gold:100:1500.00`.
    fn from_str(s: &str) -> Result<LevelConfig, String> {
        let mut parts = s.splitn(3, ':');
        let (Some(name), Some(cap), Some(price)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(format!("level {s:?}: expected NAME:CAP:PRICE"));
        };
        Ok(LevelConfig {
            level: Level::parse(name).map_err(|e| e.to_string())?,
            cap: cap
                .parse()
                .map_err(|e| format!("level {s:?}: cap {cap:?}: {e}"))?,
            price: price.to_owned(),
        })
    }
}

/// Which backends hold the shared state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum StackKind {
    /// Everything in process: nothing to install.
    #[default]
    Embedded,
    /// Self-hosted: everything shared on Redis (the seat ledger,
    /// coordination, the records and their change stream, the queue, the
    /// sent-mail log, alerts and the status document), the back office on
    /// PostgreSQL. No instance keeps state another needs.
    Redis,
    /// Production's: the seat ledger and coordination on Redis, the records
    /// and their stream on DynamoDB, the queue on SQS FIFO, `status.json` on
    /// S3, the back office on PostgreSQL (`[stack.aws]`).
    Aws,
}

/// The AWS side of `kind = "aws"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AwsStackConfig {
    /// Every resource's name starts with this ([`booking_aws::Resources::named`]).
    pub prefix: String,
    /// Region, endpoint overrides, local test credentials; the rest comes
    /// from the SDK's standard configuration (`AWS_REGION`,
    /// `AWS_ENDPOINT_URL`, profiles, instance roles).
    pub sdk: booking_aws::AwsSettings,
    /// Run the expiry and sync handlers on the stream in this instance
    /// (off when the Lambda functions of `deploy/` do it).
    pub stream_mappings: bool,
    /// Let `provision` pass over settings the server lacks (point-in-time
    /// recovery on a local emulator). Never on a real account.
    pub allow_unsupported_settings: bool,
}

impl Default for AwsStackConfig {
    fn default() -> AwsStackConfig {
        AwsStackConfig {
            prefix: booking_aws::resources::PREFIX_DEFAULT.to_owned(),
            sdk: booking_aws::AwsSettings::default(),
            stream_mappings: true,
            allow_unsupported_settings: false,
        }
    }
}

/// The backends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct StackConfig {
    /// Embedded or Redis.
    pub kind: StackKind,
    /// Redis URL (`kind = "redis"`).
    pub redis_url: String,
    /// Redis connections per instance.
    pub redis_pool_size: usize,
    /// How the Redis server's persistence is known (`kind = "redis"`).
    pub redis_persistence: PersistenceCheck,
    /// The back office (`postgres://…` or `host=… dbname=…`; `redis` and
    /// `aws`); none: PAID records are not synced anywhere.
    pub postgres_url: Option<String>,
    /// The back office's schema.
    pub postgres_schema: String,
    /// The local stream mappings' settings (Lambda's event-source mapping's),
    /// wherever the handlers run in the instances.
    pub mapping: booking_streams::MappingConfig,
    /// The AWS resources (`kind = "aws"`).
    pub aws: AwsStackConfig,
}

/// How a Redis deployment knows its server keeps what it acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PersistenceCheck {
    /// Read `appendonly`/`appendfsync`/`save` with `CONFIG GET` at start and
    /// at `provision`: a production sale refuses a server without them.
    #[default]
    Checked,
    /// The server's `CONFIG` is disabled (managed Redis): persistence was
    /// checked out of band, and the operator says so here.
    OutOfBand,
}

impl Default for StackConfig {
    fn default() -> StackConfig {
        StackConfig {
            kind: StackKind::Embedded,
            redis_url: "redis://127.0.0.1:6379".to_owned(),
            redis_pool_size: booking::settings::REDIS_POOL_SIZE,
            redis_persistence: PersistenceCheck::Checked,
            postgres_url: None,
            postgres_schema: booking_postgres::SCHEMA_DEFAULT.to_owned(),
            mapping: booking_streams::MappingConfig::default(),
            aws: AwsStackConfig::default(),
        }
    }
}

/// The payment gateway: where, and the merchant's credentials.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct GatewayConfig {
    /// Base URL, e.g. `http://127.0.0.1:9090` (the mock) or bKash's.
    pub base_url: String,
    /// Grant header `username`.
    pub username: String,
    /// Grant header `password`.
    pub password: String,
    /// `app_key`.
    pub app_key: String,
    /// `app_secret`.
    pub app_secret: String,
    /// The gateway is the mock: `/ops/audit` reads its ground truth from
    /// `<base_url>/__mock/ledger` (the only URL it fetches; never one from
    /// the request). Off: the audit runs without the gateway checks.
    pub mock_ledger: bool,
}

impl std::fmt::Debug for GatewayConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayConfig")
            .field("base_url", &self.base_url)
            .field("username", &self.username)
            .field("app_key", &self.app_key)
            .field("mock_ledger", &self.mock_ledger)
            .finish_non_exhaustive()
    }
}

impl Default for GatewayConfig {
    /// The mock gateway's address and default merchant.
    fn default() -> GatewayConfig {
        GatewayConfig {
            base_url: GATEWAY_URL_DEFAULT.to_owned(),
            username: "sellout".to_owned(),
            password: "sellout-password".to_owned(),
            app_key: "sellout-app-key".to_owned(),
            app_secret: "sellout-app-secret".to_owned(),
            mock_ledger: false,
        }
    }
}

/// Which webhooks are believed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WebhookConfig {
    /// Trust real AWS SNS certificate URLs (`https://sns.<region>.amazonaws.com/….pem`).
    pub aws_cert_urls: bool,
    /// Also trust `http://127.0.0.1:<port>/….pem`: the mock gateway, for
    /// rehearsals only.
    pub loopback_sns_port: Option<u16>,
    /// Accepted topic ARNs; `None` accepts any topic (with a warning at start).
    pub topic_arns: Option<Vec<String>>,
}

impl Default for WebhookConfig {
    fn default() -> WebhookConfig {
        WebhookConfig {
            aws_cert_urls: true,
            loopback_sns_port: None,
            topic_arns: None,
        }
    }
}

impl WebhookConfig {
    /// The certificate-URL and topic policies.
    pub fn trust(&self) -> Result<booking_api::WebhookTrust, ConfigError> {
        let mut cert_urls = if self.aws_cert_urls {
            sns::CertUrlPolicy::aws()
        } else {
            sns::CertUrlPolicy::none()
        };
        if let Some(port) = self.loopback_sns_port {
            cert_urls = cert_urls
                .allow_http_loopback(IpAddr::V4(Ipv4Addr::LOCALHOST), Some(port))
                .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        }
        let topics = match &self.topic_arns {
            Some(arns) => sns::TopicPolicy::only(arns.iter().cloned()),
            None => sns::TopicPolicy::any(),
        };
        Ok(booking_api::WebhookTrust { cert_urls, topics })
    }
}

/// The shortest status throttle on the AWS stack: `status.json` is an S3
/// object behind a CDN that keeps a copy [`booking::settings::STATUS_THROTTLE`]
/// (its `s-maxage`), so uploading it more often only costs `PutObject`
/// calls (a rehearsal scaled by 0.01 would upload every 20 ms). Transitions
/// (a level full, the sale closed) still publish at once.
pub const AWS_STATUS_THROTTLE_MIN: std::time::Duration = booking::settings::STATUS_THROTTLE;

/// Everything one server runs with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServerConfig {
    /// The sale.
    pub sale: SaleId,
    /// Levels with caps and prices, in order.
    pub levels: Vec<LevelConfig>,
    /// Where to listen.
    pub listen: SocketAddr,
    /// Our base URL as payers' browsers reach it (the callback URL is this
    /// plus `/payment/callback`); empty: `http://<listen>`.
    pub public_url: String,
    /// Backends.
    pub stack: StackConfig,
    /// The payment gateway.
    pub gateway: GatewayConfig,
    /// Webhook trust.
    pub webhook: WebhookConfig,
    /// Every sale timer is multiplied by this ([`Settings::scaled`]).
    pub time_scale: f64,
    /// Explicit settings (before scaling); absent fields keep the article's numbers.
    pub settings: Settings,
    /// Prefix of every coordination and Redis key.
    pub key_prefix: String,
    /// Where the `/ops/` routes are served (their own listener; the public
    /// one does not serve them): loopback by default
    /// ([`crate::admin_settings::ADMIN_LISTEN_DEFAULT`]). Any other address
    /// needs a token.
    pub admin_listen: SocketAddr,
    /// When set, the `/ops/` routes require `Authorization: Bearer <token>`
    /// (also `--admin-token`, `SELLOUT_ADMIN_TOKEN`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_token: Option<String>,
    /// A second token accepted while `admin_token` is rotated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_token_previous: Option<String>,
    /// A file of admin tokens, one per line, the current one first (at most
    /// two in all, with `admin_token` and `admin_token_previous`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_token_file: Option<PathBuf>,
    /// Production (the default) refuses the bug zoo's switches
    /// (`settings.bugs`); only a rehearsal may switch a bug back on.
    pub environment: Environment,
    /// A fault schedule to arm this instance with (rehearsals only); none:
    /// the ports are not wrapped at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub faults: Option<FaultsConfig>,
    /// Where confirmation emails go.
    pub mail: MailConfig,
    /// Where alerts go.
    pub alerts: AlertsConfig,
    /// Signed candidates (`[candidate_auth]`, off when absent): `POST
    /// /bookings` needs a token whose subject is the candidate
    /// ([`crate::candidate_auth_config`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate_auth: Option<crate::candidate_auth_config::CandidateAuthConfig>,
}

/// Where confirmation emails go (`[mail] kind`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MailKind {
    /// The stack's own output log, the default: in process on the embedded
    /// stack, the fleet's shared Redis list on Redis and AWS.
    #[default]
    Outputs,
    /// An SMTP server (`[mail.smtp]`). Each email the server took is also
    /// logged in the stack's output log, which the audit reads unless
    /// `readback_maildir` is set.
    Smtp,
    /// Amazon SES v2 (`[mail.ses]`), the same raw message as over SMTP,
    /// through the SDK configured by `[stack.aws.sdk]` (whatever the
    /// stack). Each email SES took is also logged in the stack's output
    /// log, which the audit reads unless `readback_moto_url` is set.
    Ses,
}

/// `[mail]`: where confirmation emails go, and where the audit reads them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MailConfig {
    /// The mailer.
    pub kind: MailKind,
    /// The SMTP server, for `kind = "smtp"` (its password from the
    /// environment variable `password_env` names).
    pub smtp: booking_smtp::SmtpConfig,
    /// A Maildir the SMTP server delivers into, readable by this instance
    /// (`scripts/smtp-sink` writes one): the audit then counts the emails
    /// delivered there, as the candidates received them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub readback_maildir: Option<PathBuf>,
    /// SES, for `kind = "ses"`: the verified sender, the domains, the
    /// configuration set, the bound on each send.
    pub ses: booking_aws::SesConfig,
    /// The moto server SES sends go to (`http://127.0.0.1:<port>`), for
    /// `kind = "ses"` in a rehearsal: the audit then counts the emails moto
    /// recorded from `mail.ses.from` (`booking_aws::SesMotoOutputs`). Read
    /// from this file only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub readback_moto_url: Option<String>,
}

impl MailConfig {
    /// Checks `[mail]`: SMTP or SES settings that work (and leak nothing),
    /// a read-back Maildir only with SMTP, a read-back moto only with SES.
    pub fn check(&self) -> Result<(), ConfigError> {
        let bad = |m: &str| Err(ConfigError::Invalid(m.into()));
        if self.readback_maildir.is_some() && self.kind != MailKind::Smtp {
            return bad("mail.readback_maildir is for kind = \"smtp\"");
        }
        if self.readback_moto_url.is_some() && self.kind != MailKind::Ses {
            return bad("mail.readback_moto_url is for kind = \"ses\"");
        }
        match self.kind {
            MailKind::Smtp => self
                .smtp
                .check()
                .map_err(|e| ConfigError::Invalid(format!("mail.{e}"))),
            MailKind::Ses => {
                self.ses
                    .check()
                    .map_err(|e| ConfigError::Invalid(format!("mail.{e}")))?;
                if let Some(url) = &self.readback_moto_url {
                    booking_aws::ses_readback::check_moto_url(url).map_err(|e| {
                        ConfigError::Invalid(format!("mail.readback_moto_url: {e}"))
                    })?;
                }
                Ok(())
            }
            MailKind::Outputs => Ok(()),
        }
    }
}

/// Where alerts go (`[alerts] kind`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertsKind {
    /// The stack's own output log only, the default.
    #[default]
    Outputs,
    /// An SNS topic (`topic_arn`), through the SDK configured by
    /// `[stack.aws.sdk]`; every alert is recorded in the stack's output log
    /// too, which the audit reads.
    Sns,
}

/// `[alerts]`: where alerts to a human go.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AlertsConfig {
    /// Where.
    pub kind: AlertsKind,
    /// The topic, for `kind = "sns"`
    /// (`arn:aws:sns:<region>:<account>:<name>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic_arn: Option<String>,
}

impl AlertsConfig {
    /// Checks `[alerts]`: a topic ARN exactly when `kind = "sns"`.
    pub fn check(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        match (self.kind, &self.topic_arn) {
            (AlertsKind::Sns, None) => {
                bad("alerts.topic_arn is needed for kind = \"sns\": the topic to publish to".into())
            }
            (AlertsKind::Sns, Some(arn)) => booking_aws::alerts::check_topic_arn(arn)
                .map_err(|e| ConfigError::Invalid(format!("alerts.topic_arn: {e}"))),
            (AlertsKind::Outputs, Some(_)) => bad("alerts.topic_arn is for kind = \"sns\"".into()),
            (AlertsKind::Outputs, None) => Ok(()),
        }
    }
}

/// `[faults]`: the fault schedule a rehearsal arms one instance with (see
/// the module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultsConfig {
    /// This instance's label, as the schedule's `instances` lists name it
    /// (e.g. `instance-1`).
    pub instance: String,
    /// The run's seed; the label is mixed in ([`FaultsConfig::seed_for_instance`]),
    /// so each instance tosses its own coins, the same ones on every run.
    pub seed: u64,
    /// The faults, inline (`[[faults.schedule.fault]]`); times count from
    /// `POST /ops/faults/start`.
    #[serde(default)]
    pub schedule: faults::Schedule,
}

impl FaultsConfig {
    /// The seed of this instance's coins: the run's seed mixed with the
    /// label's FNV-1a hash (stable across builds and platforms, unlike
    /// `std`'s hasher).
    pub fn seed_for_instance(&self) -> u64 {
        const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
        const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
        let label = self.instance.bytes().fold(FNV_OFFSET, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(FNV_PRIME)
        });
        self.seed ^ label
    }
}

/// Where an instance runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Environment {
    /// Real sales: no bug switch may be on.
    #[default]
    Production,
    /// A rehearsal: the bug zoo may switch bugs back on.
    Rehearsal,
}

impl Default for ServerConfig {
    /// A local rehearsal: one sale "launch" with one level, embedded stack,
    /// the mock gateway on its default port.
    fn default() -> ServerConfig {
        ServerConfig {
            sale: SaleId::parse("launch").unwrap_or_else(|_| unreachable!()),
            levels: vec![LevelConfig {
                level: Level::parse("general").unwrap_or_else(|_| unreachable!()),
                cap: 100,
                price: "1000.00".to_owned(),
            }],
            listen: LISTEN_DEFAULT.parse().unwrap_or_else(|_| unreachable!()),
            public_url: String::new(),
            stack: StackConfig::default(),
            gateway: GatewayConfig::default(),
            webhook: WebhookConfig::default(),
            time_scale: 1.0,
            settings: Settings::default(),
            key_prefix: KEY_PREFIX_DEFAULT.to_owned(),
            admin_listen: crate::admin_settings::ADMIN_LISTEN_DEFAULT
                .parse()
                .unwrap_or_else(|_| unreachable!()),
            admin_token: None,
            admin_token_previous: None,
            admin_token_file: None,
            environment: Environment::Production,
            faults: None,
            mail: MailConfig::default(),
            alerts: AlertsConfig::default(),
            candidate_auth: None,
        }
    }
}

impl ServerConfig {
    /// Reads a TOML file.
    pub fn from_file(path: &std::path::Path) -> Result<ServerConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        ServerConfig::from_toml(&text).map_err(|source| ConfigError::Parse {
            path: path.to_owned(),
            source: Box::new(source),
        })
    }

    /// Parses TOML.
    pub fn from_toml(text: &str) -> Result<ServerConfig, toml::de::Error> {
        toml::from_str(text)
    }

    /// The settings the services run with: the configured ones, scaled.
    pub fn effective_settings(&self) -> Settings {
        let mut s = self.settings.clone();
        s.redis_pool_size = self.redis_pool_size();
        if (self.time_scale - 1.0).abs() > f64::EPSILON {
            s = s.scaled(self.time_scale);
        }
        if self.stack.kind == StackKind::Aws {
            s.status_throttle = s.status_throttle.max(AWS_STATUS_THROTTLE_MIN);
        }
        s
    }

    /// Redis connections per instance: the configured size, or, with the
    /// zoo's `small_redis_pool` switched on, [`booking::bugs::SMALL_REDIS_POOL`]
    /// (a pool sized for normal traffic, not for the burst).
    pub fn redis_pool_size(&self) -> usize {
        if self.settings.bugs.on(booking::Bug::SmallRedisPool) {
            booking::bugs::SMALL_REDIS_POOL
        } else {
            self.stack.redis_pool_size
        }
    }

    /// Levels and caps, as the ledger takes them.
    pub fn caps(&self) -> Vec<(Level, u32)> {
        self.levels
            .iter()
            .map(|l| (l.level.clone(), l.cap))
            .collect()
    }

    /// The public URL, defaulting to the listen address.
    pub fn public_url_or(&self, addr: SocketAddr) -> String {
        if self.public_url.is_empty() {
            format!("http://{addr}")
        } else {
            self.public_url.trim_end_matches('/').to_owned()
        }
    }

    /// The admin listener's settings ([`crate::admin_settings`]).
    pub fn admin(&self) -> crate::admin_settings::AdminSettings<'_> {
        crate::admin_settings::AdminSettings {
            listen: self.admin_listen,
            public: self.listen,
            token: self.admin_token.as_deref(),
            previous: self.admin_token_previous.as_deref(),
            file: self.admin_token_file.as_deref(),
        }
    }

    /// Refuses what cannot run, including settings (as scaled by
    /// `time_scale`) that break a relation of [`Settings::check`]: `serve`,
    /// [`crate::build`] and [`crate::provision`] all start here.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if self.environment == Environment::Production && !self.settings.bugs.is_empty() {
            let on: Vec<String> = self.settings.bugs.iter().map(|b| b.to_string()).collect();
            return bad(format!(
                "bug switches are refused in production: {} (set environment = \"rehearsal\")",
                on.join(", ")
            ));
        }
        if let Some(f) = &self.faults {
            if self.environment == Environment::Production {
                return bad(
                    "fault hooks are for rehearsals: set environment = \"rehearsal\" (or remove \
                     [faults])"
                        .into(),
                );
            }
            if f.instance.trim().is_empty() {
                return bad(
                    "faults.instance is empty: label this instance as the schedule's \
                     `instances` name it"
                        .into(),
                );
            }
            f.schedule
                .validate()
                .map_err(|e| ConfigError::Invalid(format!("faults.schedule: {e}")))?;
        }
        self.mail.check()?;
        self.alerts.check()?;
        crate::candidate_auth_config::verifier_of(self.candidate_auth.as_ref())
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        self.admin()
            .resolve()
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        if self.levels.is_empty() {
            return bad("at least one level is needed".into());
        }
        let mut seen = std::collections::BTreeSet::new();
        for l in &self.levels {
            if !seen.insert(&l.level) {
                return bad(format!("level {} given twice", l.level));
            }
            if l.price.is_empty() {
                return bad(format!("level {} has no price", l.level));
            }
        }
        if !(self.time_scale > 0.0 && self.time_scale.is_finite()) {
            return bad(format!("time_scale {} must be > 0", self.time_scale));
        }
        if self.stack.redis_pool_size == 0 {
            return bad("redis_pool_size must be > 0".into());
        }
        let prefix_ok = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b':' | b'_' | b'.' | b'-');
        if self.key_prefix.is_empty()
            || self.key_prefix.len() > 64
            || !self.key_prefix.bytes().all(prefix_ok)
        {
            return bad(format!(
                "key_prefix {:?}: 1..=64 of [A-Za-z0-9:_.-]",
                self.key_prefix
            ));
        }
        if self.stack.kind == StackKind::Aws {
            booking_aws::Resources::named(&self.stack.aws.prefix).map_err(ConfigError::Invalid)?;
        }
        booking_postgres::check_schema(&self.stack.postgres_schema)
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        self.stack.mapping.check().map_err(ConfigError::Invalid)?;
        // the stream handlers' lease outlives a step of their mapping
        booking_streams::LeaseConfig::new(&self.key_prefix, &self.sale, "expiry", "-")
            .check(self.stack.mapping.poll_wait)
            .map_err(ConfigError::Invalid)?;
        if self.stack.kind == StackKind::Embedded && self.stack.postgres_url.is_some() {
            return bad(
                "postgres_url needs a shared stack (redis or aws): the embedded stack has no \
                 back office"
                    .into(),
            );
        }
        if self.webhook.topic_arns.as_ref().is_some_and(Vec::is_empty) {
            return bad("webhook.topic_arns is empty: no webhook could be accepted".into());
        }
        // the numbers the services will really run with, after scaling
        self.effective_settings().check()?;
        Ok(())
    }
}

fn parse_sale(s: &str) -> Result<SaleId, String> {
    SaleId::parse(s).map_err(|e| e.to_string())
}

/// `booking serve` flags: each overrides the file.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServeArgs {
    /// TOML configuration file.
    #[arg(long, env = "SELLOUT_CONFIG")]
    pub config: Option<PathBuf>,
    /// Sale id.
    #[arg(long, value_parser = parse_sale)]
    pub sale: Option<SaleId>,
    /// A level as NAME:CAP:PRICE (repeat; replaces the file's levels).
    #[arg(long = "level")]
    pub levels: Vec<LevelConfig>,
    /// Listen address.
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Public base URL (the gateway redirects payers here).
    #[arg(long)]
    pub public_url: Option<String>,
    /// Backends.
    #[arg(long, value_enum)]
    pub stack: Option<StackKind>,
    /// Redis URL.
    #[arg(long, env = "SELLOUT_REDIS_URL")]
    pub redis_url: Option<String>,
    /// Redis connections per instance.
    #[arg(long)]
    pub redis_pool_size: Option<usize>,
    /// The AWS resources' name prefix (`--stack aws`).
    #[arg(long)]
    pub aws_prefix: Option<String>,
    /// The back office's PostgreSQL (`--stack redis` or `aws`).
    #[arg(long, env = "SELLOUT_POSTGRES_URL", hide_env_values = true)]
    pub postgres_url: Option<String>,
    /// Payment gateway base URL.
    #[arg(long)]
    pub gateway_url: Option<String>,
    /// Gateway username.
    #[arg(long)]
    pub gateway_username: Option<String>,
    /// Gateway password.
    #[arg(long, env = "SELLOUT_GATEWAY_PASSWORD", hide_env_values = true)]
    pub gateway_password: Option<String>,
    /// Gateway app key.
    #[arg(long)]
    pub gateway_app_key: Option<String>,
    /// Gateway app secret.
    #[arg(long, env = "SELLOUT_GATEWAY_APP_SECRET", hide_env_values = true)]
    pub gateway_app_secret: Option<String>,
    /// Also trust SNS certificates served on http://127.0.0.1:PORT (the mock
    /// gateway). Rehearsals only.
    #[arg(long, value_name = "PORT")]
    pub trust_loopback_sns_port: Option<u16>,
    /// An accepted SNS topic ARN (repeat; replaces the file's list).
    #[arg(long = "topic-arn")]
    pub topic_arns: Vec<String>,
    /// Multiply every sale timer by this (1/30 makes the 10-minute hold 20 s).
    #[arg(long)]
    pub time_scale: Option<f64>,
    /// Prefix of every coordination key.
    #[arg(long)]
    pub key_prefix: Option<String>,
    /// Where the /ops/ routes are served (loopback by default; any other
    /// address needs a token).
    #[arg(long)]
    pub admin_listen: Option<SocketAddr>,
    /// Require this bearer token on the /ops/ routes.
    #[arg(long, env = "SELLOUT_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// A file of admin tokens, one per line, the current one first.
    #[arg(long, env = "SELLOUT_ADMIN_TOKEN_FILE")]
    pub admin_token_file: Option<PathBuf>,
    /// Production (the default) or rehearsal (the only one that may switch
    /// a bug of the zoo back on).
    #[arg(long, value_enum)]
    pub environment: Option<Environment>,
    /// Switch a bug of the zoo back on (repeat; rehearsals only): see
    /// `booking::bugs` for the names.
    #[arg(long = "bug", value_parser = parse_bug)]
    pub bugs: Vec<booking::Bug>,
}

fn parse_bug(s: &str) -> Result<booking::Bug, String> {
    booking::Bug::parse(s).ok_or_else(|| {
        let names: Vec<&str> = booking::Bug::ALL.iter().map(|b| b.name()).collect();
        format!("unknown bug {s:?}; one of: {}", names.join(", "))
    })
}

impl ServeArgs {
    /// The file (or the defaults), then these flags over it, validated.
    pub fn load(&self) -> Result<ServerConfig, ConfigError> {
        let mut c = match &self.config {
            Some(path) => ServerConfig::from_file(path)?,
            None => ServerConfig::default(),
        };
        self.apply(&mut c);
        c.validate()?;
        Ok(c)
    }

    /// Overrides `c` with every flag given.
    pub fn apply(&self, c: &mut ServerConfig) {
        fn set<T: Clone>(slot: &mut T, v: &Option<T>) {
            if let Some(v) = v {
                *slot = v.clone();
            }
        }
        set(&mut c.sale, &self.sale);
        set(&mut c.environment, &self.environment);
        if !self.bugs.is_empty() {
            c.settings.bugs = booking::Bugs::of(self.bugs.iter().copied());
        }
        if !self.levels.is_empty() {
            c.levels = self.levels.clone();
        }
        set(&mut c.listen, &self.listen);
        set(&mut c.public_url, &self.public_url);
        set(&mut c.stack.kind, &self.stack);
        set(&mut c.stack.redis_url, &self.redis_url);
        set(&mut c.stack.redis_pool_size, &self.redis_pool_size);
        set(&mut c.stack.aws.prefix, &self.aws_prefix);
        if self.postgres_url.is_some() {
            c.stack.postgres_url = self.postgres_url.clone();
        }
        set(&mut c.gateway.base_url, &self.gateway_url);
        set(&mut c.gateway.username, &self.gateway_username);
        set(&mut c.gateway.password, &self.gateway_password);
        set(&mut c.gateway.app_key, &self.gateway_app_key);
        set(&mut c.gateway.app_secret, &self.gateway_app_secret);
        if self.trust_loopback_sns_port.is_some() {
            c.webhook.loopback_sns_port = self.trust_loopback_sns_port;
        }
        if !self.topic_arns.is_empty() {
            c.webhook.topic_arns = Some(self.topic_arns.clone());
        }
        set(&mut c.time_scale, &self.time_scale);
        set(&mut c.key_prefix, &self.key_prefix);
        set(&mut c.admin_listen, &self.admin_listen);
        if self.admin_token.is_some() {
            c.admin_token = self.admin_token.clone();
        }
        if self.admin_token_file.is_some() {
            c.admin_token_file = self.admin_token_file.clone();
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn defaults_are_a_local_rehearsal_against_the_mock() {
        let c = ServerConfig::default();
        c.validate().unwrap();
        assert_eq!(c.gateway.username, "sellout");
        assert_eq!(c.gateway.password, "sellout-password");
        assert_eq!(c.gateway.app_key, "sellout-app-key");
        assert_eq!(c.gateway.app_secret, "sellout-app-secret");
        assert_eq!(c.stack.redis_pool_size, booking::settings::REDIS_POOL_SIZE);
        assert_eq!(
            c.webhook.trust().unwrap().cert_urls,
            sns::CertUrlPolicy::aws()
        );
        assert_eq!(c.effective_settings(), Settings::default());
    }

    #[test]
    fn toml_then_flags() {
        let c = ServerConfig::from_toml(
            r#"
            sale = "s1"
            time_scale = 0.01
            [[levels]]
            level = "gold"
            cap = 3
            price = "10.00"
            [stack]
            kind = "redis"
            [settings]
            hold = 1000
            sweep_window = 500
            "#,
        )
        .unwrap();
        assert_eq!(c.stack.kind, StackKind::Redis);
        assert_eq!(c.caps(), vec![(Level::parse("gold").unwrap(), 3)]);
        assert_eq!(
            c.effective_settings().hold,
            std::time::Duration::from_millis(10)
        );
        assert_eq!(
            c.effective_settings().sweep_window,
            std::time::Duration::from_millis(5),
            "inside the hold, as the relations require"
        );
        // the status document is rewritten at the scaled throttle on Redis;
        // on S3 no more often than production's 2 s
        assert_eq!(
            c.effective_settings().status_throttle,
            booking::settings::STATUS_THROTTLE.mul_f64(0.01)
        );
        let mut aws = c.clone();
        aws.stack.kind = StackKind::Aws;
        assert_eq!(
            aws.effective_settings().status_throttle,
            AWS_STATUS_THROTTLE_MIN
        );
        let args = ServeArgs {
            levels: vec!["a:1:5.00".parse().unwrap(), "b:2:6.00".parse().unwrap()],
            trust_loopback_sns_port: Some(9090),
            topic_arns: vec!["arn:x".into()],
            ..ServeArgs::default()
        };
        let mut c2 = c.clone();
        args.apply(&mut c2);
        c2.validate().unwrap();
        assert_eq!(c2.levels.len(), 2);
        let trust = c2.webhook.trust().unwrap();
        assert!(trust.cert_urls.check("http://127.0.0.1:9090/x.pem").is_ok());
        assert!(
            trust
                .cert_urls
                .check("http://127.0.0.1:9091/x.pem")
                .is_err()
        );
        assert!(trust.topics.check("arn:x").is_ok());
        assert!(trust.topics.check("arn:y").is_err());
        assert!("gold:x:1".parse::<LevelConfig>().is_err());
    }

    #[test]
    fn the_aws_stack_is_configured_in_its_own_table_and_checked() {
        let c = ServerConfig::from_toml(
            r#"
            [stack]
            kind = "aws"
            postgres_url = "host=127.0.0.1 dbname=test"
            [stack.aws]
            prefix = "rehearsal-1"
            [stack.aws.sdk]
            region = "ap-southeast-1"
            endpoints = { sqs = "http://127.0.0.1:5000" }
            "#,
        )
        .unwrap();
        c.validate().unwrap();
        assert_eq!(c.stack.kind, StackKind::Aws);
        assert_eq!(c.stack.aws.sdk.region.as_deref(), Some("ap-southeast-1"));
        assert!(c.stack.aws.stream_mappings);
        assert_eq!(c.stack.postgres_schema, "back_office");
        let mut bad = c.clone();
        // a fine table and queue name, but S3 wants lower case
        bad.stack.aws.prefix = "NotABucket".into();
        assert!(bad.validate().unwrap_err().to_string().contains("bucket"));
        bad.stack.aws.prefix = "not a table".into();
        assert!(bad.validate().unwrap_err().to_string().contains("table"));
        let mut bad = c.clone();
        bad.stack.postgres_schema = "x;y".into();
        assert!(bad.validate().is_err());
        assert!(ServerConfig::from_toml("[stack.aws]\nmade_up = 1").is_err());
    }

    #[test]
    fn bug_switches_are_refused_in_production_only() {
        let text = r#"
            [settings]
            bugs = ["paid_keeps_ttl"]
        "#;
        let c = ServerConfig::from_toml(text).unwrap();
        assert_eq!(
            c.environment,
            Environment::Production,
            "production by default"
        );
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("paid_keeps_ttl"), "{err}");
        let rehearsal =
            ServerConfig::from_toml(&format!("environment = \"rehearsal\"\n{text}")).unwrap();
        rehearsal.validate().unwrap();
        assert_eq!(
            rehearsal.redis_pool_size(),
            booking::settings::REDIS_POOL_SIZE
        );
        let mut small = rehearsal.clone();
        small.settings.bugs = booking::Bugs::of([booking::Bug::SmallRedisPool]);
        assert_eq!(small.redis_pool_size(), booking::bugs::SMALL_REDIS_POOL);
        assert!(
            rehearsal
                .effective_settings()
                .bugs
                .on(booking::Bug::PaidKeepsTtl)
        );
        assert!(ServerConfig::from_toml("[settings]\nbugs = [\"made_up\"]").is_err());
        ServerConfig::default().validate().unwrap();
    }

    const ARMED: &str = r#"
        environment = "rehearsal"
        [faults]
        instance = "instance-1"
        seed = 7
        [[faults.schedule.fault]]
        name = "ledger-down"
        target = "ledger"
        ops = ["admit"]
        instances = ["instance-1"]
        start_ms = 0
        duration_ms = 60_000
        kind = { type = "error" }
        [[faults.schedule.fault]]
        name = "die-after-enqueue"
        target = "instance"
        instances = ["instance-1"]
        start_ms = 0
        duration_ms = 60_000
        kind = { type = "kill", point = "after_enqueue" }
    "#;

    #[test]
    fn a_faults_section_is_read_checked_and_round_trips() {
        let c = ServerConfig::from_toml(ARMED).unwrap();
        c.validate().unwrap();
        let f = c.faults.as_ref().unwrap();
        assert_eq!(f.instance, "instance-1");
        assert_eq!(f.seed, 7);
        assert_eq!(f.schedule.faults.len(), 2);
        assert_eq!(
            f.schedule.faults[1].kind,
            faults::FaultKind::Kill {
                point: Some(faults::KillPoint::AfterEnqueue)
            }
        );
        let text = toml::to_string(&c).unwrap();
        assert_eq!(ServerConfig::from_toml(&text).unwrap(), c, "{text}");

        // production refuses the hooks, naming the way out
        let mut production = c.clone();
        production.environment = Environment::Production;
        let err = production.validate().unwrap_err().to_string();
        assert!(
            err.contains("fault hooks are for rehearsals")
                && err.contains("environment = \"rehearsal\""),
            "{err}"
        );
        let mut unlabelled = c.clone();
        unlabelled.faults.as_mut().unwrap().instance = "  ".into();
        let err = unlabelled.validate().unwrap_err().to_string();
        assert!(err.contains("faults.instance"), "{err}");
        let mut broken = c.clone();
        broken.faults.as_mut().unwrap().schedule.faults[0].duration_ms = 0;
        let err = broken.validate().unwrap_err().to_string();
        assert!(
            err.contains("faults.schedule") && err.contains("ledger-down"),
            "{err}"
        );
        assert!(
            ServerConfig::from_toml("[faults]\ninstance = \"a\"\nseed = 1\nmade_up = 2").is_err()
        );
    }

    #[test]
    fn without_faults_nothing_changes_in_the_file() {
        let c = ServerConfig::default();
        assert_eq!(c.faults, None);
        let text = toml::to_string(&c).unwrap();
        assert!(!text.contains("faults"), "{text}");
        assert_eq!(ServerConfig::from_toml(&text).unwrap(), c);
    }

    #[test]
    fn each_instance_tosses_its_own_coins_the_same_on_every_run() {
        let of = |instance: &str, seed| {
            FaultsConfig {
                instance: instance.into(),
                seed,
                schedule: faults::Schedule::default(),
            }
            .seed_for_instance()
        };
        assert_eq!(of("instance-1", 7), of("instance-1", 7));
        assert_ne!(of("instance-1", 7), of("instance-2", 7));
        assert_ne!(of("instance-1", 7), of("instance-1", 8));
        // pinned: FNV-1a, not std's hasher, whose output may change
        assert_eq!(of("", 0), 0xcbf2_9ce4_8422_2325);
    }

    #[test]
    fn settings_that_break_a_relation_are_refused_naming_it() {
        use booking::Relation;
        // a token lock that lapses under the grant call it guards
        let c = ServerConfig::from_toml(
            r#"
            [settings]
            token_lock = 20000
            "#,
        )
        .unwrap();
        let err = c.validate().unwrap_err();
        assert!(
            matches!(&err, ConfigError::Settings(b) if b.relation == Relation::TokenLockOutlivesGrant),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "invalid configuration: settings break token_lock_outlives_grant: \
             token_lock (20s) must be >= token_grant_deadline (30s) + TOKEN_LOCK_MARGIN (10s) = 40s"
        );
        // or a grant deadline raised past the lock
        let c = ServerConfig::from_toml("[settings]\ntoken_grant_deadline = 40000").unwrap();
        assert!(matches!(
            c.validate(),
            Err(ConfigError::Settings(b)) if b.relation == Relation::TokenLockOutlivesGrant
        ));

        // the check is on the settings as scaled: a sweep window as long as
        // the hold breaks at every scale
        let c = ServerConfig::from_toml(
            r#"
            time_scale = 0.01
            [settings]
            sweep_window = 600000
            "#,
        )
        .unwrap();
        let err = c.validate().unwrap_err().to_string();
        assert!(
            err.contains("sweep_window_within_hold")
                && err.contains("sweep_window (6s)")
                && err.contains("hold (6s)"),
            "{err}"
        );
        // and a stale-pending wait shorter than a request
        let c = ServerConfig::from_toml("[settings]\npending_stale_after = 1000").unwrap();
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("pending_stale_outlives_request"), "{err}");

        // the rehearsal profiles' scales run
        for time_scale in [1.0 / 30.0, 0.01] {
            let c = ServerConfig {
                time_scale,
                ..ServerConfig::default()
            };
            c.validate().unwrap();
            assert_eq!(
                c.effective_settings().token_lock,
                booking::settings::TOKEN_LOCK
            );
        }
    }

    #[test]
    fn serve_refuses_a_file_whose_settings_break_a_relation() {
        let path = std::env::temp_dir().join(format!(
            "booking-config-{}-{:x}.toml",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::write(&path, "[settings]\nsweep_concurrency = 0\n").unwrap();
        let args = ServeArgs {
            config: Some(path.clone()),
            ..ServeArgs::default()
        };
        let loaded = args.load();
        std::fs::remove_file(&path).unwrap();
        let err = loaded.unwrap_err().to_string();
        assert!(
            err.contains("sweep_concurrency_positive") && err.contains("sweep_concurrency (0)"),
            "{err}"
        );
        // the flags are applied before the check: a time scale is checked too
        let args = ServeArgs {
            time_scale: Some(0.01),
            ..ServeArgs::default()
        };
        assert_eq!(args.load().unwrap().effective_settings().check(), Ok(()));
    }

    #[test]
    fn ses_mail_and_sns_alerts_are_configured_in_their_tables() {
        let c = ServerConfig::from_toml(
            r#"
            [mail]
            kind = "ses"
            readback_moto_url = "http://127.0.0.1:5000"
            [mail.ses]
            from = "Tickets <tickets@example.com>"
            configuration_set = "sale-mail"
            send_timeout_ms = 4000
            [alerts]
            kind = "sns"
            topic_arn = "arn:aws:sns:ap-southeast-1:123456789012:sellout-alerts"
            "#,
        )
        .unwrap();
        c.validate().unwrap();
        assert_eq!(c.mail.kind, MailKind::Ses);
        assert_eq!(c.mail.ses.from, "Tickets <tickets@example.com>");
        assert_eq!(c.mail.ses.configuration_set.as_deref(), Some("sale-mail"));
        assert_eq!(c.mail.ses.send_timeout_ms, 4000);
        assert_eq!(
            c.mail.readback_moto_url.as_deref(),
            Some("http://127.0.0.1:5000")
        );
        assert_eq!(c.alerts.kind, AlertsKind::Sns);
        assert_eq!(
            c.alerts.topic_arn.as_deref(),
            Some("arn:aws:sns:ap-southeast-1:123456789012:sellout-alerts")
        );
        // the defaults: the stack's own outputs for both
        let d = ServerConfig::default();
        assert_eq!(
            (d.mail.kind, d.alerts.kind),
            (MailKind::Outputs, AlertsKind::Outputs)
        );
        d.validate().unwrap();
    }

    #[test]
    fn ses_and_sns_without_what_they_need_are_refused_naming_the_setting() {
        let refused = |toml: &str, names: &str| {
            let e = ServerConfig::from_toml(toml)
                .unwrap()
                .validate()
                .unwrap_err()
                .to_string();
            assert!(e.contains(names), "{toml}: {e}");
        };
        refused("[mail]\nkind = \"ses\"", "mail.ses: from is empty");
        refused(
            "[mail]\nkind = \"ses\"\n[mail.ses]\nfrom = \"not an address\"",
            "mail.ses: from",
        );
        refused(
            "[mail]\nkind = \"ses\"\n[mail.ses]\nfrom = \"t@example.com\"\nsend_timeout_ms = 0",
            "mail.ses: send_timeout_ms",
        );
        refused(
            "[mail]\nkind = \"ses\"\nreadback_moto_url = \"file:///tmp/x\"\n[mail.ses]\nfrom = \"t@example.com\"",
            "mail.readback_moto_url",
        );
        refused(
            "[mail]\nreadback_moto_url = \"http://127.0.0.1:5000\"",
            "mail.readback_moto_url is for kind = \"ses\"",
        );
        refused(
            "[mail]\nkind = \"ses\"\nreadback_maildir = \"/tmp/m\"\n[mail.ses]\nfrom = \"t@example.com\"",
            "mail.readback_maildir is for kind = \"smtp\"",
        );
        refused("[alerts]\nkind = \"sns\"", "alerts.topic_arn is needed");
        refused(
            "[alerts]\nkind = \"sns\"\ntopic_arn = \"sellout-alerts\"",
            "alerts.topic_arn: topic ARN",
        );
        refused(
            "[alerts]\ntopic_arn = \"arn:aws:sns:us-east-1:123456789012:a\"",
            "alerts.topic_arn is for kind = \"sns\"",
        );
        assert!(ServerConfig::from_toml("[mail.ses]\nmade_up = 1").is_err());
        assert!(ServerConfig::from_toml("[alerts]\nkind = \"pager\"").is_err());
    }

    #[tokio::test]
    async fn build_refuses_settings_that_break_a_relation() {
        // the in-process fleet (scenarios) and every server are built here
        let config = ServerConfig {
            settings: Settings {
                receives_max: 0,
                ..Settings::default()
            },
            ..ServerConfig::default()
        };
        let err = crate::build(&config, "http://127.0.0.1:1")
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("receives_positive"), "{err}");
    }
}
