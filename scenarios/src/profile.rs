//! What a rehearsal runs: a [`Profile`], read from TOML with the article's
//! figures as the defaults, then `--set key=value` overrides on any dotted
//! path ([`Profile::load`]).
//!
//! The order is fixed: the defaults (serialized), the profile file merged
//! over them (tables merge, everything else is replaced), then each override
//! in the order given, then one deserialization, so a typo in a key is an
//! error rather than a silently ignored value.
//!
//! Two profiles ship in the binary: `default` (the article's headline
//! rehearsal) and `ci` (short, for the CI gate). `--profile NAME` finds those,
//! or a file path.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use booking::{Level, SaleId, Settings};
use booking_server::config::{LevelConfig, StackKind};
use serde::{Deserialize, Serialize};

use crate::kills::KillSpec;
use crate::load::LoadProfile;

/// The article's profile, shipped in the binary.
pub const DEFAULT_PROFILE: &str = include_str!("../profiles/default.toml");
/// The CI gate's short profile, shipped in the binary.
pub const CI_PROFILE: &str = include_str!("../profiles/ci.toml");

/// Why a profile could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The file could not be read.
    #[error("reading profile {path}: {source}")]
    Read {
        /// Which file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not TOML, or not a profile.
    #[error("profile {what}: {message}")]
    Parse {
        /// Which file or override.
        what: String,
        /// Why.
        message: String,
    },
    /// An override is not `key=value`, or its path does not lead anywhere.
    #[error("override {0:?}: {1}")]
    Override(String, String),
    /// A value is out of range.
    #[error("invalid profile: {0}")]
    Invalid(String),
}

/// The backends of the in-process fleet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StackProfile {
    /// `embedded` (nothing to install) or `redis`.
    pub kind: StackKind,
    /// Redis URL (`kind = "redis"`); a private `redis-server` is started on a
    /// free port when nothing answers there.
    pub redis_url: String,
    /// Redis connections per instance.
    pub redis_pool_size: usize,
    /// The back office (`kind = "redis"` or `"aws"`): PostgreSQL, in a
    /// schema of the run's own.
    pub postgres_url: Option<String>,
    /// The AWS side (`kind = "aws"`); the fleet provisions it under a
    /// per-run prefix (the configured prefix is replaced).
    pub aws: booking_server::config::AwsStackConfig,
}

impl Default for StackProfile {
    fn default() -> StackProfile {
        StackProfile {
            kind: StackKind::Embedded,
            redis_url: "redis://127.0.0.1:6379".to_owned(),
            redis_pool_size: booking::settings::REDIS_POOL_SIZE,
            postgres_url: None,
            aws: booking_server::config::AwsStackConfig::default(),
        }
    }
}

/// What runs the booking instances of a local rehearsal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum FleetKind {
    /// Tasks of the rehearsal's own process ([`crate::fleet`]).
    #[default]
    InProcess,
    /// `booking serve --stack redis` OS processes on a private
    /// `redis-server` ([`crate::processes`]); they can be killed (`kills`).
    Processes,
}

/// When the fleet's webhook endpoint is subscribed to the mock gateway.
///
/// The mock signs every notification with a 2048-bit RSA key, as SNS does;
/// at the rush's rate that is most of a core on this machine, spent by the
/// simulated third party rather than the system under rehearsal (in
/// production AWS signs). `after_rush` keeps the webhook confirm path in the
/// run (late arrivals, settling) without charging the rush for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Webhooks {
    /// Subscribed from the start: every completed payment is notified.
    Always,
    /// Subscribed once the rush's arrivals have all started.
    AfterRush,
    /// Never: callbacks and the reconciler confirm.
    Never,
}

/// The bounds a run is held to, besides the audit's zero-violation
/// invariants (whose bounds are in [`Thresholds::audit`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Thresholds {
    /// Bookings started per second during the rush, at least.
    pub rush_rate_min: f64,
    /// p99 booking latency (from each arrival's intended start), ms, at most.
    pub booking_p99_ms_max: f64,
    /// Age of the oldest queued message during the run, ms, at most (the
    /// article's launch day: under 4 s).
    pub queue_age_ms_max: f64,
    /// Server errors (5xx or no answer) as a percentage of requests, at most.
    pub server_error_pct_max: f64,
    /// Redis connection requests that waited for a connection (every one of
    /// the pool in use), as a percentage of all, at most: the cause of the
    /// article's first load-test bug, a pool sized for normal traffic.
    pub redis_pool_wait_pct_max: f64,
    /// Violations allowed per audit invariant, by name; absent means 0.
    pub audit: BTreeMap<String, u64>,
}

