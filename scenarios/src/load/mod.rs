//! The open-model load engine, built on goose.
//!
//! # The model: arrivals at a rate, whatever the latency
//!
//! A flash sale is an *open* system: 2,000 bookings per second arrive because
//! 2,000 people press the button each second, not because the previous
//! request came back. Goose 0.19 is a closed-model tool (each user loops, and
//! `--throttle-requests` is only a cap; its coordinated-omission mitigation
//! back-fills after the fact), so the arrival schedule is built on top of it,
//! the way wrk2 does it:
//!
//! - [`schedule()`] turns a [`LoadProfile`] into [`Arrival`]s: intended start
//!   times **evenly spaced** (`i / rate`; a constant-throughput stream, as
//!   wrk2's), a candidate (distinct unless `duplicate_fraction` asks for
//!   repeats), a level (demand weighted by the level's cap) and a payer
//!   behaviour (drawn from the [`PayerMix`]), all from one seeded RNG: pure
//!   and deterministic for a seed.
//! - [`run`] starts goose in-process with three scenarios (below). Booking
//!   users take the next arrival from the shared schedule (an atomic index),
//!   sleep until its intended time (on one `Instant` base), send the booking
//!   and record the latency **from the intended start**, not from the send:
//!   when every user is busy, the next arrival starts late and its wait is in
//!   its latency, so a stall shows in the percentiles instead of being
//!   omitted. Latencies go into HDR histograms (microseconds) behind a few
//!   sharded locks and are merged at the end.
//! - An arrival that starts more than `lateness_allowance_ms` after its
//!   intended time counts as **late** (it still runs). One that never starts
//!   — not taken before `schedule end + DROP_GRACE`, or still waiting when
//!   the run's hard bound (`LoadConfig::stop_by`) passes — counts as
//!   **dropped**. The **achieved rate** of the rush is the rush arrivals
//!   started divided by the time from the first rush start to the last, plus
//!   one arrival interval (so a perfectly punctual rush achieves exactly its
//!   target rate).
//!
//! # The goose scenarios
//!
//! | scenario | users | transactions (in order) | requests |
//! |---|---|---|---|
//! | `Bookings` | `users` | `arrival` (wait for the intended start), `booking` | `booking`: `POST /bookings` |
//! | `Payers` | `payer_users` | `payer waits`, `pay` | `checkout page` (GET), `checkout action` (POST pay/cancel/fail), `callback` (GET the merchant redirect) |
//! | `Retries` | `users / 8` (at least 4) | `retry waits`, `retry` | `retry`: `POST /bookings` again |
//!
//! Every request goes through the [`goose::goose::GooseUser`], so goose's own
//! request, transaction and status-code tables, and its HTML/JSON/Markdown
//! reports (written beside ours when `out_dir` is set), count them. Goose's
//! request times are its closed-model view (from the send); its `arrival`,
//! `payer waits` and `retry waits` transactions are the time users spent
//! waiting for work. Our own figures ([`LoadResult::figures`]) are the ones
//! measured from intended starts. Expected refusals (`level_full`,
//! `already_paid`, a callback's `402` after a cancel, …) are marked successes
//! in goose's tables; 5xx answers and transport errors are failures.
//! Goose's coordinated-omission back-fill is off (this engine measures from
//! intended starts instead), its telnet controller is off, its console
//! output is warnings only and it prints no metrics (the driver prints
//! progress from [`LiveStats`]); the one line goose prints regardless is
//! `All N users launched.`
//!
//! # Paying does not slow the bookings
//!
//! A booking user never pays: a `201` hands the payment to the `Payers`
//! scenario through a **due-time queue** ([`queue`]): due now for most
//! payers, due `pay_late_after` later for [`PayerKind::PayLate`]. A small
//! dispatcher task holds the not-yet-due items in a heap and releases each
//! into a channel when due; payer users take items from the channel one at a
//! time. So a pay-late payer holds no user while it waits, and the booking
//! rate does not depend on how long payers take. Retries (a `503` or a
//! transport error, retried once after `Retry-After` or 1 s when the
//! arrival's seeded coin says so) go through a second queue of the same kind
//! to the `Retries` scenario. Checkout latency is measured from the payment's
//! due time, retry latency from the retry's due time, callback latency from
//! the moment the redirect was in hand.
//!
//! The payer steps mirror [`mock_gateway::payer::Payer::run`] on goose
//! requests (see [`outcome::PayerPlan`]); redirects are not followed
//! automatically, so a payer can press Back or forge the `status`.
//!
//! # Ending, and bounds
//!
//! The run ends when every arrival has been booked (or dropped) and every
//! payment and retry it caused is done: each goose user then reports itself
//! finished on goose's shutdown channel (the one goose's own `--iterations`
//! uses), and goose stops when all have. Everything is bounded: goose's
//! `run_time` and every wait and request inside a transaction stop at
//! `stop_by` after [`run`] was called, requests time out after
//! [`REQUEST_TIMEOUT`], and `execute()` itself is abandoned
//! [`EXECUTE_GRACE`] after that.
//!
//! Module map: [`schedule`](mod@schedule) (the pure arrival schedule),
//! [`outcome`] (pure classification of answers and payer plans),
//! [`stats`] (HDR recorders and [`LiveStats`]), [`queue`] (the due-time
//! queue), `engine` (goose wiring and [`run`]).

