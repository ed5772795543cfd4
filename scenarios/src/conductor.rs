//! The fault conductor of a rehearsal (`scenarios rehearse --faults
//! NAME|FILE`): carries out a [`faults::Schedule`] against the fleet while
//! the load runs, and says what it did.
//!
//! Who does what:
//! - **port faults** (`ledger`, `records`, `queue`, …, `clock`) and the
//!   **kill points** run inside each booking instance, which has the
//!   schedule in its `[faults]` configuration (`booking serve`): the
//!   conductor starts their clock (`POST /ops/faults/start`, again after an
//!   instance is started anew) and reads what fired (`GET /ops/faults`);
//! - **process faults** (`instance`, `redis_server`): signals to the OS
//!   processes of a process fleet ([`FleetControl`]);
//! - **link faults** (`redis_link`, `gateway_link`): toxics on the fleet's
//!   [`Links`] (the `netfault` proxies between the instances and Redis, and
//!   the gateway), added when a window opens and removed when it closes;
//! - **gateway rules** (`gateway_rules`): a rule of the mock gateway's
//!   script, appended over its control API when a window opens and removed
//!   when it closes.
//!
//! Each window of each fault becomes a [`FaultRecord`]: when it opened and
//! closed, what fired, what went wrong, and the system's reactions (the
//! fleet's counters over the window: undos, releases, extensions, alerts,
//! redeliveries, …). Windows open only while the load runs; one that is
//! open when the load ends is carried out to its close (an instance killed
//! is started again) before the sale is closed.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use faults::{FaultKind, FaultSpec, LinkStream, Schedule, Scope, Target};
use netfault::{Netfault, ProxySpec, Stream, Toxic, ToxicKind};
use tokio::sync::watch;

use crate::kills::BoxFuture;

/// The `redis_link` proxy's name.
pub const REDIS_PROXY: &str = "redis";
/// The `gateway_link` proxy's name.
pub const GATEWAY_PROXY: &str = "gateway";
/// How long an instance stopped with SIGTERM may take to exit before it is
/// killed: its drain notice (`processes::FLEET_DRAIN_NOTICE`), its requests
/// in flight, and its worker's receive in progress (a long poll of up to
/// `booking_server::run::WORKER_WAIT`, 5 s), with slack.
pub const TERM_MAX: Duration = Duration::from_secs(10);
/// Counters of `/metrics` summed over the fleet as a fault's reactions:
/// `(reaction, metric)`.
pub const REACTIONS: &[(&str, &str)] = &[
    ("admissions_undone", "booking_undos_total"),
    ("pending_undone", "booking_pending_undone_total"),
    ("releases", "booking_releases_total"),
    ("extensions", "booking_extensions_total"),
    ("alerts", "booking_alerts_total"),
    ("orphans_recovered", "booking_orphans_recovered_total"),
    ("gateway_errors", "booking_gateway_errors_total"),
    (
        "redeliveries",
        "booking_worker_messages_total{outcome=\"left\"}",
    ),
    (
        "dead_letters",
        "booking_worker_messages_total{outcome=\"dead_letter\"}",
    ),
    ("deadline_refusals", "booking_deadline_expired_total"),
    (
        "admissions_refused_busy",
        "booking_admissions_total{outcome=\"busy\"}",
    ),
];

/// A booking instance's label in schedules (`instances = ["instance-1"]`).
pub fn instance_label(index: usize) -> String {
    format!("instance-{index}")
}

/// The index of `label` among `n` instances.
pub fn instance_index(label: &str, n: usize) -> Option<usize> {
    label
        .strip_prefix("instance-")?
        .parse()
        .ok()
        .filter(|i| *i < n)
}

/// The OS processes of a process fleet, as the conductor acts on them.
pub trait FleetControl: Send + Sync + std::fmt::Debug {
    /// How many booking instances.
    fn instances(&self) -> usize;
    /// SIGKILLs instance `i` and waits until it is gone.
    fn kill(&self, i: usize) -> BoxFuture<'_, Result<(), String>>;
    /// SIGTERM to instance `i`, then waits for it to exit (SIGKILL after
    /// [`TERM_MAX`]).
    fn terminate(&self, i: usize) -> BoxFuture<'_, Result<(), String>>;
    /// SIGSTOP (`true`) or SIGCONT (`false`) to instance `i`.
    fn pause(&self, i: usize, stop: bool) -> BoxFuture<'_, Result<(), String>>;
    /// Waits at most `max` for instance `i` to exit by itself; whether it did.
    fn wait_exit(&self, i: usize, max: Duration) -> BoxFuture<'_, Result<bool, String>>;
    /// Starts instance `i` again (same port, same config) and waits until it
    /// answers.
    fn start(&self, i: usize) -> BoxFuture<'_, Result<(), String>>;
    /// SIGSTOP (`true`) or SIGCONT (`false`) to `redis-server`.
    fn pause_redis(&self, stop: bool) -> BoxFuture<'_, Result<(), String>>;
    /// SIGKILLs `redis-server` and waits until it is gone.
    fn kill_redis(&self) -> BoxFuture<'_, Result<(), String>>;
    /// Starts `redis-server` again on its port and data directory and waits
    /// until it answers.
    fn start_redis(&self) -> BoxFuture<'_, Result<(), String>>;
}

/// The fleet's faultable links: `netfault` proxies between the instances
/// and Redis, and between the instances and the gateway, and (when asked)
/// their toxiproxy-shaped HTTP API on a loopback port, for a toxiproxy
/// client during a manual rehearsal. Dropping the last clone stops the API.
#[derive(Debug, Clone)]
pub struct Links {
    /// The proxies.
    pub netfault: Netfault,
    /// Where the instances reach Redis through the proxy (`redis://…`).
    pub redis_url: Option<String>,
    /// Where the instances reach the gateway through the proxy.
    pub gateway_url: Option<String>,
    /// Where the toxiproxy API answers, if served.
    pub api: Option<SocketAddr>,
    _api_task: Option<Arc<AbortOnDrop>>,
}

