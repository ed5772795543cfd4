//! A load spread over several generator processes:
//! `scenarios rehearse --target URL --shard INDEX/COUNT`.
//!
//! Every shard computes the whole seeded schedule and runs its part of it
//! ([`crate::load::schedule::shard`]: arrival `k` goes to shard
//! `k % COUNT`), against the same deployment, so the shards together send
//! exactly the unsharded schedule's arrivals, each once. The roles:
//!
//! - **Shard 0 coordinates.** It runs setup (`reset` → `load-candidates` →
//!   `open`), its own arrivals, then waits until every shard's schedule is
//!   over ([`shared_end`]: the schedule's last intended start plus the
//!   engine's drop grace, past which no shard starts a first booking),
//!   closes the sale, lets it settle (which waits for the other shards'
//!   holds to be paid or released) and runs the audit. Its report carries
//!   the audit's invariants and the verdicts on the sale's state (level
//!   peaks, turned away, settled) for the whole run.
//! - **The other shards** only load: they wait for the sale to open, run
//!   their arrivals with their payers and retries, sample the sale as it
//!   goes, and write a report of their share (no close, no settle, no
//!   audit).
//! - Every shard's verdicts on the load hold its share to its share of the
//!   rush-rate bound; `reports merge` judges the merged figures again
//!   against the whole run's bounds, which each shard writes down
//!   ([`reports::ShardInfo::bounds`]).
//!
//! The schedules start together in one of two ways ([`Start`]):
//!
//! - **rendezvous** (the default): shard 0 starts its schedule `lead` after
//!   it opened the sale; every other shard watches the sale's public status
//!   document (`GET /status.json`, which publishes nothing) every
//!   [`POLL`], must see the sale closed first, and starts its schedule
//!   `lead` after it sees it open with no seat taken (taking the middle of
//!   the last look that found it closed and the first that found it open).
//!   The shards then start within about half a poll and a round trip of
//!   each other. So every other shard
//!   must be watching before shard 0 opens the sale: one that first finds
//!   the sale open refuses to start, rather than start its schedule late.
//! - **`--start-at TIME`**: every shard is given the same wall-clock time
//!   (RFC 3339, or seconds since the Unix epoch) and starts its schedule
//!   then; shard 0 must have opened the sale by then, and the others check
//!   that it is open. For shards on several machines (a Kubernetes Indexed
//!   Job), whose start-up may be seconds apart; their clocks must agree.
//!
//! Sharded runs take no kills and no fault schedules, and need `--target`
//! (a shared deployment): an in-process fleet would be one per shard.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use booking::StatusDocument;

use crate::fleet::{Fleet, FleetError};
use crate::load::DROP_GRACE;
use crate::profile::{FleetKind, Profile};
use crate::rehearse::{self, Extras, Outcome, Progress, RehearseError, RunPlace};

/// From the sale's opening to the schedule's zero, by default.
pub const LEAD_DEFAULT: Duration = Duration::from_secs(3);
/// How long a shard other than 0 waits for the sale to open, by default.
pub const WAIT_MAX_DEFAULT: Duration = Duration::from_secs(600);
/// How often a waiting shard reads the status document (rendezvous).
pub const POLL: Duration = Duration::from_millis(20);
/// How often a shard reads it waiting for `--start-at`.
pub const POLL_AT: Duration = Duration::from_millis(200);
/// How long after `--start-at` a shard other than 0 waits for the sale to
/// be open.
pub const AT_GRACE: Duration = Duration::from_secs(5);
/// One read of the status document may take this long.
pub const STATUS_TIMEOUT: Duration = Duration::from_secs(2);
/// The most shards a load may be split into.
pub const COUNT_MAX: u32 = 1_000;

/// Which shard of how many: `INDEX/COUNT`, `0 <= INDEX < COUNT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This shard, from 0 (shard 0 coordinates).
    pub index: u32,
    /// Shards in all.
    pub count: u32,
}

