//! The rehearsal, phase by phase:
//!
//! 1. **setup**: `reset` → `load-candidates` (deterministic from the seed) →
//!    `open`, and the arrival schedule;
//! 2. **rush** and **late**: the load engine ([`crate::load`]) drives the
//!    schedule while a sampler records the timeline every second and the
//!    oldest queued message every [`QUEUE_SAMPLE_EVERY`];
//! 3. **settle**: the sale is closed and left to finish (holds expire, the
//!    reconciler releases, the queue drains) until nothing is held or
//!    queued and nothing changes for `settle.quiet_ms`, at most
//!    `settle.max_ms`;
//! 4. **audit**: the audit's invariants ([`booking_server::ops::audit`])
//!    and the rehearsal's own ([`crate::thresholds`]);
//! 5. **report**: `reports/runs/<UTC timestamp>-<seed>/`.
//!
//! [`rehearse`] does all of it on a fleet of its own (in process, or OS
//! processes: [`crate::processes`]); [`run_on`] on a fleet the caller keeps
//! (tests break the state afterwards and call [`verdicts`] again);
//! [`run_with`] also fires a process fleet's kills during the load and adds
//! their verdict (`kills_done`, [`crate::kills`]). Every run holds the load's
//! connection errors (failed over, not counted as server errors) to
//! `connection_errors_outside_kills`: none outside a kill's window.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use booking_server::ops::GatewayTruth;
use parking_lot::Mutex;
use reports::{
    LevelFigures, LoadFigures, Phase, QueueFigures, Report, SaleFigures, Sample, Verdict,
};
use tokio::sync::watch;

use crate::conductor::{self, Conductor};
use crate::fleet::{Fleet, FleetError, Snapshot};
use crate::kills::{self, KillDriver};
use crate::load::{self, LiveStats, LoadConfig, LoadError, LoadResult, Targets};
use crate::processes::ProcessError;
use crate::profile::{self, FleetKind, Profile, Webhooks};
use crate::progress;
use crate::shard::{self, ShardError, Sharding};
use crate::thresholds::{self, Leftovers, LevelPeak};

/// How often the oldest queued message's age is sampled.
pub const QUEUE_SAMPLE_EVERY: Duration = Duration::from_millis(250);
/// How often the timeline is sampled (and progress printed).
pub const TIMELINE_EVERY: Duration = Duration::from_secs(1);
/// The load engine's hard stop, past the schedule's own end.
pub const LOAD_SLACK: Duration = Duration::from_secs(60);

