//! The fault schedule: which faults, at which boundary, when, for how long, how
//! often. Pure data, read from TOML, checked by [`Schedule::validate`].
//!
//! ```toml
//! [[fault]]
//! name = "redis-slow"                 # unique, names the fault in the log and the report
//! target = "ledger"                   # which port (see [`Target`])
//! ops = ["admit", "release"]          # which of its methods; leave out for all
//! start_ms = 2_000                    # from the run's start
//! duration_ms = 5_000                 # how long each window lasts
//! every_ms = 20_000                   # optional: a window every 20 s from start_ms
//! probability = 0.3                   # per call while active (default 1)
//! kind = { type = "latency", delay = { uniform = { lo_ms = 20, hi_ms = 200 } } }
//!
//! [[fault]]
//! name = "dynamodb-throttles"
//! target = "records"
//! ops = ["put"]
//! start_ms = 10_000
//! duration_ms = 3_000
//! probability = 0.5
//! kind = { type = "throttle" }
//!
//! [[fault]]
//! name = "api-2-clock-ahead"
//! target = "clock"
//! instances = ["api-2"]               # optional: only the wrappers built for these instances
//! start_ms = 0
//! duration_ms = 60_000
//! kind = { type = "clock_skew", ms = 1_500 }
//! ```
//!
//! Kinds ([`FaultKind`]), each applied per call while the fault is active and
//! its coin (of `probability`) comes up:
//! - `latency { delay }`: the call waits `delay` (fixed, uniform, or exponential
//!   with a cap), then goes through. A latency *spike* is a latency fault with a
//!   probability below 1.
//! - `error`: the call fails at once with the port's "unavailable" error and
//!   never reaches the backend.
//! - `timeout { after_ms }`: the call waits `after_ms`, then fails with the
//!   port's timeout error; the request was lost on the way and never reached
//!   the backend (use `reset` for an answer lost after the work was done).
//! - `throttle`: the call fails at once with the port's throttling error, or
//!   "unavailable" where the port has none; the backend is not called.
//! - `reset`: the connection drops with the outcome unknown: on a seeded coin
//!   the call reaches the backend (and a write takes effect), then the caller
//!   gets an error in every case.
//! - `hang { ms }`: the dependency stops answering, like a paused server: the
//!   call blocks for `ms`, or until the fault's window closes when `ms` is left
//!   out, then goes through.
//! - `clock_skew { ms }`: only on the `clock` target: the clock reads `ms`
//!   ahead (negative: behind) while the fault is active. Its probability must
//!   be 1 (a clock that jitters per read is not a skewed clock).
//!
//! Rehearsals take more targets than the ports ([`Target::scope`]); each
//! window of these is an action the fleet's fault conductor carries out:
//! - `instance` (process fleet; `instances` picks which, all when left
//!   out): `kill` (SIGKILL at the window's opening, or with `point =
//!   "after_admission" | "after_create" | "after_enqueue" |
//!   "during_execute" | "after_paid"` the first time the instance passes that point of the
//!   request path inside the window; started again at its close), `pause`
//!   (SIGSTOP, then SIGCONT), `restart` (SIGTERM, started again at the
//!   close).
//! - `redis_server` (process fleet): `pause`, `restart` (SIGKILL, started
//!   again on the same port and data directory: the append-only file is
//!   what survives).
//! - `redis_link`, `gateway_link`: toxiproxy's toxics on the TCP link, for
//!   the window: `latency` (fixed, or uniform as latency ± jitter),
//!   `bandwidth { kb_per_s }`, `timeout { after_ms }`, `hang` (a
//!   blackhole), `reset` (reset_peer), `slow_close { ms }`, `slicer {
//!   average_size, size_variation, delay_us }`, `error` (the link down:
//!   connections refused and dropped); `probability` is the toxicity,
//!   `stream` the direction (`upstream`, `downstream`, `both`).
//! - `gateway_rules`: `kind = { type = "rule" }` with `rule = { .. }`, one
//!   of the mock gateway's script rules, installed for the window.
//!
//! A schedule may also relax latency and rate thresholds by name
//! (`[relax] booking_p99_ms = 2_500`); the report says which and by whom.
//!
//! Partial failures are faults with a probability below 1, or confined to some
//! `ops` or `instances`. When several faults are active on one call they apply
//! in schedule order: delays add up, and the first failing fault that fires
//! ends the call.

use std::collections::{BTreeMap, BTreeSet};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// The port a fault is injected at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// The seat ledger (Redis).
    Ledger,
    /// The record store (DynamoDB).
    Records,
    /// The record store's change stream (DynamoDB Streams).
    Stream,
    /// The admission queue (SQS FIFO).
    Queue,
    /// Locks, values and latches (Redis).
    Coordination,
    /// The payment gateway (bKash).
    Gateway,
    /// Confirmation emails (SES).
    Mailer,
    /// Alerts to a human.
    Alerts,
    /// The status document (S3).
    StatusSink,
    /// The clock an instance reads.
    Clock,
    /// A booking instance as an OS process (process fleet only): `kill`,
    /// `pause`, `restart`.
    Instance,
    /// The fleet's own `redis-server` process (process fleet only): `pause`,
    /// `restart`.
    RedisServer,
    /// The TCP link from the instances to Redis (a proxy with toxics).
    RedisLink,
    /// The TCP link from the instances to the payment gateway (a proxy with
    /// toxics).
    GatewayLink,
    /// The mock gateway's scripted rules (`/__mock/rules`): a rule installed
    /// for the window.
    GatewayRules,
}

/// Which harness can carry out a target's faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Per call, inside an instance, through the port wrappers: the sale in
    /// virtual time and both rehearsal fleets.
    Port,
    /// Signals to OS processes: the process fleet.
    Process,
    /// Toxics on a TCP link through a proxy: rehearsals.
    Link,
    /// The mock gateway's rules: rehearsals.
    Rules,
}

impl Scope {
    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Port => "port",
            Scope::Process => "process",
            Scope::Link => "link",
            Scope::Rules => "gateway rules",
        }
    }
}

/// Where a `kill` with a `point` takes an instance down: right after a step
/// of the request path, inside the instance (the hook is armed only by a
/// rehearsal's `[faults]` configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KillPoint {
    /// The ledger admitted the candidate (seat counted), nothing else done.
    AfterAdmission,
    /// The gateway created the payment, the booking not yet queued.
    AfterCreate,
    /// The booking was queued, the candidate not yet answered.
    AfterEnqueue,
    /// The gateway executed the payment (the money moved), the answer not
    /// yet handled.
    DuringExecute,
    /// The confirm step's HELD→PAID update landed (the booking is PAID,
    /// its email owed), the ledger's paid mark and the email not yet done.
    AfterPaid,
}