impl Shard {
    /// Whether this shard sets the sale up, closes it and audits it.
    pub fn coordinates(&self) -> bool {
        self.index == 0
    }
}

impl FromStr for Shard {
    type Err = String;

    fn from_str(s: &str) -> Result<Shard, String> {
        let (i, n) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?} is not INDEX/COUNT (e.g. 0/4)"))?;
        let index: u32 = i
            .trim()
            .parse()
            .map_err(|_| format!("shard index {i:?} is not a number"))?;
        let count: u32 = n
            .trim()
            .parse()
            .map_err(|_| format!("shard count {n:?} is not a number"))?;
        if count == 0 || count > COUNT_MAX {
            return Err(format!("shard count {count} is not in 1..={COUNT_MAX}"));
        }
        if index >= count {
            return Err(format!(
                "shard index {index} is not below the count {count} (shards are 0..{count})"
            ));
        }
        Ok(Shard { index, count })
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// How the shards' schedules start together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// `lead` after shard 0 opened the sale, as each shard sees it.
    Rendezvous {
        /// From the opening to the schedule's zero.
        lead: Duration,
    },
    /// At this wall-clock time on every shard.
    At(SystemTime),
}

/// A shard's part in a sharded run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sharding {
    /// Which shard.
    pub shard: Shard,
    /// How the schedules start together.
    pub start: Start,
    /// How long a shard other than 0 waits for the sale to open.
    pub wait_max: Duration,
}

/// Why a shard could not start its schedule.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    /// The run cannot be sharded as asked.
    #[error("sharded run: {0}")]
    Invalid(String),
    /// The sale was open before this shard looked.
    #[error(
        "shard {shard}: the sale was already open ({taken} seats taken) when this shard first looked, so its opening time is unknown: start every shard before shard 0 opens the sale (shard 0 waits --shard-lead-ms after opening), or give every shard the same --start-at"
    )]
    AlreadyOpen {
        /// This shard.
        shard: Shard,
        /// Seats taken when first seen.
        taken: u64,
    },
    /// The sale opened and seats went before this shard saw it open.
    #[error(
        "shard {shard}: the sale was open with {taken} seats taken when this shard first saw it open: its polls were further apart than the lead"
    )]
    MissedOpening {
        /// This shard.
        shard: Shard,
        /// Seats taken when seen.
        taken: u64,
    },
    /// Waited too long.
    #[error("shard {shard}: the sale did not open within {waited:?} ({why})")]
    Timeout {
        /// This shard.
        shard: Shard,
        /// How long it waited.
        waited: Duration,
        /// What it last saw.
        why: String,
    },
    /// `--start-at` had passed when shard 0's setup was done.
    #[error(
        "shard 0 finished setting the sale up {late:?} after --start-at: give every shard a later --start-at"
    )]
    SetupLate {
        /// How late.
        late: Duration,
    },
    /// The target could not be read.
    #[error(transparent)]
    Fleet(#[from] FleetError),
}

/// `TIME` of `--start-at`: RFC 3339 (`2026-12-02T18:43:18Z`) or seconds
/// since the Unix epoch (`1796236998`, `1796236998.5`).
pub fn parse_start_at(s: &str) -> Result<SystemTime, String> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<f64>() {
        if !secs.is_finite() || secs < 0.0 {
            return Err(format!("{s:?}: seconds since the Unix epoch must be ≥ 0"));
        }
        return Ok(UNIX_EPOCH + Duration::from_secs_f64(secs));
    }
    let t = chrono::DateTime::parse_from_rfc3339(s).map_err(|e| {
        format!(
            "{s:?} is neither RFC 3339 (2026-12-02T18:43:18Z) nor seconds since the Unix epoch: {e}"
        )
    })?;
    let ms = u64::try_from(t.timestamp_millis())
        .map_err(|_| format!("{s:?} is before the Unix epoch"))?;
    Ok(UNIX_EPOCH + Duration::from_millis(ms))
}