/// Aborts a task when dropped.
#[derive(Debug)]
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn proxy(
    netfault: &Netfault,
    name: &str,
    upstream: SocketAddr,
) -> Result<SocketAddr, String> {
    let info = netfault
        .create(ProxySpec {
            name: name.to_owned(),
            listen: "127.0.0.1:0".to_owned(),
            upstream: upstream.to_string(),
            enabled: true,
        })
        .await
        .map_err(|e| format!("proxy {name}: {e}"))?;
    info.listen
        .parse()
        .map_err(|e| format!("proxy {name} listens on {:?}: {e}", info.listen))
}

impl Links {
    /// Proxies for the links `schedule` faults: Redis at `redis` (when the
    /// schedule has `redis_link` faults), the gateway at `gateway` (for
    /// `gateway_link` faults). With `api` (a loopback address), both links
    /// (Redis when there is one) whatever the schedule, and their
    /// toxiproxy-shaped API served there. `None` when there is nothing to
    /// proxy.
    pub async fn start(
        schedule: Option<&Schedule>,
        redis: Option<SocketAddr>,
        gateway: SocketAddr,
        api: Option<SocketAddr>,
    ) -> Result<Option<Links>, String> {
        let wants = |t: Target| {
            api.is_some() && (t == Target::GatewayLink || redis.is_some())
                || schedule.is_some_and(|s| s.faults.iter().any(|f| f.target == t))
        };
        if !wants(Target::RedisLink) && !wants(Target::GatewayLink) {
            return Ok(None);
        }
        if let Some(a) = api
            && !a.ip().is_loopback()
        {
            return Err(format!(
                "the toxiproxy API listens on loopback only, not {a}"
            ));
        }
        let netfault = Netfault::new();
        let redis_url = match (wants(Target::RedisLink), redis) {
            (true, Some(upstream)) => Some(format!(
                "redis://{}",
                proxy(&netfault, REDIS_PROXY, upstream).await?
            )),
            (true, None) => return Err("redis_link faults need a Redis stack".into()),
            (false, _) => None,
        };
        let gateway_url = if wants(Target::GatewayLink) {
            Some(format!(
                "http://{}",
                proxy(&netfault, GATEWAY_PROXY, gateway).await?
            ))
        } else {
            None
        };
        let (api, task) = match api {
            None => (None, None),
            Some(listen) => {
                let (addr, task) = netfault::serve(netfault.clone(), listen)
                    .await
                    .map_err(|e| format!("serving the toxiproxy API on {listen}: {e}"))?;
                tracing::info!(%addr, "toxiproxy API of the fleet's links");
                eprintln!(
                    "links: toxiproxy API on http://{addr} (proxies {REDIS_PROXY:?}, {GATEWAY_PROXY:?})"
                );
                (Some(addr), Some(Arc::new(AbortOnDrop(task))))
            }
        };
        Ok(Some(Links {
            netfault,
            redis_url,
            gateway_url,
            api,
            _api_task: task,
        }))
    }
}

/// The host and port of a `redis://host:port[/db]` URL, resolved.
pub async fn redis_addr(url: &str) -> Option<SocketAddr> {
    let hostport = crate::fleet::redis_host_port(url)?;
    tokio::net::lookup_host(hostport).await.ok()?.next()
}

/// The address of an `http://host:port` base URL, resolved.
pub async fn http_addr(base: &str) -> Option<SocketAddr> {
    let u = url::Url::parse(base).ok()?;
    let hostport = format!("{}:{}", u.host_str()?, u.port_or_known_default()?);
    tokio::net::lookup_host(hostport).await.ok()?.next()
}

/// One window of one fault, as carried out.
#[derive(Debug, Clone, Default)]
pub struct FaultRecord {
    /// The fault's name.
    pub fault: String,
    /// Its kind (`kill`, `pause`, `latency`, …).
    pub kind: String,
    /// Where (`instance-1`, `redis-server`, `redis link`, `gateway`, `ledger`…).
    pub target: String,
    /// The schedule's window, ms from the load's start.
    pub window_ms: (u64, u64),
    /// When it was carried out (its window opened).
    pub opened_at: Option<Instant>,
    /// When it was undone (its window closed, the piece back).
    pub closed_at: Option<Instant>,
    /// How many times it fired (calls it hit; 1 for an action).
    pub fired: u64,
    /// The fleet's counters over its window.
    pub reactions: BTreeMap<String, u64>,
    /// What it did, for a human.
    pub detail: String,
    /// Why it could not be carried out.
    pub error: Option<String>,
    /// Whether it acts on processes or links (its window excuses
    /// connection errors) or only on calls and rules.
    pub scope: Option<Scope>,
}

impl FaultRecord {
    /// Whether it opened, closed, and nothing went wrong.
    pub fn done(&self) -> bool {
        self.opened_at.is_some() && self.closed_at.is_some() && self.error.is_none()
    }
}

/// An instance the conductor talks to over HTTP.
#[derive(Debug, Clone)]
pub struct InstanceHandle {
    /// Its label (`instance-<i>`).
    pub label: String,
    /// Its base URL (the public listener: `/metrics`).
    pub url: String,
    /// Its admin listener's base URL (`/ops/faults`).
    pub admin_url: String,
}

/// Carries out a schedule during a rehearsal.
#[derive(Debug, Clone)]
pub struct Conductor {
    /// The schedule's name (for the report).
    pub name: String,
    /// The schedule.
    pub schedule: Schedule,
    control: Option<Arc<dyn FleetControl>>,
    links: Option<Links>,
    gateway_control: Option<String>,
    instances: Vec<InstanceHandle>,
    admin_token: Option<String>,
    http: reqwest::Client,
}