/// Why a rehearsal could not run to its verdict (a failed invariant is not
/// an error: it is a verdict).
#[derive(Debug, thiserror::Error)]
pub enum RehearseError {
    /// The fleet failed.
    #[error(transparent)]
    Fleet(#[from] FleetError),
    /// The load engine failed.
    #[error("load: {0}")]
    Load(#[from] LoadError),
    /// The run folder could not be written.
    #[error("writing {0}: {1}")]
    Write(PathBuf, String),
    /// The process fleet failed.
    #[error("process fleet: {0}")]
    Processes(#[from] ProcessError),
    /// A shard of a sharded load could not start.
    #[error(transparent)]
    Shard(#[from] ShardError),
    /// The mail server's emails could not be read back.
    #[error(transparent)]
    Mail(#[from] crate::mail::MailError),
}

/// Where a run's files go: `<out>/<UTC timestamp>-<seed>/`, made when the
/// run starts (a process fleet logs into it before the rehearsal).
#[derive(Debug, Clone)]
pub struct RunPlace {
    /// `<UTC timestamp>-<seed>`.
    pub run_id: String,
    /// The run folder (created).
    pub dir: PathBuf,
    /// When the run started.
    pub started_at: chrono::DateTime<chrono::Utc>,
}

impl RunPlace {
    /// A new run folder for `profile`, created.
    pub fn new(profile: &Profile) -> Result<RunPlace, RehearseError> {
        RunPlace::named(profile, "")
    }

    /// A new run folder for one shard of a sharded load:
    /// `<UTC timestamp>-<seed>-shard<INDEX>of<COUNT>` (shards on one machine
    /// may share `out`).
    pub fn for_shard(profile: &Profile, shard: &shard::Shard) -> Result<RunPlace, RehearseError> {
        RunPlace::named(profile, &format!("-shard{}of{}", shard.index, shard.count))
    }

    fn named(profile: &Profile, suffix: &str) -> Result<RunPlace, RehearseError> {
        let started_at = chrono::Utc::now();
        let run_id = format!(
            "{}-{}{suffix}",
            started_at.format("%Y%m%dT%H%M%SZ"),
            profile.seed
        );
        let dir = profile.out_dir().join(&run_id);
        std::fs::create_dir_all(&dir)
            .map_err(|e| RehearseError::Write(dir.clone(), e.to_string()))?;
        Ok(RunPlace {
            run_id,
            dir,
            started_at,
        })
    }
}

/// What a run adds to the plain rehearsal: a process fleet's kills and log
/// files, a fault schedule, or its part in a sharded load.
#[derive(Debug)]
pub struct Extras {
    /// Kills to fire during the load (their records become the report's
    /// faults and two verdicts).
    pub kills: Option<KillDriver>,
    /// A fault schedule to carry out during the load (its windows become
    /// the report's faults and bands; `faults_done` and
    /// `server_errors_outside_faults` join the verdicts; its `[relax]`
    /// bounds replace the profile's).
    pub conductor: Option<Conductor>,
    /// Files of the run folder besides the report's (logs), by name.
    pub files: Vec<String>,
    /// This run is one shard of a sharded load ([`crate::shard`]): it runs
    /// its part of the schedule; shard 0 alone sets the sale up, closes,
    /// settles and audits it.
    pub shard: Option<Sharding>,
}

/// What a run leaves: its report and where it was written.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The report.
    pub report: Report,
    /// The run folder.
    pub dir: PathBuf,
    /// What the verdicts were computed from.
    pub measured: Measured,
}

/// What the run measured that the verdicts need besides the state.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    /// The load engine's figures.
    pub load: LoadFigures,
    /// The oldest queued message seen, ms (`None`: not observable).
    pub queue_age_max_ms: Option<u64>,
    /// Queue-age samples taken.
    pub queue_samples: u64,
    /// The most seats each level counted during the run.
    pub peaks: BTreeMap<String, u64>,
    /// Per level, the candidates (hashes) whose first booking asked for it.
    pub first_asks: BTreeMap<String, BTreeSet<String>>,
    /// What was left when the settle phase ended.
    pub leftovers: Leftovers,
    /// How long the settle phase waited, ms.
    pub settle_waited_ms: u64,
    /// Redirects of approved payers answered `not_paid`.
    pub approved_told_not_paid: u64,
    /// The fleet's Redis pools after the run, by adapter (empty off Redis).
    pub redis_pools: Vec<(String, booking::PoolFigures)>,
}

/// Whether progress lines are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// A line every second on stderr.
    Lines,
    /// Nothing (tests).
    Quiet,
}

/// Starts the fleet `profile` describes, rehearses on it, stops it.
pub async fn rehearse(profile: &Profile, progress: Progress) -> Result<Outcome, RehearseError> {
    if profile.fleet == FleetKind::Processes {
        return crate::processes::rehearse(profile, progress).await;
    }
    // a mail server keeps its Maildir in the run folder: the folder first
    let early = match profile.mail {
        crate::mail::Mail::Outputs => None,
        _ => Some(RunPlace::new(profile)?),
    };
    let fleet = match &early {
        Some(place) => Fleet::start_in(profile, &place.dir).await?,
        None => Fleet::start(profile).await?,
    };
    let outcome = match fleet.conductor() {
        Ok(conductor) => match early.map_or_else(|| RunPlace::new(profile), Ok) {
            Ok(place) => {
                let extras = Extras {
                    kills: None,
                    conductor,
                    files: fleet.files(),
                    shard: None,
                };
                run_with(&fleet, profile, progress, place, Some(extras)).await
            }
            Err(e) => Err(e),
        },
        Err(e) => Err(e.into()),
    };
    fleet.stop().await;
    outcome
}

/// The phase the sampler reports.
#[derive(Debug, Clone, Copy)]
struct PhaseNow {
    name: &'static str,
    /// Arrivals of the rush: the load is in its rush until they have all
    /// started.
    rush_arrivals: u64,
}

impl PhaseNow {
    fn label(&self, started: u64) -> &'static str {
        match self.name {
            "load" if started < self.rush_arrivals => "rush",
            "load" => "late",
            name => name,
        }
    }
}

/// What the sampler gathered.
#[derive(Debug, Default)]
struct Sampled {
    timeline: Vec<Sample>,
    queue_age_max_ms: u64,
    queue_samples: u64,
    peaks: BTreeMap<String, u64>,
}

fn ms_since(t0: Instant) -> u64 {
    t0.elapsed().as_millis() as u64
}

/// What the sampler reads and where it writes.
struct Sampler<'a> {
    fleet: &'a Fleet,
    t0: Instant,
    live: Arc<LiveStats>,
    phase: Arc<Mutex<PhaseNow>>,
    out: Arc<Mutex<Sampled>>,
    progress: Progress,
    /// Subscribe the webhooks once this many arrivals have started.
    subscribe_after: Option<u64>,
}

