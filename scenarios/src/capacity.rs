//! `scenarios capacity`: the highest arrival rate this machine sustains, on
//! each stack, and what each component spent on it.
//!
//! The rate is stepped up with short rehearsals: each step is a whole
//! rehearsal ([`crate::rehearse`], or a process fleet's
//! [`crate::processes::run`]) of the base profile reshaped to the step's
//! rate ([`step_profile`]: the same sale and payer mix, caps and candidates
//! scaled with the arrivals, a short rush and late stream, a short hold), judged by
//! the same verdicts ([`crate::thresholds`]; the rush-rate floor scaled with
//! the rate). The ladder is climbed until a step breaks a verdict, then the
//! gap between the highest rate held and the lowest broken is bisected
//! ([`next_rate`], pure). Every search is bounded in steps and in time, and
//! every step stops the fleet it started.
//!
//! Each step's CPU seconds per component over its rush (and over the whole
//! step) are read from `/proc` ([`crate::cpu`]): this process (the load
//! generator, with the mock gateway and, for an in-process fleet, the
//! booking instances: they share this process), the booking instances of a
//! process fleet (`booking`), and the private `redis-server`.
//!
//! The result is printed as a table ([`table`]) and written to
//! `capacity.json` in `<out>/capacity-<UTC timestamp>/`, beside each step's
//! run folder.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use booking_server::config::StackKind;
use chrono::{DateTime, Utc};
use reports::Report;
use serde::{Deserialize, Serialize};

use crate::cpu::{self, Sample, Usage};
use crate::processes::{self, ProcessFleet};
use crate::profile::{FleetKind, Profile, ProfileError};
use crate::rehearse::{Outcome, Progress, RehearseError, RunPlace};

/// `capacity.json`'s schema version.
pub const SCHEMA: u32 = 1;
/// A step may run this long past the search's time budget before it is
/// abandoned (its fleet is then dropped, and with it every process).
pub const STEP_GRACE: Duration = Duration::from_secs(180);
/// Rates are rounded to a multiple of this, per second.
pub const RATE_GRAIN: f64 = 10.0;

/// Why a capacity search could not run.
#[derive(Debug, thiserror::Error)]
pub enum CapacityError {
    /// The plan or the base profile cannot be stepped.
    #[error("capacity: {0}")]
    Invalid(String),
    /// A step's profile is out of range.
    #[error(transparent)]
    Profile(#[from] ProfileError),
    /// The result could not be written.
    #[error("writing {0}: {1}")]
    Write(PathBuf, String),
}

/// How the rate is stepped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Rates climbed in order (arrivals/s) until a step breaks a verdict.
    pub ladder: Vec<f64>,
    /// Steps bisecting the gap between the highest rate held and the lowest
    /// broken, after the climb (or halving below a first step that broke).
    pub bisections: u32,
    /// Bisection stops once the gap is at most this fraction of the rate
    /// held.
    pub resolution: f64,
    /// Halving below a broken first step stops under this rate.
    pub min_rate: f64,
    /// Steps per stack, at most.
    pub max_steps: usize,
    /// Time per stack, at most, s: no step starts once the last step's
    /// length would take the search past it.
    pub budget_s: f64,
    /// Each step's rush, s.
    pub rush_secs: f64,
    /// Each step's late stream, s.
    pub late_secs: f64,
    /// Each step's time scale (every sale timer; the hold with it), or the
    /// profile's.
    pub time_scale: Option<f64>,
}

/// `start`, `start × factor`, … up to `max_rate` (included), rounded.
pub fn doubling(start: f64, factor: f64, max_rate: f64) -> Vec<f64> {
    let mut out = Vec::new();
    if !(start > 0.0 && factor > 1.0 && max_rate.is_finite()) {
        return out;
    }
    let mut r = start;
    while r <= max_rate * (1.0 + 1e-9) {
        out.push(round_rate(r));
        r *= factor;
    }
    out
}

/// A rate rounded to [`RATE_GRAIN`] (at least 1/s).
pub fn round_rate(r: f64) -> f64 {
    if r < RATE_GRAIN {
        return r.round().max(1.0);
    }
    (r / RATE_GRAIN).round() * RATE_GRAIN
}

impl Plan {
    /// Refuses a plan that cannot run.
    pub fn validate(&self) -> Result<(), CapacityError> {
        let bad = |m: &str| Err(CapacityError::Invalid(m.to_owned()));
        if self.ladder.is_empty() {
            return bad("no rates to step (give --rates, or --start below --max-rate)");
        }
        if self.ladder.iter().any(|r| !(r.is_finite() && *r > 0.0)) {
            return bad("every rate must be > 0");
        }
        if self.ladder.windows(2).any(|w| w[1] <= w[0]) {
            return bad("the rates must rise");
        }
        if self.max_steps == 0 {
            return bad("max_steps must be > 0");
        }
        if !(self.rush_secs > 0.0 && self.rush_secs.is_finite()) {
            return bad("the step's rush must last > 0 s");
        }
        if !(self.late_secs >= 0.0 && self.late_secs.is_finite()) {
            return bad("the step's late stream must last ≥ 0 s");
        }
        if !(self.budget_s.is_finite() && self.budget_s > 0.0) {
            return bad("the time budget must be > 0");
        }
        if !(self.resolution.is_finite() && self.resolution >= 0.0) {
            return bad("the resolution must be ≥ 0");
        }
        Ok(())
    }
}