/// `t` as ms since the Unix epoch.
pub fn unix_ms(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1_000.0)
}

/// The instant of wall-clock time `t`, read against the clocks now (now,
/// if `t` has passed).
pub fn instant_of(t: SystemTime) -> Instant {
    let (now, wall) = (Instant::now(), SystemTime::now());
    now + t.duration_since(wall).unwrap_or_default()
}

/// The wall clock at `at`, read against the clocks now.
pub fn wall_of(at: Instant) -> SystemTime {
    let (now, wall) = (Instant::now(), SystemTime::now());
    if at >= now {
        wall + (at - now)
    } else {
        wall - (now - at)
    }
}

/// When every shard's schedule is over: its last intended start plus the
/// drop grace, after which no shard starts a first booking. Shard 0 closes
/// the sale no sooner.
pub fn shared_end(zero: Instant, schedule_end: Duration) -> Instant {
    zero + schedule_end + DROP_GRACE
}

/// The sale as a waiting shard sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Look {
    /// No document published yet.
    Nothing,
    /// Closed.
    Closed,
    /// Open with `taken` seats taken.
    Open {
        /// Seats taken over every level.
        taken: u64,
    },
}

impl Look {
    /// What `doc` shows.
    pub fn of(doc: Option<&StatusDocument>) -> Look {
        match doc {
            None => Look::Nothing,
            Some(d) if !d.open => Look::Closed,
            Some(d) => Look::Open {
                taken: d.levels.iter().map(|l| u64::from(l.taken)).sum(),
            },
        }
    }
}

/// The rendezvous, one look at a time (pure).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rendezvous {
    seen_closed: bool,
}

/// What to do after a look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Look again.
    Wait,
    /// The sale just opened: start `lead` from now.
    Opened,
}

impl Rendezvous {
    /// The next step after seeing `look`.
    pub fn step(&mut self, shard: Shard, look: Look) -> Result<Step, ShardError> {
        match look {
            Look::Nothing => Ok(Step::Wait),
            Look::Closed => {
                self.seen_closed = true;
                Ok(Step::Wait)
            }
            Look::Open { taken } if !self.seen_closed => {
                Err(ShardError::AlreadyOpen { shard, taken })
            }
            Look::Open { taken: 0 } => Ok(Step::Opened),
            Look::Open { taken } => Err(ShardError::MissedOpening { shard, taken }),
        }
    }
}

/// Shard 0, the sale just opened: when the schedules start.
pub fn coordinator_zero(sharding: &Sharding) -> Result<Instant, ShardError> {
    match sharding.start {
        Start::Rendezvous { lead } => Ok(Instant::now() + lead),
        Start::At(t) => match SystemTime::now().duration_since(t) {
            Ok(late) if late > Duration::ZERO => Err(ShardError::SetupLate { late }),
            _ if instant_of(t) > Instant::now() + sharding.wait_max => Err(too_far(sharding)),
            _ => Ok(instant_of(t)),
        },
    }
}

fn too_far(sharding: &Sharding) -> ShardError {
    ShardError::Invalid(format!(
        "--start-at is more than --shard-wait-ms ({:?}) away",
        sharding.wait_max
    ))
}

/// The sale now, or why it could not be read.
async fn look(fleet: &Fleet) -> Result<Look, String> {
    match fleet.status_document(STATUS_TIMEOUT).await {
        Ok(doc) => Ok(Look::of(doc.as_ref())),
        Err(e) => Err(e.to_string()),
    }
}