impl KillPoint {
    /// Every point, in request-path order.
    pub const ALL: [KillPoint; 5] = [
        KillPoint::AfterAdmission,
        KillPoint::AfterCreate,
        KillPoint::AfterEnqueue,
        KillPoint::DuringExecute,
        KillPoint::AfterPaid,
    ];

    /// Its name in schedules.
    pub fn name(self) -> &'static str {
        match self {
            KillPoint::AfterAdmission => "after_admission",
            KillPoint::AfterCreate => "after_create",
            KillPoint::AfterEnqueue => "after_enqueue",
            KillPoint::DuringExecute => "during_execute",
            KillPoint::AfterPaid => "after_paid",
        }
    }

    /// The port call after which it fires: `(target, op)`.
    pub fn site(self) -> (Target, &'static str) {
        match self {
            KillPoint::AfterAdmission => (Target::Ledger, "admit"),
            KillPoint::AfterCreate => (Target::Gateway, "create"),
            KillPoint::AfterEnqueue => (Target::Queue, "send"),
            KillPoint::DuringExecute => (Target::Gateway, "execute"),
            KillPoint::AfterPaid => (Target::Records, "mark_paid"),
        }
    }

    /// Whether it fires only after a call that succeeded (the `after_*`
    /// points); `during_execute` fires whatever the answer was.
    pub fn needs_success(self) -> bool {
        self != KillPoint::DuringExecute
    }
}

impl std::fmt::Display for KillPoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Which way a link toxic acts, as toxiproxy's `stream`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkStream {
    /// From the instance to the server.
    Upstream,
    /// From the server back to the instance (toxiproxy's default).
    Downstream,
    /// Both ways (two toxics).
    Both,
}

impl Target {
    /// Every target.
    pub const ALL: [Target; 15] = [
        Target::Ledger,
        Target::Records,
        Target::Stream,
        Target::Queue,
        Target::Coordination,
        Target::Gateway,
        Target::Mailer,
        Target::Alerts,
        Target::StatusSink,
        Target::Clock,
        Target::Instance,
        Target::RedisServer,
        Target::RedisLink,
        Target::GatewayLink,
        Target::GatewayRules,
    ];

    /// Its name in schedules.
    pub fn name(self) -> &'static str {
        match self {
            Target::Ledger => "ledger",
            Target::Records => "records",
            Target::Stream => "stream",
            Target::Queue => "queue",
            Target::Coordination => "coordination",
            Target::Gateway => "gateway",
            Target::Mailer => "mailer",
            Target::Alerts => "alerts",
            Target::StatusSink => "status_sink",
            Target::Clock => "clock",
            Target::Instance => "instance",
            Target::RedisServer => "redis_server",
            Target::RedisLink => "redis_link",
            Target::GatewayLink => "gateway_link",
            Target::GatewayRules => "gateway_rules",
        }
    }

    /// The harness that carries out its faults.
    pub fn scope(self) -> Scope {
        match self {
            Target::Instance | Target::RedisServer => Scope::Process,
            Target::RedisLink | Target::GatewayLink => Scope::Link,
            Target::GatewayRules => Scope::Rules,
            _ => Scope::Port,
        }
    }

    /// The port's methods, by the names a schedule's `ops` uses (the trait
    /// methods' names).
    pub fn ops(self) -> &'static [&'static str] {
        match self {
            Target::Ledger => &[
                "reset",
                "load_candidates",
                "set_open",
                "admit",
                "attach_payment",
                "undo_admission",
                "release",
                "mark_paid",
                "extend",
                "hold",
                "paid",
                "stale_pending",
                "stale_held",
                "counters",
            ],
            Target::Records => &[
                "put",
                "replace",
                "mark_paid",
                "mark_emailed",
                "extend",
                "note_query_failure",
                "clear_query_failures",
                "delete",
                "get",
                "by_payment",
                "held_due",
                "owed_emails",
                "scan_all",
                "throttles",
            ],
            Target::Stream => &["read"],
            Target::Queue => &[
                "send",
                "receive",
                "delete",
                "change_visibility",
                "oldest_age",
                "depth",
                "dead_letters",
            ],
            Target::Coordination => &[
                "try_lock",
                "unlock",
                "extend_lock",
                "get",
                "set",
                "delete",
                "set_once",
            ],
            Target::Gateway => &["create", "execute", "query"],
            Target::Mailer => &["send"],
            Target::Alerts => &["raise"],
            Target::StatusSink => &["put", "get"],
            Target::Clock => &["now_ms"],
            // whole processes, links and rules have no methods
            Target::Instance
            | Target::RedisServer
            | Target::RedisLink
            | Target::GatewayLink
            | Target::GatewayRules => &[],
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How long an injected latency lasts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Delay {
    /// Always `ms`.
    Fixed {
        /// The delay, ms.
        ms: u64,
    },
    /// Uniform in `lo_ms..=hi_ms`.
    Uniform {
        /// Shortest, ms.
        lo_ms: u64,
        /// Longest, ms.
        hi_ms: u64,
    },
    /// Exponential with mean `mean_ms`, cut at `max_ms` (a long tail).
    Exponential {
        /// Mean, ms (above 0).
        mean_ms: f64,
        /// The cap, ms.
        max_ms: u64,
    },
}

impl Delay {
    /// A delay drawn from `rng`, ms.
    pub fn sample(&self, rng: &mut impl Rng) -> u64 {
        match *self {
            Delay::Fixed { ms } => ms,
            Delay::Uniform { lo_ms, hi_ms } => rng.gen_range(lo_ms..=hi_ms.max(lo_ms)),
            Delay::Exponential { mean_ms, max_ms } => {
                // inverse CDF; 1 - u is in (0, 1], so the log is finite
                let u: f64 = rng.r#gen();
                let ms = -mean_ms * (1.0 - u).ln();
                // saturating float-to-int cast, then the cap
                (ms.round() as u64).min(max_ms)
            }
        }
    }
}

/// What a fault does to a call (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum FaultKind {
    /// The call waits, then goes through.
    Latency {
        /// How long.
        delay: Delay,
    },
    /// The call fails at once; the backend is not called.
    Error,
    /// The call waits `after_ms`, then fails as timed out; the backend is not
    /// called.
    Timeout {
        /// How long the caller waits for nothing, ms.
        after_ms: u64,
    },
    /// The call fails at once as throttled; the backend is not called.
    Throttle,
    /// The answer is lost: the backend is called on a seeded coin, the caller
    /// gets an error either way.
    Reset,
    /// The dependency stops answering, then resumes and the call goes through.
    Hang {
        /// How long, ms; until the fault's window closes when left out.
        #[serde(default)]
        ms: Option<u64>,
    },
    /// The clock reads `ms` off (clock target only).
    ClockSkew {
        /// Ahead (positive) or behind (negative), ms.
        ms: i64,
    },
    /// SIGKILL (instance, process fleet): at the window's opening, or with a
    /// `point`, the first time the instance passes that point of the request
    /// path inside the window; started again when the window closes.
    Kill {
        /// Where in the request path; at once when left out.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        point: Option<KillPoint>,
    },
    /// SIGSTOP at the window's opening, SIGCONT at its close (an instance or
    /// `redis-server`).
    Pause,
    /// Stopped at the window's opening (SIGTERM for an instance, SIGKILL for
    /// `redis-server`: its append-only file is what survives), started
    /// again at its close.
    Restart,
    /// A link carries at most `kb_per_s` KB a second (toxiproxy's
    /// `bandwidth`).
    Bandwidth {
        /// KB per second (above 0).
        kb_per_s: u64,
    },
    /// A link's connections close `ms` late (toxiproxy's `slow_close`).
    SlowClose {
        /// The delay, ms.
        ms: u64,
    },
    /// A link's data is cut into small pieces sent `delay_us` apart
    /// (toxiproxy's `slicer`).
    Slicer {
        /// Mean piece size, bytes (above 0).
        average_size: u64,
        /// How far a piece's size strays from the mean, bytes.
        size_variation: u64,
        /// Between pieces, µs.
        delay_us: u64,
    },
    /// The spec's `rule` is installed on the mock gateway for the window
    /// (`gateway_rules` only).
    Rule,
}

impl FaultKind {
    /// Its name in schedules and logs.
    pub fn name(&self) -> &'static str {
        match self {
            FaultKind::Latency { .. } => "latency",
            FaultKind::Error => "error",
            FaultKind::Timeout { .. } => "timeout",
            FaultKind::Throttle => "throttle",
            FaultKind::Reset => "reset",
            FaultKind::Hang { .. } => "hang",
            FaultKind::ClockSkew { .. } => "clock_skew",
            FaultKind::Kill { .. } => "kill",
            FaultKind::Pause => "pause",
            FaultKind::Restart => "restart",
            FaultKind::Bandwidth { .. } => "bandwidth",
            FaultKind::SlowClose { .. } => "slow_close",
            FaultKind::Slicer { .. } => "slicer",
            FaultKind::Rule => "rule",
        }
    }
}

