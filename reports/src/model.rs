//! `report.json`: what one rehearsal run did and whether it went right.
//!
//! The scenarios crate fills a [`Report`]; this crate writes it and renders
//! it (HTML, Markdown) and compares two of them. Times inside a run are
//! milliseconds since the run started (`t_ms`), so two runs line up.
//! Every field is plain data; unknown fields in an older file are ignored
//! and missing optional ones default, so older reports still render.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The schema version this crate writes.
pub const SCHEMA: u32 = 1;

/// One rehearsal run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// [`SCHEMA`] when written.
    pub schema: u32,
    /// `<UTC timestamp>-<seed>`, also the run folder's name.
    pub run_id: String,
    /// The profile's name (its file stem, or `default`).
    pub profile_name: String,
    /// The profile as run, after command-line overrides (opaque here).
    pub profile: serde_json::Value,
    /// The seed everything random was drawn from.
    pub seed: u64,
    /// `embedded`, `redis`, `aws` or `target`.
    pub stack: String,
    /// Versions of what ran: crate versions, git commit, rustc, host.
    #[serde(default)]
    pub versions: BTreeMap<String, String>,
    /// Wall-clock start, RFC 3339 UTC.
    pub started_at: String,
    /// Wall-clock end, RFC 3339 UTC.
    pub finished_at: String,
    /// Whether every invariant held.
    pub passed: bool,
    /// The run's phases in order.
    pub phases: Vec<Phase>,
    /// What the load generator did.
    pub load: LoadFigures,
    /// What happened to the seats.
    pub sale: SaleFigures,
    /// The admission queue.
    pub queue: QueueFigures,
    /// Each invariant and threshold, checked after quiescence.
    pub invariants: Vec<Verdict>,
    /// Faults injected (empty in a plain rehearsal).
    #[serde(default)]
    pub faults: Vec<Fault>,
    /// Thresholds a fault schedule relaxed for this run (empty when none
    /// did): the invariants' `threshold` is the bound used, this says what
    /// it would have been and who changed it.
    #[serde(default)]
    pub relaxed: Vec<Relaxed>,
    /// Samples over time, about one per second, for the plots.
    #[serde(default)]
    pub timeline: Vec<Sample>,
    /// Other files of the run folder (goose's own reports, logs), by name.
    #[serde(default)]
    pub files: Vec<String>,
    /// Which shard of a sharded load this run was (`None`: the whole load).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardInfo>,
    /// The shard reports this one was merged from (`None`: not a merge).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged: Option<Merged>,
}

impl Report {
    /// The invariants that failed.
    pub fn failed(&self) -> impl Iterator<Item = &Verdict> {
        self.invariants.iter().filter(|i| !i.passed)
    }

    /// The invariant called `name`.
    pub fn invariant(&self, name: &str) -> Option<&Verdict> {
        self.invariants.iter().find(|i| i.name == name)
    }

    /// How the threshold of verdict `name` was relaxed, if a fault schedule
    /// relaxed it.
    pub fn relaxed(&self, name: &str) -> Option<&Relaxed> {
        self.relaxed.iter().find(|r| r.verdict == name)
    }

    /// The faults, those that could not be carried out first, otherwise in
    /// report order.
    pub fn faults_failed_first(&self) -> Vec<&Fault> {
        let mut v: Vec<&Fault> = self.faults.iter().collect();
        v.sort_by_key(|f| !f.failed());
        v
    }
}

/// One phase: `setup`, `rush`, `late`, `settle`, `audit`, …
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    /// Its name.
    pub name: String,
    /// Start, ms since the run started.
    pub start_ms: u64,
    /// End, ms since the run started.
    pub end_ms: u64,
}

/// The load generator's figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadFigures {
    /// HTTP requests made, all transactions.
    pub requests: u64,
    /// Of which answered 5xx or not answered at all (connection errors
    /// apart).
    pub server_errors: u64,
    /// Requests that failed to connect, or whose connection dropped before
    /// an answer (an instance gone; sent again to a live instance).
    #[serde(default)]
    pub connection_errors: u64,
    /// The rush's intended arrival rate, bookings/s.
    pub target_rate: f64,
    /// The rate bookings actually started at during the rush, bookings/s.
    pub achieved_rate: f64,
    /// Arrivals scheduled (rush and late).
    pub arrivals_scheduled: u64,
    /// Arrivals started.
    pub arrivals_started: u64,
    /// Arrivals never started (no user free before the run ended).
    pub arrivals_dropped: u64,
    /// Arrivals started more than the lateness allowance after their intended time.
    pub arrivals_late: u64,
    /// Rush arrivals started (what `achieved_rate` divides; 0 in older
    /// reports).
    #[serde(default)]
    pub rush_started: u64,
    /// When the rush's first arrival started, ms since the run started.
    #[serde(default)]
    pub rush_first_ms: f64,
    /// When the rush's last arrival started, ms since the run started.
    #[serde(default)]
    pub rush_last_ms: f64,
    /// Latency per transaction, measured from each arrival's intended start.
    pub transactions: Vec<TransactionFigures>,
}

