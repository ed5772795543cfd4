//! The system under rehearsal: either an in-process fleet (the mock gateway
//! and N booking instances of one sale on free loopback ports, on the
//! embedded stack or on Redis) or a deployment already running elsewhere
//! (`--target URL`, driven through its `/ops/` routes).
//!
//! Either way the rehearsal sees the same [`Fleet`]: the URLs the load goes
//! to, the ops steps (reset, load-candidates, open, close, audit), the gateway's
//! ledger, and a [`Snapshot`] of the sale for progress and quiescence.
//!
//! In process, SNS delivers the gateway's webhooks to the first instance (the
//! fleet's one webhook endpoint, as a load balancer would be); `reset` and
//! `audit` run on that same instance, because `reset` stamps the instance it
//! runs on and the audit reads status writes from that stamp on.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener as StdListener, TcpStream, ToSocketAddrs};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use booking::records::RecordStatus;
use booking::{Counters, Level, SaleId};
use booking_server::config::{ServerConfig, StackConfig, StackKind};
use booking_server::ops::{self, AuditReport, GatewayTruth, StatusReport};
use booking_server::{Listeners, Server, build, build_sharing, serve};

use crate::conductor::{Conductor, InstanceHandle, Links};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::mail::MailServer;
use crate::profile::{Profile, Webhooks};

/// How long an instance gets to stop before its task is aborted.
pub const STOP_MAX: Duration = Duration::from_secs(15);
/// How long a private `redis-server` may take to answer `PING`.
pub const REDIS_START_MAX: Duration = Duration::from_secs(10);
/// How long one ops call to a remote target may take.
pub const TARGET_CALL_MAX: Duration = Duration::from_secs(120);