fn one() -> f64 {
    1.0
}

/// One fault of a schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    /// Unique in its schedule; names the fault in the log and the report.
    pub name: String,
    /// The port.
    pub target: Target,
    /// The port's methods it applies to; all when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ops: Option<Vec<String>>,
    /// The instances (as wrappers are labelled) it applies to; all when left
    /// out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances: Option<Vec<String>>,
    /// What it does.
    pub kind: FaultKind,
    /// When its first window opens, ms from the run's start.
    pub start_ms: u64,
    /// How long each window lasts, ms.
    pub duration_ms: u64,
    /// A window opens every `every_ms` from `start_ms`; one window only when
    /// left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_ms: Option<u64>,
    /// The chance it fires on a call while active, 0..=1 (default 1); on a
    /// link, toxiproxy's `toxicity` (the share of connections it acts on).
    #[serde(default = "one")]
    pub probability: f64,
    /// Which way a link toxic acts (links only; downstream when left out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<LinkStream>,
    /// The mock gateway's rule (a `[[rule]]` table of its script:
    /// `gateway_rules` only), installed for the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<serde_json::Value>,
}

impl FaultSpec {
    /// The window that contains `now_ms` (ms from the run's start), as
    /// `(repetition, opens_ms, closes_ms)`; `None` outside every window.
    pub fn window_at(&self, now_ms: u64) -> Option<(u64, u64, u64)> {
        let since = now_ms.checked_sub(self.start_ms)?;
        let (repetition, into) = match self.every_ms {
            Some(every) if every > 0 => (since / every, since % every),
            _ => (0, since),
        };
        if into >= self.duration_ms {
            return None;
        }
        let opens = now_ms - into;
        Some((repetition, opens, opens.saturating_add(self.duration_ms)))
    }

    /// Whether it applies to `op` of `target` on `instance` at `now_ms` (ms
    /// from the run's start), coins aside.
    pub fn applies(&self, now_ms: u64, target: Target, op: &str, instance: Option<&str>) -> bool {
        self.target == target
            && self
                .ops
                .as_ref()
                .is_none_or(|ops| ops.iter().any(|o| o == op))
            && self
                .instances
                .as_ref()
                .is_none_or(|names| instance.is_some_and(|i| names.iter().any(|n| n == i)))
            && self.window_at(now_ms).is_some()
    }
}

/// Why a schedule was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScheduleError {
    /// The file could not be read.
    #[error("cannot read {path}: {why}")]
    Io {
        /// The file.
        path: String,
        /// The system's reason.
        why: String,
    },
    /// Not TOML, or not a schedule (unknown target, kind or field).
    #[error("cannot read the schedule: {0}")]
    Parse(String),
    /// A relaxed threshold that makes no sense.
    #[error("relax {name:?}: {why}")]
    Relax {
        /// The verdict's name.
        name: String,
        /// What is wrong.
        why: String,
    },
    /// A fault that makes no sense.
    #[error("fault {index} ({name:?}): {why}")]
    Invalid {
        /// Its position in the schedule.
        index: usize,
        /// Its name.
        name: String,
        /// What is wrong.
        why: String,
    },
}

/// A fault schedule: the faults of one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    /// What the schedule rehearses, for a human (listings, the report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Latency and rate thresholds the schedule relaxes, by verdict name
    /// (`booking_p99_ms = 1_000`): a schedule that pauses Redis for 2 s
    /// cannot hold a 50 ms p99. The report lists each with the schedule's
    /// name; invariants of the audit cannot be relaxed (the rehearsal
    /// refuses such a name).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub relax: BTreeMap<String, f64>,
    /// The faults, in the order they apply.
    #[serde(default, rename = "fault")]
    pub faults: Vec<FaultSpec>,
}