fn unix_ms_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A netfault toxic (or two, for `both`) for a link fault.
fn toxics_of(f: &FaultSpec) -> Result<Vec<Toxic>, String> {
    let kind = match f.kind {
        FaultKind::Latency { delay } => match delay {
            faults::Delay::Fixed { ms } => ToxicKind::Latency {
                latency: ms,
                jitter: 0,
            },
            faults::Delay::Uniform { lo_ms, hi_ms } => ToxicKind::Latency {
                latency: (lo_ms + hi_ms) / 2,
                jitter: (hi_ms - lo_ms) / 2,
            },
            faults::Delay::Exponential { .. } => {
                return Err("a link's latency is fixed or uniform".into());
            }
        },
        FaultKind::Timeout { after_ms } => ToxicKind::Timeout { timeout: after_ms },
        FaultKind::Hang { .. } => ToxicKind::Timeout { timeout: 0 },
        FaultKind::Reset => ToxicKind::ResetPeer { timeout: 0 },
        FaultKind::Bandwidth { kb_per_s } => ToxicKind::Bandwidth { rate: kb_per_s },
        FaultKind::SlowClose { ms } => ToxicKind::SlowClose { delay: ms },
        FaultKind::Slicer {
            average_size,
            size_variation,
            delay_us,
        } => ToxicKind::Slicer {
            average_size,
            size_variation,
            delay: delay_us,
        },
        other => return Err(format!("{} is not a toxic", other.name())),
    };
    let streams = match f.stream.unwrap_or(LinkStream::Downstream) {
        LinkStream::Upstream => vec![Stream::Upstream],
        LinkStream::Downstream => vec![Stream::Downstream],
        LinkStream::Both => vec![Stream::Upstream, Stream::Downstream],
    };
    Ok(streams
        .into_iter()
        .map(|s| {
            Toxic::new(s, kind.clone())
                .named(format!("{}-{}", f.name, s.name()))
                .with_toxicity(f.probability as f32)
        })
        .collect())
}

/// Sums every sample of `metric` in a Prometheus text exposition; a
/// `metric` of the form `name{label="value"}` sums only the samples with
/// that label.
pub fn metric_sum(text: &str, metric: &str) -> f64 {
    let (want, label) = match metric.split_once('{') {
        Some((name, rest)) => (name, Some(rest.trim_end_matches('}'))),
        None => (metric, None),
    };
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (name_labels, value) = l.rsplit_once(' ')?;
            let (name, labels) = match name_labels.split_once('{') {
                Some((n, rest)) => (n.trim(), rest.trim_end_matches('}')),
                None => (name_labels.trim(), ""),
            };
            // every label asked for is on the line (others may be too)
            let labelled = label.is_none_or(|want| {
                want.split(',')
                    .all(|w| labels.split(',').any(|l| l.trim() == w.trim()))
            });
            (name == want && labelled).then(|| value.trim().parse::<f64>().ok())?
        })
        .sum()
}

/// The Redis pools an instance's `/metrics` shows
/// (`booking_redis_pool_*{pool=…}`), by adapter: those that were asked for
/// a connection at least once. The gauges of connections open and in use
/// are left at 0 (the figures judged are the counts).
pub fn pools_from_metrics(text: &str) -> Vec<(String, booking::PoolFigures)> {
    booking_server::build::REDIS_POOLS
        .iter()
        .filter_map(|name| {
            let read = |metric: &str, more: &str| {
                metric_sum(
                    text,
                    &format!("booking_redis_pool_{metric}{{pool=\"{name}\"{more}}}"),
                )
            };
            let gets = read("gets_total", "") as u64;
            (gets > 0).then(|| {
                let figures = booking::PoolFigures {
                    max_size: read("connections", ",state=\"max\"") as u64,
                    waiting: read("waiting", "") as u64,
                    gets,
                    waits: read("waits_total", "") as u64,
                    wait_micros: (read("wait_seconds_total", "") * 1e6).round() as u64,
                    timeouts: read("timeouts_total", "") as u64,
                    ..booking::PoolFigures::default()
                };
                ((*name).to_owned(), figures)
            })
        })
        .collect()
}