/// Runs the sampler until `stop` says so.
async fn sample_loop(sampler: Sampler<'_>, mut stop: watch::Receiver<bool>) {
    let Sampler {
        fleet,
        t0,
        live,
        phase,
        out,
        progress,
        subscribe_after,
    } = sampler;
    let mut tick = tokio::time::interval(QUEUE_SAMPLE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_timeline = Instant::now();
    let observable = fleet.queue_observable();
    let mut subscribe_after = subscribe_after;
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            _ = tick.tick() => {}
        }
        if let Some(n) = subscribe_after {
            if live
                .arrivals_started
                .load(std::sync::atomic::Ordering::Relaxed)
                >= n
            {
                subscribe_after = None;
                if fleet.subscribe_webhooks() && progress == Progress::Lines {
                    eprintln!(
                        "[{:>6.1}s] rush done: webhooks subscribed",
                        t0.elapsed().as_secs_f64()
                    );
                }
            }
        }
        let age = if observable {
            fleet.queue_age_ms().await
        } else {
            None
        };
        if let Some(age) = age {
            let mut o = out.lock();
            o.queue_age_max_ms = o.queue_age_max_ms.max(age);
            o.queue_samples += 1;
        }
        // half a tick early counts: the ticks land on the second
        if last_timeline.elapsed() + QUEUE_SAMPLE_EVERY / 2 < TIMELINE_EVERY {
            continue;
        }
        let interval = last_timeline.elapsed();
        last_timeline = Instant::now();
        let snap = match fleet.timeline_snapshot().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "sampling the sale");
                continue;
            }
        };
        let (stats, latencies) = live.take_interval_with_histogram();
        let started = live_bookings_ok(&live);
        let taken = snap.taken();
        let sample = Sample {
            t_ms: ms_since(t0),
            bookings_per_s: stats.bookings_per_s,
            requests_per_s: stats.requests_per_s,
            p50_ms: stats.p50_ms,
            p99_ms: stats.p99_ms,
            holds: taken.saturating_sub(snap.paid),
            paid: snap.paid,
            released: started.saturating_sub(taken),
            seats_left: snap.seats_left(),
            queue_age_ms: age.unwrap_or(0),
            admitted: started,
            booking_hdr: Some(reports::hdr::encode(&latencies)),
        };
        let label = phase.lock().label(
            live.arrivals_started
                .load(std::sync::atomic::Ordering::Relaxed),
        );
        if progress == Progress::Lines {
            eprintln!("{}", progress::line(label, &sample));
        }
        tracing::debug!(interval_ms = interval.as_millis() as u64, "sampled");
        let mut o = out.lock();
        record_peaks(&mut o.peaks, &snap);
        o.timeline.push(sample);
    }
}

fn record_peaks(peaks: &mut BTreeMap<String, u64>, snap: &Snapshot) {
    if let Some(c) = &snap.counters {
        for l in &c.levels {
            // the ledger's own high-water mark: exact, where a sample sees
            // a level full only if it is full at that instant
            let e = peaks.entry(l.level.to_string()).or_default();
            *e = (*e).max(u64::from(l.count.max(l.peak)));
        }
    }
    for (level, taken) in &snap.status_peaks {
        let e = peaks.entry(level.clone()).or_default();
        *e = (*e).max(*taken);
    }
}

/// Bookings answered 201 so far.
fn live_bookings_ok(live: &LiveStats) -> u64 {
    live.bookings_ok.load(std::sync::atomic::Ordering::Relaxed)
}

/// Holds created during the run: the 201 answers, first attempts and retries.
fn holds_created(result: &LoadResult) -> u64 {
    [&result.booking_outcomes, &result.retry_outcomes]
        .iter()
        .filter_map(|m| m.get("admitted"))
        .sum()
}

/// The phases' bounds as they happened.
#[derive(Debug, Default)]
struct Clock {
    phases: Vec<Phase>,
}

impl Clock {
    fn push(&mut self, name: &str, start_ms: u64, end_ms: u64) {
        self.phases.push(Phase {
            name: name.to_owned(),
            start_ms,
            end_ms,
        });
    }
}

/// Rehearses on `fleet` (which the caller stops).
pub async fn run_on(
    fleet: &Fleet,
    profile: &Profile,
    progress: Progress,
) -> Result<Outcome, RehearseError> {
    let place = RunPlace::new(profile)?;
    run_with(fleet, profile, progress, place, None).await
}