/// Why the fleet could not start or answer.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// Binding a port or starting a process failed.
    #[error("{0}: {1}")]
    Io(&'static str, std::io::Error),
    /// The mock gateway did not start.
    #[error("mock gateway: {0}")]
    Gateway(#[from] mock_gateway::StartError),
    /// A booking instance could not be built.
    #[error("booking instance: {0}")]
    Build(#[from] booking_server::BuildError),
    /// An ops step failed.
    #[error("ops: {0}")]
    Ops(#[from] ops::OpsError),
    /// The record store or queue could not be read.
    #[error("reading the sale: {0}")]
    Read(String),
    /// A remote target answered badly.
    #[error("target {0}: {1}")]
    Target(String, String),
    /// Redis could not be reached or started.
    #[error("redis: {0}")]
    Redis(String),
    /// The profile cannot describe a fleet.
    #[error("invalid fleet: {0}")]
    Invalid(String),
    /// The mail server (`--mail smtp|ses`) could not start.
    #[error(transparent)]
    Mail(#[from] crate::mail::MailError),
}

/// The sale at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// The ledger's counters (open flag, cap and count per level).
    pub counters: Option<Counters>,
    /// HELD records.
    pub held: u64,
    /// PAID records.
    pub paid: u64,
    /// PAID records by confirm path.
    pub paid_by: BTreeMap<String, u64>,
    /// PAID records per level.
    pub paid_per_level: BTreeMap<String, u64>,
    /// HELD records past their deadline plus the grace given.
    pub overdue_holds: u64,
    /// Extensions counted on the records left.
    pub extensions: u64,
    /// Messages queued or in flight.
    pub queued: u64,
    /// Dead letters.
    pub dead_letters: u64,
    /// Confirmation emails sent.
    pub emails: u64,
    /// PAID records whose email is still owed (in process: the email sweep
    /// sends them a sweep interval after the payment).
    pub emails_owed: u64,
    /// Alerts raised.
    pub alerts: u64,
    /// The most seats each level showed taken in any status document
    /// written since the reset (in process, when asked for).
    pub status_peaks: BTreeMap<String, u64>,
}

impl Snapshot {
    /// What the ledger's counters alone tell: seats taken, paid, and the
    /// rest held (or pending).
    pub fn of_counters(counters: Counters) -> Snapshot {
        let taken: u64 = counters.levels.iter().map(|l| u64::from(l.count)).sum();
        Snapshot {
            paid: counters.paid,
            held: taken.saturating_sub(counters.paid),
            counters: Some(counters),
            ..Snapshot::default()
        }
    }

    /// Seats counted in all (pending, held and paid).
    pub fn taken(&self) -> u64 {
        self.counters
            .as_ref()
            .map_or(0, |c| c.levels.iter().map(|l| u64::from(l.count)).sum())
    }

    /// Seats left per level.
    pub fn seats_left(&self) -> BTreeMap<String, u64> {
        self.counters
            .as_ref()
            .map(|c| {
                c.levels
                    .iter()
                    .map(|l| {
                        (
                            l.level.to_string(),
                            u64::from(l.cap.saturating_sub(l.count)),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// What must stop changing for the sale to count as quiet.
    pub fn fingerprint(&self) -> (Vec<u32>, u64, u64, u64, u64, u64) {
        let counts = self
            .counters
            .as_ref()
            .map(|c| c.levels.iter().map(|l| l.count).collect())
            .unwrap_or_default();
        (
            counts,
            self.held,
            self.paid,
            self.queued,
            self.emails,
            self.dead_letters,
        )
    }
}

/// A `redis-server` of the rehearsal's own, killed on drop.
#[derive(Debug)]
pub struct RedisProcess {
    child: Child,
}

impl Drop for RedisProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `host:port` of a `redis://` URL.
pub fn redis_host_port(url: &str) -> Option<String> {
    let rest = url.strip_prefix("redis://")?;
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let hostport = rest.split('/').next()?;
    if hostport.is_empty() {
        return None;
    }
    Some(if hostport.contains(':') {
        hostport.to_owned()
    } else {
        format!("{hostport}:6379")
    })
}

fn redis_pings(hostport: &str) -> bool {
    let Some(addr) = hostport.to_socket_addrs().ok().and_then(|mut a| a.next()) else {
        return false;
    };
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut answer = [0u8; 7];
    stream.read_exact(&mut answer).is_ok() && &answer == b"+PONG\r\n"
}

/// The `host:port` of each node a Redis Cluster URL names
/// (`redis+cluster://[user:pass@]host:port,host:port[/…]`); `None` for any
/// other URL.
pub fn redis_cluster_nodes(url: &str) -> Option<Vec<String>> {
    let rest = url.strip_prefix("redis+cluster://")?;
    let rest = rest.split(['/', '?']).next()?;
    let hosts = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let nodes: Vec<String> = hosts.split(',').map(str::to_owned).collect();
    (!nodes.iter().any(String::is_empty)).then_some(nodes)
}

/// The Redis URL to use: `url` if a server answers there, else a private
/// `redis-server` on a free loopback port (returned, to be kept alive). A
/// Redis Cluster URL is used as it is if one of its nodes answers (nothing
/// private is started for a cluster: `scripts/redis-cluster start`).
pub fn ensure_redis(url: &str) -> Result<(String, Option<RedisProcess>), FleetError> {
    if url.starts_with("redis+cluster://") {
        let nodes = redis_cluster_nodes(url)
            .ok_or_else(|| FleetError::Redis(format!("not a redis cluster URL: {url}")))?;
        if nodes.iter().any(|n| redis_pings(n)) {
            return Ok((url.to_owned(), None));
        }
        return Err(FleetError::Redis(format!(
            "no node of the cluster {url} answers: start it (scripts/redis-cluster start)"
        )));
    }
    let hostport =
        redis_host_port(url).ok_or_else(|| FleetError::Redis(format!("not a redis URL: {url}")))?;
    if redis_pings(&hostport) {
        return Ok((url.to_owned(), None));
    }
    let port = StdListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| FleetError::Io("finding a port for redis-server", e))?
        .port();
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string()])
        .args(["--save", "", "--appendonly", "no", "--bind", "127.0.0.1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| {
            FleetError::Redis(format!(
                "nothing answers at {url} and redis-server could not start ({e}); run scripts/setup"
            ))
        })?;
    let mut process = RedisProcess { child };
    let started = Instant::now();
    let local = format!("127.0.0.1:{port}");
    while started.elapsed() < REDIS_START_MAX {
        if redis_pings(&local) {
            tracing::info!(port, "started a private redis-server");
            return Ok((format!("redis://{local}"), Some(process)));
        }
        if let Ok(Some(status)) = process.child.try_wait() {
            return Err(FleetError::Redis(format!("redis-server exited: {status}")));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(FleetError::Redis(format!(
        "redis-server on port {port} did not answer within {REDIS_START_MAX:?}"
    )))
}

/// One in-process booking instance.
#[derive(Debug)]
struct Instance {
    stop: Option<oneshot::Sender<()>>,
    served: JoinHandle<std::io::Result<()>>,
}

/// A deployment driven through its `/ops/` routes.
#[derive(Debug)]
struct Remote {
    /// Its public listener (the API, `/status.json`).
    public: String,
    /// Its admin listener (the `/ops/` routes).
    base: String,
    http: reqwest::Client,
    token: Option<String>,
    /// The sale named in `X-Confirm-Sale`, when the profile confirms it.
    confirm: Option<String>,
    gateway: Option<String>,
}

/// The system under rehearsal.
#[derive(Debug)]
pub struct Fleet {
    /// The instances, in process (empty for a remote target); the first runs
    /// reset and audit.
    pub servers: Vec<Arc<Server>>,
    /// Where bookings go.
    pub booking_urls: Vec<String>,
    /// The admin listeners (the `/ops/` routes), in the order of
    /// `booking_urls`.
    pub admin_urls: Vec<String>,
    /// The payment gateway's base URL (payers' checkout pages).
    pub gateway_url: String,
    /// The mock gateway, in process.
    pub mock: Option<mock_gateway::Running>,
    /// `embedded`, `redis` or `target`.
    pub stack_name: String,
    /// The sale.
    pub sale: SaleId,
    /// Level caps, as the profile gives them.
    pub caps: Vec<(Level, u32)>,
    /// The hold after scaling (a HELD record past its deadline by more than
    /// a sweep interval is overdue).
    pub overdue_after: Duration,
    instances: Vec<Instance>,
    remote: Option<Remote>,
    redis: Option<RedisProcess>,
    /// The profile's fault schedule and the proxies of the links it faults
    /// (in process: port faults, links and gateway rules).
    faults: Option<(String, faults::Schedule, Option<Links>)>,
    /// The links' proxies (a schedule's link faults, or the toxiproxy API
    /// asked for): kept open while the fleet runs.
    links: Option<Links>,
    /// The mail server every instance sends through (`--mail smtp|ses`),
    /// stopped with the fleet.
    pub(crate) mail: Option<MailServer>,
}

/// The run's mock gateway, on a port of its own: with its signing key made
/// before the run when webhooks are to be signed (on a blocking thread: see
/// [`mock_gateway::webhooks::Webhooks::prepare_keys`]).
pub(crate) async fn start_mock(
    config: mock_gateway::Config,
    webhooks: Webhooks,
) -> Result<mock_gateway::Running, mock_gateway::StartError> {
    let mock = mock_gateway::start_local(config, mock_gateway::ScriptSpec::default()).await?;
    if webhooks != Webhooks::Never {
        let app = mock.app.clone();
        let made = tokio::task::spawn_blocking(move || app.webhooks.prepare_keys())
            .await
            .unwrap_or(false);
        if !made {
            tracing::warn!("the mock gateway has no signing key: its webhooks go unsigned");
        }
    }
    Ok(mock)
}

/// The fleet's webhook endpoint: the first instance's (as a load balancer
/// would be the one SNS endpoint).
fn webhook_endpoint(first_url: &str) -> String {
    format!("{first_url}/payment/webhook")
}

/// A key prefix no earlier run used: `rehearse-<seed>-<random>`.
pub fn run_key_prefix(seed: u64) -> String {
    format!("rehearse-{seed:x}-{:08x}", rand::random::<u32>())
}

/// The configuration every instance of a rehearsal's fleet starts from
/// (in process or as processes): the profile's sale, levels, settings and
/// time scale on `kind` at `redis_url`, the mock gateway and its SNS topic, a
/// key prefix and a back-office schema of the run's own. A rehearsal: the
/// zoo's switches are allowed.
pub fn rehearsal_config(
    profile: &Profile,
    sale: &SaleId,
    kind: StackKind,
    redis_url: String,
    mock: &mock_gateway::Running,
    topic: String,
) -> ServerConfig {
    let mut config = ServerConfig {
        sale: sale.clone(),
        levels: profile.levels.clone(),
        stack: StackConfig {
            kind,
            redis_url,
            redis_pool_size: profile.stack.redis_pool_size,
            postgres_url: profile.stack.postgres_url.clone(),
            aws: profile.stack.aws.clone(),
            ..StackConfig::default()
        },
        settings: booking::Settings {
            hold: Duration::from_millis(profile.hold_ms),
            bugs: booking::Bugs::of(profile.bugs.iter().copied()),
            ..booking::Settings::default()
        },
        time_scale: profile.time_scale,
        key_prefix: run_key_prefix(profile.seed),
        environment: booking_server::config::Environment::Rehearsal,
        ..ServerConfig::default()
    };
    config.gateway.base_url = mock.url.clone();
    // `/ops/audit` reads the mock's ground truth from here (never a URL in the request)
    config.gateway.mock_ledger = true;
    config.webhook.loopback_sns_port = Some(mock.addr.port());
    config.webhook.topic_arns = Some(vec![topic]);
    // a back office of the run's own (its rows have no clear operation)
    config.stack.postgres_schema = config.key_prefix.replace('-', "_");
    config.candidate_auth = crate::candidate_tokens::server_config(profile);
    config
}

impl Fleet {
    /// Starts what `profile` describes: the in-process fleet, or a handle on
    /// the remote target. A mail server (`profile.mail`) keeps its files in
    /// a temporary folder of its own: [`Fleet::start_in`] puts them in the
    /// run folder.
    pub async fn start(profile: &Profile) -> Result<Fleet, FleetError> {
        let dir = std::env::temp_dir().join(format!("sellout-mail-{:016x}", rand::random::<u64>()));
        Fleet::start_in(profile, &dir).await
    }

    /// [`Fleet::start`], the mail server's files (the sink's Maildir and
    /// log) in `dir`, the run folder.
    pub async fn start_in(profile: &Profile, dir: &Path) -> Result<Fleet, FleetError> {
        let sale = SaleId::parse(&profile.sale).map_err(|e| FleetError::Invalid(e.to_string()))?;
        let caps: Vec<(Level, u32)> = profile
            .levels
            .iter()
            .map(|l| (l.level.clone(), l.cap))
            .collect();
        let settings = profile.settings();
        // a profile built in code (not through `Profile::load`) is checked too
        settings
            .check()
            .map_err(|e| FleetError::Invalid(e.to_string()))?;
        let overdue_after = settings.sweep_interval * 2 + settings.sweep_budget.min(settings.hold);
        match &profile.target {
            Some(base) => {
                let admin = profile.target_admin.as_deref().ok_or_else(|| {
                    FleetError::Invalid(format!(
                        "rehearsing the deployment at {base} needs its admin listener (the \
                         /ops/ routes are not on the public one): --target-admin URL, or \
                         --target-config FILE to read admin_listen and the token from its \
                         configuration"
                    ))
                })?;
                Ok(Fleet {
                    servers: Vec::new(),
                    booking_urls: vec![base.trim_end_matches('/').to_owned()],
                    admin_urls: vec![admin.trim_end_matches('/').to_owned()],
                    gateway_url: profile.target_gateway.clone().unwrap_or_default(),
                    mock: None,
                    stack_name: "target".to_owned(),
                    sale,
                    caps,
                    overdue_after,
                    instances: Vec::new(),
                    remote: Some(Remote {
                        public: base.trim_end_matches('/').to_owned(),
                        base: admin.trim_end_matches('/').to_owned(),
                        http: reqwest::Client::builder()
                            .timeout(TARGET_CALL_MAX)
                            .build()
                            .map_err(|e| FleetError::Target(base.clone(), e.to_string()))?,
                        token: profile.target_admin_token.clone(),
                        confirm: profile.target_confirm.clone(),
                        gateway: profile.target_gateway.clone(),
                    }),
                    redis: None,
                    faults: None,
                    links: None,
                    mail: None,
                })
            }
            None => Fleet::start_local(profile, sale, caps, overdue_after, dir).await,
        }
    }

    async fn start_local(
        profile: &Profile,
        sale: SaleId,
        caps: Vec<(Level, u32)>,
        overdue_after: Duration,
        dir: &Path,
    ) -> Result<Fleet, FleetError> {
        // first, so every instance is built sending to it (on an error
        // below, dropping it stops it)
        let mail = MailServer::start(profile, dir).await?;
        let mut listeners = Vec::with_capacity(profile.instances);
        let mut urls = Vec::with_capacity(profile.instances);
        let mut admin_urls = Vec::with_capacity(profile.instances);
        for _ in 0..profile.instances {
            let l = Listeners::loopback()
                .await
                .map_err(|e| FleetError::Io("binding an instance's ports", e))?;
            let addr = l
                .public
                .local_addr()
                .map_err(|e| FleetError::Io("an instance's address", e))?;
            let admin = l
                .admin
                .local_addr()
                .map_err(|e| FleetError::Io("an instance's admin address", e))?;
            urls.push(format!("http://{addr}"));
            admin_urls.push(booking_server::admin_settings::admin_url(admin));
            listeners.push((l, addr, admin));
        }
        let first_url = urls
            .first()
            .cloned()
            .ok_or_else(|| FleetError::Invalid("no instances".into()))?;
        let mock_config = mock_gateway::Config {
            seed: profile.seed,
            webhook_urls: if profile.webhooks == Webhooks::Always {
                vec![webhook_endpoint(&first_url)]
            } else {
                Vec::new()
            },
            // SHA256withRSA: AWS-LC signs it about five times faster than
            // version 1 (sns/examples/sign_rate.rs), and the mock signs one
            // message per completed payment, thousands a second in the rush
            signature_version: 2,
            ..mock_gateway::Config::default()
        };
        let topic = mock_config.topic_arn.clone();
        let mock = start_mock(mock_config, profile.webhooks).await?;

        let (redis_url, redis) = match profile.stack.kind {
            StackKind::Redis | StackKind::Aws => ensure_redis(&profile.stack.redis_url)?,
            StackKind::Embedded => (profile.stack.redis_url.clone(), None),
        };
        let mut config =
            rehearsal_config(profile, &sale, profile.stack.kind, redis_url, &mock, topic);
        if let Some(m) = &mail {
            m.configure(&mut config.mail);
            config
                .mail
                .check()
                .map_err(|e| FleetError::Invalid(e.to_string()))?;
        }
        let schedule = profile
            .fault_schedule()
            .map_err(|e| FleetError::Invalid(e.to_string()))?;
        let redis_upstream = match profile.stack.kind {
            StackKind::Embedded => None,
            _ => crate::conductor::redis_addr(&config.stack.redis_url).await,
        };
        let links = Links::start(
            schedule.as_ref().map(|(_, s)| s),
            redis_upstream,
            mock.addr,
            profile.links_api,
        )
        .await
        .map_err(FleetError::Invalid)?;
        if let Some(l) = &links {
            if let Some(url) = &l.redis_url {
                config.stack.redis_url = url.clone();
            }
            if let Some(url) = &l.gateway_url {
                config.gateway.base_url = url.clone();
            }
        }
        let faults = schedule.map(|(name, schedule)| (name, schedule, links.clone()));
        if profile.stack.kind == StackKind::Aws {
            // fresh resources per run: records and queues have no clear
            // operation (see ops::reset)
            config.stack.aws.prefix = config.key_prefix.clone();
            booking_server::provision(&config, false)
                .await
                .map_err(|e| FleetError::Invalid(format!("provisioning: {e}")))?;
        }

        let mut servers: Vec<Arc<Server>> = Vec::with_capacity(profile.instances);
        let mut instances = Vec::with_capacity(profile.instances);
        for (index, ((listener, addr, admin), url)) in listeners.into_iter().zip(&urls).enumerate()
        {
            let mut c = config.clone();
            c.listen = addr;
            c.admin_listen = admin;
            c.public_url = url.clone();
            if let Some((_, schedule, _)) = &faults {
                c.faults = Some(booking_server::config::FaultsConfig {
                    instance: crate::conductor::instance_label(index),
                    seed: profile.seed,
                    schedule: schedule.clone(),
                });
            }
            let server = match servers.first() {
                None => build(&c, url).await?,
                Some(first) => build_sharing(&c, url, first).await?,
            };
            let server = Arc::new(server);
            let (stop, stopped) = oneshot::channel::<()>();
            let served = tokio::spawn(serve(server.clone(), listener, async move {
                let _ = stopped.await;
            }));
            servers.push(server);
            instances.push(Instance {
                stop: Some(stop),
                served,
            });
        }
        let stack_name = match profile.stack.kind {
            StackKind::Embedded => "embedded",
            StackKind::Redis => "redis",
            StackKind::Aws => "aws",
        };
        Ok(Fleet {
            servers,
            booking_urls: urls,
            admin_urls,
            gateway_url: mock.url.clone(),
            mock: Some(mock),
            stack_name: stack_name.to_owned(),
            sale,
            caps,
            overdue_after,
            instances,
            remote: None,
            redis,
            faults,
            links,
            mail,
        })
    }

    /// The mail server the instances send through (`--mail smtp|ses`).
    pub fn mail(&self) -> Option<&MailServer> {
        self.mail.as_ref()
    }

    /// The run folder's files the fleet writes besides the report's (the
    /// mail server's log), by name.
    pub fn files(&self) -> Vec<String> {
        self.mail
            .as_ref()
            .map(MailServer::files)
            .unwrap_or_default()
    }

    /// The proxies of the fleet's links, if it has any (a schedule's link
    /// faults, or the toxiproxy API asked for).
    pub fn links(&self) -> Option<&Links> {
        self.links.as_ref()
    }

    /// The conductor of the profile's fault schedule on this in-process
    /// fleet (port faults, links, gateway rules), if it has one.
    pub fn conductor(&self) -> Result<Option<Conductor>, FleetError> {
        let Some((name, schedule, links)) = &self.faults else {
            return Ok(None);
        };
        let handles = self
            .booking_urls
            .iter()
            .enumerate()
            .zip(&self.admin_urls)
            .map(|((i, url), admin_url)| InstanceHandle {
                label: crate::conductor::instance_label(i),
                url: url.clone(),
                admin_url: admin_url.clone(),
            })
            .collect();
        Conductor::new(
            name.clone(),
            schedule.clone(),
            None,
            links.clone(),
            self.mock.as_ref().map(|m| m.url.clone()),
            handles,
            None,
        )
        .map(Some)
        .map_err(FleetError::Invalid)
    }

    /// Subscribes the fleet's webhook endpoint to the in-process mock
    /// gateway (which sends the confirmation the endpoint answers); `false`
    /// when there is no in-process gateway or it is subscribed already.
    pub fn subscribe_webhooks(&self) -> bool {
        let (Some(mock), Some(first)) = (&self.mock, self.booking_urls.first()) else {
            return false;
        };
        let endpoint = webhook_endpoint(first);
        if mock
            .app
            .webhooks
            .subscriptions()
            .iter()
            .any(|s| s.endpoint == endpoint)
        {
            return false;
        }
        mock.app.webhooks.add_subscription(&endpoint);
        mock.app.webhooks.request_confirmations();
        true
    }

    /// The instance that runs reset and audit, in process.
    pub fn first(&self) -> Option<&Arc<Server>> {
        self.servers.first()
    }

    async fn remote_call(
        &self,
        remote: &Remote,
        method: reqwest::Method,
        path: &str,
        text: Option<String>,
    ) -> Result<Value, FleetError> {
        let url = format!("{}{path}", remote.base);
        let mut req = remote.http.request(method, &url);
        if let Some(t) = &remote.token {
            req = req.bearer_auth(t);
        }
        if let Some(sale) = &remote.confirm {
            req = req.header(booking_server::admin_settings::CONFIRM_HEADER, sale);
        }
        if let Some(text) = text {
            req = req
                .header(reqwest::header::CONTENT_TYPE, "text/plain")
                .body(text);
        }
        let err = |e: String| FleetError::Target(url.clone(), e);
        let resp = req.send().await.map_err(|e| err(e.to_string()))?;
        let code = resp.status();
        let v: Value = resp.json().await.map_err(|e| err(e.to_string()))?;
        if !code.is_success() {
            return Err(err(format!("{code}: {v}")));
        }
        Ok(v)
    }

    /// `reset`: levels and caps, closed, no candidates.
    pub async fn reset(&self) -> Result<Value, FleetError> {
        if let Some(r) = &self.remote {
            return self
                .remote_call(r, reqwest::Method::POST, "/ops/reset", None)
                .await;
        }
        let s = self.local()?;
        Ok(serde_json::to_value(ops::reset(s).await?).unwrap_or(Value::Null))
    }

    /// `load-candidates`: candidates newly eligible. On a target, the list
    /// goes in requests of at most [`ops::LOAD_BODY_BYTES_MAX`] bytes.
    pub async fn load_candidates(&self, list: &[String]) -> Result<u64, FleetError> {
        if let Some(r) = &self.remote {
            let bodies = ops::load_request_bodies(list)
                .map_err(|e| FleetError::Target(r.base.clone(), e))?;
            let mut added = 0;
            for body in bodies {
                let v = self
                    .remote_call(r, reqwest::Method::POST, "/ops/load-candidates", Some(body))
                    .await?;
                added += v["added"].as_u64().ok_or_else(|| {
                    FleetError::Target(
                        r.base.clone(),
                        format!("a load report without `added`: {v}"),
                    )
                })?;
            }
            return Ok(added);
        }
        Ok(ops::load_candidates(self.local()?, list).await?.added)
    }

    /// `open`.
    pub async fn open(&self) -> Result<(), FleetError> {
        if let Some(r) = &self.remote {
            self.remote_call(r, reqwest::Method::POST, "/ops/open", None)
                .await?;
            return Ok(());
        }
        ops::open(self.local()?).await?;
        Ok(())
    }

    /// `close`.
    pub async fn close(&self) -> Result<(), FleetError> {
        if let Some(r) = &self.remote {
            self.remote_call(r, reqwest::Method::POST, "/ops/close", None)
                .await?;
            return Ok(());
        }
        ops::close(self.local()?).await?;
        Ok(())
    }

    /// Publishes the status document now (the audit compares the current one).
    pub async fn publish_status(&self) -> Result<(), FleetError> {
        if let Some(r) = &self.remote {
            self.remote_call(r, reqwest::Method::GET, "/ops/status", None)
                .await?;
            return Ok(());
        }
        ops::status(self.local()?).await?;
        Ok(())
    }

    /// The gateway's ground truth, when known: the in-process mock's
    /// payments and grants, or a remote target's mock's `/__mock/ledger`.
    pub async fn gateway_ledger(&self) -> Result<Option<GatewayTruth>, FleetError> {
        if let Some(mock) = &self.mock {
            let ledger = json!({
                "payments": mock.app.gateway.payments(),
                "grants_in_window": mock.app.gateway.grants_in_window_json(),
            });
            return GatewayTruth::from_value(&ledger)
                .map(Some)
                .map_err(|e| FleetError::Read(e.to_string()));
        }
        match self.remote.as_ref().and_then(|r| r.gateway.as_deref()) {
            Some(base) => booking_server::admin::fetch_gateway_ledger(base)
                .await
                .map(Some)
                .map_err(|e| FleetError::Target(base.to_owned(), e.to_string())),
            None => Ok(None),
        }
    }

    /// The audit, on the instance that ran `reset`, against `gateway_ledger`.
    pub async fn audit(
        &self,
        gateway_ledger: Option<&GatewayTruth>,
    ) -> Result<AuditReport, FleetError> {
        if let Some(r) = &self.remote {
            // the deployment reads its configured gateway's ground truth
            // (`gateway.mock_ledger`); the rehearsal's own checks read
            // `r.gateway` themselves
            let v = self
                .remote_call(r, reqwest::Method::GET, "/ops/audit", None)
                .await?;
            return serde_json::from_value(v)
                .map_err(|e| FleetError::Target(r.base.clone(), e.to_string()));
        }
        Ok(ops::audit(self.local()?, gateway_ledger).await?)
    }

    /// The sale's public status document as last published (a remote
    /// target's `GET /status.json`, the first instance's in process), or
    /// `None` before the first publication: what a shard of a sharded load
    /// polls for the sale's opening. Reading it publishes nothing.
    pub async fn status_document(
        &self,
        timeout: Duration,
    ) -> Result<Option<booking::StatusDocument>, FleetError> {
        let bytes = if let Some(r) = &self.remote {
            // the public document, on the public listener
            let url = format!("{}/status.json", r.public);
            let err = |e: String| FleetError::Target(url.clone(), e);
            let resp = r
                .http
                .get(&url)
                .timeout(timeout)
                .send()
                .await
                .map_err(|e| err(e.to_string()))?;
            let code = resp.status();
            let body = resp.bytes().await.map_err(|e| err(e.to_string()))?;
            if !code.is_success() {
                return Err(err(format!("{code}: {}", String::from_utf8_lossy(&body))));
            }
            Some(body.to_vec())
        } else {
            let s = self.local()?;
            s.stack
                .status_sink
                .get()
                .await
                .map_err(|e| FleetError::Read(e.to_string()))?
        };
        bytes
            .map(|b| booking::StatusDocument::from_json(&b))
            .transpose()
            .map_err(|e| FleetError::Read(format!("status document: {e}")))
    }

    /// Age of the oldest queued message, ms (`None`: empty, or not
    /// observable on a remote target).
    pub async fn queue_age_ms(&self) -> Option<u64> {
        let s = self.first()?;
        match s.stack.queue.oldest_age().await {
            Ok(age) => Some(age.map_or(0, |a| a.as_millis() as u64)),
            Err(e) => {
                tracing::warn!(error = %e, "queue age");
                None
            }
        }
    }

    /// Whether the queue can be watched (in process only).
    pub fn queue_observable(&self) -> bool {
        self.remote.is_none()
    }

    /// The sale now. `with_status_peaks` also reads every status document
    /// written since the reset (in process), for the level peaks.
    pub async fn snapshot(&self, with_status_peaks: bool) -> Result<Snapshot, FleetError> {
        self.snapshot_of(with_status_peaks, true).await
    }

    /// The sale for the timeline, every second of the run: the ledger's
    /// counters only (seats counted, candidates paid, open), one O(levels)
    /// read (`/ops/counters` of a target). Holds are the counted seats not
    /// paid. Neither the records nor the outputs are read: a scan of every
    /// record each second cost the Redis rehearsal its latency bound (about
    /// 20,000 `HGETALL`s a second around sell-out, on the server under test).
    pub async fn timeline_snapshot(&self) -> Result<Snapshot, FleetError> {
        let counters: Counters = if let Some(r) = &self.remote {
            let v = self
                .remote_call(r, reqwest::Method::GET, "/ops/counters", None)
                .await?;
            serde_json::from_value(v)
                .map_err(|e| FleetError::Target(r.base.clone(), e.to_string()))?
        } else {
            let s = self.local()?;
            s.stack
                .ledger
                .counters(&self.sale)
                .await
                .map_err(|e| FleetError::Read(e.to_string()))?
        };
        Ok(Snapshot::of_counters(counters))
    }

    /// The Redis pools' figures, each pool summed over the instances that
    /// answer (empty where nothing runs on Redis): in process from the
    /// servers' pools, otherwise from each booking URL's `/metrics`.
    pub async fn redis_pools(&self) -> Vec<(String, booking::PoolFigures)> {
        let mut by_pool: BTreeMap<String, booking::PoolFigures> = BTreeMap::new();
        match &self.remote {
            None => {
                for server in &self.servers {
                    for (name, pool) in &server.redis_pools {
                        *by_pool.entry((*name).to_owned()).or_default() += pool.figures();
                    }
                }
            }
            Some(remote) => {
                for url in &self.booking_urls {
                    let answer = remote.http.get(format!("{url}/metrics")).send().await;
                    let text = match answer {
                        Ok(r) => r.text().await.unwrap_or_default(),
                        Err(e) => {
                            tracing::warn!(%url, error = %e, "metrics for the pools");
                            continue;
                        }
                    };
                    for (name, figures) in crate::conductor::pools_from_metrics(&text) {
                        *by_pool.entry(name).or_default() += figures;
                    }
                }
            }
        }
        by_pool.into_iter().collect()
    }

    async fn snapshot_of(
        &self,
        with_status_peaks: bool,
        with_outputs: bool,
    ) -> Result<Snapshot, FleetError> {
        if let Some(r) = &self.remote {
            let v = self
                .remote_call(r, reqwest::Method::GET, "/ops/status", None)
                .await?;
            let report: StatusReport = serde_json::from_value(v)
                .map_err(|e| FleetError::Target(r.base.clone(), e.to_string()))?;
            let mut snap = Snapshot {
                counters: Some(report.counters),
                queued: report.queue.visible + report.queue.in_flight,
                dead_letters: report.dead_letters as u64,
                emails: report.emails as u64,
                alerts: report.alerts as u64,
                ..Snapshot::default()
            };
            for (level, c) in report.records {
                snap.held += c.held;
                snap.paid += c.paid;
                snap.emails_owed += c.emails_owed;
                snap.paid_per_level.insert(level.to_string(), c.paid);
            }
            // Deadlines and confirm paths are not visible remotely: every
            // HELD record counts until the reconciler resolves it, and the
            // paid are by an unknown path.
            snap.overdue_holds = snap.held;
            if snap.paid > 0 {
                snap.paid_by.insert("unknown".to_owned(), snap.paid);
            }
            return Ok(snap);
        }
        let s = self.local()?;
        let stack = &s.stack;
        let read = |e: &dyn std::fmt::Display| FleetError::Read(e.to_string());
        let counters = stack
            .ledger
            .counters(&self.sale)
            .await
            .map_err(|e| read(&e))?;
        let records = stack.records.scan_all().await.map_err(|e| read(&e))?;
        let depth = stack.queue.depth().await.map_err(|e| read(&e))?;
        let dead = stack.queue.dead_letters().await.map_err(|e| read(&e))?;
        let now_ms = stack.clock.now_ms();
        let grace_ms = self.overdue_after.as_millis() as u64;
        let mut snap = Snapshot {
            counters: Some(counters),
            queued: depth.visible + depth.in_flight,
            dead_letters: dead.len() as u64,
            ..Snapshot::default()
        };
        if with_outputs {
            snap.emails = s.outputs.sent_mail().await.map_err(|e| read(&e))?.len() as u64;
            snap.alerts = s.outputs.alerts_raised().await.map_err(|e| read(&e))?.len() as u64;
        }
        for r in records.iter().filter(|r| r.sale == self.sale) {
            snap.extensions += u64::from(r.extensions);
            match r.status {
                RecordStatus::Held => {
                    snap.held += 1;
                    if r.deadline_ms + grace_ms < now_ms {
                        snap.overdue_holds += 1;
                    }
                }
                RecordStatus::Paid => {
                    snap.paid += 1;
                    snap.emails_owed += u64::from(!r.email_sent);
                    *snap.paid_per_level.entry(r.level.to_string()).or_default() += 1;
                    let path = r.paid_by.map_or_else(
                        || "unknown".to_owned(),
                        |p| {
                            serde_json::to_value(p)
                                .ok()
                                .and_then(|v| v.as_str().map(str::to_owned))
                                .unwrap_or_else(|| format!("{p:?}"))
                        },
                    );
                    *snap.paid_by.entry(path).or_default() += 1;
                }
            }
        }
        if with_status_peaks {
            let since = s.reset_at_ms().await.map_err(|e| read(&e))?;
            for w in s.outputs.status_writes(since).await.map_err(|e| read(&e))? {
                if let Ok(doc) = booking::StatusDocument::from_json(&w.document) {
                    for l in &doc.levels {
                        let e = snap.status_peaks.entry(l.level.to_string()).or_default();
                        *e = (*e).max(u64::from(l.taken));
                    }
                }
            }
        }
        Ok(snap)
    }

    fn local(&self) -> Result<&Server, FleetError> {
        self.first()
            .map(|s| s.as_ref())
            .ok_or_else(|| FleetError::Invalid("no in-process instance".into()))
    }

    /// Stops the instances' servers and background loops, keeping their
    /// state readable (the mock gateway keeps running until [`Fleet::stop`]).
    pub async fn stop_instances(&mut self) {
        for i in &mut self.instances {
            if let Some(tx) = i.stop.take() {
                let _ = tx.send(());
            }
        }
        for i in &mut self.instances {
            match tokio::time::timeout(STOP_MAX, &mut i.served).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => tracing::warn!(error = %e, "instance stopped with an error"),
                Ok(Err(e)) => tracing::warn!(error = %e, "instance task failed"),
                Err(_) => {
                    tracing::warn!("instance did not stop in {STOP_MAX:?}; aborting it");
                    i.served.abort();
                }
            }
        }
        self.instances.clear();
    }

    /// Stops everything started here.
    pub async fn stop(mut self) {
        self.stop_instances().await;
        if let Some(mock) = self.mock.take() {
            mock.stop().await;
        }
        drop(self.redis.take());
        // after the instances: nothing sends any more
        drop(self.mail.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timelines_snapshot_holds_what_is_counted_and_not_paid() {
        let level = |name: &str, cap, count| booking::ledger::LevelCount {
            level: Level::parse(name).unwrap(),
            cap,
            count,
            peak: count,
        };
        let snap = Snapshot::of_counters(Counters {
            open: true,
            levels: vec![level("a", 10, 7), level("b", 5, 5)],
            paid: 9,
        });
        assert_eq!((snap.taken(), snap.paid, snap.held), (12, 9, 3));
        assert_eq!(snap.seats_left().get("a"), Some(&3));
        assert_eq!(snap.seats_left().get("b"), Some(&0));
    }

    #[test]
    fn redis_urls_give_host_and_port() {
        assert_eq!(
            redis_host_port("redis://127.0.0.1:6379").as_deref(),
            Some("127.0.0.1:6379")
        );
        assert_eq!(
            redis_host_port("redis://localhost").as_deref(),
            Some("localhost:6379")
        );
        assert_eq!(
            redis_host_port("redis://u:p@h:7000/2").as_deref(),
            Some("h:7000")
        );
        assert_eq!(redis_host_port("http://h"), None);
        assert_eq!(redis_host_port("redis://"), None);
    }

    #[test]
    fn cluster_urls_give_every_node_and_no_single_host() {
        let url = "redis+cluster://u:p@127.0.0.1:7101,127.0.0.1:7102/0";
        assert_eq!(
            redis_cluster_nodes(url),
            Some(vec![
                "127.0.0.1:7101".to_owned(),
                "127.0.0.1:7102".to_owned()
            ])
        );
        // no link proxy in front of one node of a cluster
        assert_eq!(redis_host_port(url), None);
        assert_eq!(redis_cluster_nodes("redis+cluster://a:1,"), None);
        assert_eq!(redis_cluster_nodes("redis://127.0.0.1:6379"), None);
        assert!(matches!(
            ensure_redis("redis+cluster://127.0.0.1:1"),
            Err(FleetError::Redis(why)) if why.contains("scripts/redis-cluster start")
        ));
    }

    #[test]
    fn key_prefixes_differ_per_run() {
        assert_ne!(run_key_prefix(1), run_key_prefix(1));
        assert!(run_key_prefix(1).starts_with("rehearse-1-"));
    }

    #[tokio::test]
    async fn a_mock_that_will_sign_webhooks_has_its_key_before_the_run() {
        // made on the first signature instead, the key stalled the run's
        // process mid-run (the after-rush subscription)
        for (webhooks, made) in [
            (Webhooks::AfterRush, true),
            (Webhooks::Always, true),
            (Webhooks::Never, false),
        ] {
            let mock = start_mock(mock_gateway::Config::default(), webhooks)
                .await
                .unwrap();
            assert_eq!(mock.app.webhooks.has_key(), made, "{webhooks:?}");
        }
    }
}