/// Latency of one transaction (`booking`, `checkout`, `callback`, …), ms.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TransactionFigures {
    /// The transaction.
    pub name: String,
    /// How many completed.
    pub count: u64,
    /// Of which failed (transport error or unexpected answer).
    pub errors: u64,
    /// Mean.
    pub mean_ms: f64,
    /// 50th percentile.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Maximum.
    pub max_ms: f64,
    /// The latencies themselves, µs: base64 of the HDR histogram's
    /// compressed V2 serialization ([`crate::hdr`]); absent in older
    /// reports. `reports merge` adds the shards' histograms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hdr: Option<String>,
}

/// The sale's figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SaleFigures {
    /// Seats in all.
    pub seats: u64,
    /// Per level, at the end.
    pub levels: Vec<LevelFigures>,
    /// Holds created (201 answers).
    pub holds_created: u64,
    /// Bookings marked PAID, by confirm path (`callback`, `webhook`,
    /// `fast_payer`, `reconciler`).
    pub paid_by_path: BTreeMap<String, u64>,
    /// Holds released (expired, cancelled, failed).
    pub released: u64,
    /// Holds extended by the reconciler.
    pub extended: u64,
    /// Seats sold again after a release.
    pub resold: u64,
    /// Alerts raised.
    pub alerts: u64,
    /// Confirmation emails sent (with [`SaleFigures::mail`]: the ones the
    /// mail server delivered).
    pub emails: u64,
    /// The emails as a real mail server delivered them, read back after the
    /// audit (`scenarios rehearse --mail smtp|ses`; `None`: the stack's own
    /// output log counted them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mail: Option<MailFigures>,
}

/// The confirmation emails a mail server delivered, read back from it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MailFigures {
    /// `smtp` (scripts/smtp-sink) or `ses` (SES on moto).
    pub kind: String,
    /// Where they were read from (the Maildir, or moto's state document).
    pub read_from: String,
    /// Emails delivered, repeats included.
    pub delivered: u64,
    /// Bookings (payments) with at least one email delivered.
    pub bookings: u64,
    /// Distinct Message-IDs among the emails delivered.
    pub message_ids: u64,
    /// PAID bookings at the end of the run.
    pub paid: u64,
    /// Emails the email sweep sent (the first send failed, or its outcome
    /// was unknown).
    pub recovered: u64,
    /// Emails beyond the first for one booking.
    pub repeats: u64,
}

/// One level at the end of the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LevelFigures {
    /// The level.
    pub level: String,
    /// Its cap.
    pub cap: u64,
    /// Seats counted by the ledger (held + paid).
    pub taken: u64,
    /// PAID bookings.
    pub paid: u64,
}

/// The admission queue's figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueFigures {
    /// Age of the oldest queued message, the most seen during the run, ms.
    pub oldest_age_max_ms: u64,
    /// Messages in the dead-letter queue at the end.
    pub dead_letters: u64,
}

pub use booking_audit::Verdict;

/// The name [`Verdict`] had here before the audit and the reports shared it
/// (its JSON is unchanged).
pub type InvariantResult = Verdict;

/// A fault injected during the run.
///
/// The first five fields are as old reports wrote them; the others were
/// added for fault schedules and default when an older file lacks them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Fault {
    /// When it started, ms since the run started.
    pub at_ms: u64,
    /// How long it lasted, ms (0: instantaneous).
    pub duration_ms: u64,
    /// What (`latency`, `error`, `kill`, `gateway:timeout`, …).
    pub what: String,
    /// Where (`ledger`, `records`, `gateway`, `instance-1`, …).
    pub target: String,
    /// What it caused (retries, extensions, alerts, DLQ messages).
    #[serde(default)]
    pub effect: String,
    /// The fault's name in its schedule (`""` in older reports).
    #[serde(default)]
    pub fault: String,
    /// Its kind: `kill`, `pause`, `redis_restart`, `latency`,
    /// `toxic:latency`, `gateway_rule`, … (`""` in older reports).
    #[serde(default)]
    pub kind: String,
    /// How many times it fired: the calls it hit, or 1 for a process action.
    #[serde(default)]
    pub fired: u64,
    /// What the system did during or after it, as named counters (`undos`,
    /// `redeliveries`, `extensions`, `alerts`, `restarts`, `reconnects`,
    /// `connection_errors`, `http_5xx`, …).
    #[serde(default)]
    pub reactions: BTreeMap<String, u64>,
    /// Why the fault could not be carried out (`None`: it was).
    #[serde(default)]
    pub error: Option<String>,
}