mod attack;
pub mod balancer;
mod engine;
pub mod outcome;
pub mod queue;
pub mod schedule;
pub mod stats;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use attack::run;
pub use engine::{DROP_GRACE, EXECUTE_GRACE, GOOSE_REPORTS, REQUEST_TIMEOUT};
pub use schedule::schedule;
pub use stats::{IntervalStats, LiveStats};

/// Why the load could not be planned or run.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A profile value is out of range.
    #[error("load profile: {0}")]
    Profile(String),
    /// The schedule needs more distinct candidates than were given.
    #[error("the schedule needs {needed} distinct candidates but only {available} were given")]
    TooFewCandidates {
        /// Distinct candidates the arrivals need.
        needed: usize,
        /// Candidates given.
        available: usize,
    },
    /// No levels (or only levels with no seats) to book.
    #[error("no level with seats to book")]
    NoLevels,
    /// The targets are unusable.
    #[error("targets: {0}")]
    Targets(String),
    /// Goose refused its configuration or failed.
    #[error("goose: {0}")]
    Goose(String),
    /// The HTTP client could not be built.
    #[error("http client: {0}")]
    Client(String),
}

/// What a payer does with the checkout page (see
/// [`mock_gateway::payer::Behaviour`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PayerKind {
    /// Pays at once and follows the redirect.
    PayNow,
    /// Waits `pay_late_after`, then pays.
    PayLate,
    /// Opens the page and leaves.
    Abandon,
    /// Cancels.
    Cancel,
    /// The wallet refuses.
    Fail,
    /// Pays, then presses Back: the same redirect twice.
    PressBack,
    /// Pays in two tabs; both redirects are delivered.
    SecondTab,
    /// Pays, but delivers the redirect with `status=cancel`.
    ForgeCancel,
    /// Cancels, but delivers the redirect with `status=success`.
    ForgeSuccess,
}

impl PayerKind {
    /// Every kind, in [`PayerMix`] field order.
    pub const ALL: [PayerKind; 9] = [
        PayerKind::PayNow,
        PayerKind::PayLate,
        PayerKind::Abandon,
        PayerKind::Cancel,
        PayerKind::Fail,
        PayerKind::PressBack,
        PayerKind::SecondTab,
        PayerKind::ForgeCancel,
        PayerKind::ForgeSuccess,
    ];

    /// The snake_case name (as in profiles and reports).
    pub fn as_str(self) -> &'static str {
        match self {
            PayerKind::PayNow => "pay_now",
            PayerKind::PayLate => "pay_late",
            PayerKind::Abandon => "abandon",
            PayerKind::Cancel => "cancel",
            PayerKind::Fail => "fail",
            PayerKind::PressBack => "press_back",
            PayerKind::SecondTab => "second_tab",
            PayerKind::ForgeCancel => "forge_cancel",
            PayerKind::ForgeSuccess => "forge_success",
        }
    }
}