/// Why a search stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// A step broke a verdict and the gap below it was bisected as far as
    /// the plan allows.
    Ceiling,
    /// The ladder's top rate held: the ceiling is above it.
    NoBreak,
    /// Even the lowest rate tried broke.
    NothingHeld,
    /// The step budget ran out.
    Steps,
    /// The time budget ran out.
    Time,
    /// A step could not run.
    Error,
}

impl Stop {
    /// For a human.
    pub fn describe(self) -> &'static str {
        match self {
            Stop::Ceiling => "a verdict broke above the highest rate held",
            Stop::NoBreak => "every rate of the ladder held: the ceiling is higher",
            Stop::NothingHeld => "even the lowest rate tried broke",
            Stop::Steps => "the step budget ran out",
            Stop::Time => "the time budget ran out",
            Stop::Error => "a step could not run",
        }
    }
}

/// What to do next.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Next {
    /// Run a step at this rate.
    Run(f64),
    /// Stop.
    Stop(Stop),
}

/// The next step of the search (pure), from the steps so far as `(rate,
/// held)` in the order run: climb the ladder while every step holds; after
/// the first break, bisect between the highest rate held below the lowest
/// broken and that broken rate ([`Plan::bisections`] times at most, until
/// the gap is within [`Plan::resolution`]), or halve when nothing held yet
/// (down to [`Plan::min_rate`]).
pub fn next_rate(plan: &Plan, tried: &[(f64, bool)]) -> Next {
    if tried.len() >= plan.max_steps {
        return Next::Stop(Stop::Steps);
    }
    let Some(first_break) = tried.iter().position(|(_, held)| !held) else {
        let top = tried.iter().map(|(r, _)| *r).fold(0.0, f64::max);
        return match plan.ladder.iter().find(|r| **r > top) {
            Some(r) => Next::Run(*r),
            None => Next::Stop(Stop::NoBreak),
        };
    };
    let bisected = (tried.len() - first_break - 1) as u32;
    let bad = tried
        .iter()
        .filter(|(_, held)| !held)
        .map(|(r, _)| *r)
        .fold(f64::INFINITY, f64::min);
    let good = tried
        .iter()
        .filter(|(r, held)| *held && *r < bad)
        .map(|(r, _)| *r)
        .fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.max(r))));
    match good {
        Some(good) => {
            if bisected >= plan.bisections || (bad - good) <= plan.resolution * good {
                return Next::Stop(Stop::Ceiling);
            }
            let mid = round_rate((good + bad) / 2.0);
            if mid <= good || mid >= bad {
                Next::Stop(Stop::Ceiling)
            } else {
                Next::Run(mid)
            }
        }
        None => {
            let half = round_rate(bad / 2.0);
            if bisected >= plan.bisections || half < plan.min_rate || half >= bad {
                Next::Stop(Stop::NothingHeld)
            } else {
                Next::Run(half)
            }
        }
    }
}

/// `base` reshaped to one step at `rate` arrivals/s on `stack` (pure): the
/// rush lasts [`Plan::rush_secs`] and the late stream [`Plan::late_secs`]
/// at the base's late rate scaled with the rate; caps are scaled with the
/// rush's arrivals (so the step sells out as the base does) and there is a
/// candidate per arrival at least; the rush-rate floor and the goose users
/// scale with the rate (users never below the base's); the time scale is the
/// plan's, the pay-late wait scaled with it; run folders go to `out`.
pub fn step_profile(
    base: &Profile,
    plan: &Plan,
    rate: f64,
    stack: StackKind,
    out: &Path,
) -> Result<Profile, ProfileError> {
    let invalid = |m: String| ProfileError::Invalid(m);
    if !(base.load.rate > 0.0 && base.load.rush_secs > 0.0) {
        return Err(invalid(
            "the base profile needs a rush (load.rate and load.rush_secs > 0)".into(),
        ));
    }
    let mut p = base.clone();
    let ratio = rate / base.load.rate;
    p.name = format!("{}@{rate}", base.name);
    p.stack.kind = stack;
    p.load.rate = rate;
    p.load.rush_secs = plan.rush_secs;
    p.load.late_rate = base.load.late_rate * ratio;
    p.load.late_secs = if p.load.late_rate > 0.0 {
        plan.late_secs
    } else {
        0.0
    };
    p.load.users = ((base.load.users as f64 * ratio).ceil() as usize)
        .clamp(base.load.users, crate::load::USERS_MAX.max(base.load.users));
    let arrivals_ratio = (rate * plan.rush_secs) / (base.load.rate * base.load.rush_secs);
    for l in &mut p.levels {
        l.cap = ((f64::from(l.cap) * arrivals_ratio).round() as u32).max(1);
    }
    let arrivals = p.load.rush_arrivals() + p.load.late_arrivals();
    let total_base = (base.load.rush_arrivals() + base.load.late_arrivals()).max(1);
    let scaled = (f64::from(base.candidates) * arrivals as f64 / total_base as f64).ceil();
    p.candidates = (scaled as u32)
        .max(u32::try_from(arrivals).unwrap_or(u32::MAX))
        .max(1);
    p.thresholds.rush_rate_min = base.thresholds.rush_rate_min * ratio;
    if let Some(scale) = plan.time_scale {
        p.load.pay_late_after = base.load.pay_late_after.mul_f64(scale / base.time_scale);
        p.time_scale = scale;
    }
    p.out = out.to_owned();
    p.validate()?;
    Ok(p)
}