/// Rehearses on `fleet` (which the caller stops) into `place`, with what a
/// process fleet adds: its kills fired during the load (the load then waits
/// for every instance killed to be back before the sale is closed), their
/// faults and verdicts, its log files; or, as one shard of a sharded load,
/// only its part of the schedule (see [`crate::shard`] for who does what).
pub async fn run_with(
    fleet: &Fleet,
    profile: &Profile,
    progress: Progress,
    place: RunPlace,
    extras: Option<Extras>,
) -> Result<Outcome, RehearseError> {
    let t0 = Instant::now();
    let t0_wall = SystemTime::now();
    let RunPlace {
        run_id,
        dir,
        started_at,
    } = place;
    let (kills, conductor, extra_files, sharding) = match extras {
        Some(e) => (e.kills, e.conductor, e.files, e.shard),
        None => (None, None, Vec::new(), None),
    };
    // shard 0 of a sharded load, or a whole run, sets up, closes, settles
    // and audits the sale
    let coordinates = sharding.is_none_or(|s| s.shard.coordinates());
    let mut clock = Clock::default();
    let say = |what: &str| {
        if progress == Progress::Lines {
            eprintln!("[{:>6.1}s] {what}", t0.elapsed().as_secs_f64());
        }
    };

    // setup
    say(&format!(
        "setup: {} on {} ({} instance(s)), {} candidates, {} seats in {} levels{}",
        profile.name,
        fleet.stack_name,
        fleet.booking_urls.len(),
        profile.candidates,
        profile.seats(),
        profile.levels.len(),
        sharding
            .map(|s| format!(
                "; shard {}{}",
                s.shard,
                if coordinates { " (coordinates)" } else { "" }
            ))
            .unwrap_or_default()
    ));
    let candidates = profile::candidates(profile.seed, profile.candidates);
    let added = if coordinates {
        fleet.reset().await?;
        Some(fleet.load_candidates(&candidates).await?)
    } else {
        None
    };
    let levels = profile.level_caps();
    let whole = load::schedule(&profile.load, &candidates, &levels, profile.seed)?;
    let whole_end = schedule_end(&whole);
    let hashes: Vec<(String, String)> = whole
        .iter()
        .map(|a| {
            let hash = booking_server::ops::candidate_of(&a.candidate)
                .map_or_else(|| a.candidate.clone(), |c| c.to_string());
            (a.level.clone(), hash)
        })
        .collect();
    let first_asks = thresholds::first_asks(hashes.iter().map(|(l, c)| (l.as_str(), c.as_str())));
    let rush_in = |a: &[load::Arrival]| a.iter().filter(|x| x.phase == load::Phase::Rush).count();
    let (arrivals, sharded) = match &sharding {
        Some(s) => {
            let mine = load::schedule::shard(&whole, s.shard.index, s.shard.count);
            let facts = WholeSchedule {
                fingerprint: load::schedule::fingerprint(&whole),
                arrivals: whole.len() as u64,
                rush: rush_in(&whole) as u64,
            };
            (mine, Some(facts))
        }
        None => (whole, None),
    };
    let rush_arrivals = rush_in(&arrivals) as u64;
    let zero = match &sharding {
        None => {
            fleet.open().await?;
            None
        }
        Some(s) if coordinates => {
            fleet.open().await?;
            Some(shard::coordinator_zero(s)?)
        }
        Some(s) => {
            say("waiting for shard 0 to open the sale");
            Some(shard::await_zero(fleet, s).await?)
        }
    };
    say(&format!(
        "open: {}{} arrivals scheduled{}",
        added
            .map(|n| format!("{n} candidates eligible, "))
            .unwrap_or_default(),
        arrivals.len(),
        match (&sharded, zero) {
            (Some(w), Some(z)) => format!(
                " (of {}), starting in {:.1} s",
                w.arrivals,
                z.saturating_duration_since(Instant::now()).as_secs_f64()
            ),
            _ => String::new(),
        }
    ));
    let setup_end = ms_since(t0);
    clock.push("setup", 0, setup_end);

    // load, with the sampler beside it
    let live = Arc::new(LiveStats::default());
    let phase = Arc::new(Mutex::new(PhaseNow {
        name: "load",
        rush_arrivals,
    }));
    let sampled = Arc::new(Mutex::new(Sampled::default()));
    let (stop_tx, stop_rx) = watch::channel(false);
    let sampler = sample_loop(
        Sampler {
            fleet,
            t0,
            live: live.clone(),
            phase: phase.clone(),
            out: sampled.clone(),
            progress,
            subscribe_after: (profile.webhooks == Webhooks::AfterRush).then_some(rush_arrivals),
        },
        stop_rx,
    );
    // signed candidates: the load signs with the fleet's secret
    let candidate_tokens = crate::candidate_tokens::signer(profile).map_err(LoadError::Profile)?;
    let main = async {
        let load_start = ms_since(t0);
        let load_started = Instant::now();
        let targets = Targets {
            booking_urls: fleet.booking_urls.clone(),
            gateway_url: fleet.gateway_url.clone(),
        };
        // a shard's schedule starts at the shared zero; the bound counts
        // from the call
        let wait = zero.map_or(Duration::ZERO, |z| {
            z.saturating_duration_since(load_started)
        });
        let config = LoadConfig {
            out_dir: Some(dir.clone()),
            stop_by: wait + schedule_end(&arrivals) + LOAD_SLACK,
            start_at: zero,
            candidate_tokens: candidate_tokens.clone(),
        };
        // a shard's stream is every count-th arrival: `rate / count`
        let load_profile = match &sharding {
            Some(s) => load::LoadProfile {
                rate: profile.load.rate / f64::from(s.shard.count),
                late_rate: profile.load.late_rate / f64::from(s.shard.count),
                ..profile.load.clone()
            },
            None => profile.load.clone(),
        };
        let (load_done_tx, load_done_rx) = watch::channel(false);
        let load = async {
            let r = load::run(arrivals, targets, &load_profile, config, live.clone()).await;
            let _ = load_done_tx.send(true);
            r
        };
        let conductor_done = load_done_rx.clone();
        let conduct = async {
            match &conductor {
                Some(c) => {
                    say(&format!(
                        "faults: {} ({} fault(s))",
                        c.name,
                        c.schedule.faults.len()
                    ));
                    c.run(load_started, conductor_done).await
                }
                None => Vec::new(),
            }
        };
        let fire = async {
            match &kills {
                Some(k) => {
                    k.run(
                        live.clone(),
                        profile.load.rush_arrivals() as u64,
                        load_done_rx,
                    )
                    .await
                }
                None => Vec::new(),
            }
        };
        let (result, kill_records, fault_records) = tokio::join!(load, fire, conduct);
        for r in &kill_records {
            say(&r.describe(t0));
        }
        for r in &fault_records {
            say(&format!(
                "fault {} ({} on {}): fired {}{}",
                r.fault,
                r.kind,
                r.target,
                r.fired,
                r.error
                    .as_deref()
                    .map(|e| format!(", error: {e}"))
                    .unwrap_or_default()
            ));
        }
        let load_end = ms_since(t0);
        if profile.webhooks == Webhooks::AfterRush {
            // the rush's arrivals may not all have started (a bound hit)
            fleet.subscribe_webhooks();
        }
        // shard 0 closes the sale once no shard starts a first booking
        if let (Some(z), true) = (zero, coordinates) {
            let end = shard::shared_end(z, whole_end);
            if end > Instant::now() {
                say("load done: waiting for the other shards' schedules to end");
                tokio::time::sleep_until(end.into()).await;
            }
        }
        let settle_start = ms_since(t0);
        let (closed, settled) = if coordinates {
            // settle
            phase.lock().name = "settle";
            say("load done: closing the sale and letting it finish");
            let closed = fleet.close().await;
            (closed, settle(fleet, profile).await)
        } else {
            say("load done: shard 0 closes, settles and audits the sale");
            let now = fleet.snapshot(false).await;
            (Ok(()), now.map(|snap| (Leftovers::default(), 0, snap)))
        };
        let settle_end = ms_since(t0);
        let _ = stop_tx.send(true);
        (
            result,
            (load_start, load_started.duration_since(t0)),
            (load_end, settle_start, settle_end),
            closed,
            settled,
            kill_records,
            fault_records,
        )
    };
    let (
        (
            result,
            (load_start, load_offset),
            (load_end, settle_start, settle_end),
            closed,
            settled,
            kill_records,
            fault_records,
        ),
        (),
    ) = tokio::join!(main, sampler);
    let result = result?;
    closed?;
    let (leftovers, settle_waited_ms, last) = settled?;
    let (rush_from, rush_to) = result.rush_window;
    clock.push(
        "rush",
        load_start + rush_from.as_millis() as u64,
        load_start + rush_to.as_millis() as u64,
    );
    clock.push("late", load_start + rush_to.as_millis() as u64, load_end);
    if settle_start > load_end {
        clock.push("shards_end", load_end, settle_start);
    }
    if coordinates {
        clock.push("settle", settle_start, settle_end);
    }

    // audit
    let audit_start = ms_since(t0);
    let final_snap = if coordinates {
        say("audit");
        // the document as the counters stand now (the audit compares them)
        fleet.publish_status().await?;
        fleet.snapshot(true).await?
    } else {
        last.clone()
    };
    let sampled = std::mem::take(&mut *sampled.lock());
    let mut peaks = sampled.peaks;
    record_peaks(&mut peaks, &final_snap);
    record_peaks(&mut peaks, &last);
    // the rush's starts on this run's clock (a merge of shards lines them up)
    let on_clock = |d: Duration| (load_offset + d).as_secs_f64() * 1_000.0;
    let mut load_figures = result.figures.clone();
    load_figures.rush_first_ms = on_clock(rush_from);
    load_figures.rush_last_ms = on_clock(rush_to);
    let measured = Measured {
        load: load_figures,
        queue_age_max_ms: fleet.queue_observable().then_some(sampled.queue_age_max_ms),
        queue_samples: sampled.queue_samples,
        peaks,
        first_asks,
        leftovers,
        settle_waited_ms,
        approved_told_not_paid: result.payments.approved_told_not_paid,
        redis_pools: fleet.redis_pools().await,
    };
    // a fault schedule relaxes the bounds it names, and says so
    let (judged, relaxed) = match &conductor {
        Some(c) => {
            let (thresholds, relaxed) =
                thresholds::relaxed(&profile.thresholds, &c.schedule.relax, &c.name);
            let mut p = profile.clone();
            p.thresholds = thresholds;
            (std::borrow::Cow::Owned(p), relaxed)
        }
        None => (std::borrow::Cow::Borrowed(profile), Vec::new()),
    };
    // a shard's rush is its share of the rush: so is its rate's floor
    let judged = match &sharded {
        Some(w) if w.rush > 0 => {
            let mut p = judged.into_owned();
            p.thresholds.rush_rate_min *= rush_arrivals as f64 / w.rush as f64;
            std::borrow::Cow::Owned(p)
        }
        _ => judged,
    };
    let (mut invariants, gateway_ledger) = if coordinates {
        verdicts_with_ledger(fleet, &judged, &measured).await?
    } else {
        (share_verdicts(&judged, &measured), None)
    };
    // Connection errors are not server errors (the load fails them over to
    // a live instance), so they are held to their own verdict on every run:
    // none at all without kills or process faults, none outside their
    // windows with them.
    let connection_errors = live.connection_error_times();
    if kills.is_some() {
        invariants.push(kills::kills_done(&kill_records, t0));
    }
    let mut excused = kills::kill_windows(&kill_records);
    excused.extend(conductor::windows(
        &fault_records,
        &[faults::Scope::Process],
        kills::WINDOW_GRACE,
    ));
    invariants.push(kills::connection_errors_outside(
        &connection_errors,
        &excused,
        t0,
    ));
    if conductor.is_some() {
        invariants.push(conductor::faults_done(&fault_records));
        invariants.push(conductor::server_errors_outside_faults(
            &live.server_error_spans(),
            &fault_records,
            t0,
        ));
    }
    if coordinates {
        clock.push("audit", audit_start, ms_since(t0));
    }

    // report
    let report_start = ms_since(t0);
    let holds = holds_created(&result);
    let mut sale = sale_figures(profile, &final_snap, holds, gateway_ledger.as_ref());
    // with a mail server, the emails are what it delivered, read back now
    // (after the audit, which read them too)
    if let (Some(m), true) = (fleet.mail(), coordinates) {
        let delivered = m.delivered().await?;
        let figures = crate::mail::figures(m.kind(), m.read_from(), &delivered, final_snap.paid);
        say(&format!(
            "mail: {} emails delivered by {} for {} PAID bookings",
            figures.delivered, figures.kind, figures.paid
        ));
        sale.emails = figures.delivered;
        sale.mail = Some(figures);
    }
    let passed = invariants.iter().all(|i| i.passed);
    let mut report = Report {
        schema: reports::SCHEMA,
        run_id: run_id.clone(),
        profile_name: profile.name.clone(),
        profile: profile.to_json(),
        seed: profile.seed,
        stack: fleet.stack_name.clone(),
        versions: versions(),
        started_at: started_at.to_rfc3339(),
        finished_at: String::new(),
        passed,
        phases: Vec::new(),
        load: measured.load.clone(),
        sale,
        queue: QueueFigures {
            oldest_age_max_ms: measured.queue_age_max_ms.unwrap_or(0),
            dead_letters: final_snap.dead_letters,
        },
        invariants,
        faults: kills::faults(&kill_records, &connection_errors, t0)
            .into_iter()
            .chain(conductor::report_faults(&fault_records, t0))
            .collect(),
        relaxed,
        timeline: sampled.timeline,
        files: result
            .goose_files
            .iter()
            .chain(&extra_files)
            .cloned()
            .collect(),
        shard: sharding.zip(sharded).map(|(s, w)| {
            let t0_unix_ms = shard::unix_ms(t0_wall);
            let since_t0 = |at: Instant| at.saturating_duration_since(t0).as_secs_f64() * 1_000.0;
            reports::ShardInfo {
                index: s.shard.index,
                count: s.shard.count,
                schedule: w.fingerprint,
                arrivals_total: w.arrivals,
                rate: profile.load.rate,
                target: profile.target.clone().unwrap_or_default(),
                t0_unix_ms,
                zero_unix_ms: t0_unix_ms + zero.map_or(0.0, since_t0),
                bounds: thresholds::merge_bounds(&profile.thresholds),
            }
        }),
        merged: None,
    };
    clock.push("report", report_start, ms_since(t0));
    report.phases = clock.phases;
    report.finished_at = chrono::Utc::now().to_rfc3339();
    write_report(&dir, &report)?;
    if progress == Progress::Lines {
        println!("{}", progress::summary(&report, &dir.display().to_string()));
    }
    Ok(Outcome {
        report,
        dir,
        measured,
    })
}