impl Default for Thresholds {
    fn default() -> Thresholds {
        Thresholds {
            rush_rate_min: 1_950.0,
            booking_p99_ms_max: 50.0,
            queue_age_ms_max: 4_000.0,
            server_error_pct_max: 0.01,
            redis_pool_wait_pct_max: 10.0,
            audit: BTreeMap::new(),
        }
    }
}

impl Thresholds {
    /// The violations allowed for the audit invariant `name` (0 unless set).
    pub fn audit_max(&self, name: &str) -> u64 {
        self.audit.get(name).copied().unwrap_or(0)
    }
}

/// How long the sale may take to go quiet after the load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settle {
    /// The longest wait for quiescence, ms; the audit runs after it either
    /// way (and `sale_settled` says it did not settle).
    pub max_ms: u64,
    /// The state must stay unchanged this long to count as quiet, ms.
    pub quiet_ms: u64,
    /// How often the state is polled, ms.
    pub poll_ms: u64,
}

impl Default for Settle {
    fn default() -> Settle {
        Settle {
            max_ms: 90_000,
            quiet_ms: 1_500,
            poll_ms: 250,
        }
    }
}

/// One rehearsal, everything it needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Profile {
    /// Its name (the file stem), shown in the report.
    pub name: String,
    /// Everything random is drawn from it: candidates, arrivals, payers, the
    /// mock gateway.
    pub seed: u64,
    /// The sale id.
    pub sale: String,
    /// Distinct eligible candidates.
    pub candidates: u32,
    /// Levels with caps and prices.
    pub levels: Vec<LevelConfig>,
    /// Booking instances of the local fleet.
    pub instances: usize,
    /// In process, or OS processes (`processes`: on Redis, killable).
    pub fleet: FleetKind,
    /// With `fleet = "processes"`: the `booking` binary (default: the one
    /// next to the running executable).
    pub booking_bin: Option<PathBuf>,
    /// With `fleet = "processes"`: instances to SIGKILL during the rush and
    /// start again, as `INSTANCE@rush=FRACTION[,down_ms=MS]`
    /// ([`crate::kills`]).
    pub kills: Vec<KillSpec>,
    /// A fault schedule carried out during the load: a built-in rehearsal
    /// schedule's name (`faults::builtin`, e.g. `headline`) or a TOML file
    /// ([`crate::conductor`]).
    pub faults: Option<String>,
    /// Serve the fleet's link proxies' toxiproxy-shaped HTTP API on this
    /// loopback address (e.g. `127.0.0.1:8474`), the Redis and gateway links
    /// through proxies whatever the schedule, so a toxiproxy client adds
    /// toxics by hand during the rehearsal.
    pub links_api: Option<std::net::SocketAddr>,
    /// With `fleet = "processes"`: the private `redis-server` keeps an
    /// append-only file (`appendonly yes`, fsync every second). `false` runs
    /// it with no persistence at all, which only the zoo does: a restarted
    /// server then forgets every seat.
    pub redis_aof: bool,
    /// Backends of the local fleet.
    pub stack: StackProfile,
    /// Where the confirmation emails go: the stack's own output log
    /// (`outputs`), `scripts/smtp-sink` (`smtp`), or SES on moto (`ses`,
    /// `--stack aws`); with a mail server the audit counts what it
    /// delivered ([`crate::mail`]).
    pub mail: crate::mail::Mail,
    /// When the in-process mock gateway's SNS webhooks (one per completed
    /// payment, RSA-signed: the webhook confirm path) are subscribed.
    pub webhooks: Webhooks,
    /// Rehearse the deployment at this base URL (its public listener)
    /// instead of an in-process fleet.
    pub target: Option<String>,
    /// With `target`: its admin listener's base URL (the `/ops/` routes;
    /// `http://<admin_listen>`).
    pub target_admin: Option<String>,
    /// With `target`: the sale named in the `X-Confirm-Sale` header of its
    /// `reset`, `load-candidates` and `close` (a production sale needs it).
    pub target_confirm: Option<String>,
    /// With `target`: the mock gateway that deployment talks to (its ledger
    /// is the audit's ground truth); without it, the ground-truth checks are
    /// reported as not run.
    pub target_gateway: Option<String>,
    /// With `target`: its `admin_token`, when the `/ops/` routes need one.
    pub target_admin_token: Option<String>,
    /// The hold as the article has it, ms, before scaling.
    pub hold_ms: u64,
    /// Every sale timer is multiplied by this (1/30: the 10-minute hold
    /// becomes 20 s).
    pub time_scale: f64,
    /// Where run folders go.
    pub out: PathBuf,
    /// The load.
    pub load: LoadProfile,
    /// The bounds.
    pub thresholds: Thresholds,
    /// Quiescence.
    pub settle: Settle,
    /// The bug zoo's switches for the in-process fleet (`booking::bugs`):
    /// none unless the run means to prove the harness catches them; the
    /// instances then run as a rehearsal, never as production.
    pub bugs: Vec<booking::Bug>,
    /// Signed candidates: the fleet requires candidate tokens
    /// (`[candidate_auth]`, HS256 with the run's secret) and the load signs
    /// each candidate's ([`crate::candidate_tokens`]).
    pub candidate_auth: bool,
}