/// The payers' behaviours as fractions of the arrivals. In a profile, a
/// fraction not named is 0 (a `[load.mix]` table lists the whole mix); a
/// profile without the table gets [`PayerMix::default`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayerMix {
    /// Pay at once.
    #[serde(default)]
    pub pay_now: f64,
    /// Pay after `pay_late_after`.
    #[serde(default)]
    pub pay_late: f64,
    /// Open the page and leave.
    #[serde(default)]
    pub abandon: f64,
    /// Cancel.
    #[serde(default)]
    pub cancel: f64,
    /// The wallet refuses.
    #[serde(default)]
    pub fail: f64,
    /// Pay, then press Back.
    #[serde(default)]
    pub press_back: f64,
    /// Pay in two tabs.
    #[serde(default)]
    pub second_tab: f64,
    /// Pay, then forge `status=cancel`.
    #[serde(default)]
    pub forge_cancel: f64,
    /// Cancel, then forge `status=success`.
    #[serde(default)]
    pub forge_success: f64,
}

impl Default for PayerMix {
    /// Most pay at once; a few of each misbehaviour.
    fn default() -> PayerMix {
        PayerMix {
            pay_now: 0.70,
            pay_late: 0.05,
            abandon: 0.10,
            cancel: 0.04,
            fail: 0.03,
            press_back: 0.03,
            second_tab: 0.03,
            forge_cancel: 0.02,
            forge_success: 0.0,
        }
    }
}

/// How far from 1 the mix's sum may be.
pub const MIX_SUM_TOLERANCE: f64 = 1e-6;

impl PayerMix {
    /// The fractions in [`PayerKind::ALL`] order.
    pub fn fractions(&self) -> [f64; PayerKind::ALL.len()] {
        [
            self.pay_now,
            self.pay_late,
            self.abandon,
            self.cancel,
            self.fail,
            self.press_back,
            self.second_tab,
            self.forge_cancel,
            self.forge_success,
        ]
    }

    /// The fraction of `kind`.
    pub fn fraction(&self, kind: PayerKind) -> f64 {
        let i = PayerKind::ALL.iter().position(|k| *k == kind).unwrap_or(0);
        self.fractions()[i]
    }

    /// Every fraction in `[0, 1]`, summing to 1 (± [`MIX_SUM_TOLERANCE`]).
    pub fn validate(&self) -> Result<(), LoadError> {
        for (kind, f) in PayerKind::ALL.iter().zip(self.fractions()) {
            if !(0.0..=1.0).contains(&f) {
                return Err(LoadError::Profile(format!(
                    "payer mix: {} = {f} is not in [0, 1]",
                    kind.as_str()
                )));
            }
        }
        let sum: f64 = self.fractions().iter().sum();
        if (sum - 1.0).abs() > MIX_SUM_TOLERANCE {
            return Err(LoadError::Profile(format!(
                "payer mix: the fractions sum to {sum}, not 1"
            )));
        }
        Ok(())
    }
}

/// Serde for a [`Duration`] as whole milliseconds.
mod duration_ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