impl Schedule {
    /// Reads and validates a TOML schedule.
    pub fn from_toml(text: &str) -> Result<Schedule, ScheduleError> {
        let schedule: Schedule =
            toml::from_str(text).map_err(|e| ScheduleError::Parse(e.to_string()))?;
        schedule.validate()?;
        Ok(schedule)
    }

    /// Reads and validates a TOML schedule file (`chaos run --schedule FILE`).
    pub fn load(path: &std::path::Path) -> Result<Schedule, ScheduleError> {
        let text = std::fs::read_to_string(path).map_err(|e| ScheduleError::Io {
            path: path.display().to_string(),
            why: e.to_string(),
        })?;
        Schedule::from_toml(&text)
    }

    /// The schedule as TOML.
    pub fn to_toml(&self) -> Result<String, ScheduleError> {
        toml::to_string(self).map_err(|e| ScheduleError::Parse(e.to_string()))
    }

    /// Checks every fault: a unique, non-empty name; `ops` naming methods of
    /// the target, at least one; a probability in 0..=1; a window of at least
    /// 1 ms, and repeats whose windows neither overlap nor touch (a window as
    /// long as its period is a continuous fault: leave `every_ms` out);
    /// delays that make sense; `clock_skew` on the clock and only there, with
    /// probability 1.
    pub fn validate(&self) -> Result<(), ScheduleError> {
        let mut names = BTreeSet::new();
        for (index, f) in self.faults.iter().enumerate() {
            let bad = |why: String| ScheduleError::Invalid {
                index,
                name: f.name.clone(),
                why,
            };
            if f.name.trim().is_empty() {
                return Err(bad("a fault needs a name".into()));
            }
            if !names.insert(f.name.as_str()) {
                return Err(bad("another fault has this name".into()));
            }
            if let Some(ops) = f.ops.as_ref().filter(|_| f.target.scope() == Scope::Port) {
                if ops.is_empty() {
                    return Err(bad(
                        "an empty ops list selects nothing: leave it out for every method".into(),
                    ));
                }
                for op in ops {
                    if !f.target.ops().contains(&op.as_str()) {
                        return Err(bad(format!(
                            "{} has no method {op:?} (it has {})",
                            f.target,
                            f.target.ops().join(", ")
                        )));
                    }
                }
            }
            if let Some(instances) = &f.instances {
                if instances.is_empty() {
                    return Err(bad(
                        "an empty instances list selects nothing: leave it out for all".into(),
                    ));
                }
            }
            if !(0.0..=1.0).contains(&f.probability) {
                return Err(bad(format!(
                    "probability {} is not within 0..=1",
                    f.probability
                )));
            }
            if f.duration_ms == 0 {
                return Err(bad("a window of 0 ms never opens".into()));
            }
            if let Some(every) = f.every_ms {
                if every <= f.duration_ms {
                    return Err(bad(format!(
                        "windows of {} ms every {every} ms overlap or touch: leave every_ms out \
                         for a continuous fault",
                        f.duration_ms
                    )));
                }
            }
            check_kind(f).map_err(bad)?;
        }
        for (name, bound) in &self.relax {
            if name.trim().is_empty() || !bound.is_finite() || *bound < 0.0 {
                return Err(ScheduleError::Relax {
                    name: name.clone(),
                    why: format!("a bound must be a finite number of at least 0, not {bound}"),
                });
            }
        }
        Ok(())
    }

    /// The harnesses its faults need.
    pub fn scopes(&self) -> BTreeSet<Scope> {
        self.faults.iter().map(|f| f.target.scope()).collect()
    }

    /// Refuses a fault that a harness able to carry out only `scopes`
    /// cannot (the sale in virtual time has ports only; an in-process fleet
    /// has no processes to kill), naming the fault and what it needs.
    pub fn check_scopes(&self, harness: &str, scopes: &[Scope]) -> Result<(), ScheduleError> {
        match self
            .faults
            .iter()
            .enumerate()
            .find(|(_, f)| !scopes.contains(&f.target.scope()))
        {
            None => Ok(()),
            Some((index, f)) => Err(ScheduleError::Invalid {
                index,
                name: f.name.clone(),
                why: format!(
                    "{} is a {} fault, which {harness} cannot carry out",
                    f.target,
                    f.target.scope().name()
                ),
            }),
        }
    }

    /// The faults that apply to `op` of `target` at `now_ms` (ms from the
    /// run's start), whatever the instance, in schedule order.
    pub fn active(&self, now_ms: u64, target: Target, op: &str) -> Vec<&FaultSpec> {
        self.faults
            .iter()
            .filter(|f| {
                f.target == target
                    && f.ops.as_ref().is_none_or(|ops| ops.iter().any(|o| o == op))
                    && f.window_at(now_ms).is_some()
            })
            .collect()
    }

    /// Like [`Schedule::active`] for a call from `instance`, with each fault's
    /// position in the schedule.
    pub fn active_for(
        &self,
        now_ms: u64,
        target: Target,
        op: &str,
        instance: Option<&str>,
    ) -> Vec<(usize, &FaultSpec)> {
        self.faults
            .iter()
            .enumerate()
            .filter(|(_, f)| f.applies(now_ms, target, op, instance))
            .collect()
    }
}