fn level(name: &str, cap: u32, price: &str) -> LevelConfig {
    LevelConfig {
        level: Level::parse(name).unwrap_or_else(|_| unreachable!("a valid level name")),
        cap,
        price: price.to_owned(),
    }
}

/// The headline rehearsal's six levels: 20,700 seats (the article's launch
/// day), priced apart so a payment's amount names its level.
pub fn article_levels() -> Vec<LevelConfig> {
    vec![
        level("floor", 1_200, "5000.00"),
        level("lower", 2_500, "3500.00"),
        level("club", 3_500, "2500.00"),
        level("upper", 4_000, "1500.00"),
        level("balcony", 4_500, "1000.00"),
        level("gallery", 5_000, "500.00"),
    ]
}

impl Default for Profile {
    /// The article's headline rehearsal.
    fn default() -> Profile {
        Profile {
            name: "default".to_owned(),
            seed: 1,
            sale: "launch".to_owned(),
            candidates: 40_000,
            levels: article_levels(),
            instances: 2,
            fleet: FleetKind::InProcess,
            booking_bin: None,
            kills: Vec::new(),
            faults: None,
            links_api: None,
            redis_aof: true,
            stack: StackProfile::default(),
            mail: crate::mail::Mail::Outputs,
            webhooks: Webhooks::AfterRush,
            target: None,
            target_admin: None,
            target_confirm: None,
            target_gateway: None,
            target_admin_token: None,
            hold_ms: 600_000,
            time_scale: 1.0 / 30.0,
            out: PathBuf::from("reports/runs"),
            load: LoadProfile::default(),
            thresholds: Thresholds::default(),
            settle: Settle::default(),
            bugs: Vec::new(),
            candidate_auth: false,
        }
    }
}

impl Profile {
    /// A profile by name (`default`, `ci`) or file path, then `sets`
    /// (`key.path=value`) over it.
    pub fn load(profile: Option<&str>, sets: &[String]) -> Result<Profile, ProfileError> {
        let (name, text) = match profile {
            None => ("default".to_owned(), DEFAULT_PROFILE.to_owned()),
            Some(p) => resolve(p)?,
        };
        let mut value = defaults_value()?;
        let mut file: toml::Value = toml::from_str(&text).map_err(|e| ProfileError::Parse {
            what: name.clone(),
            message: e.to_string(),
        })?;
        if let toml::Value::Table(t) = &mut file {
            t.entry("name")
                .or_insert_with(|| toml::Value::String(name.clone()));
        }
        merge(&mut value, file);
        for s in sets {
            apply_override(&mut value, s)?;
        }
        let profile: Profile =
            value
                .try_into()
                .map_err(|e: toml::de::Error| ProfileError::Parse {
                    what: name,
                    message: e.to_string(),
                })?;
        profile.validate()?;
        Ok(profile)
    }