/// What a shard knows of the whole schedule.
#[derive(Debug, Clone)]
struct WholeSchedule {
    /// [`load::schedule::fingerprint`] of it.
    fingerprint: String,
    /// Its arrivals.
    arrivals: u64,
    /// Its rush arrivals.
    rush: u64,
}

/// The verdicts of a shard other than 0: only on its share of the load
/// (shard 0 judges the sale's state for the whole run).
fn share_verdicts(profile: &Profile, measured: &Measured) -> Vec<Verdict> {
    let t = &profile.thresholds;
    vec![
        thresholds::rush_rate(&measured.load, t),
        thresholds::booking_p99(&measured.load, t),
        thresholds::server_errors(&measured.load, t),
        thresholds::approved_payers_told_paid(measured.approved_told_not_paid),
    ]
}

/// When the last arrival is due.
fn schedule_end(arrivals: &[load::Arrival]) -> Duration {
    arrivals.iter().map(|a| a.at).max().unwrap_or_default()
}

/// Waits until the sale is quiet: nothing held, nothing queued, every
/// counted seat paid, nothing changing for `quiet_ms`, at most `max_ms`. Returns what was left, how
/// long it waited, and the last snapshot.
async fn settle(
    fleet: &Fleet,
    profile: &Profile,
) -> Result<(Leftovers, u64, Snapshot), FleetError> {
    let start = Instant::now();
    let max = Duration::from_millis(profile.settle.max_ms);
    let quiet_for = Duration::from_millis(profile.settle.quiet_ms);
    let poll = Duration::from_millis(profile.settle.poll_ms);
    let mut last = fleet.snapshot(false).await?;
    let mut unchanged_since = Instant::now();
    loop {
        tokio::time::sleep(poll).await;
        let snap = fleet.snapshot(false).await?;
        if snap.fingerprint() != last.fingerprint() {
            unchanged_since = Instant::now();
        }
        last = snap;
        let quiet = unchanged_since.elapsed() >= quiet_for;
        // nothing held, nothing queued, every counted seat a PAID record
        // (no pending admission left), no email owed, and still
        let done = quiet
            && last.held == 0
            && last.queued == 0
            && last.taken() == last.paid
            && last.emails_owed == 0;
        if done || start.elapsed() >= max {
            let left = Leftovers {
                overdue_holds: last.overdue_holds,
                queued: last.queued,
                quiet,
            };
            return Ok((left, start.elapsed().as_millis() as u64, last));
        }
    }
}