/// A verdict that broke, as the step's report gives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Broken {
    /// The verdict's name.
    pub name: String,
    /// The figure measured.
    pub figure: f64,
    /// Its bound.
    pub threshold: f64,
    /// `at_most` or `at_least`.
    pub bound: String,
    /// The figure's unit.
    pub unit: String,
}

impl Broken {
    /// `booking_p99_ms 78.1 ms > 50`.
    pub fn describe(&self) -> String {
        let op = if self.bound == booking_audit::AT_LEAST {
            "<"
        } else {
            ">"
        };
        format!(
            "{} {:.1} {} {op} {:.1}",
            self.name, self.figure, self.unit, self.threshold
        )
    }
}

/// CPU seconds of one component over a window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComponentCpu {
    /// What it is.
    pub component: String,
    /// Processes it ran as.
    pub processes: usize,
    /// CPU seconds, user plus system.
    pub cpu_s: f64,
}

/// One step of a search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// The rush's target rate, arrivals/s.
    pub rate: f64,
    /// Whether every verdict held.
    pub held: bool,
    /// The rush's achieved rate, bookings started/s.
    pub achieved_rate: f64,
    /// Booking latency from the intended start, ms.
    pub booking_p50_ms: f64,
    /// p99 of the same.
    pub booking_p99_ms: f64,
    /// p99.9 of the same.
    pub booking_p999_ms: f64,
    /// The oldest queued message seen, ms (`None`: not observable).
    pub queue_age_max_ms: Option<u64>,
    /// Requests the load made.
    pub requests: u64,
    /// Of which answered 5xx or not at all.
    pub server_errors: u64,
    /// The verdicts that broke.
    pub broken: Vec<Broken>,
    /// The step's length, s (fleet start to fleet stop).
    pub wall_s: f64,
    /// The rush's length, s.
    pub rush_s: f64,
    /// CPU seconds per component over the rush.
    pub rush_cpu: Vec<ComponentCpu>,
    /// CPU seconds per component over the whole step (setup, load, settle,
    /// audit).
    pub step_cpu: Vec<ComponentCpu>,
    /// A process fleet's load generator CPU over the system's (booking
    /// instances and redis-server) during the rush; the generator's figure
    /// includes the mock gateway (one process).
    pub generator_to_system: Option<f64>,
    /// The step's run folder.
    pub run_dir: String,
}

/// One stack's search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StackCapacity {
    /// `embedded` or `redis`.
    pub stack: String,
    /// `in_process` or `processes`.
    pub fleet: String,
    /// Booking instances.
    pub instances: usize,
    /// Which components share a process.
    pub note: String,
    /// The steps, in the order run.
    pub steps: Vec<Step>,
    /// The highest rate every verdict held at (below the lowest that broke).
    pub highest_held: Option<f64>,
    /// Its booking p99, ms.
    pub highest_held_p99_ms: Option<f64>,
    /// The lowest rate that broke above it, and what broke.
    pub broke_at: Option<f64>,
    /// What broke there.
    pub broke: Vec<Broken>,
    /// Why the search stopped.
    pub stop: Stop,
    /// The error that stopped it, if one did.
    pub error: Option<String>,
}

/// A capacity run: every stack's search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityReport {
    /// [`SCHEMA`].
    pub schema: u32,
    /// When it started (RFC 3339).
    pub started_at: String,
    /// When it ended.
    pub finished_at: String,
    /// The base profile's name.
    pub profile_name: String,
    /// How the rate was stepped.
    pub plan: Plan,
    /// The host: cores, build, the load average before and after
    /// (`/proc/loadavg`: the machine is shared).
    pub host: Host,
    /// Each stack's search.
    pub stacks: Vec<StackCapacity>,
}

/// Where the figures came from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Host {
    /// Cores available.
    pub cores: usize,
    /// `debug` or `release`.
    pub build: String,
    /// `/proc/loadavg` when the run started.
    pub loadavg_before: String,
    /// `/proc/loadavg` when it ended.
    pub loadavg_after: String,
}

/// `/proc/loadavg`'s first three fields.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn host() -> Host {
    Host {
        cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
        build: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
        .to_owned(),
        loadavg_before: loadavg(),
        loadavg_after: String::new(),
    }
}

fn stack_name(kind: StackKind) -> &'static str {
    match kind {
        StackKind::Embedded => "embedded",
        StackKind::Redis => "redis",
        StackKind::Aws => "aws",
    }
}

/// The components of a fleet, for the table and the note.
fn note(fleet: FleetKind, instances: usize, stack: StackKind) -> String {
    let redis = if stack == StackKind::Embedded {
        ""
    } else {
        "; redis-server is a process of its own"
    };
    match fleet {
        FleetKind::InProcess => format!(
            "in-process fleet: the load generator, the mock gateway and the {instances} booking \
             instance(s) share this process (one CPU figure){redis}"
        ),
        FleetKind::Processes => format!(
            "process fleet: {instances} booking process(es); the load generator and the mock \
             gateway share this process{redis}"
        ),
    }
}