/// The load: the `[load]` section of a profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoadProfile {
    /// Rush arrivals per second.
    pub rate: f64,
    /// How long the rush lasts, s.
    pub rush_secs: f64,
    /// Arrivals per second after the rush (late arrivals).
    pub late_rate: f64,
    /// How long the late stream lasts, s.
    pub late_secs: f64,
    /// The fraction of busy (`503`) or unanswered bookings retried once,
    /// after `Retry-After` (or 1 s).
    pub retry_fraction: f64,
    /// The fraction of arrivals that reuse a candidate an earlier arrival
    /// used (a refresh, a second device). The article's run sends 54,000
    /// bookings from 40,000 candidates, so the default is 0.3; 0 makes every
    /// arrival a distinct candidate.
    pub duplicate_fraction: f64,
    /// How long a [`PayerKind::PayLate`] payer waits before paying: a bit
    /// less than the (scaled) hold, so the payment lands before the deadline.
    #[serde(rename = "pay_late_after_ms", with = "duration_ms")]
    pub pay_late_after: Duration,
    /// Goose users running the bookings (the most bookings in flight).
    pub users: usize,
    /// Goose users running the payments (the most payments in flight).
    pub payer_users: usize,
    /// An arrival started later than this after its intended time is late.
    pub lateness_allowance_ms: u64,
    /// What the payers do.
    pub mix: PayerMix,
    /// Goose's own pass/fail rules over its closed-model figures (goose's
    /// `--threshold` syntax: `"error-rate<1%"`, `"p99<50ms for POST booking"`),
    /// judged at the end without stopping the run; the results are in
    /// [`GooseSummary::thresholds`]. Empty by default: the rehearsal's own
    /// thresholds judge the figures measured from intended starts.
    pub goose_thresholds: Vec<String>,
}

impl Default for LoadProfile {
    /// The article's run: 2,000 bookings/s for 25 s, then 100/s for 40 s.
    fn default() -> LoadProfile {
        LoadProfile {
            rate: 2_000.0,
            rush_secs: 25.0,
            late_rate: 100.0,
            late_secs: 40.0,
            retry_fraction: 1.0,
            duplicate_fraction: 0.3,
            pay_late_after: Duration::from_secs(15),
            users: 512,
            payer_users: 256,
            lateness_allowance_ms: 10,
            mix: PayerMix::default(),
            goose_thresholds: Vec::new(),
        }
    }
}

/// The most goose users a load may ask for (each is a task; beyond this
/// the engine's own cost would show).
pub const USERS_MAX: usize = 20_000;

impl LoadProfile {
    /// Every value in range.
    pub fn validate(&self) -> Result<(), LoadError> {
        let finite_non_negative = [
            ("rate", self.rate),
            ("rush_secs", self.rush_secs),
            ("late_rate", self.late_rate),
            ("late_secs", self.late_secs),
        ];
        for (name, v) in finite_non_negative {
            if !v.is_finite() || v < 0.0 {
                return Err(LoadError::Profile(format!("{name} = {v} must be ≥ 0")));
            }
        }
        for (name, v) in [
            ("retry_fraction", self.retry_fraction),
            ("duplicate_fraction", self.duplicate_fraction),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(LoadError::Profile(format!("{name} = {v} is not in [0, 1]")));
            }
        }
        if self.duplicate_fraction >= 1.0 {
            return Err(LoadError::Profile(
                "duplicate_fraction must be below 1: the first arrival needs a candidate".into(),
            ));
        }
        for (name, v) in [("users", self.users), ("payer_users", self.payer_users)] {
            if v == 0 || v > USERS_MAX {
                return Err(LoadError::Profile(format!(
                    "{name} = {v} must be in 1..={USERS_MAX}"
                )));
            }
        }
        self.mix.validate()
    }

    /// The rush's arrivals: `rate × rush_secs`, rounded.
    pub fn rush_arrivals(&self) -> usize {
        count(self.rate, self.rush_secs)
    }

    /// The late stream's arrivals: `late_rate × late_secs`, rounded.
    pub fn late_arrivals(&self) -> usize {
        count(self.late_rate, self.late_secs)
    }

    /// Goose users of the `Retries` scenario.
    pub fn retry_users(&self) -> usize {
        (self.users / 8).max(4)
    }
}

fn count(rate: f64, secs: f64) -> usize {
    let n = (rate * secs).round();
    if n.is_finite() && n > 0.0 {
        n as usize
    } else {
        0
    }
}

/// Which part of the load an arrival belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The rush at `rate`.
    Rush,
    /// The late stream at `late_rate`.
    Late,
}

/// One booking to start at an intended time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Arrival {
    /// Intended start, since the load's start.
    pub at: Duration,
    /// Who books.
    pub candidate: String,
    /// Which level.
    pub level: String,
    /// What they do at the checkout if they get a hold.
    pub payer: PayerKind,
    /// Rush or late.
    pub phase: Phase,
    /// Whether this arrival retries once if the booking is busy or
    /// unanswered (the seeded `retry_fraction` coin).
    pub retry_if_busy: bool,
}