/// A shard other than 0: waits for shard 0 to open the sale, then says
/// when the schedules start. The target not answering yet (still starting)
/// is waited out like a closed sale, until `wait_max`.
pub async fn await_zero(fleet: &Fleet, sharding: &Sharding) -> Result<Instant, ShardError> {
    let shard = sharding.shard;
    let started = Instant::now();
    let deadline = started + sharding.wait_max;
    let timeout = |last: &Result<Look, String>| ShardError::Timeout {
        shard,
        waited: started.elapsed(),
        why: match last {
            Ok(look) => format!("last seen: {look:?}"),
            Err(e) => format!("last error: {e}"),
        },
    };
    match sharding.start {
        Start::Rendezvous { lead } => {
            let mut rendezvous = Rendezvous::default();
            // when the last look that found the sale not open was sent
            let mut previous = Instant::now();
            loop {
                let sent = Instant::now();
                let seen = look(fleet).await;
                if let Ok(l) = seen {
                    if rendezvous.step(shard, l)? == Step::Opened {
                        // it opened after the previous look was sent and
                        // before this answer came: the middle is off by
                        // half of that
                        let now = Instant::now();
                        return Ok(previous + (now - previous) / 2 + lead);
                    }
                    previous = sent;
                }
                if Instant::now() >= deadline {
                    return Err(timeout(&seen));
                }
                tokio::time::sleep(POLL).await;
            }
        }
        Start::At(t) => {
            let zero = instant_of(t);
            if zero > deadline {
                return Err(too_far(sharding));
            }
            let until = zero + AT_GRACE;
            tokio::time::sleep_until(zero.into()).await;
            loop {
                let seen = look(fleet).await;
                if matches!(seen, Ok(Look::Open { .. })) {
                    return Ok(zero);
                }
                if Instant::now() >= until {
                    return Err(timeout(&seen));
                }
                tokio::time::sleep(POLL_AT).await;
            }
        }
    }
}

/// `scenarios rehearse --target URL --shard INDEX/COUNT`: one shard of the
/// load against the running deployment, into a run folder of its own
/// (`<UTC timestamp>-<seed>-shard<INDEX>of<COUNT>`).
pub async fn rehearse(
    profile: &Profile,
    progress: Progress,
    sharding: Sharding,
) -> Result<Outcome, RehearseError> {
    check(profile).map_err(|e| RehearseError::Shard(ShardError::Invalid(e)))?;
    let fleet = Fleet::start(profile).await?;
    let place = RunPlace::for_shard(profile, &sharding.shard)?;
    let extras = Extras {
        kills: None,
        conductor: None,
        files: Vec::new(),
        shard: Some(sharding),
    };
    let outcome = rehearse::run_with(&fleet, profile, progress, place, Some(extras)).await;
    fleet.stop().await;
    outcome
}