impl Conductor {
    /// A conductor of `schedule` (named `name`) over the fleet's pieces.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        name: String,
        schedule: Schedule,
        control: Option<Arc<dyn FleetControl>>,
        links: Option<Links>,
        gateway_control: Option<String>,
        instances: Vec<InstanceHandle>,
        admin_token: Option<String>,
    ) -> Result<Conductor, String> {
        let mut scopes = vec![Scope::Port];
        if control.is_some() {
            scopes.push(Scope::Process);
        }
        if links.is_some() {
            scopes.push(Scope::Link);
        }
        if gateway_control.is_some() {
            scopes.push(Scope::Rules);
        }
        schedule
            .check_scopes("this fleet", &scopes)
            .map_err(|e| e.to_string())?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .no_proxy()
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Conductor {
            name,
            schedule,
            control,
            links,
            gateway_control,
            instances,
            admin_token,
            http,
        })
    }

    fn authed(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.admin_token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    /// Starts the clock of the port faults and kill points in instance `i`
    /// (`started_unix_ms`: the load's start).
    async fn start_instance_clock(&self, i: usize, started_unix_ms: u64) -> Result<(), String> {
        let Some(inst) = self.instances.get(i) else {
            return Ok(());
        };
        let r = self
            .authed(
                self.http
                    .post(format!("{}/ops/faults/start", inst.admin_url)),
            )
            .json(&serde_json::json!({ "started_unix_ms": started_unix_ms }))
            .send()
            .await
            .map_err(|e| format!("{}: starting its faults: {e}", inst.label))?;
        if !r.status().is_success() {
            return Err(format!(
                "{}: starting its faults: {}",
                inst.label,
                r.status()
            ));
        }
        Ok(())
    }

    /// The fleet's counters of [`REACTIONS`], summed over the instances
    /// that answer.
    async fn counters(&self) -> BTreeMap<String, f64> {
        let mut sums: BTreeMap<String, f64> = BTreeMap::new();
        for inst in &self.instances {
            let Ok(r) = self.http.get(format!("{}/metrics", inst.url)).send().await else {
                continue;
            };
            let Ok(text) = r.text().await else {
                continue;
            };
            for (reaction, metric) in REACTIONS {
                *sums.entry((*reaction).to_owned()).or_default() += metric_sum(&text, metric);
            }
        }
        sums
    }

    /// What fired inside each instance, summed by fault name.
    pub async fn fired_in_instances(&self) -> BTreeMap<String, u64> {
        let mut fired = BTreeMap::new();
        for inst in &self.instances {
            let Ok(r) = self
                .authed(self.http.get(format!("{}/ops/faults", inst.admin_url)))
                .send()
                .await
            else {
                continue;
            };
            let Ok(v) = r.json::<serde_json::Value>().await else {
                continue;
            };
            for c in v["counts"].as_array().into_iter().flatten() {
                if let (Some(name), Some(n)) = (c["fault"].as_str(), c["fired"].as_u64()) {
                    *fired.entry(name.to_owned()).or_default() += n;
                }
            }
        }
        fired
    }

    /// Carries out the schedule from `load_start` until `load_done` (no
    /// window opens after it; open ones are closed), then reads what fired
    /// inside the instances. One record per window opened or due.
    pub async fn run(
        &self,
        load_start: Instant,
        load_done: watch::Receiver<bool>,
    ) -> Vec<FaultRecord> {
        let started_unix_ms = unix_ms_now().saturating_sub(load_start.elapsed().as_millis() as u64);
        let mut records = Vec::new();
        for i in 0..self.instances.len() {
            if let Err(e) = self.start_instance_clock(i, started_unix_ms).await {
                records.push(FaultRecord {
                    fault: "faults-clock".into(),
                    kind: "start".into(),
                    target: instance_label(i),
                    error: Some(e),
                    ..FaultRecord::default()
                });
            }
        }
        let mut tasks = tokio::task::JoinSet::new();
        for spec in &self.schedule.faults {
            if spec.target.scope() == Scope::Port {
                continue;
            }
            let this = self.clone();
            let spec = spec.clone();
            let done = load_done.clone();
            tasks
                .spawn(async move { this.windows(&spec, load_start, started_unix_ms, done).await });
        }
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok(r) => records.extend(r),
                Err(e) => records.push(FaultRecord {
                    fault: "conductor".into(),
                    error: Some(format!("a fault's task failed: {e}")),
                    ..FaultRecord::default()
                }),
            }
        }
        // the port faults and kill points, as the instances counted them
        let fired = self.fired_in_instances().await;
        let load_ms = load_start.elapsed().as_millis() as u64;
        for spec in &self.schedule.faults {
            if spec.target.scope() != Scope::Port {
                continue;
            }
            let Some((opens, closes)) = first_window(spec, load_ms) else {
                continue;
            };
            records.push(FaultRecord {
                fault: spec.name.clone(),
                kind: spec.kind.name().to_owned(),
                target: spec.target.name().to_owned(),
                window_ms: (opens, closes),
                opened_at: Some(load_start + Duration::from_millis(opens)),
                closed_at: Some(load_start + Duration::from_millis(closes.min(load_ms))),
                fired: fired.get(&spec.name).copied().unwrap_or(0),
                detail: format!(
                    "inside the instances{}",
                    spec.instances
                        .as_ref()
                        .map(|i| format!(" ({})", i.join(", ")))
                        .unwrap_or_default()
                ),
                scope: Some(Scope::Port),
                ..FaultRecord::default()
            });
        }
        // kill points fire inside the instances: their records say so
        for r in &mut records {
            if let Some(n) = fired.get(&r.fault) {
                r.fired = r.fired.max(*n);
            }
        }
        records.sort_by_key(|r| r.window_ms);
        records
    }

    /// Every window of `spec` that opens while the load runs.
    async fn windows(
        &self,
        spec: &FaultSpec,
        load_start: Instant,
        started_unix_ms: u64,
        mut load_done: watch::Receiver<bool>,
    ) -> Vec<FaultRecord> {
        let mut out = Vec::new();
        let mut repetition = 0u64;
        loop {
            let opens = spec.start_ms + repetition * spec.every_ms.unwrap_or(0);
            let closes = opens + spec.duration_ms;
            let mut record = FaultRecord {
                fault: spec.name.clone(),
                kind: spec.kind.name().to_owned(),
                target: target_name(spec),
                window_ms: (opens, closes),
                scope: Some(spec.target.scope()),
                ..FaultRecord::default()
            };
            let open_at = load_start + Duration::from_millis(opens);
            let ended = tokio::select! {
                _ = tokio::time::sleep_until(open_at.into()) => false,
                _ = load_done.wait_for(|d| *d) => true,
            };
            if ended {
                if repetition == 0 {
                    record.error = Some(format!(
                        "the load ended before its window opened at {opens} ms"
                    ));
                    out.push(record);
                }
                return out;
            }
            // opened first: a kill point fires inside the instance the
            // moment the window opens, before the counters are read. The
            // window as scheduled, not when this task woke: the instance
            // fires on its own clock at `open_at`, and on a busy runtime
            // this task wakes late (a point kill's connection errors 40 ms
            // before a late stamp were once counted outside its window)
            record.opened_at = Some(open_at);
            let before = self.counters().await;
            if let Err(e) = self.open(spec, &mut record).await {
                record.error = Some(e);
            }
            tracing::info!(fault = %spec.name, kind = %record.kind, target = %record.target, "fault window opened");
            tokio::time::sleep_until((load_start + Duration::from_millis(closes)).into()).await;
            if let Err(e) = self.close(spec, &mut record, started_unix_ms).await {
                record.error.get_or_insert(e);
            }
            record.closed_at = Some(Instant::now());
            tracing::info!(fault = %spec.name, error = ?record.error, "fault window closed");
            let after = self.counters().await;
            let counted: BTreeMap<String, u64> = after
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        (v - before.get(k).copied().unwrap_or(0.0)).max(0.0) as u64,
                    )
                })
                .filter(|(_, v)| *v > 0)
                .collect();
            // beside what the close itself counted (restarts)
            record.reactions.extend(counted);
            out.push(record);
            if spec.every_ms.is_none() {
                return out;
            }
            repetition += 1;
        }
    }

    fn targeted(&self, spec: &FaultSpec) -> Result<Vec<usize>, String> {
        let n = self.control.as_ref().map_or(0, |c| c.instances());
        match &spec.instances {
            None => Ok((0..n).collect()),
            Some(labels) => labels
                .iter()
                .map(|l| {
                    instance_index(l, n)
                        .ok_or_else(|| format!("no instance {l:?} in a fleet of {n}"))
                })
                .collect(),
        }
    }

    fn control(&self) -> Result<&Arc<dyn FleetControl>, String> {
        self.control
            .as_ref()
            .ok_or_else(|| "process faults need a process fleet".to_owned())
    }

    fn links(&self) -> Result<&Links, String> {
        self.links
            .as_ref()
            .ok_or_else(|| "link faults need the fleet's proxies".to_owned())
    }

    fn gateway_control(&self) -> Result<&str, String> {
        self.gateway_control
            .as_deref()
            .ok_or_else(|| "gateway rules need the mock gateway".to_owned())
    }

    fn proxy_of(spec: &FaultSpec) -> &'static str {
        if spec.target == Target::RedisLink {
            REDIS_PROXY
        } else {
            GATEWAY_PROXY
        }
    }

    async fn open(&self, spec: &FaultSpec, record: &mut FaultRecord) -> Result<(), String> {
        match (spec.target, spec.kind) {
            (Target::Instance, FaultKind::Kill { point: None }) => {
                for i in self.targeted(spec)? {
                    self.control()?.kill(i).await?;
                    record.fired += 1;
                }
                record.detail = "SIGKILL".into();
            }
            (Target::Instance, FaultKind::Kill { point: Some(p) }) => {
                // the instance kills itself at the point; wait for it
                let left = Duration::from_millis(spec.duration_ms);
                let deadline = Instant::now() + left;
                let mut missed = Vec::new();
                for i in self.targeted(spec)? {
                    let max = deadline.saturating_duration_since(Instant::now());
                    if self.control()?.wait_exit(i, max).await? {
                        record.fired += 1;
                    } else {
                        missed.push(instance_label(i));
                        // down all the same, as scheduled
                        self.control()?.kill(i).await?;
                    }
                }
                record.detail = format!("SIGKILL by itself at {p}");
                if !missed.is_empty() {
                    return Err(format!(
                        "{} never passed {p} inside the window (killed at its close instead)",
                        missed.join(", ")
                    ));
                }
            }
            (Target::Instance, FaultKind::Pause) => {
                for i in self.targeted(spec)? {
                    self.control()?.pause(i, true).await?;
                    record.fired += 1;
                }
                record.detail = "SIGSTOP, then SIGCONT".into();
            }
            (Target::Instance, FaultKind::Restart) => {
                for i in self.targeted(spec)? {
                    self.control()?.terminate(i).await?;
                    record.fired += 1;
                }
                record.detail = "SIGTERM, then started again".into();
            }
            (Target::RedisServer, FaultKind::Pause) => {
                self.control()?.pause_redis(true).await?;
                record.fired = 1;
                record.detail = "SIGSTOP, then SIGCONT".into();
            }
            (Target::RedisServer, FaultKind::Restart) => {
                self.control()?.kill_redis().await?;
                record.fired = 1;
                record.detail = "SIGKILL, then started again on its data".into();
            }
            (Target::RedisLink | Target::GatewayLink, FaultKind::Error) => {
                self.links()?
                    .netfault
                    .set_enabled(Self::proxy_of(spec), false)
                    .await
                    .map_err(|e| e.to_string())?;
                record.fired = 1;
                record.detail = "link down: connections refused and dropped".into();
            }
            (Target::RedisLink | Target::GatewayLink, _) => {
                let links = self.links()?;
                for toxic in toxics_of(spec)? {
                    record.detail = format!(
                        "toxic {} {}",
                        toxic.kind.type_name(),
                        toxic.kind.attributes()
                    );
                    links
                        .netfault
                        .add_toxic(Self::proxy_of(spec), toxic)
                        .map_err(|e| e.to_string())?;
                }
                record.fired = 1;
            }
            (Target::GatewayRules, FaultKind::Rule) => {
                let base = self.gateway_control()?;
                let mut rule = spec.rule.clone().unwrap_or_default();
                rule["name"] = serde_json::Value::String(spec.name.clone());
                let r = self
                    .http
                    .post(format!("{base}/__mock/rules"))
                    .json(&rule)
                    .send()
                    .await
                    .map_err(|e| format!("installing the rule: {e}"))?;
                if !r.status().is_success() {
                    let status = r.status();
                    let body = r.text().await.unwrap_or_default();
                    return Err(format!("the mock refused the rule: {status} {body}"));
                }
                record.fired = 1;
                record.detail = format!("rule {rule}");
            }
            (target, kind) => {
                return Err(format!("{} on {target} is not an action", kind.name()));
            }
        }
        Ok(())
    }

    async fn restart_instances(
        &self,
        spec: &FaultSpec,
        started_unix_ms: u64,
    ) -> Result<(), String> {
        for i in self.targeted(spec)? {
            self.control()?.start(i).await?;
            self.start_instance_clock(i, started_unix_ms).await?;
        }
        Ok(())
    }

    async fn close(
        &self,
        spec: &FaultSpec,
        record: &mut FaultRecord,
        started_unix_ms: u64,
    ) -> Result<(), String> {
        match (spec.target, spec.kind) {
            (Target::Instance, FaultKind::Kill { .. } | FaultKind::Restart) => {
                self.restart_instances(spec, started_unix_ms).await?;
                record.reactions.insert("restarts".into(), 1);
            }
            (Target::Instance, FaultKind::Pause) => {
                for i in self.targeted(spec)? {
                    self.control()?.pause(i, false).await?;
                }
            }
            (Target::RedisServer, FaultKind::Pause) => self.control()?.pause_redis(false).await?,
            (Target::RedisServer, FaultKind::Restart) => self.control()?.start_redis().await?,
            (Target::RedisLink | Target::GatewayLink, FaultKind::Error) => {
                self.links()?
                    .netfault
                    .set_enabled(Self::proxy_of(spec), true)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            (Target::RedisLink | Target::GatewayLink, _) => {
                let links = self.links()?;
                for toxic in toxics_of(spec)? {
                    links
                        .netfault
                        .remove_toxic(Self::proxy_of(spec), &toxic.name)
                        .map_err(|e| e.to_string())?;
                }
                if let Some(stats) = links.netfault.stats(Self::proxy_of(spec)) {
                    record.detail.push_str(&format!("; link {stats:?}"));
                }
            }
            (Target::GatewayRules, FaultKind::Rule) => {
                let base = self.gateway_control()?;
                let script: serde_json::Value = self
                    .http
                    .get(format!("{base}/__mock/rules"))
                    .send()
                    .await
                    .map_err(|e| format!("reading the rules: {e}"))?
                    .json()
                    .await
                    .map_err(|e| format!("reading the rules: {e}"))?;
                let mut script = script;
                let key = if script.get("rule").is_some() {
                    "rule"
                } else {
                    "rules"
                };
                if let Some(rules) = script.get_mut(key).and_then(|r| r.as_array_mut()) {
                    rules.retain(|r| r["name"].as_str() != Some(spec.name.as_str()));
                }
                let r = self
                    .http
                    .put(format!("{base}/__mock/rules"))
                    .json(&script)
                    .send()
                    .await
                    .map_err(|e| format!("removing the rule: {e}"))?;
                if !r.status().is_success() {
                    return Err(format!("removing the rule: {}", r.status()));
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// The first window of `spec` that opens before `load_ms`, `(opens,
/// closes)` ms from the load's start.
fn first_window(spec: &FaultSpec, load_ms: u64) -> Option<(u64, u64)> {
    (spec.start_ms < load_ms).then_some((spec.start_ms, spec.start_ms + spec.duration_ms))
}

/// After a fault's window closes, errors it caused may still arrive this
/// long (a pool finds its dead connections on their next use; a client
/// gives up on a request it sent into the window).
pub const SERVER_ERROR_GRACE: Duration = Duration::from_secs(3);
/// The name of the verdict that every fault was carried out.
pub const FAULTS_DONE: &str = "faults_done";
/// The name of the verdict on server errors outside the faults' windows.
pub const SERVER_ERRORS_OUTSIDE_FAULTS: &str = "server_errors_outside_faults";

/// The windows of `records` whose scope is in `scopes`, each from its
/// opening to `grace` after its closing (open-ended if it never closed).
pub fn windows(
    records: &[FaultRecord],
    scopes: &[Scope],
    grace: Duration,
) -> Vec<(Instant, Option<Instant>)> {
    records
        .iter()
        .filter(|r| r.scope.is_some_and(|s| scopes.contains(&s)))
        .filter_map(|r| Some((r.opened_at?, r.closed_at.map(|c| c + grace))))
        .collect()
}

/// The `times` outside every window.
pub fn outside(times: &[Instant], windows: &[(Instant, Option<Instant>)]) -> Vec<Instant> {
    let spans: Vec<(Instant, Instant)> = times.iter().map(|&t| (t, t)).collect();
    spans_outside(&spans, windows)
        .into_iter()
        .map(|(t, _)| t)
        .collect()
}

/// The spans `(from, to)` that overlap no window: a request in flight
/// during a window is the window's, however late it failed.
pub fn spans_outside(
    spans: &[(Instant, Instant)],
    windows: &[(Instant, Option<Instant>)],
) -> Vec<(Instant, Instant)> {
    spans
        .iter()
        .copied()
        .filter(|(start, end)| {
            !windows
                .iter()
                .any(|(from, to)| *end >= *from && to.is_none_or(|to| *start <= to))
        })
        .collect()
}

/// `faults_done`: every window of the schedule opened, was carried out and
/// closed (an instance killed answers again, a paused server runs again, a
/// toxic or rule is removed).
pub fn faults_done(records: &[FaultRecord]) -> booking_audit::Verdict {
    let missed: Vec<String> = records
        .iter()
        .filter(|r| !r.done())
        .map(|r| {
            format!(
                "{} ({} on {}, {}–{} ms): {}",
                r.fault,
                r.kind,
                r.target,
                r.window_ms.0,
                r.window_ms.1,
                r.error.as_deref().unwrap_or("not carried out")
            )
        })
        .collect();
    let mut v = booking_audit::Verdict::violations(FAULTS_DONE, &missed, 0);
    if missed.is_empty() {
        v.detail = format!(
            "{} fault window(s), each carried out and undone",
            records.len()
        );
    }
    v
}

/// `server_errors_outside_faults`: no 5xx or unanswered request outside
/// every fault's window and [`SERVER_ERROR_GRACE`] after it. The figure
/// names the cause of a system that does not recover (dead Redis
/// connections kept, a pool never refilled): errors long after the fault
/// that caused them. Each error is its request's span, `(sent, seen)`: a
/// request in flight during a window is excused however late it failed (an
/// unanswered one sent to an instance as it was stopped fails at the
/// client's timeout, seconds after the window closed); one sent after
/// every window and its grace is not.
pub fn server_errors_outside_faults(
    errors: &[(Instant, Instant)],
    records: &[FaultRecord],
    t0: Instant,
) -> booking_audit::Verdict {
    let all = [Scope::Port, Scope::Process, Scope::Link, Scope::Rules];
    let out = spans_outside(errors, &windows(records, &all, SERVER_ERROR_GRACE));
    let lines: Vec<String> = out
        .iter()
        .map(|(sent, seen)| {
            format!(
                "server error at {} ms (sent at {} ms)",
                seen.saturating_duration_since(t0).as_millis(),
                sent.saturating_duration_since(t0).as_millis()
            )
        })
        .collect();
    let mut v = booking_audit::Verdict::violations(SERVER_ERRORS_OUTSIDE_FAULTS, &lines, 0);
    if lines.is_empty() {
        v.detail = format!(
            "{} server error(s), all inside a fault's window or {} s after it",
            errors.len(),
            SERVER_ERROR_GRACE.as_secs()
        );
    }
    v
}

/// The report's entries of `records` (times since `t0`).
pub fn report_faults(records: &[FaultRecord], t0: Instant) -> Vec<reports::Fault> {
    records
        .iter()
        .map(|r| {
            let at = r.opened_at.map_or_else(
                || r.window_ms.0,
                |o| o.saturating_duration_since(t0).as_millis() as u64,
            );
            let duration_ms = match (r.opened_at, r.closed_at) {
                (Some(o), Some(c)) => c.saturating_duration_since(o).as_millis() as u64,
                _ => 0,
            };
            reports::Fault {
                at_ms: at,
                duration_ms,
                what: format!("{} ({})", r.kind, r.fault),
                target: r.target.clone(),
                effect: r.detail.clone(),
                fault: r.fault.clone(),
                kind: r.kind.clone(),
                fired: r.fired,
                reactions: r.reactions.clone(),
                error: r.error.clone(),
            }
        })
        .collect()
}

/// Where a fault acts, for the report.
fn target_name(spec: &FaultSpec) -> String {
    match spec.target {
        Target::Instance => spec
            .instances
            .as_ref()
            .map_or_else(|| "every instance".to_owned(), |i| i.join(", ")),
        Target::RedisServer => "redis-server".to_owned(),
        Target::RedisLink => "redis link".to_owned(),
        Target::GatewayLink => "gateway link".to_owned(),
        Target::GatewayRules => "gateway".to_owned(),
        t => t.name().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn instance_labels_round_trip_within_the_fleet() {
        assert_eq!(instance_label(2), "instance-2");
        assert_eq!(instance_index("instance-2", 3), Some(2));
        assert_eq!(instance_index("instance-3", 3), None);
        assert_eq!(instance_index("api-1", 3), None);
    }

    #[test]
    fn metrics_sum_over_labels_and_skip_comments() {
        let text = "# HELP booking_undos_total x\n# TYPE booking_undos_total counter\nbooking_undos_total{reason=\"a\"} 3\nbooking_undos_total{reason=\"b\"} 4\nbooking_undos_totally 100\nbooking_releases_total 2\n";
        assert_eq!(metric_sum(text, "booking_undos_total"), 7.0);
        assert_eq!(metric_sum(text, "booking_releases_total"), 2.0);
        assert_eq!(metric_sum(text, "nothing"), 0.0);
        assert_eq!(metric_sum(text, "booking_undos_total{reason=\"b\"}"), 4.0);
        assert_eq!(metric_sum(text, "booking_undos_total{reason=\"c\"}"), 0.0);
        let two = "booking_redis_pool_connections{pool=\"ledger\",state=\"max\"} 8\nbooking_redis_pool_connections{pool=\"ledger\",state=\"in_use\"} 3\nbooking_redis_pool_connections{pool=\"queue\",state=\"max\"} 64\n";
        let read = |m: &str| metric_sum(two, m);
        assert_eq!(
            read("booking_redis_pool_connections{pool=\"ledger\",state=\"max\"}"),
            8.0
        );
        assert_eq!(
            read("booking_redis_pool_connections{state=\"max\",pool=\"queue\"}"),
            64.0
        );
        assert_eq!(
            read("booking_redis_pool_connections{pool=\"ledger\"}"),
            11.0
        );
        assert_eq!(
            read("booking_redis_pool_connections{pool=\"ledger\",state=\"idle\"}"),
            0.0
        );
    }

    #[test]
    fn pools_read_from_metrics_are_the_pools_the_api_rendered() {
        let ledger = booking::PoolFigures {
            max_size: 300,
            open: 40,
            in_use: 12,
            waiting: 2,
            gets: 9_000,
            waits: 450,
            wait_micros: 3_250_000,
            timeouts: 7,
        };
        let queue = booking::PoolFigures {
            max_size: 64,
            gets: 1_000,
            ..booking::PoolFigures::default()
        };
        let idle = booking::PoolFigures {
            max_size: 64,
            ..booking::PoolFigures::default()
        };
        let metrics = booking_api::metrics::ApiMetrics::new();
        metrics.sync_services(&booking_api::metrics::ServiceFigures {
            redis_pools: vec![("ledger", ledger), ("queue", queue), ("outputs", idle)],
            ..booking_api::metrics::ServiceFigures::default()
        });
        let read = pools_from_metrics(&metrics.render(None));
        // the gauges of open connections are not read back; a pool never
        // asked for a connection is left out
        let counts = |f: booking::PoolFigures| booking::PoolFigures {
            open: 0,
            in_use: 0,
            ..f
        };
        assert_eq!(
            read,
            vec![
                ("ledger".to_owned(), counts(ledger)),
                ("queue".to_owned(), counts(queue)),
            ]
        );
    }

    #[test]
    fn link_faults_become_toxiproxy_toxics() {
        let (_, s) = faults::builtin::rehearsal("link-trouble").unwrap();
        let jitter = toxics_of(&s.faults[0]).unwrap();
        assert_eq!(jitter.len(), 2, "both ways");
        assert_eq!(
            jitter[0].kind,
            ToxicKind::Latency {
                latency: 5,
                jitter: 4
            }
        );
        let resets = s
            .faults
            .iter()
            .find(|f| f.name == "gateway-link-resets")
            .unwrap();
        let t = toxics_of(resets).unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].kind, ToxicKind::ResetPeer { timeout: 0 });
        assert!((t[0].toxicity - 0.2).abs() < 1e-6);
        let (_, s) = faults::builtin::rehearsal("redis-link-blackhole").unwrap();
        let hole = s
            .faults
            .iter()
            .find(|f| f.name == "redis-link-blackhole")
            .unwrap();
        assert_eq!(
            toxics_of(hole).unwrap()[0].kind,
            ToxicKind::Timeout { timeout: 0 }
        );
    }

    #[test]
    fn every_built_in_gateway_rule_is_a_rule_the_mock_takes() {
        for name in faults::builtin::rehearsal_names() {
            let (_, s) = faults::builtin::rehearsal(name).unwrap();
            for f in s.faults.iter().filter(|f| f.target == Target::GatewayRules) {
                let rule: mock_gateway::script::Rule =
                    serde_json::from_value(f.rule.clone().unwrap())
                        .unwrap_or_else(|e| panic!("{name}/{}: {e}", f.name));
                let spec = mock_gateway::ScriptSpec {
                    seed: None,
                    rules: vec![rule],
                };
                spec.validate()
                    .unwrap_or_else(|e| panic!("{name}/{}: {e}", f.name));
            }
        }
    }

    fn record(
        fault: &str,
        scope: Scope,
        from_ms: u64,
        to_ms: Option<u64>,
        t0: Instant,
    ) -> FaultRecord {
        FaultRecord {
            fault: fault.into(),
            kind: "pause".into(),
            target: "instance-1".into(),
            window_ms: (from_ms, to_ms.unwrap_or(from_ms)),
            opened_at: Some(t0 + Duration::from_millis(from_ms)),
            closed_at: to_ms.map(|ms| t0 + Duration::from_millis(ms)),
            fired: 1,
            scope: Some(scope),
            ..FaultRecord::default()
        }
    }

    #[test]
    fn errors_count_only_outside_the_windows_and_their_grace() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let records = [
            record("paused", Scope::Process, 1_000, Some(2_000), t0),
            record("slow", Scope::Port, 10_000, Some(11_000), t0),
        ];
        let process_only = windows(&records, &[Scope::Process], Duration::from_secs(1));
        assert_eq!(process_only.len(), 1);
        let errors = [
            at(500),
            at(1_500),
            at(2_900),
            at(3_100),
            at(10_500),
            at(13_900),
            at(14_100),
        ];
        assert_eq!(
            outside(&errors, &process_only),
            [at(500), at(3_100), at(10_500), at(13_900), at(14_100)]
        );
        // answered at once: each sent as it failed
        let spans: Vec<(Instant, Instant)> = errors.iter().map(|&e| (e, e)).collect();
        let v = server_errors_outside_faults(&spans, &records, t0);
        // inside: 1_500 to 3_100 (paused + 3 s), 10_500 and 13_900 (slow + 3 s)
        assert_eq!(v.figure, 2.0, "{v:?}");
        assert!(!v.passed);
        assert!(
            v.detail.contains("500 ms") && v.detail.contains("14100 ms"),
            "{}",
            v.detail
        );
        assert!(server_errors_outside_faults(&spans[1..3], &records, t0).passed);
        // sent into the pause, failed at a 10 s timeout long after it: the
        // pause's; sent after every window's grace, failed as late: not
        let late_from_the_pause = (at(1_900), at(11_900) + Duration::from_secs(5));
        assert!(server_errors_outside_faults(&[late_from_the_pause], &records, t0).passed);
        let sent_after = (at(14_200), at(24_200));
        let v = server_errors_outside_faults(&[late_from_the_pause, sent_after], &records, t0);
        assert_eq!(v.figure, 1.0, "{v:?}");
        assert!(v.detail.contains("sent at 14200 ms"), "{}", v.detail);
        // sent before a window, failing inside it: the window's
        assert!(server_errors_outside_faults(&[(at(9_000), at(10_200))], &records, t0).passed);
        // a window that never closed excuses everything after it
        let open = [record("dead", Scope::Process, 1_000, None, t0)];
        assert!(
            outside(
                &errors[1..],
                &windows(&open, &[Scope::Process], Duration::ZERO)
            )
            .is_empty()
        );
    }

    #[test]
    fn faults_are_done_only_when_opened_closed_and_clean_and_report_as_bands() {
        let t0 = Instant::now();
        let good = record("paused", Scope::Process, 1_000, Some(3_000), t0);
        assert!(faults_done(std::slice::from_ref(&good)).passed);
        let never = FaultRecord {
            opened_at: None,
            closed_at: None,
            error: Some("the load ended before its window opened at 9000 ms".into()),
            ..record("late", Scope::Process, 9_000, Some(10_000), t0)
        };
        let failed = FaultRecord {
            error: Some("instance-1 never passed after_enqueue".into()),
            ..good.clone()
        };
        let v = faults_done(&[good.clone(), never, failed]);
        assert_eq!(v.figure, 2.0);
        assert!(v.detail.contains("never passed"), "{}", v.detail);
        let mut reacted = good;
        reacted.reactions.insert("restarts".into(), 1);
        let f = report_faults(&[reacted], t0);
        assert_eq!((f[0].at_ms, f[0].duration_ms), (1_000, 2_000));
        assert_eq!(
            (f[0].fault.as_str(), f[0].kind.as_str(), f[0].fired),
            ("paused", "pause", 1)
        );
        assert_eq!(f[0].reactions.get("restarts"), Some(&1));
    }
}