/// Every verdict of a run on `fleet`'s state now: the audit's invariants
/// (judged against the profile) and the rehearsal's own. The status
/// document is taken as it stands (the rehearsal publishes it first).
pub async fn verdicts(
    fleet: &Fleet,
    profile: &Profile,
    measured: &Measured,
) -> Result<Vec<Verdict>, RehearseError> {
    Ok(verdicts_with_ledger(fleet, profile, measured).await?.0)
}

async fn verdicts_with_ledger(
    fleet: &Fleet,
    profile: &Profile,
    measured: &Measured,
) -> Result<(Vec<Verdict>, Option<GatewayTruth>), RehearseError> {
    let t = &profile.thresholds;
    let ledger = fleet.gateway_ledger().await?;
    let audit = fleet.audit(ledger.as_ref()).await?;
    let mut out: Vec<Verdict> = audit
        .invariants
        .iter()
        .map(|i| thresholds::from_audit(i, t))
        .collect();
    out.push(thresholds::rush_rate(&measured.load, t));
    out.push(thresholds::booking_p99(&measured.load, t));
    if let Some(age) = measured.queue_age_max_ms {
        out.push(thresholds::queue_age(age, measured.queue_samples, t));
    }
    out.push(thresholds::server_errors(&measured.load, t));
    if !measured.redis_pools.is_empty() {
        out.push(thresholds::pool_waits(&measured.redis_pools, t));
    }
    let admissions = ledger.as_ref().and_then(|g| admissions(profile, g));
    let turned_away = admissions
        .as_ref()
        .map(|a| thresholds::turned_away(&measured.first_asks, &a.candidates));
    let peaks: Vec<LevelPeak> = profile
        .levels
        .iter()
        .map(|l| {
            let name = l.level.to_string();
            LevelPeak {
                cap: u64::from(l.cap),
                turned_away: turned_away
                    .as_ref()
                    .and_then(|t| t.get(&name).copied())
                    .unwrap_or(0),
                peak: measured.peaks.get(&name).copied().unwrap_or(0),
                level: name,
            }
        })
        .collect();
    // who was turned away is known from the gateway's ledger only
    if turned_away.is_some() {
        out.push(thresholds::at_cap_when_demand_exceeded(&peaks));
    }
    out.push(thresholds::never_above_cap(&peaks));
    out.push(thresholds::approved_payers_told_paid(
        measured.approved_told_not_paid,
    ));
    out.push(thresholds::sale_settled(
        measured.leftovers,
        measured.settle_waited_ms,
    ));
    Ok((out, ledger))
}