    /// Refuses what cannot run.
    pub fn validate(&self) -> Result<(), ProfileError> {
        let bad = |m: String| Err(ProfileError::Invalid(m));
        SaleId::parse(&self.sale).map_err(|e| ProfileError::Invalid(format!("sale: {e}")))?;
        if self.levels.is_empty() {
            return bad("at least one level is needed".into());
        }
        if self.candidates == 0 {
            return bad("candidates must be > 0".into());
        }
        if self.target.is_none() && self.instances == 0 {
            return bad("instances must be > 0".into());
        }
        if !(self.time_scale > 0.0 && self.time_scale.is_finite()) {
            return bad(format!("time_scale {} must be > 0", self.time_scale));
        }
        if self.hold_ms == 0 {
            return bad("hold_ms must be > 0".into());
        }
        if self.fleet == FleetKind::Processes {
            if self.target.is_some() {
                return bad("a process fleet is local: drop target (or the process fleet)".into());
            }
            if self.stack.kind == StackKind::Embedded {
                return bad(format!(
                    "a process fleet shares its state on Redis (and AWS): stack.kind must be \"redis\" or \"aws\", not {:?} (--stack redis)",
                    self.stack.kind
                ));
            }
        }
        if let Some(why) = self.mail.refusal(self.stack.kind, self.target.is_some()) {
            return bad(why);
        }
        if !self.kills.is_empty() && self.fleet != FleetKind::Processes {
            return bad("kills need a process fleet (--fleet processes)".into());
        }
        if let Some(k) = self.kills.iter().find(|k| k.instance >= self.instances) {
            return bad(format!(
                "kill {k}: instance {} of {} (0 is the first)",
                k.instance, self.instances
            ));
        }
        if !self.redis_aof && self.fleet != FleetKind::Processes {
            return bad("redis_aof = false is for the process fleet's private redis-server".into());
        }
        if let Some(a) = self.links_api
            && (!a.ip().is_loopback() || self.target.is_some())
        {
            return bad(format!(
                "links_api {a}: a loopback address, on a local fleet"
            ));
        }
        if let Some((name, schedule)) = self.fault_schedule()? {
            self.check_schedule(&name, &schedule)?;
        }
        if self.settle.poll_ms == 0 {
            return bad("settle.poll_ms must be > 0".into());
        }
        // the numbers every instance would run with, scaled
        self.settings()
            .check()
            .map_err(|e| ProfileError::Invalid(e.to_string()))?;
        self.load
            .validate()
            .map_err(|e| ProfileError::Invalid(format!("load: {e}")))
    }

    /// The fault schedule `faults` names, read and validated: `(name,
    /// schedule)`.
    pub fn fault_schedule(&self) -> Result<Option<(String, faults::Schedule)>, ProfileError> {
        self.faults
            .as_deref()
            .map(faults::builtin::rehearsal)
            .transpose()
            .map_err(|e| ProfileError::Invalid(format!("faults: {e}")))
    }

    /// Refuses a schedule this profile's fleet cannot carry out: process
    /// faults without a process fleet, a Redis link without Redis, an
    /// instance the fleet does not have, a relaxed bound that is not a
    /// rehearsal threshold, a gateway rule the mock would refuse.
    fn check_schedule(&self, name: &str, schedule: &faults::Schedule) -> Result<(), ProfileError> {
        use faults::{Scope, Target};
        let bad = |m: String| Err(ProfileError::Invalid(format!("faults {name}: {m}")));
        if self.target.is_some() {
            return bad("a remote target's processes and links are not ours to break: rehearse a local fleet".into());
        }
        let mut scopes = vec![Scope::Port, Scope::Link, Scope::Rules];
        if self.fleet == FleetKind::Processes {
            scopes.push(Scope::Process);
        }
        let harness = if self.fleet == FleetKind::Processes {
            "the process fleet"
        } else {
            "the in-process fleet (--fleet processes carries out process faults)"
        };
        if let Err(e) = schedule.check_scopes(harness, &scopes) {
            return bad(e.to_string());
        }
        if self.stack.kind == StackKind::Embedded
            && schedule
                .faults
                .iter()
                .any(|f| f.target == Target::RedisLink)
        {
            return bad("redis_link faults need a Redis stack (--stack redis)".into());
        }
        for f in &schedule.faults {
            for label in f.instances.iter().flatten() {
                if crate::conductor::instance_index(label, self.instances).is_none() {
                    return bad(format!(
                        "fault {:?} names {label:?}: this fleet has instance-0 to instance-{}",
                        f.name,
                        self.instances.saturating_sub(1)
                    ));
                }
            }
            if let Some(rule) = &f.rule {
                let parsed: Result<mock_gateway::script::Rule, _> =
                    serde_json::from_value(rule.clone());
                let spec = parsed.map(|r| mock_gateway::ScriptSpec {
                    seed: None,
                    rules: vec![r],
                });
                if let Err(e) = spec
                    .as_ref()
                    .map_err(|e| e.to_string())
                    .and_then(|s| s.validate().map_err(|e| e.to_string()))
                {
                    return bad(format!(
                        "fault {:?}: the mock gateway refuses its rule: {e}",
                        f.name
                    ));
                }
            }
        }
        for verdict in schedule.relax.keys() {
            if !crate::thresholds::RELAXABLE.contains(&verdict.as_str()) {
                return bad(format!(
                    "relax {verdict:?}: only the rehearsal's latency and rate bounds can be relaxed ({}); the audit's invariants cannot",
                    crate::thresholds::RELAXABLE.join(", ")
                ));
            }
        }
        Ok(())
    }