/// CPU per component of a fleet over a window.
fn components(usage: &Usage, fleet: FleetKind) -> Vec<ComponentCpu> {
    let this = match fleet {
        FleetKind::InProcess => "this process (generator + mock gateway + booking instances)",
        FleetKind::Processes => "this process (generator + mock gateway)",
    };
    let mut out = vec![ComponentCpu {
        component: this.to_owned(),
        processes: 1,
        cpu_s: usage.this_process_s,
    }];
    let (booking, n) = usage.children_named(processes::BOOKING_BIN);
    if n > 0 {
        out.push(ComponentCpu {
            component: "booking instances".to_owned(),
            processes: n,
            cpu_s: booking,
        });
    }
    let (redis, n) = usage.children_named("redis-server");
    if n > 0 {
        out.push(ComponentCpu {
            component: "redis-server".to_owned(),
            processes: n,
            cpu_s: redis,
        });
    }
    let others: Vec<&cpu::ProcessCpu> = usage
        .children
        .iter()
        .filter(|c| c.comm != processes::BOOKING_BIN && c.comm != "redis-server")
        .collect();
    if !others.is_empty() {
        out.push(ComponentCpu {
            component: "other child processes".to_owned(),
            processes: others.len(),
            cpu_s: others.iter().map(|c| c.cpu_s).sum(),
        });
    }
    out
}

fn parse_time(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// The rush's window in wall-clock time: the report's phases count from its
/// start.
pub fn rush_window(report: &Report) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
    let start = parse_time(&report.started_at)?;
    let rush = report.phases.iter().find(|p| p.name == "rush")?;
    let at = |ms: u64| Some(start + chrono::Duration::milliseconds(i64::try_from(ms).ok()?));
    Some((at(rush.start_ms)?, at(rush.end_ms)?))
}

/// The step's figures from its outcome and the CPU samples.
fn step_of(
    rate: f64,
    outcome: &Outcome,
    samples: &[Sample],
    window: (DateTime<Utc>, DateTime<Utc>),
    fleet: FleetKind,
) -> Step {
    let r = &outcome.report;
    let booking = r
        .load
        .transactions
        .iter()
        .find(|t| t.name == crate::thresholds::BOOKING_TRANSACTION);
    let (rush_cpu, rush_s, generator_to_system) = match rush_window(r) {
        Some((from, to)) => {
            let u = cpu::window(samples, from, to);
            let system: f64 =
                u.children_named(processes::BOOKING_BIN).0 + u.children_named("redis-server").0;
            let ratio =
                (fleet == FleetKind::Processes && system > 0.0).then(|| u.this_process_s / system);
            (components(&u, fleet), u.wall_s, ratio)
        }
        None => (Vec::new(), 0.0, None),
    };
    let step_usage = cpu::window(samples, window.0, window.1);
    Step {
        rate,
        held: r.passed,
        achieved_rate: r.load.achieved_rate,
        booking_p50_ms: booking.map_or(0.0, |b| b.p50_ms),
        booking_p99_ms: booking.map_or(0.0, |b| b.p99_ms),
        booking_p999_ms: booking.map_or(0.0, |b| b.p999_ms),
        queue_age_max_ms: outcome.measured.queue_age_max_ms,
        requests: r.load.requests,
        server_errors: r.load.server_errors,
        broken: r
            .failed()
            .map(|v| Broken {
                name: v.name.clone(),
                figure: v.figure,
                threshold: v.threshold,
                bound: v.bound.clone(),
                unit: v.unit.clone(),
            })
            .collect(),
        wall_s: step_usage.wall_s,
        rush_s,
        rush_cpu,
        step_cpu: components(&step_usage, fleet),
        generator_to_system,
        run_dir: outcome.dir.display().to_string(),
    }
}

/// Runs one step's rehearsal: in process, or on a process fleet whose run
/// clock starts once its processes answer (the report's phases, and so the
/// CPU windows, count from there).
async fn rehearse_step(profile: &Profile, progress: Progress) -> Result<Outcome, RehearseError> {
    match profile.fleet {
        FleetKind::InProcess => crate::rehearse(profile, progress).await,
        FleetKind::Processes => {
            let place = RunPlace::new(profile)?;
            let (procs, fleet) = ProcessFleet::start(profile, &place.dir).await?;
            let place = RunPlace {
                started_at: Utc::now(),
                ..place
            };
            processes::run(procs, fleet, profile, progress, place).await
        }
    }
}

/// A loopback Redis URL nothing answers at, so the fleet starts a private
/// `redis-server` of its own (whose CPU is then this process's child's).
fn private_redis_url() -> Result<String, CapacityError> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| CapacityError::Invalid(format!("finding a free port: {e}")))?
        .port();
    Ok(format!("redis://127.0.0.1:{port}"))
}

/// The highest rate held below the lowest broken, its p99, and the lowest
/// broken step (pure).
pub fn verdict(steps: &[Step]) -> (Option<&Step>, Option<&Step>) {
    let broke = steps
        .iter()
        .filter(|s| !s.held)
        .min_by(|a, b| a.rate.total_cmp(&b.rate));
    let held = steps
        .iter()
        .filter(|s| s.held && broke.is_none_or(|b| s.rate < b.rate))
        .max_by(|a, b| a.rate.total_cmp(&b.rate));
    (held, broke)
}