/// Where the load goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Targets {
    /// Booking instances' base URLs; arrivals are spread round-robin.
    pub booking_urls: Vec<String>,
    /// The (mock) gateway's base URL. Payers go to the checkout URL each
    /// booking answer gives (`redirect_url`), as a browser would; this one
    /// is only checked to be a URL.
    pub gateway_url: String,
}

/// How the run is kept and bounded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadConfig {
    /// Goose's own HTML/JSON/Markdown reports go here (created if missing).
    pub out_dir: Option<PathBuf>,
    /// Hard bound: the whole load stops by itself this long after [`run`]
    /// was called, even if the target hangs.
    pub stop_by: Duration,
    /// The schedule's zero, if it must be no sooner than this (the shards
    /// of a sharded load start their schedules together); `None`: as soon
    /// as every goose user has started. `stop_by` counts from the call all
    /// the same.
    pub start_at: Option<std::time::Instant>,
    /// Signs the candidates' tokens (`candidate_auth`): each booking then
    /// carries `Authorization: Bearer` ([`crate::candidate_tokens`]).
    pub candidate_tokens: Option<crate::candidate_tokens::TokenSigner>,
}

/// What the payers did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentTally {
    /// Payer flows run, by [`PayerKind::as_str`].
    pub by_kind: BTreeMap<String, u64>,
    /// Payer flows never run (the run was stopped first).
    pub not_run: u64,
    /// Checkout actions by answer: `redirect`, `no_redirect`,
    /// `refused_<http>`, `transport_error`.
    pub actions: BTreeMap<String, u64>,
    /// Redirects delivered to the merchant (answered or not).
    pub redirects_delivered: u64,
    /// Of which with a forged `status`.
    pub forged_delivered: u64,
    /// The merchant's answers to delivered redirects, by
    /// [`outcome::callback_answer`] (`paid`, `not_paid`, `processing`, …).
    pub callback_answers: BTreeMap<String, u64>,
    /// Redirects of payers who approved at the checkout, answered `not_paid`
    /// (`402`): an approved payer whose hold was live is never told so.
    #[serde(default)]
    pub approved_told_not_paid: u64,
    /// Transport errors talking to the gateway or the callback.
    pub transport_errors: u64,
}

/// What the load did.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadResult {
    /// The figures for the report.
    pub figures: reports::LoadFigures,
    /// First booking attempts by outcome: `admitted` (201),
    /// `already_holding` (200), the API's error codes (`level_full`,
    /// `sale_closed`, `not_eligible`, `already_paid`, `busy`,
    /// `deadline_exceeded`, …), `http_<status>` for an answer without a
    /// code, `transport_error`.
    pub booking_outcomes: BTreeMap<String, u64>,
    /// Retries by outcome, keyed as [`LoadResult::booking_outcomes`].
    pub retry_outcomes: BTreeMap<String, u64>,
    /// What the payers did.
    pub payments: PaymentTally,
    /// When the rush's first and last arrivals actually started, since
    /// [`run`] was called.
    pub rush_window: (Duration, Duration),
    /// When the schedule's zero was, since [`run`] was called (the users'
    /// start-up).
    pub schedule_zero: Duration,
    /// Whether the run hit `stop_by` before its work was done.
    pub stopped_by_bound: bool,
    /// File names written into `out_dir` (goose's reports).
    pub goose_files: Vec<String>,
    /// Goose's own figures: requests, failures, and its request-time
    /// percentiles per request name (closed-model: from the send).
    pub goose: GooseSummary,
}

/// A few of goose's own figures, for comparison with ours.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GooseSummary {
    /// Requests goose counted.
    pub requests: u64,
    /// Of which goose counted failed.
    pub failures: u64,
    /// Users goose ran.
    pub users: u64,
    /// Goose's run time, s.
    pub duration_s: u64,
    /// Per request name (`POST booking`, …): count and goose's mean and
    /// max, ms.
    pub per_request: BTreeMap<String, GooseRequestSummary>,
    /// Goose's verdicts on [`LoadProfile::goose_thresholds`].
    pub thresholds: Vec<GooseThreshold>,
}