impl Fault {
    /// When it ended, ms since the run started (`at_ms` for an
    /// instantaneous fault).
    pub fn end_ms(&self) -> u64 {
        self.at_ms.saturating_add(self.duration_ms)
    }

    /// Whether it could not be carried out.
    pub fn failed(&self) -> bool {
        self.error.is_some()
    }

    /// What to call it: its schedule name, else (older reports) `what`.
    pub fn name(&self) -> &str {
        if self.fault.is_empty() {
            &self.what
        } else {
            &self.fault
        }
    }

    /// Whether it came from a fault schedule, with a name or a kind (older
    /// reports had neither, nor a count of firings).
    pub fn from_schedule(&self) -> bool {
        !(self.fault.is_empty() && self.kind.is_empty())
    }

    /// Its kind, else (older reports) `what`.
    pub fn kind_or_what(&self) -> &str {
        if self.kind.is_empty() {
            &self.what
        } else {
            &self.kind
        }
    }
}

/// A threshold a fault schedule relaxed for the run (a kill makes the p99
/// worse by design, so the schedule may allow more).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Relaxed {
    /// The verdict whose threshold was relaxed (`booking_p99_ms`, …).
    pub verdict: String,
    /// The bound used for this run.
    pub bound: f64,
    /// The bound it would have been held to without the schedule.
    pub default_bound: f64,
    /// The fault schedule that relaxed it.
    pub by: String,
}

/// One sample of the run, about once per second.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// When, ms since the run started.
    pub t_ms: u64,
    /// Bookings started in the last interval, per second.
    pub bookings_per_s: f64,
    /// All requests in the last interval, per second.
    pub requests_per_s: f64,
    /// Booking latency in the last interval, ms (from intended start).
    pub p50_ms: f64,
    /// Booking latency in the last interval, ms.
    pub p99_ms: f64,
    /// Holds live now.
    pub holds: u64,
    /// PAID bookings so far.
    pub paid: u64,
    /// Holds released so far.
    pub released: u64,
    /// Bookings this load generator saw answered `201` so far (first
    /// attempts and retries): what `released` is counted from (0 in older
    /// reports).
    #[serde(default)]
    pub admitted: u64,
    /// Seats left per level now.
    pub seats_left: BTreeMap<String, u64>,
    /// Age of the oldest queued message now, ms.
    pub queue_age_ms: u64,
    /// The interval's booking latencies, µs, as
    /// [`TransactionFigures::hdr`] (absent in older reports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub booking_hdr: Option<String>,
}

/// One shard of a load spread over several generator processes
/// (`scenarios rehearse --shard INDEX/COUNT`): every shard runs the arrivals
/// `k` with `k % count == index` of the same seeded schedule against the
/// same target; shard 0 also sets the sale up, closes it once every shard's
/// schedule is over, waits for it to settle and audits it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ShardInfo {
    /// This shard, from 0 (shard 0 coordinates).
    pub index: u32,
    /// Shards in all.
    pub count: u32,
    /// The whole (unsharded) schedule's fingerprint, hex: the same on every
    /// shard of one run.
    pub schedule: String,
    /// Arrivals of the whole schedule.
    pub arrivals_total: u64,
    /// The whole schedule's rush rate, bookings/s.
    pub rate: f64,
    /// The deployment every shard loaded.
    pub target: String,
    /// The wall clock at this run's `t_ms = 0`, ms since the Unix epoch.
    pub t0_unix_ms: f64,
    /// The wall clock at the schedule's zero, ms since the Unix epoch: the
    /// same instant on every shard of one run (within the rendezvous' poll).
    pub zero_unix_ms: f64,
    /// The whole run's bounds of the verdicts a merge judges again, by
    /// verdict name (this shard's own verdicts hold its share to its share
    /// of a rate bound).
    #[serde(default)]
    pub bounds: BTreeMap<String, f64>,
}

/// What a merged report was merged from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Merged {
    /// Shards merged (all of them).
    pub count: u32,
    /// The schedule's fingerprint they share.
    pub schedule: String,
    /// The target they loaded.
    pub target: String,
    /// Each shard's run id, in shard order.
    pub runs: Vec<String>,
}