/// Whether `f`'s kind fits its target (see the module docs).
fn check_kind(f: &FaultSpec) -> Result<(), String> {
    let kind = f.kind.name();
    let target = f.target;
    let scope = target.scope();
    let not_for = || format!("{kind} does not apply to {target}");
    if f.stream.is_some() && scope != Scope::Link {
        return Err(format!("stream is for links, not {target}"));
    }
    if f.rule.is_some() != (target == Target::GatewayRules) {
        return Err("a rule goes with gateway_rules, and gateway_rules needs a rule".into());
    }
    if scope != Scope::Port && f.ops.is_some() {
        return Err(format!("{target} has no methods: leave ops out"));
    }
    if (matches!(scope, Scope::Link | Scope::Rules) || target == Target::RedisServer)
        && f.instances.is_some()
    {
        return Err(format!(
            "{target} is shared by the fleet: leave instances out"
        ));
    }
    let action = matches!(
        f.kind,
        FaultKind::Kill { .. } | FaultKind::Pause | FaultKind::Restart | FaultKind::Rule
    ) || (scope == Scope::Link && f.kind == FaultKind::Error);
    if action && f.probability != 1.0 {
        return Err(format!(
            "{kind} on {target} is an action, not a coin: it needs probability 1"
        ));
    }
    match f.kind {
        FaultKind::Latency { delay } => {
            if scope != Scope::Port && scope != Scope::Link {
                return Err(not_for());
            }
            match delay {
                Delay::Uniform { lo_ms, hi_ms } if lo_ms > hi_ms => {
                    return Err(format!("uniform delay with lo_ms {lo_ms} > hi_ms {hi_ms}"));
                }
                Delay::Exponential { mean_ms, .. } if !(mean_ms > 0.0 && mean_ms.is_finite()) => {
                    return Err(format!(
                        "exponential delay needs a finite mean above 0, not {mean_ms}"
                    ));
                }
                Delay::Exponential { .. } if scope == Scope::Link => {
                    return Err(
                        "a link's latency is fixed or uniform (toxiproxy's latency ± jitter)"
                            .into(),
                    );
                }
                _ => {}
            }
        }
        FaultKind::Error | FaultKind::Timeout { .. } | FaultKind::Reset => {
            if scope != Scope::Port && scope != Scope::Link {
                return Err(not_for());
            }
        }
        FaultKind::Throttle => {
            if scope != Scope::Port {
                return Err(not_for());
            }
        }
        FaultKind::Hang { ms } => {
            if ms == Some(0) {
                return Err("a hang of 0 ms is no hang".into());
            }
            if scope == Scope::Link && ms.is_some() {
                return Err(
                    "a link's hang holds the data for the whole window: leave ms out".into(),
                );
            }
            if scope != Scope::Port && scope != Scope::Link {
                return Err(not_for());
            }
        }
        FaultKind::ClockSkew { .. } => {
            if f.probability != 1.0 && target == Target::Clock {
                return Err("clock_skew needs probability 1".into());
            }
        }
        FaultKind::Kill { .. } => {
            if target != Target::Instance {
                return Err(format!(
                    "kill is for instance (redis_server takes restart), not {target}"
                ));
            }
        }
        FaultKind::Pause | FaultKind::Restart => {
            if scope != Scope::Process {
                return Err(not_for());
            }
        }
        FaultKind::Bandwidth { kb_per_s } => {
            if scope != Scope::Link {
                return Err(not_for());
            }
            if kb_per_s == 0 {
                return Err("a bandwidth of 0 KB/s is a blackhole: use hang".into());
            }
        }
        FaultKind::SlowClose { .. } => {
            if scope != Scope::Link {
                return Err(not_for());
            }
        }
        FaultKind::Slicer { average_size, .. } => {
            if scope != Scope::Link {
                return Err(not_for());
            }
            if average_size == 0 {
                return Err("a slicer needs an average_size above 0".into());
            }
        }
        FaultKind::Rule => {
            if target != Target::GatewayRules {
                return Err(not_for());
            }
            if !f.rule.as_ref().is_some_and(serde_json::Value::is_object) {
                return Err("rule must be a table (a [[rule]] of the mock's script)".into());
            }
        }
    }
    let is_skew = matches!(f.kind, FaultKind::ClockSkew { .. });
    if is_skew != (target == Target::Clock) {
        return Err(format!(
            "{kind} on {target}: clock_skew goes on the clock, and the clock takes only clock_skew"
        ));
    }
    Ok(())
}

/// What the coins said for one call under one fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Whether the fault fires on this call.
    pub fires: bool,
    /// The injected delay, ms (latency faults; 0 otherwise).
    pub delay_ms: u64,
    /// For a reset: whether the call reached the backend before the answer
    /// was lost.
    pub applied: bool,
}

/// The seeded coins: the decision for the `call`-th call a fault sees is a
/// pure function of (run seed, fault index, call), so a run is reproducible
/// given the same call order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decider {
    seed: u64,
}