/// Goose's verdict on one of its thresholds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GooseThreshold {
    /// The rule as given.
    pub rule: String,
    /// Whether it held.
    pub passed: bool,
    /// What goose observed, as goose words it.
    pub observed: String,
}

/// Goose's figures for one request name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GooseRequestSummary {
    /// Requests.
    pub count: u64,
    /// Failed.
    pub failures: u64,
    /// Mean response time, ms.
    pub mean_ms: f64,
    /// Slowest, ms.
    pub max_ms: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_mix_is_valid_and_mostly_pays_now() {
        let mix = PayerMix::default();
        mix.validate().unwrap();
        assert!(mix.pay_now > 0.5);
        assert_eq!(mix.fraction(PayerKind::Abandon), 0.10);
    }

    #[test]
    fn a_mix_out_of_range_or_not_summing_to_one_is_refused() {
        let bad = PayerMix {
            pay_now: 1.2,
            pay_late: -0.2,
            ..PayerMix::default()
        };
        assert!(bad.validate().is_err());
        let short = PayerMix {
            pay_now: 0.5,
            ..PayerMix::default()
        };
        let err = short.validate().unwrap_err().to_string();
        assert!(err.contains("sum"), "{err}");
        let close = PayerMix {
            pay_now: 0.70 + 5e-7,
            ..PayerMix::default()
        };
        close.validate().unwrap();
    }

    #[test]
    fn the_default_profile_is_the_articles_run() {
        let p = LoadProfile::default();
        p.validate().unwrap();
        assert_eq!(p.rush_arrivals(), 50_000);
        assert_eq!(p.late_arrivals(), 4_000);
        // 54,000 arrivals from 40,000 candidates need the repeats
        let distinct = (54_000.0 * (1.0 - p.duplicate_fraction)) as usize;
        assert!(distinct <= 40_000, "{distinct}");
    }

    #[test]
    fn the_profile_reads_from_toml_with_defaults_and_ms() {
        let p: LoadProfile = toml::from_str(
            "rate = 300.0\npay_late_after_ms = 1500\n[mix]\npay_now = 0.5\nabandon = 0.6\n",
        )
        .unwrap();
        assert_eq!(p.rate, 300.0);
        assert_eq!(p.pay_late_after, Duration::from_millis(1_500));
        assert_eq!(p.rush_secs, 25.0);
        // the mix's unnamed fractions are 0: this one sums past 1
        assert_eq!(p.mix.cancel, 0.0);
        assert!(p.validate().is_err());
        let whole: LoadProfile = toml::from_str("[mix]\npay_now = 0.9\nabandon = 0.1\n").unwrap();
        whole.validate().unwrap();
        let none: LoadProfile = toml::from_str("rate = 5.0").unwrap();
        assert_eq!(none.mix, PayerMix::default());
        let back = toml::to_string(&p).unwrap();
        assert!(back.contains("pay_late_after_ms = 1500"), "{back}");
        assert!(toml::from_str::<LoadProfile>("rte = 1.0").is_err());
    }

    #[test]
    fn profile_values_out_of_range_are_refused() {
        for p in [
            LoadProfile {
                rate: -1.0,
                ..LoadProfile::default()
            },
            LoadProfile {
                rush_secs: f64::NAN,
                ..LoadProfile::default()
            },
            LoadProfile {
                retry_fraction: 1.5,
                ..LoadProfile::default()
            },
            LoadProfile {
                duplicate_fraction: 1.0,
                ..LoadProfile::default()
            },
            LoadProfile {
                users: 0,
                ..LoadProfile::default()
            },
        ] {
            assert!(p.validate().is_err(), "{p:?}");
        }
    }

    #[test]
    fn payer_kinds_serialise_snake_case() {
        for kind in PayerKind::ALL {
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{}\"", kind.as_str()));
        }
    }
}