    /// The settings every instance runs with: the article's, with this hold,
    /// scaled by `time_scale`.
    pub fn settings(&self) -> Settings {
        Settings {
            hold: std::time::Duration::from_millis(self.hold_ms),
            bugs: booking::Bugs::of(self.bugs.iter().copied()),
            ..Settings::default()
        }
        .scaled(self.time_scale)
    }

    /// Seats in all.
    pub fn seats(&self) -> u64 {
        self.levels.iter().map(|l| u64::from(l.cap)).sum()
    }

    /// Levels and caps, as the load engine takes them.
    pub fn level_caps(&self) -> Vec<(String, u32)> {
        self.levels
            .iter()
            .map(|l| (l.level.to_string(), l.cap))
            .collect()
    }

    /// Where this run's folder goes, the profile's `out` unless overridden.
    pub fn out_dir(&self) -> &Path {
        &self.out
    }

    /// The profile as JSON, for the report.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

/// The candidate identities of a run: `n` distinct raw identifiers, the same
/// for the same seed (what `load-candidates` is given and what the load
/// books as).
pub fn candidates(seed: u64, n: u32) -> Vec<String> {
    (0..n).map(|i| format!("cand-{seed:x}-{i:06}")).collect()
}

/// `(name, text)` of a built-in profile or a file.
fn resolve(profile: &str) -> Result<(String, String), ProfileError> {
    match profile {
        "default" => return Ok(("default".to_owned(), DEFAULT_PROFILE.to_owned())),
        "ci" => return Ok(("ci".to_owned(), CI_PROFILE.to_owned())),
        _ => {}
    }
    let path = PathBuf::from(profile);
    let text = std::fs::read_to_string(&path).map_err(|source| ProfileError::Read {
        path: path.clone(),
        source,
    })?;
    let name = path
        .file_stem()
        .map_or_else(|| profile.to_owned(), |s| s.to_string_lossy().into_owned());
    Ok((name, text))
}

fn defaults_value() -> Result<toml::Value, ProfileError> {
    toml::Value::try_from(Profile::default()).map_err(|e| ProfileError::Parse {
        what: "defaults".to_owned(),
        message: e.to_string(),
    })
}

/// Tables a profile file gives whole: the payer mix (a fraction it does
/// not name is 0, so the fractions it names sum to 1).
pub const WHOLE_TABLES: &[&str] = &["load.mix"];

/// `over` merged into `base`: tables key by key (except [`WHOLE_TABLES`]),
/// anything else replaced.
pub fn merge(base: &mut toml::Value, over: toml::Value) {
    merge_at(base, over, "");
}

fn merge_at(base: &mut toml::Value, over: toml::Value, path: &str) {
    match (base, over) {
        (toml::Value::Table(b), toml::Value::Table(o)) if !WHOLE_TABLES.contains(&path) => {
            for (k, v) in o {
                let sub = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match b.get_mut(&k) {
                    Some(slot) => merge_at(slot, v, &sub),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

/// The value of an override: TOML if it parses as a TOML value (`500`,
/// `0.5`, `true`, `"x"`, `[1, 2]`), else the text as a string.
pub fn parse_value(text: &str) -> toml::Value {
    toml::from_str::<toml::Table>(&format!("v = {text}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(text.to_owned()))
}

/// Applies `key.path=value` to `root`: tables are created on the way, a
/// numeric segment indexes an array (which must be long enough).
pub fn apply_override(root: &mut toml::Value, assignment: &str) -> Result<(), ProfileError> {
    let err = |m: &str| ProfileError::Override(assignment.to_owned(), m.to_owned());
    let (path, value) = assignment
        .split_once('=')
        .ok_or_else(|| err("expected key=value"))?;
    let segments: Vec<&str> = path.trim().split('.').collect();
    if segments.iter().any(|s| s.is_empty()) {
        return Err(err("empty key segment"));
    }
    let value = parse_value(value.trim());
    let mut slot = root;
    for (i, seg) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        slot = match slot {
            toml::Value::Table(t) => {
                if last {
                    t.insert((*seg).to_owned(), value);
                    return Ok(());
                }
                t.entry(*seg)
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            }
            toml::Value::Array(a) => {
                let idx: usize = seg
                    .parse()
                    .map_err(|_| err(&format!("{seg:?} indexes an array: give a number")))?;
                let len = a.len();
                let item = a
                    .get_mut(idx)
                    .ok_or_else(|| err(&format!("index {idx} past the array's {len} items")))?;
                if last {
                    *item = value;
                    return Ok(());
                }
                item
            }
            _ => return Err(err(&format!("{seg:?} is inside a value, not a table"))),
        };
    }
    Err(err("nothing to set"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_default_profile_is_the_articles_rehearsal() {
        let p = Profile::load(None, &[]).unwrap();
        assert_eq!(p.name, "default");
        assert_eq!(p.candidates, 40_000);
        assert_eq!(p.seats(), 20_700);
        assert_eq!(p.levels.len(), 6);
        assert_eq!(p.instances, 2);
        assert_eq!(p.stack.kind, StackKind::Embedded);
        assert_eq!(p.webhooks, Webhooks::AfterRush);
        assert_eq!(p.settings().hold, std::time::Duration::from_secs(20));
        assert_eq!(p.thresholds.rush_rate_min, 1_950.0);
        assert_eq!(p.thresholds.booking_p99_ms_max, 50.0);
        assert_eq!(p.thresholds.queue_age_ms_max, 4_000.0);
        assert_eq!(p.thresholds.server_error_pct_max, 0.01);
        assert_eq!(p.thresholds.audit_max("no_throttling"), 0);
        let prices: std::collections::BTreeSet<&str> =
            p.levels.iter().map(|l| l.price.as_str()).collect();
        assert_eq!(prices.len(), 6, "prices name levels");
    }

    #[test]
    fn the_ci_profile_is_short() {
        let p = Profile::load(Some("ci"), &[]).unwrap();
        assert_eq!(p.name, "ci");
        assert_eq!(p.webhooks, Webhooks::Always);
        assert!(p.candidates <= 10_000);
        assert_eq!(p.settings().hold, std::time::Duration::from_secs(6));
        assert!(p.load.rate * p.load.rush_secs < 2_000.0);
    }

    #[test]
    fn overrides_reach_any_dotted_path() {
        let p = Profile::load(
            None,
            &[
                "candidates=5000".into(),
                "seed=7".into(),
                "stack.kind=redis".into(),
                "levels.0.cap=10".into(),
                "thresholds.audit.no_throttling=3".into(),
                "target=http://127.0.0.1:8080".into(),
                "time_scale=0.5".into(),
                "webhooks=never".into(),
            ],
        )
        .unwrap();
        assert_eq!(p.candidates, 5_000);
        assert_eq!(p.seed, 7);
        assert_eq!(p.stack.kind, StackKind::Redis);
        assert_eq!(p.levels[0].cap, 10);
        assert_eq!(p.levels[1].cap, 2_500, "the rest of the array stays");
        assert_eq!(p.thresholds.audit_max("no_throttling"), 3);
        assert_eq!(p.target.as_deref(), Some("http://127.0.0.1:8080"));
        assert_eq!(p.time_scale, 0.5);
        assert_eq!(p.webhooks, Webhooks::Never);
    }

    #[test]
    fn bad_overrides_are_refused() {
        assert!(Profile::load(None, &["candidates".into()]).is_err());
        assert!(
            Profile::load(None, &["candidatez=5".into()]).is_err(),
            "typo"
        );
        assert!(Profile::load(None, &["levels.9.cap=1".into()]).is_err());
        assert!(Profile::load(None, &["levels.x.cap=1".into()]).is_err());
        assert!(Profile::load(None, &["seed.x=1".into()]).is_err());
        assert!(Profile::load(None, &["candidates=0".into()]).is_err());
        assert!(Profile::load(None, &["time_scale=-1".into()]).is_err());
    }

    #[test]
    fn a_process_fleet_is_on_redis_and_only_it_has_kills() {
        let p = Profile::load(
            Some("ci"),
            &[
                "fleet=\"processes\"".into(),
                "stack.kind=\"redis\"".into(),
                "kills=[\"1@rush=0.5,down_ms=200\", \"0@rush=0.1\"]".into(),
            ],
        )
        .unwrap();
        assert_eq!(p.fleet, FleetKind::Processes);
        assert_eq!(p.kills.len(), 2);
        assert_eq!(p.kills[0].instance, 1);
        assert_eq!(p.kills[1].down.as_millis(), 1_000);
        let refused = |sets: &[&str]| {
            let sets: Vec<String> = sets.iter().map(|s| (*s).to_owned()).collect();
            Profile::load(Some("ci"), &sets).unwrap_err().to_string()
        };
        let e = refused(&["fleet=\"processes\""]);
        assert!(e.contains("redis"), "{e}");
        let e = refused(&["kills=[\"0@rush=0.5\"]"]);
        assert!(e.contains("--fleet processes"), "{e}");
        let e = refused(&[
            "fleet=\"processes\"",
            "stack.kind=\"redis\"",
            "kills=[\"2@rush=0.5\"]",
        ]);
        assert!(e.contains("instance 2 of 2"), "{e}");
        let e = refused(&["kills=[\"0@rush=7\"]"]);
        assert!(e.contains("[0, 1]"), "{e}");
    }

    #[test]
    fn mail_over_ses_is_refused_off_the_aws_stack() {
        let load = |sets: &[&str]| {
            let sets: Vec<String> = sets.iter().map(|s| (*s).to_owned()).collect();
            Profile::load(Some("ci"), &sets)
        };
        let e = load(&["mail=\"ses\""]).unwrap_err().to_string();
        assert!(e.contains("--mail ses needs --stack aws"), "{e}");
        let e = load(&["mail=\"ses\"", "stack.kind=\"redis\""])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--mail ses needs --stack aws"), "{e}");
        let p = load(&["mail=\"ses\"", "stack.kind=\"aws\""]).unwrap();
        assert_eq!(p.mail, crate::mail::Mail::Ses);
        assert_eq!(
            load(&["mail=\"smtp\""]).unwrap().mail,
            crate::mail::Mail::Smtp
        );
        let e = load(&["mail=\"smtp\"", "target=\"http://127.0.0.1:1\""])
            .unwrap_err()
            .to_string();
        assert!(e.contains("a remote target mails as its own"), "{e}");
        assert!(load(&["mail=\"imap\""]).is_err());
    }

    #[test]
    fn profiles_whose_settings_break_a_relation_are_refused() {
        for name in [None, Some("ci")] {
            let p = Profile::load(name, &[]).unwrap();
            assert_eq!(p.settings().check(), Ok(()), "{name:?}");
            // the token lock keeps the article's 45 s under the 30 s grant
            assert_eq!(p.settings().token_lock, booking::settings::TOKEN_LOCK);
        }
        // a 5-minute hold is shorter than the article's 6-minute sweep window
        let err = Profile::load(None, &["hold_ms=300000".into()])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("sweep_window_within_hold") && err.contains("hold (10s)"),
            "{err}"
        );
    }

    #[test]
    fn files_merge_over_the_defaults() {
        let dir = std::env::temp_dir().join(format!("profile-{:x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("small.toml");
        std::fs::write(
            &path,
            "candidates = 100\n[thresholds]\nrush_rate_min = 10.0\n",
        )
        .unwrap();
        let p = Profile::load(Some(path.to_str().unwrap()), &[]).unwrap();
        assert_eq!(p.name, "small");
        assert_eq!(p.candidates, 100);
        assert_eq!(p.thresholds.rush_rate_min, 10.0);
        assert_eq!(p.thresholds.booking_p99_ms_max, 50.0);
        assert_eq!(p.seats(), 20_700);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(Profile::load(Some("/nonexistent/x.toml"), &[]).is_err());
    }

    #[test]
    fn a_files_payer_mix_is_taken_whole() {
        let mut base = defaults_value().unwrap();
        let file: toml::Value =
            toml::from_str("[load]\nrate = 5.0\n[load.mix]\npay_now = 1.0\n").unwrap();
        merge(&mut base, file);
        let p: Profile = base.try_into().unwrap();
        assert_eq!(p.load.rate, 5.0);
        assert_eq!(p.load.mix.pay_now, 1.0);
        assert_eq!(p.load.mix.abandon, 0.0, "not merged with the default mix");
        assert_eq!(p.load.users, LoadProfile::default().users);
    }

    #[test]
    fn values_parse_as_toml_or_text() {
        assert_eq!(parse_value("5"), toml::Value::Integer(5));
        assert_eq!(parse_value("0.5"), toml::Value::Float(0.5));
        assert_eq!(parse_value("true"), toml::Value::Boolean(true));
        assert_eq!(parse_value("\"x\""), toml::Value::String("x".into()));
        assert_eq!(
            parse_value("redis://h:1"),
            toml::Value::String("redis://h:1".into())
        );
    }

    #[test]
    fn candidates_are_distinct_and_seeded() {
        let a = candidates(1, 1_000);
        let set: std::collections::BTreeSet<&String> = a.iter().collect();
        assert_eq!(set.len(), 1_000);
        assert_eq!(candidates(1, 3), candidates(1, 3));
        assert_ne!(candidates(1, 3), candidates(2, 3));
    }

    #[test]
    fn a_fault_schedule_is_checked_against_the_fleet_that_carries_it_out() {
        let load = |sets: &[&str]| {
            let sets: Vec<String> = sets.iter().map(|s| (*s).to_owned()).collect();
            Profile::load(Some("ci"), &sets)
        };
        let processes = ["fleet=\"processes\"", "stack.kind=\"redis\"", "instances=3"];
        let with = |extra: &str| {
            let mut v = processes.to_vec();
            v.push(extra);
            load(&v)
        };
        let p = with("faults=\"kill-after-enqueue\"").unwrap();
        let (name, schedule) = p.fault_schedule().unwrap().unwrap();
        assert_eq!(name, "kill-after-enqueue");
        assert_eq!(schedule.faults.len(), 1);
        // process faults need the process fleet
        let e = load(&["faults=\"kill-after-enqueue\""])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("kill-after-enqueue") && e.contains("process"),
            "{e}"
        );
        // a Redis link needs Redis
        let e = load(&["faults=\"link-trouble\""]).unwrap_err().to_string();
        assert!(e.contains("Redis stack"), "{e}");
        load(&["faults=\"ports-and-gateway\""]).unwrap();
        // an instance the fleet does not have
        let e = load(&[
            "fleet=\"processes\"",
            "stack.kind=\"redis\"",
            "instances=1",
            "faults=\"kill-after-enqueue\"",
        ])
        .unwrap_err()
        .to_string();
        assert!(e.contains("instance-1"), "{e}");
        // unknown schedules, audit invariants relaxed, rules the mock refuses
        assert!(with("faults=\"no-such\"").is_err());
        let dir = std::env::temp_dir().join(format!("sellout-faults-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, text: &str| {
            let f = dir.join(name);
            std::fs::write(&f, text).unwrap();
            format!("faults={:?}", f.display().to_string())
        };
        let relax_audit = write(
            "relax.toml",
            "[relax]\none_email_per_paid = 3\n[[fault]]\nname = \"p\"\ntarget = \"redis_server\"\nstart_ms = 1\nduration_ms = 1\nkind = { type = \"pause\" }\n",
        );
        let e = with(&relax_audit).unwrap_err().to_string();
        assert!(e.contains("cannot"), "{e}");
        let bad_rule = write(
            "rule.toml",
            "[[fault]]\nname = \"r\"\ntarget = \"gateway_rules\"\nstart_ms = 1\nduration_ms = 1\nkind = { type = \"rule\" }\nrule = { op = \"execute\", action = { explode = 1 } }\n",
        );
        let e = with(&bad_rule).unwrap_err().to_string();
        assert!(e.contains("refuses its rule"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
        // a remote target's processes are not ours
        assert!(
            load(&[
                "target=\"http://127.0.0.1:1\"",
                "faults=\"ports-and-gateway\""
            ])
            .is_err()
        );
        // only the process fleet runs a redis-server without persistence
        assert!(load(&["redis_aof=false"]).is_err());
    }
}