/// SplitMix64's finaliser: spreads nearby inputs over the whole range.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Decider {
    /// Coins for a run with this seed.
    pub fn new(seed: u64) -> Decider {
        Decider { seed }
    }

    /// The run seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The generator of one call under one fault.
    pub fn rng(&self, fault_index: usize, call: u64) -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(mix(mix(self.seed ^ mix(fault_index as u64)) ^ call))
    }

    /// The decision for the `call`-th call (from 0) under fault `fault_index`.
    pub fn decide(&self, spec: &FaultSpec, fault_index: usize, call: u64) -> Decision {
        let mut rng = self.rng(fault_index, call);
        // always draw the same number of values, so the kind does not shift them
        let coin: f64 = rng.r#gen();
        let applied: bool = rng.r#gen();
        let fires = coin < spec.probability;
        let delay_ms = match spec.kind {
            FaultKind::Latency { delay } => delay.sample(&mut rng),
            _ => 0,
        };
        Decision {
            fires,
            delay_ms,
            applied,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    const EXAMPLE: &str = r#"
[[fault]]
name = "redis-slow"
target = "ledger"
ops = ["admit", "release"]
start_ms = 2_000
duration_ms = 5_000
every_ms = 20_000
probability = 0.3
kind = { type = "latency", delay = { uniform = { lo_ms = 20, hi_ms = 200 } } }

[[fault]]
name = "dynamodb-throttles"
target = "records"
ops = ["put"]
start_ms = 10_000
duration_ms = 3_000
probability = 0.5
kind = { type = "throttle" }

[[fault]]
name = "api-2-clock-ahead"
target = "clock"
instances = ["api-2"]
start_ms = 0
duration_ms = 60_000
kind = { type = "clock_skew", ms = 1_500 }

[[fault]]
name = "sqs-paused"
target = "queue"
start_ms = 30_000
duration_ms = 4_000
kind = { type = "hang" }
"#;

    fn spec(target: Target, kind: FaultKind) -> FaultSpec {
        FaultSpec {
            name: "f".into(),
            target,
            ops: None,
            instances: None,
            kind,
            start_ms: 100,
            duration_ms: 50,
            every_ms: None,
            probability: 1.0,
            stream: None,
            rule: None,
        }
    }

    fn invalid(f: FaultSpec) -> String {
        Schedule {
            faults: vec![f],
            ..Schedule::default()
        }
        .validate()
        .unwrap_err()
        .to_string()
    }

    #[test]
    fn the_documented_example_reads_and_round_trips() {
        let s = Schedule::from_toml(EXAMPLE).unwrap();
        assert_eq!(s.faults.len(), 4);
        assert_eq!(s.faults[0].target, Target::Ledger);
        assert_eq!(
            s.faults[0].kind,
            FaultKind::Latency {
                delay: Delay::Uniform {
                    lo_ms: 20,
                    hi_ms: 200
                }
            }
        );
        assert_eq!(s.faults[1].kind, FaultKind::Throttle);
        assert_eq!(s.faults[2].probability, 1.0, "probability defaults to 1");
        assert_eq!(s.faults[2].kind, FaultKind::ClockSkew { ms: 1_500 });
        assert_eq!(s.faults[3].kind, FaultKind::Hang { ms: None });
        let again = Schedule::from_toml(&s.to_toml().unwrap()).unwrap();
        assert_eq!(again, s);
        let dir = std::env::temp_dir().join(format!("chaos-schedule-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("faults.toml");
        std::fs::write(&file, EXAMPLE).unwrap();
        assert_eq!(Schedule::load(&file).unwrap(), s);
        std::fs::remove_dir_all(&dir).unwrap();
        let missing = Schedule::load(&dir.join("nope.toml")).unwrap_err();
        assert!(matches!(missing, ScheduleError::Io { .. }), "{missing}");
    }

    #[test]
    fn the_example_schedule_file_is_valid() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../chaos/schedules/example.toml");
        let s = Schedule::load(&path).unwrap();
        let kinds: BTreeSet<&str> = s.faults.iter().map(|f| f.kind.name()).collect();
        assert_eq!(
            kinds,
            BTreeSet::from([
                "clock_skew",
                "error",
                "hang",
                "latency",
                "reset",
                "throttle"
            ])
        );
    }

    #[test]
    fn unknown_targets_kinds_and_fields_are_parse_errors() {
        for (text, needle) in [
            (EXAMPLE.replace("\"ledger\"", "\"redis\""), "redis"),
            (EXAMPLE.replace("\"throttle\"", "\"explode\""), "explode"),
            (EXAMPLE.replace("every_ms", "evry_ms"), "evry_ms"),
        ] {
            let err = Schedule::from_toml(&text).unwrap_err();
            assert!(matches!(err, ScheduleError::Parse(_)), "{err}");
            assert!(err.to_string().contains(needle), "{err}");
        }
    }

    #[test]
    fn validation_names_what_is_wrong() {
        let ok = spec(Target::Ledger, FaultKind::Error);
        Schedule {
            faults: vec![ok.clone()],
            ..Schedule::default()
        }
        .validate()
        .unwrap();

        let e = invalid(FaultSpec {
            ops: Some(vec!["admit".into(), "admitt".into()]),
            ..ok.clone()
        });
        assert!(e.contains("ledger has no method \"admitt\""), "{e}");
        assert!(
            invalid(FaultSpec {
                ops: Some(vec![]),
                ..ok.clone()
            })
            .contains("empty ops")
        );
        for p in [-0.1, 1.5, f64::NAN, f64::INFINITY] {
            let e = invalid(FaultSpec {
                probability: p,
                ..ok.clone()
            });
            assert!(e.contains("probability"), "{p}: {e}");
        }
        assert!(
            invalid(FaultSpec {
                duration_ms: 0,
                ..ok.clone()
            })
            .contains("0 ms")
        );
        for every in [50, 10] {
            let e = invalid(FaultSpec {
                every_ms: Some(every),
                ..ok.clone()
            });
            assert!(e.contains("overlap"), "{e}");
        }
        let e = invalid(spec(
            Target::Ledger,
            FaultKind::Latency {
                delay: Delay::Uniform { lo_ms: 9, hi_ms: 3 },
            },
        ));
        assert!(e.contains("lo_ms 9 > hi_ms 3"), "{e}");
        let e = invalid(spec(
            Target::Ledger,
            FaultKind::Latency {
                delay: Delay::Exponential {
                    mean_ms: 0.0,
                    max_ms: 10,
                },
            },
        ));
        assert!(e.contains("mean above 0"), "{e}");
        assert!(invalid(spec(Target::Ledger, FaultKind::ClockSkew { ms: 5 })).contains("clock"));
        assert!(invalid(spec(Target::Clock, FaultKind::Error)).contains("clock"));
        let e = invalid(FaultSpec {
            probability: 0.5,
            ..spec(Target::Clock, FaultKind::ClockSkew { ms: 5 })
        });
        assert!(e.contains("probability 1"), "{e}");
        assert!(invalid(spec(Target::Queue, FaultKind::Hang { ms: Some(0) })).contains("hang"));
        assert!(
            invalid(FaultSpec {
                name: " ".into(),
                ..ok.clone()
            })
            .contains("name")
        );
        let twice = Schedule {
            faults: vec![ok.clone(), ok.clone()],
            ..Schedule::default()
        };
        let e = twice.validate().unwrap_err();
        assert_eq!(
            e,
            ScheduleError::Invalid {
                index: 1,
                name: "f".into(),
                why: "another fault has this name".into()
            }
        );
    }

    #[test]
    fn every_target_lists_its_ports_methods_once() {
        for t in Target::ALL {
            let ops: BTreeSet<_> = t.ops().iter().collect();
            assert_eq!(ops.len(), t.ops().len(), "{t}");
            let json = serde_json::to_string(&t).unwrap();
            assert_eq!(json, format!("\"{}\"", t.name()));
        }
    }

    #[test]
    fn windows_open_close_and_repeat() {
        let once = spec(Target::Ledger, FaultKind::Error); // [100, 150)
        assert_eq!(once.window_at(99), None);
        assert_eq!(once.window_at(100), Some((0, 100, 150)));
        assert_eq!(once.window_at(149), Some((0, 100, 150)));
        assert_eq!(once.window_at(150), None);
        assert_eq!(once.window_at(10_000), None);
        let repeating = FaultSpec {
            every_ms: Some(200),
            ..once
        };
        assert_eq!(repeating.window_at(150), None);
        assert_eq!(repeating.window_at(300), Some((1, 300, 350)));
        assert_eq!(repeating.window_at(349), Some((1, 300, 350)));
        assert_eq!(repeating.window_at(350), None);
        assert_eq!(repeating.window_at(2_120), Some((10, 2_100, 2_150)));
    }

    #[test]
    fn active_selects_by_target_op_window_and_instance() {
        let mut admit_only = spec(Target::Ledger, FaultKind::Error);
        admit_only.name = "admit".into();
        admit_only.ops = Some(vec!["admit".into()]);
        let mut all_ops = spec(Target::Ledger, FaultKind::Throttle);
        all_ops.name = "all".into();
        all_ops.start_ms = 120;
        let mut queue = spec(Target::Queue, FaultKind::Error);
        queue.name = "queue".into();
        let mut api2 = spec(Target::Ledger, FaultKind::Reset);
        api2.name = "api2".into();
        api2.instances = Some(vec!["api-2".into()]);
        let s = Schedule {
            faults: vec![admit_only, all_ops, queue, api2],
            ..Schedule::default()
        };
        s.validate().unwrap();
        let names = |v: Vec<&FaultSpec>| v.iter().map(|f| f.name.clone()).collect::<Vec<_>>();
        assert_eq!(
            names(s.active(110, Target::Ledger, "admit")),
            ["admit", "api2"]
        );
        assert_eq!(
            names(s.active(130, Target::Ledger, "admit")),
            ["admit", "all", "api2"]
        );
        assert_eq!(
            names(s.active(130, Target::Ledger, "release")),
            ["all", "api2"]
        );
        assert_eq!(names(s.active(130, Target::Queue, "send")), ["queue"]);
        assert!(s.active(99, Target::Ledger, "admit").is_empty());
        assert!(s.active(170, Target::Ledger, "admit").is_empty());
        assert_eq!(names(s.active(150, Target::Ledger, "admit")), ["all"]);
        assert!(s.active(130, Target::Gateway, "create").is_empty());
        let idx = |v: Vec<(usize, &FaultSpec)>| v.iter().map(|(i, _)| *i).collect::<Vec<_>>();
        assert_eq!(
            idx(s.active_for(130, Target::Ledger, "admit", Some("api-1"))),
            [0, 1]
        );
        assert_eq!(
            idx(s.active_for(130, Target::Ledger, "admit", Some("api-2"))),
            [0, 1, 3]
        );
        assert_eq!(
            idx(s.active_for(130, Target::Ledger, "admit", None)),
            [0, 1]
        );
    }

    #[test]
    fn decisions_are_reproducible_and_follow_the_probability() {
        let mut f = spec(
            Target::Ledger,
            FaultKind::Latency {
                delay: Delay::Uniform {
                    lo_ms: 10,
                    hi_ms: 20,
                },
            },
        );
        f.probability = 0.25;
        let d = Decider::new(7);
        let a: Vec<Decision> = (0..1_000).map(|c| d.decide(&f, 0, c)).collect();
        let b: Vec<Decision> = (0..1_000)
            .map(|c| Decider::new(7).decide(&f, 0, c))
            .collect();
        assert_eq!(a, b, "same seed, same calls: same decisions");
        let other_seed: Vec<Decision> = (0..1_000)
            .map(|c| Decider::new(8).decide(&f, 0, c))
            .collect();
        assert_ne!(a, other_seed);
        let other_fault: Vec<Decision> = (0..1_000).map(|c| d.decide(&f, 1, c)).collect();
        assert_ne!(a, other_fault);
        let fired = a.iter().filter(|x| x.fires).count();
        assert!((180..=320).contains(&fired), "about a quarter: {fired}");
        assert!(a.iter().all(|x| (10..=20).contains(&x.delay_ms)));
        let applied = a.iter().filter(|x| x.applied).count();
        assert!((400..=600).contains(&applied), "a fair coin: {applied}");
        f.probability = 0.0;
        assert!((0..200).all(|c| !d.decide(&f, 0, c).fires));
        f.probability = 1.0;
        assert!((0..200).all(|c| d.decide(&f, 0, c).fires));
    }

    #[test]
    fn delays_follow_their_distribution() {
        let mut rng = Decider::new(1).rng(0, 0);
        assert_eq!(Delay::Fixed { ms: 42 }.sample(&mut rng), 42);
        let exp = Delay::Exponential {
            mean_ms: 100.0,
            max_ms: 450,
        };
        let xs: Vec<u64> = (0..4_000).map(|_| exp.sample(&mut rng)).collect();
        assert!(xs.iter().all(|&x| x <= 450), "capped");
        let mean = xs.iter().sum::<u64>() as f64 / xs.len() as f64;
        // the cap at 4.5 means takes about 1% of the mass off the top
        assert!((85.0..=105.0).contains(&mean), "mean {mean}");
        assert!(xs.iter().filter(|&&x| x == 450).count() > 0, "a tail");
    }

    const REHEARSAL: &str = r#"
description = "the headline: a kill, a paused Redis, a slow gateway link"
[relax]
booking_p99_ms = 2_500

[[fault]]
name = "kill-instance-1"
target = "instance"
instances = ["instance-1"]
start_ms = 10_000
duration_ms = 5_000
kind = { type = "kill" }

[[fault]]
name = "kill-after-enqueue"
target = "instance"
instances = ["instance-2"]
start_ms = 12_000
duration_ms = 3_000
kind = { type = "kill", point = "after_enqueue" }

[[fault]]
name = "redis-paused"
target = "redis_server"
start_ms = 20_000
duration_ms = 2_000
kind = { type = "pause" }

[[fault]]
name = "gateway-slow"
target = "gateway_link"
start_ms = 25_000
duration_ms = 5_000
stream = "downstream"
kind = { type = "latency", delay = { uniform = { lo_ms = 180, hi_ms = 220 } } }

[[fault]]
name = "redis-sliced"
target = "redis_link"
start_ms = 31_000
duration_ms = 1_000
probability = 0.5
kind = { type = "slicer", average_size = 64, size_variation = 32, delay_us = 100 }

[[fault]]
name = "executes-refused"
target = "gateway_rules"
start_ms = 40_000
duration_ms = 2_000
kind = { type = "rule" }
rule = { op = "execute", action = { fail = "insufficient_balance" } }
"#;

    #[test]
    fn process_link_and_rule_faults_read_round_trip_and_say_their_scope() {
        let s = Schedule::from_toml(REHEARSAL).unwrap();
        assert_eq!(s.relax.get("booking_p99_ms"), Some(&2_500.0));
        assert!(s.description.as_deref().unwrap().contains("headline"));
        assert_eq!(
            s.faults[1].kind,
            FaultKind::Kill {
                point: Some(KillPoint::AfterEnqueue)
            }
        );
        assert_eq!(s.faults[3].stream, Some(LinkStream::Downstream));
        assert_eq!(s.faults[5].rule.as_ref().unwrap()["op"], "execute");
        assert_eq!(
            s.scopes(),
            BTreeSet::from([Scope::Process, Scope::Link, Scope::Rules])
        );
        let again = Schedule::from_toml(&s.to_toml().unwrap()).unwrap();
        assert_eq!(again, s, "round trip");
        let e = s
            .check_scopes("the sale in virtual time", &[Scope::Port])
            .unwrap_err();
        assert!(
            e.to_string().contains("kill-instance-1") && e.to_string().contains("process"),
            "{e}"
        );
        s.check_scopes(
            "the process fleet",
            &[Scope::Port, Scope::Process, Scope::Link, Scope::Rules],
        )
        .unwrap();
        let in_process = s
            .check_scopes(
                "the in-process fleet",
                &[Scope::Port, Scope::Link, Scope::Rules],
            )
            .unwrap_err();
        assert!(in_process.to_string().contains("kill-instance-1"));
    }

    #[test]
    fn kinds_that_do_not_fit_their_target_are_refused() {
        let base = |target: Target, kind: FaultKind| FaultSpec {
            rule: (target == Target::GatewayRules).then(|| serde_json::json!({"op": "execute"})),
            ..spec(target, kind)
        };
        let bad = [
            (
                base(Target::Ledger, FaultKind::Kill { point: None }),
                "kill is for instance",
            ),
            (
                base(Target::RedisServer, FaultKind::Kill { point: None }),
                "kill is for instance",
            ),
            (
                base(Target::Instance, FaultKind::Error),
                "does not apply to instance",
            ),
            (
                base(
                    Target::Instance,
                    FaultKind::Latency {
                        delay: Delay::Fixed { ms: 1 },
                    },
                ),
                "does not apply",
            ),
            (
                base(Target::Ledger, FaultKind::Pause),
                "does not apply to ledger",
            ),
            (
                base(Target::RedisLink, FaultKind::Throttle),
                "does not apply to redis_link",
            ),
            (
                base(Target::Queue, FaultKind::Bandwidth { kb_per_s: 10 }),
                "does not apply",
            ),
            (
                base(Target::GatewayLink, FaultKind::Bandwidth { kb_per_s: 0 }),
                "blackhole",
            ),
            (
                base(
                    Target::RedisLink,
                    FaultKind::Slicer {
                        average_size: 0,
                        size_variation: 0,
                        delay_us: 1,
                    },
                ),
                "average_size",
            ),
            (
                base(Target::RedisLink, FaultKind::Hang { ms: Some(5) }),
                "leave ms out",
            ),
            (
                base(
                    Target::RedisLink,
                    FaultKind::Latency {
                        delay: Delay::Exponential {
                            mean_ms: 5.0,
                            max_ms: 9,
                        },
                    },
                ),
                "fixed or uniform",
            ),
            (
                base(Target::Ledger, FaultKind::Rule),
                "rule does not apply to ledger",
            ),
            (
                FaultSpec {
                    rule: Some(serde_json::json!({})),
                    ..base(Target::Ledger, FaultKind::Error)
                },
                "rule goes with gateway_rules",
            ),
            (
                FaultSpec {
                    rule: None,
                    ..base(Target::GatewayRules, FaultKind::Rule)
                },
                "needs a rule",
            ),
            (
                FaultSpec {
                    rule: Some(serde_json::json!(3)),
                    ..base(Target::GatewayRules, FaultKind::Rule)
                },
                "must be a table",
            ),
            (
                FaultSpec {
                    probability: 0.5,
                    ..base(Target::Instance, FaultKind::Pause)
                },
                "probability 1",
            ),
            (
                FaultSpec {
                    probability: 0.5,
                    ..base(Target::GatewayLink, FaultKind::Error)
                },
                "probability 1",
            ),
            (
                FaultSpec {
                    ops: Some(vec!["admit".into()]),
                    ..base(Target::Instance, FaultKind::Pause)
                },
                "leave ops out",
            ),
            (
                FaultSpec {
                    instances: Some(vec!["a".into()]),
                    ..base(Target::RedisServer, FaultKind::Pause)
                },
                "leave instances out",
            ),
            (
                FaultSpec {
                    stream: Some(LinkStream::Both),
                    ..base(Target::Ledger, FaultKind::Error)
                },
                "stream is for links",
            ),
        ];
        for (f, needle) in bad {
            let e = invalid(f.clone());
            assert!(e.contains(needle), "{f:?}: {e}");
        }
        // what fits is taken, a link toxic with a coin included
        for ok in [
            base(
                Target::Instance,
                FaultKind::Kill {
                    point: Some(KillPoint::DuringExecute),
                },
            ),
            base(Target::Instance, FaultKind::Restart),
            base(Target::RedisServer, FaultKind::Restart),
            FaultSpec {
                probability: 0.3,
                ..base(Target::RedisLink, FaultKind::Reset)
            },
            base(Target::GatewayLink, FaultKind::Hang { ms: None }),
            base(Target::GatewayLink, FaultKind::SlowClose { ms: 50 }),
            base(Target::GatewayRules, FaultKind::Rule),
        ] {
            Schedule {
                faults: vec![ok.clone()],
                ..Schedule::default()
            }
            .validate()
            .unwrap_or_else(|e| panic!("{ok:?}: {e}"));
        }
        let relax = Schedule {
            relax: BTreeMap::from([("booking_p99_ms".to_owned(), f64::NAN)]),
            ..Schedule::default()
        };
        assert!(matches!(relax.validate(), Err(ScheduleError::Relax { .. })));
    }

    #[test]
    fn kill_points_sit_after_their_step_of_the_request_path() {
        let sites: Vec<_> = KillPoint::ALL.iter().map(|p| p.site()).collect();
        assert_eq!(
            sites,
            [
                (Target::Ledger, "admit"),
                (Target::Gateway, "create"),
                (Target::Queue, "send"),
                (Target::Gateway, "execute"),
                (Target::Records, "mark_paid")
            ]
        );
        for p in KillPoint::ALL {
            let (target, op) = p.site();
            assert!(target.ops().contains(&op), "{p}");
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(json, format!("\"{}\"", p.name()));
        }
        assert!(!KillPoint::DuringExecute.needs_success());
        assert!(KillPoint::AfterEnqueue.needs_success());
    }
}