/// One stack's search.
async fn search(
    base: &Profile,
    plan: &Plan,
    stack: StackKind,
    dir: &Path,
    sampler: &cpu::Sampler,
    progress: Progress,
) -> StackCapacity {
    let started = Instant::now();
    let name = stack_name(stack);
    let mut steps: Vec<Step> = Vec::new();
    let mut tried: Vec<(f64, bool)> = Vec::new();
    let mut error = None;
    let budget = Duration::from_secs_f64(plan.budget_s);
    let say = |s: String| {
        if progress == Progress::Lines {
            eprintln!("capacity [{name}] {s}");
        }
    };
    let stop = loop {
        let rate = match next_rate(plan, &tried) {
            Next::Run(r) => r,
            Next::Stop(s) => break s,
        };
        let last = steps
            .last()
            .map_or(Duration::ZERO, |s| Duration::from_secs_f64(s.wall_s));
        if started.elapsed() + last > budget {
            break Stop::Time;
        }
        let mut profile = match step_profile(base, plan, rate, stack, &dir.join(name)) {
            Ok(p) => p,
            Err(e) => {
                error = Some(e.to_string());
                break Stop::Error;
            }
        };
        if stack != StackKind::Embedded {
            match private_redis_url() {
                Ok(url) => profile.stack.redis_url = url,
                Err(e) => {
                    error = Some(e.to_string());
                    break Stop::Error;
                }
            }
        }
        say(format!(
            "step {}: {rate}/s for {} s ({} seats, {} candidates)",
            steps.len() + 1,
            plan.rush_secs,
            profile.seats(),
            profile.candidates
        ));
        let from = Utc::now();
        let left = budget.saturating_sub(started.elapsed()) + STEP_GRACE;
        let step_progress = Progress::Quiet;
        let outcome = match tokio::time::timeout(left, rehearse_step(&profile, step_progress)).await
        {
            Ok(Ok(o)) => o,
            Ok(Err(e)) => {
                error = Some(format!("step at {rate}/s: {e}"));
                break Stop::Error;
            }
            Err(_) => {
                error = Some(format!("step at {rate}/s abandoned past the time budget"));
                break Stop::Time;
            }
        };
        // a last sample after the fleet stopped
        tokio::time::sleep(cpu::SAMPLE_EVERY * 2).await;
        let step = step_of(
            rate,
            &outcome,
            &sampler.samples(),
            (from, Utc::now()),
            profile.fleet,
        );
        say(step_line(&step));
        tried.push((rate, step.held));
        steps.push(step);
    };
    let (held, broke) = verdict(&steps);
    let result = StackCapacity {
        stack: name.to_owned(),
        fleet: match base.fleet {
            FleetKind::InProcess => "in_process",
            FleetKind::Processes => "processes",
        }
        .to_owned(),
        instances: base.instances,
        note: note(base.fleet, base.instances, stack),
        highest_held: held.map(|s| s.rate),
        highest_held_p99_ms: held.map(|s| s.booking_p99_ms),
        broke_at: broke.map(|s| s.rate),
        broke: broke.map(|s| s.broken.clone()).unwrap_or_default(),
        steps: steps.clone(),
        stop,
        error,
    };
    say(summary_line(&result));
    result
}

/// Steps every stack in turn, writes `capacity.json` into a new folder
/// under the base profile's `out`, and returns the result (also printed as
/// [`table`] by the caller).
pub async fn run(
    base: &Profile,
    plan: &Plan,
    stacks: &[StackKind],
    progress: Progress,
) -> Result<(CapacityReport, PathBuf), CapacityError> {
    plan.validate()?;
    if stacks.is_empty() {
        return Err(CapacityError::Invalid("no stack to step".into()));
    }
    if base.target.is_some() {
        return Err(CapacityError::Invalid(
            "capacity steps a local fleet: drop target".into(),
        ));
    }
    if base.fleet == FleetKind::Processes
        && let Some(s) = stacks.iter().find(|s| **s != StackKind::Redis)
    {
        return Err(CapacityError::Invalid(format!(
            "a process fleet runs on Redis only, not --stack {}",
            stack_name(*s)
        )));
    }
    let started_at = Utc::now();
    let dir = base
        .out_dir()
        .join(format!("capacity-{}", started_at.format("%Y%m%dT%H%M%SZ")));
    std::fs::create_dir_all(&dir).map_err(|e| CapacityError::Write(dir.clone(), e.to_string()))?;
    let mut host = host();
    let sampler = cpu::Sampler::start();
    let mut out = Vec::new();
    for stack in stacks {
        out.push(search(base, plan, *stack, &dir, &sampler, progress).await);
    }
    drop(sampler);
    host.loadavg_after = loadavg();
    let report = CapacityReport {
        schema: SCHEMA,
        started_at: started_at.to_rfc3339(),
        finished_at: Utc::now().to_rfc3339(),
        profile_name: base.name.clone(),
        plan: plan.clone(),
        host,
        stacks: out,
    };
    let path = dir.join("capacity.json");
    let text = serde_json::to_string_pretty(&report)
        .map_err(|e| CapacityError::Write(path.clone(), e.to_string()))?;
    std::fs::write(&path, text).map_err(|e| CapacityError::Write(path.clone(), e.to_string()))?;
    Ok((report, path))
}