/// A price string (`"1500.00"`) in poisha.
pub fn price_poisha(price: &str) -> Option<u64> {
    let (whole, frac) = price.split_once('.').unwrap_or((price, ""));
    if frac.len() > 2 || whole.is_empty() {
        return None;
    }
    let whole: u64 = whole.parse().ok()?;
    let frac: u64 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<2}").parse().ok()?
    };
    whole.checked_mul(100)?.checked_add(frac)
}

/// Admissions per level that reached the gateway (a payment created), read
/// from the gateway's ledger: each payment's amount names its level, its
/// invoice number its candidate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Admissions {
    /// Payments created per level.
    pub count: BTreeMap<String, u64>,
    /// Candidates (hashes) admitted per level.
    pub candidates: BTreeMap<String, BTreeSet<String>>,
}

/// The [`Admissions`] in the gateway's ledger; `None` when two levels share
/// a price (an amount would not name one level).
pub fn admissions(profile: &Profile, ledger: &GatewayTruth) -> Option<Admissions> {
    let mut by_price: BTreeMap<u64, String> = BTreeMap::new();
    for l in &profile.levels {
        if by_price
            .insert(price_poisha(&l.price)?, l.level.to_string())
            .is_some()
        {
            return None;
        }
    }
    let mut out = Admissions::default();
    for p in &ledger.payments {
        let Some(level) = by_price.get(&p.amount_poisha) else {
            continue;
        };
        *out.count.entry(level.clone()).or_default() += 1;
        if let Some((_, c, _)) = booking::parse_invoice(&p.merchant_invoice_number) {
            out.candidates
                .entry(level.clone())
                .or_default()
                .insert(c.as_str().to_owned());
        }
    }
    Some(out)
}

/// Seats sold again after a release: per level, admissions beyond the cap
/// (each of those took a seat somebody else had held), summed.
pub fn resold(caps: &[(String, u64)], admissions: &BTreeMap<String, u64>) -> u64 {
    caps.iter()
        .map(|(level, cap)| {
            admissions
                .get(level)
                .copied()
                .unwrap_or(0)
                .saturating_sub(*cap)
        })
        .sum()
}

fn sale_figures(
    profile: &Profile,
    snap: &Snapshot,
    holds_created: u64,
    ledger: Option<&GatewayTruth>,
) -> SaleFigures {
    let counts: BTreeMap<String, u64> = snap
        .counters
        .as_ref()
        .map(|c| {
            c.levels
                .iter()
                .map(|l| (l.level.to_string(), u64::from(l.count)))
                .collect()
        })
        .unwrap_or_default();
    let levels: Vec<LevelFigures> = profile
        .levels
        .iter()
        .map(|l| {
            let name = l.level.to_string();
            LevelFigures {
                cap: u64::from(l.cap),
                taken: counts.get(&name).copied().unwrap_or(0),
                paid: snap.paid_per_level.get(&name).copied().unwrap_or(0),
                level: name,
            }
        })
        .collect();
    let caps: Vec<(String, u64)> = levels.iter().map(|l| (l.level.clone(), l.cap)).collect();
    let resold = ledger
        .and_then(|g| admissions(profile, g))
        .map_or(0, |a| resold(&caps, &a.count));
    SaleFigures {
        seats: profile.seats(),
        levels,
        holds_created,
        paid_by_path: snap.paid_by.clone(),
        released: holds_created.saturating_sub(snap.taken()),
        extended: snap.extensions,
        resold,
        alerts: snap.alerts,
        emails: snap.emails,
        mail: None,
    }
}