/// What a sharded run cannot do.
pub fn check(profile: &Profile) -> Result<(), String> {
    if profile.target.is_none() {
        return Err(
            "--shard needs --target URL: every shard loads the same running deployment".into(),
        );
    }
    if profile.fleet == FleetKind::Processes {
        return Err("--shard loads a --target, not a process fleet of its own".into());
    }
    if !profile.kills.is_empty() || profile.faults.is_some() {
        return Err("a sharded run takes no --kill and no --faults".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn shards_read_as_index_over_count() {
        assert_eq!(
            "1/4".parse::<Shard>().unwrap(),
            Shard { index: 1, count: 4 }
        );
        assert_eq!(" 0 / 1 ".parse::<Shard>().unwrap().to_string(), "0/1");
        assert!("0/1".parse::<Shard>().unwrap().coordinates());
        assert!(!"3/4".parse::<Shard>().unwrap().coordinates());
        for bad in ["4/4", "1/0", "1", "a/2", "1/b", "-1/2", "0/1001"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
        let e = "4/4".parse::<Shard>().unwrap_err();
        assert!(e.contains("0..4"), "{e}");
    }

    #[test]
    fn start_at_reads_rfc3339_or_unix_seconds() {
        let t = parse_start_at("2026-12-02T18:43:18.5Z").unwrap();
        assert_eq!(unix_ms(t), 1_796_236_998_500.0);
        assert_eq!(parse_start_at("1796236998.5").unwrap(), t);
        assert_eq!(
            parse_start_at("2026-12-02T19:43:18.5+01:00").unwrap(),
            t,
            "offsets honoured"
        );
        for bad in ["tomorrow", "-5", "2026-13-02T00:00:00Z", ""] {
            assert!(parse_start_at(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn wall_and_instant_clocks_convert_both_ways() {
        let later = SystemTime::now() + Duration::from_secs(30);
        let at = instant_of(later);
        let back = wall_of(at);
        let diff = back.duration_since(later).unwrap_or_else(|e| e.duration());
        assert!(diff < Duration::from_millis(50), "{diff:?}");
        // a time past is now
        let past = instant_of(SystemTime::now() - Duration::from_secs(30));
        assert!(past <= Instant::now());
        let end = shared_end(at, Duration::from_secs(10));
        assert_eq!(end - at, Duration::from_secs(10) + DROP_GRACE);
    }

    fn shard() -> Shard {
        Shard { index: 1, count: 2 }
    }

    #[test]
    fn the_rendezvous_starts_on_an_opening_it_saw() {
        let mut r = Rendezvous::default();
        assert_eq!(r.step(shard(), Look::Nothing).unwrap(), Step::Wait);
        assert_eq!(r.step(shard(), Look::Closed).unwrap(), Step::Wait);
        assert_eq!(r.step(shard(), Look::Closed).unwrap(), Step::Wait);
        assert_eq!(
            r.step(shard(), Look::Open { taken: 0 }).unwrap(),
            Step::Opened
        );
    }

    #[test]
    fn the_rendezvous_refuses_an_opening_it_did_not_see() {
        // open at the first look: when it opened is unknown
        let e = Rendezvous::default()
            .step(shard(), Look::Open { taken: 0 })
            .unwrap_err();
        assert!(matches!(e, ShardError::AlreadyOpen { taken: 0, .. }), "{e}");
        assert!(e.to_string().contains("--start-at"), "{e}");
        // seats went before the opening was seen
        let mut r = Rendezvous::default();
        r.step(shard(), Look::Closed).unwrap();
        let e = r.step(shard(), Look::Open { taken: 12 }).unwrap_err();
        assert!(
            matches!(e, ShardError::MissedOpening { taken: 12, .. }),
            "{e}"
        );
    }

    #[test]
    fn shard_zero_starts_lead_after_opening_or_at_the_time_given() {
        let lead = Duration::from_secs(3);
        let s = Sharding {
            shard: Shard { index: 0, count: 2 },
            start: Start::Rendezvous { lead },
            wait_max: WAIT_MAX_DEFAULT,
        };
        let before = Instant::now();
        let zero = coordinator_zero(&s).unwrap();
        assert!(zero >= before + lead && zero <= Instant::now() + lead);
        let at = SystemTime::now() + Duration::from_secs(20);
        let s = Sharding {
            start: Start::At(at),
            ..s
        };
        let zero = coordinator_zero(&s).unwrap();
        let off = zero.saturating_duration_since(Instant::now());
        assert!(
            off > Duration::from_secs(19) && off <= Duration::from_secs(20),
            "{off:?}"
        );
        let s = Sharding {
            start: Start::At(SystemTime::now() - Duration::from_secs(2)),
            ..s
        };
        assert!(matches!(
            coordinator_zero(&s),
            Err(ShardError::SetupLate { .. })
        ));
    }

    #[test]
    fn a_sharded_run_needs_a_target_and_takes_no_faults() {
        let mut p = Profile::default();
        assert!(check(&p).unwrap_err().contains("--target"));
        p.target = Some("http://127.0.0.1:1".into());
        check(&p).unwrap();
        p.faults = Some("headline".into());
        assert!(check(&p).unwrap_err().contains("--faults"));
        p.faults = None;
        p.fleet = FleetKind::Processes;
        assert!(check(&p).is_err());
    }
}