fn cpu_cell(cpu: &[ComponentCpu]) -> String {
    cpu.iter()
        .map(|c| {
            let name = match c.component.as_str() {
                s if s.starts_with("this process") => "this",
                "booking instances" => "booking",
                "redis-server" => "redis",
                _ => "other",
            };
            format!("{name} {:.2}", c.cpu_s)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn step_line(s: &Step) -> String {
    format!(
        "{:>7.0}/s: {} achieved {:.0}/s, booking p99 {:.1} ms; rush CPU s {}{}",
        s.rate,
        if s.held { "held," } else { "BROKE," },
        s.achieved_rate,
        s.booking_p99_ms,
        cpu_cell(&s.rush_cpu),
        if s.broken.is_empty() {
            String::new()
        } else {
            format!(
                "; broke: {}",
                s.broken
                    .iter()
                    .map(Broken::describe)
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        }
    )
}

/// `embedded: highest sustained 4000/s (booking p99 12.3 ms); at 6000/s
/// broke booking_p99_ms …`.
pub fn summary_line(s: &StackCapacity) -> String {
    let held = match (s.highest_held, s.highest_held_p99_ms) {
        (Some(r), Some(p)) => format!("highest sustained {r:.0}/s (booking p99 {p:.1} ms)"),
        _ => "no rate held".to_owned(),
    };
    let broke = match s.broke_at {
        Some(r) => format!(
            "; at {r:.0}/s broke {}",
            s.broke
                .iter()
                .map(Broken::describe)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => String::new(),
    };
    let error = s
        .error
        .as_deref()
        .map(|e| format!(" ({e})"))
        .unwrap_or_default();
    format!(
        "{}: {held}{broke}; stopped: {}{error}",
        s.stack,
        s.stop.describe()
    )
}

/// The result as a table: a row per step (rate, verdict, achieved rate,
/// p50/p99, queue age, CPU seconds per component over the rush and cores
/// used), then a line per stack.
pub fn table(r: &CapacityReport) -> String {
    use std::fmt::Write;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "capacity ({} build, {} cores, load average {} → {}; steps of {} s rush + {} s late)",
        r.host.build,
        r.host.cores,
        r.host.loadavg_before,
        r.host.loadavg_after,
        r.plan.rush_secs,
        r.plan.late_secs
    );
    for s in &r.stacks {
        let _ = writeln!(t, "\n{} — {}", s.stack, s.note);
        let _ = writeln!(
            t,
            "| rate/s | verdict | achieved/s | p50 ms | p99 ms | queue ms | CPU s over the rush (cores) | gen/system |"
        );
        let _ = writeln!(t, "|---:|---|---:|---:|---:|---:|---|---:|");
        let mut sorted: Vec<&Step> = s.steps.iter().collect();
        sorted.sort_by(|a, b| a.rate.total_cmp(&b.rate));
        for st in sorted {
            let verdict = if st.held {
                "held".to_owned()
            } else {
                st.broken
                    .iter()
                    .map(|b| b.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let cores: f64 = st.rush_cpu.iter().map(|c| c.cpu_s).sum::<f64>() / st.rush_s.max(1e-9);
            let _ = writeln!(
                t,
                "| {:.0} | {verdict} | {:.0} | {:.1} | {:.1} | {} | {} ({cores:.2}) | {} |",
                st.rate,
                st.achieved_rate,
                st.booking_p50_ms,
                st.booking_p99_ms,
                st.queue_age_max_ms
                    .map_or_else(|| "-".to_owned(), |q| q.to_string()),
                cpu_cell(&st.rush_cpu),
                st.generator_to_system
                    .map_or_else(|| "-".to_owned(), |g| format!("{g:.2}")),
            );
        }
        let _ = writeln!(t, "{}", summary_line(s));
    }
    t
}

/// `scenarios capacity`'s flags.
#[derive(Debug, clap::Args)]
pub struct CapacityArgs {
    /// The base profile (`default`, `ci`, or a TOML file), reshaped per step.
    #[arg(long, short)]
    pub profile: Option<String>,
    /// Override any base profile value by its dotted path (repeat).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Seed of everything random.
    #[arg(long)]
    pub seed: Option<u64>,
    /// A stack to step (repeat); default: embedded, then redis (a private
    /// redis-server is started for each step).
    #[arg(long = "stack", value_enum)]
    pub stacks: Vec<StackKind>,
    /// `in-process` (the default) or `processes` (booking OS processes on
    /// Redis: their CPU apart from the generator's).
    #[arg(long, value_enum)]
    pub fleet: Option<FleetKind>,
    /// Booking instances.
    #[arg(long)]
    pub instances: Option<usize>,
    /// With `--fleet processes`: the `booking` binary.
    #[arg(long, value_name = "PATH")]
    pub booking_bin: Option<PathBuf>,
    /// The rates to climb, e.g. `500,1000,2000,3000,4000` (default: from
    /// --start, times --factor, up to --max-rate).
    #[arg(long, value_delimiter = ',')]
    pub rates: Vec<f64>,
    /// The first rate, arrivals/s.
    #[arg(long, default_value_t = 500.0)]
    pub start: f64,
    /// Each rate of the climb is the last times this.
    #[arg(long, default_value_t = 2.0)]
    pub factor: f64,
    /// The highest rate climbed to.
    #[arg(long, default_value_t = 16_000.0)]
    pub max_rate: f64,
    /// Bisection steps after the climb broke.
    #[arg(long, default_value_t = 2)]
    pub bisect: u32,
    /// Bisection stops once the gap is within this fraction of the rate held.
    #[arg(long, default_value_t = 0.1)]
    pub resolution: f64,
    /// Each step's rush, s.
    #[arg(long, default_value_t = 8.0)]
    pub step_secs: f64,
    /// Each step's late stream, s.
    #[arg(long, default_value_t = 2.0)]
    pub late_secs: f64,
    /// Each step's time scale (0.01: the 10-minute hold becomes 6 s).
    #[arg(long, default_value_t = 0.01)]
    pub time_scale: f64,
    /// Steps per stack, at most.
    #[arg(long, default_value_t = 8)]
    pub max_steps: usize,
    /// Minutes per stack, at most.
    #[arg(long, default_value_t = 12.0)]
    pub max_minutes: f64,
    /// Where the capacity folder goes (default: the profile's `out`,
    /// reports/runs).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// A line per step on stderr.
    #[arg(long, short)]
    pub verbose: bool,
}

impl CapacityArgs {
    /// The base profile, the plan and the stacks the flags describe.
    pub fn resolve(&self) -> Result<(Profile, Plan, Vec<StackKind>), CapacityError> {
        let mut sets = self.sets.clone();
        let quote = |s: &str| format!("{s:?}");
        if let Some(seed) = self.seed {
            sets.push(format!("seed={seed}"));
        }
        if let Some(fleet) = self.fleet {
            let kind = match fleet {
                FleetKind::InProcess => "in_process",
                FleetKind::Processes => "processes",
            };
            sets.push(format!("fleet={}", quote(kind)));
        }
        let stacks = if !self.stacks.is_empty() {
            self.stacks.clone()
        } else if self.fleet == Some(FleetKind::Processes) {
            vec![StackKind::Redis]
        } else {
            vec![StackKind::Embedded, StackKind::Redis]
        };
        if self.fleet == Some(FleetKind::Processes) {
            // the profile is checked as a process fleet on Redis
            sets.push(format!("stack.kind={}", quote("redis")));
        }
        if let Some(bin) = &self.booking_bin {
            sets.push(format!("booking_bin={}", quote(&bin.display().to_string())));
        }
        if let Some(n) = self.instances {
            sets.push(format!("instances={n}"));
        }
        if let Some(out) = &self.out {
            sets.push(format!("out={}", quote(&out.display().to_string())));
        }
        let base = Profile::load(self.profile.as_deref(), &sets)?;
        let ladder = if self.rates.is_empty() {
            doubling(self.start, self.factor, self.max_rate)
        } else {
            self.rates.iter().map(|r| round_rate(*r)).collect()
        };
        let plan = Plan {
            min_rate: ladder.first().map_or(1.0, |r| (r / 8.0).max(1.0)),
            ladder,
            bisections: self.bisect,
            resolution: self.resolution,
            max_steps: self.max_steps,
            budget_s: self.max_minutes * 60.0,
            rush_secs: self.step_secs,
            late_secs: self.late_secs,
            time_scale: Some(self.time_scale),
        };
        plan.validate()?;
        Ok((base, plan, stacks))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn plan(ladder: &[f64]) -> Plan {
        Plan {
            ladder: ladder.to_vec(),
            bisections: 2,
            resolution: 0.1,
            min_rate: 100.0,
            max_steps: 8,
            budget_s: 600.0,
            rush_secs: 8.0,
            late_secs: 2.0,
            time_scale: Some(0.01),
        }
    }

    #[test]
    fn the_ladder_doubles_up_to_the_top() {
        assert_eq!(
            doubling(500.0, 2.0, 4000.0),
            vec![500.0, 1000.0, 2000.0, 4000.0]
        );
        assert_eq!(doubling(300.0, 3.0, 2000.0), vec![300.0, 900.0]);
        assert!(
            doubling(500.0, 1.0, 4000.0).is_empty(),
            "a factor of 1 never climbs"
        );
        assert_eq!(round_rate(1234.0), 1230.0);
        assert_eq!(round_rate(3.4), 3.0);
    }

    #[test]
    fn the_search_climbs_then_bisects_then_stops() {
        let p = plan(&[500.0, 1000.0, 2000.0, 4000.0]);
        assert_eq!(next_rate(&p, &[]), Next::Run(500.0));
        assert_eq!(next_rate(&p, &[(500.0, true)]), Next::Run(1000.0));
        let climbed = [(500.0, true), (1000.0, true), (2000.0, false)];
        assert_eq!(next_rate(&p, &climbed), Next::Run(1500.0));
        let mut more = climbed.to_vec();
        more.push((1500.0, true));
        assert_eq!(next_rate(&p, &more), Next::Run(1750.0));
        more.push((1750.0, false));
        assert_eq!(
            next_rate(&p, &more),
            Next::Stop(Stop::Ceiling),
            "two bisections used"
        );
        let top = [
            (500.0, true),
            (1000.0, true),
            (2000.0, true),
            (4000.0, true),
        ];
        assert_eq!(next_rate(&p, &top), Next::Stop(Stop::NoBreak));
    }

    #[test]
    fn the_search_stops_within_its_resolution_and_its_step_budget() {
        let p = plan(&[1000.0, 1050.0]);
        assert_eq!(
            next_rate(&p, &[(1000.0, true), (1050.0, false)]),
            Next::Stop(Stop::Ceiling),
            "a 5 % gap is within 10 %"
        );
        let mut small = plan(&[100.0, 200.0, 400.0]);
        small.max_steps = 2;
        assert_eq!(
            next_rate(&small, &[(100.0, true), (200.0, true)]),
            Next::Stop(Stop::Steps)
        );
    }

    #[test]
    fn a_first_step_that_breaks_is_halved_down_to_the_floor() {
        let p = plan(&[800.0, 1600.0]);
        assert_eq!(next_rate(&p, &[(800.0, false)]), Next::Run(400.0));
        assert_eq!(
            next_rate(&p, &[(800.0, false), (400.0, false)]),
            Next::Run(200.0)
        );
        assert_eq!(
            next_rate(&p, &[(800.0, false), (400.0, false), (200.0, false)]),
            Next::Stop(Stop::NothingHeld),
            "bisections used up"
        );
        let mut deep = p.clone();
        deep.bisections = 10;
        let broken = [(800.0, false), (400.0, false), (200.0, false)];
        assert_eq!(next_rate(&deep, &broken), Next::Run(100.0), "at the floor");
        let mut below = broken.to_vec();
        below.push((100.0, false));
        assert_eq!(
            next_rate(&deep, &below),
            Next::Stop(Stop::NothingHeld),
            "50/s is under the floor"
        );
    }

    fn step(rate: f64, held: bool, p99: f64) -> Step {
        Step {
            rate,
            held,
            achieved_rate: rate,
            booking_p50_ms: 1.0,
            booking_p99_ms: p99,
            booking_p999_ms: p99,
            queue_age_max_ms: None,
            requests: 0,
            server_errors: 0,
            broken: Vec::new(),
            wall_s: 1.0,
            rush_s: 1.0,
            rush_cpu: Vec::new(),
            step_cpu: Vec::new(),
            generator_to_system: None,
            run_dir: String::new(),
        }
    }

    #[test]
    fn the_ceiling_is_the_highest_held_below_the_lowest_broken() {
        let steps = [
            step(500.0, true, 3.0),
            step(2000.0, false, 90.0),
            step(1500.0, true, 20.0),
            step(1750.0, false, 60.0),
            // held above a broken rate: noise, not the ceiling
            step(4000.0, true, 5.0),
        ];
        let (held, broke) = verdict(&steps);
        assert_eq!(held.map(|s| s.rate), Some(1500.0));
        assert_eq!(broke.map(|s| s.rate), Some(1750.0));
        let (held, broke) = verdict(&steps[..1]);
        assert_eq!(
            (held.map(|s| s.rate), broke.map(|s| s.rate)),
            (Some(500.0), None)
        );
    }

    #[test]
    fn a_step_profile_scales_the_sale_with_the_rate() {
        let base = Profile::default();
        let p = plan(&[1000.0]);
        let out = Path::new("/tmp/capacity-test");
        let s = step_profile(&base, &p, 1000.0, StackKind::Redis, out).unwrap();
        assert_eq!(s.load.rate, 1000.0);
        assert_eq!(s.load.rush_secs, 8.0);
        assert_eq!(s.load.late_secs, 2.0);
        assert_eq!(s.load.late_rate, 50.0, "100/s at 2000/s → 50/s at 1000/s");
        assert_eq!(s.stack.kind, StackKind::Redis);
        // 8,000 rush arrivals against the base's 50,000: caps × 0.16
        assert_eq!(s.levels[0].cap, 192, "1,200 × 0.16");
        assert_eq!(s.seats(), (20_700.0_f64 * 0.16).round() as u64);
        assert!(s.candidates as usize >= s.load.rush_arrivals() + s.load.late_arrivals());
        assert!(
            (s.thresholds.rush_rate_min - 975.0).abs() < 1e-9,
            "1950 × 0.5"
        );
        assert_eq!(
            s.thresholds.booking_p99_ms_max,
            base.thresholds.booking_p99_ms_max
        );
        assert_eq!(
            s.load.users, base.load.users,
            "never below the base's users"
        );
        assert_eq!(s.time_scale, 0.01);
        assert_eq!(s.load.pay_late_after, Duration::from_millis(4_500));
        assert_eq!(s.out, out);
        let fast = step_profile(&base, &p, 8000.0, StackKind::Embedded, out).unwrap();
        assert_eq!(fast.load.users, base.load.users * 4);
        let mut no_rush = base.clone();
        no_rush.load.rate = 0.0;
        assert!(step_profile(&no_rush, &p, 1000.0, StackKind::Embedded, out).is_err());
    }

    #[test]
    fn a_plan_that_cannot_run_is_refused() {
        assert!(plan(&[500.0, 1000.0]).validate().is_ok());
        assert!(plan(&[]).validate().is_err());
        assert!(plan(&[1000.0, 500.0]).validate().is_err(), "falling");
        assert!(plan(&[0.0]).validate().is_err());
        let mut p = plan(&[500.0]);
        p.max_steps = 0;
        assert!(p.validate().is_err());
    }
}