/// What ran: this crate's version, the build, the host, the commit.
fn versions() -> BTreeMap<String, String> {
    let mut v = BTreeMap::new();
    v.insert("scenarios".to_owned(), env!("CARGO_PKG_VERSION").to_owned());
    v.insert(
        "build".to_owned(),
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
        .to_owned(),
    );
    v.insert(
        "host".to_owned(),
        format!("{}-{}", std::env::consts::ARCH, std::env::consts::OS),
    );
    if let Ok(n) = std::thread::available_parallelism() {
        v.insert("cores".to_owned(), n.to_string());
    }
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|out| out.status.success());
    if let Some(out) = commit {
        v.insert(
            "git_commit".to_owned(),
            String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        );
    }
    v
}

/// Writes the run folder's report files: `report.json`, `report.html`,
/// `summary.md` ([`reports::write_run`]).
pub fn write_report(dir: &Path, report: &Report) -> Result<(), RehearseError> {
    reports::write_run(dir, report)
        .map(|_| ())
        .map_err(|e| RehearseError::Write(dir.to_owned(), e.to_string()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    /// A level full between two samples: the ledger's peak says so though
    /// the count sampled has fallen since; a ledger that keeps no peak (0)
    /// still gives its count.
    #[test]
    fn a_levels_peak_is_the_ledgers_high_water_mark_not_the_sample() {
        use booking::ledger::{Counters, LevelCount};
        let level = |name: &str, count, peak| LevelCount {
            level: booking::Level::parse(name).unwrap(),
            cap: 100,
            count,
            peak,
        };
        let snap = Snapshot::of_counters(Counters {
            open: true,
            levels: vec![level("front", 95, 100), level("back", 3, 0)],
            paid: 0,
        });
        let mut peaks = BTreeMap::from([("front".to_owned(), 97)]);
        record_peaks(&mut peaks, &snap);
        assert_eq!(
            peaks,
            BTreeMap::from([("back".to_owned(), 3), ("front".to_owned(), 100)])
        );
    }

    #[test]
    fn prices_read_as_poisha() {
        assert_eq!(price_poisha("1500.00"), Some(150_000));
        assert_eq!(price_poisha("1500"), Some(150_000));
        assert_eq!(price_poisha("0.5"), Some(50));
        assert_eq!(price_poisha("1.234"), None);
        assert_eq!(price_poisha("x"), None);
    }

    #[test]
    fn resold_seats_are_admissions_beyond_the_cap() {
        let caps = vec![("a".to_owned(), 10), ("b".to_owned(), 5)];
        let adm = BTreeMap::from([("a".to_owned(), 14), ("b".to_owned(), 3)]);
        assert_eq!(resold(&caps, &adm), 4);
    }

    #[test]
    fn admissions_are_read_per_level_from_amounts_and_invoices() {
        let p = Profile::default();
        let sale = booking::SaleId::parse("launch").unwrap();
        let (a, b, c) = (
            booking::CandidateHash::of("a"),
            booking::CandidateHash::of("b"),
            booking::CandidateHash::of("c"),
        );
        let inv = |c: &booking::CandidateHash, ms| booking::invoice_number(&sale, c, ms);
        let ledger = GatewayTruth::from_value(&json!({"payments": [
            {"paymentID": "1", "amountPoisha": 500_000, "state": "Completed", "merchantInvoiceNumber": inv(&a, 1)},
            {"paymentID": "2", "amountPoisha": 500_000, "state": "Cancelled", "merchantInvoiceNumber": inv(&b, 2)},
            {"paymentID": "3", "amountPoisha": 50_000, "state": "Initiated", "merchantInvoiceNumber": inv(&a, 3)},
            {"paymentID": "4", "amountPoisha": 1, "state": "Initiated", "merchantInvoiceNumber": inv(&c, 4)},
            {"paymentID": "5", "amountPoisha": 500_000, "state": "Initiated", "merchantInvoiceNumber": "not-an-invoice"},
        ]}))
        .unwrap();
        let got = admissions(&p, &ledger).unwrap();
        assert_eq!(
            got.count.get("floor"),
            Some(&3),
            "a payment counts, its invoice or not"
        );
        assert_eq!(got.count.get("gallery"), Some(&1));
        assert_eq!(
            got.candidates["floor"],
            BTreeSet::from([a.as_str().to_owned(), b.as_str().to_owned()]),
            "an unreadable invoice names nobody"
        );
        assert!(!got.count.contains_key("lower"));
        let mut shared = Profile::default();
        shared.levels[1].price = shared.levels[0].price.clone();
        assert!(admissions(&shared, &ledger).is_none());
    }
}
