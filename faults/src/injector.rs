//! The injector every wrapper of a run shares: the schedule, the seeded coins,
//! the run's clock and the fault log.
//!
//! A wrapper asks [`Injector::intercept`] before each call; the injector finds
//! the faults active for that call, tosses their coins, sleeps for latencies
//! and hangs (on `tokio::time`, so paused-time tests run instantly), logs every
//! fault that fired and says how the call ends. The log is bounded; the
//! per-fault counts are not.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use booking::Clock;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::schedule::{Decider, FaultKind, KillPoint, Schedule, Target};

/// Fired faults the log keeps by default; later ones are only counted.
pub const LOG_MAX_DEFAULT: usize = 10_000;

/// What a fired fault did to the call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "effect", rename_all = "snake_case")]
pub enum Effect {
    /// The call waited, then went on.
    Delayed {
        /// How long, ms.
        ms: u64,
    },
    /// The dependency did not answer for a while, then did.
    Hung {
        /// How long, ms.
        ms: u64,
    },
    /// The call failed at once.
    Failed,
    /// The call waited, then failed as timed out.
    TimedOut {
        /// How long it waited, ms.
        after_ms: u64,
    },
    /// The call failed as throttled.
    Throttled,
    /// The answer was lost.
    Reset {
        /// Whether the call reached the backend first (a write took effect).
        applied: bool,
    },
    /// The clock read off (logged once per window).
    Skewed {
        /// By how much, ms.
        ms: i64,
    },
    /// The instance reached an armed kill point and was killed.
    Killed {
        /// The point.
        point: KillPoint,
    },
}

/// One fault that fired on one call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FiredFault {
    /// When, ms from the run's start.
    pub at_ms: u64,
    /// The fault's name.
    pub fault: String,
    /// Its position in the schedule.
    pub fault_index: usize,
    /// The port.
    pub target: Target,
    /// The method.
    pub op: String,
    /// The instance the wrapper belongs to, if labelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// What it did.
    #[serde(flatten)]
    pub effect: Effect,
}

/// One fault's totals over the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultCount {
    /// The fault's name.
    pub fault: String,
    /// Its kind (`latency`, `error`, …).
    pub kind: String,
    /// The port.
    pub target: Target,
    /// Calls it was active on (coins tossed).
    pub calls: u64,
    /// Calls it fired on.
    pub fired: u64,
    /// Resets whose call reached the backend.
    pub resets_applied: u64,
    /// Delay it added (latencies, hangs, timeouts), ms.
    pub delayed_ms: u64,
}

/// How a call ends, as the injector decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// No failing fault fired: make the call (after the delays already slept).
    Proceed {
        /// Time already spent in injected delays.
        spent: Duration,
    },
    /// The call fails without reaching the backend.
    Fail {
        /// The fault's name.
        fault: String,
        /// How.
        failure: Failure,
    },
    /// The answer is lost: make the call first if `applied`, then fail.
    Reset {
        /// The fault's name.
        fault: String,
        /// Whether the call reaches the backend.
        applied: bool,
    },
}

/// How an injected failure surfaces; each port maps it to its own error type
/// (see [`crate::wrappers`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Unreachable or failed.
    Error,
    /// No answer within `after_ms`.
    Timeout {
        /// ms waited.
        after_ms: u64,
    },
    /// Over the backend's throughput.
    Throttle,
    /// The connection dropped with the outcome unknown.
    Reset,
}

#[derive(Debug)]
struct Log {
    max: usize,
    fired: Vec<FiredFault>,
    dropped: u64,
    counts: Vec<FaultCount>,
    /// Per fault, the last window a clock skew was logged for.
    skew_logged: Vec<Option<u64>>,
}

/// What an instance does when it reaches an armed kill point: the booking
/// server raises SIGKILL on itself; it is given the fault's name.
pub type Killer = Arc<dyn Fn(&str) + Send + Sync>;

/// `start_ms` of an injector whose run has not started: no fault is active.
const DORMANT: u64 = u64::MAX;

/// The faults of one run, shared by all its wrappers.
pub struct Injector {
    schedule: Schedule,
    decider: Decider,
    clock: Arc<dyn Clock>,
    /// The run's start on `clock`, ms; [`DORMANT`] until it starts.
    start_ms: AtomicU64,
    calls: Vec<AtomicU64>,
    log: Mutex<Log>,
    killer: Option<Killer>,
    /// Whether any fault is a kill at a point (else `after_call` is free).
    kill_points: bool,
}

impl std::fmt::Debug for Injector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Injector")
            .field("faults", &self.schedule.faults.len())
            .field("seed", &self.decider.seed())
            .field("start_ms", &self.start_ms.load(Ordering::Relaxed))
            .field("killer", &self.killer.is_some())
            .finish()
    }
}

impl Injector {
    /// An injector for `schedule` (validate it first) with coins from `seed`.
    /// Fault times count from now on `clock`, which must not itself be a
    /// [`crate::wrappers::SkewedClock`] of this injector.
    pub fn new(schedule: Schedule, seed: u64, clock: Arc<dyn Clock>) -> Injector {
        Injector::with_log_max(schedule, seed, clock, LOG_MAX_DEFAULT)
    }

    /// Like [`Injector::new`], keeping at most `log_max` fired faults.
    pub fn with_log_max(
        schedule: Schedule,
        seed: u64,
        clock: Arc<dyn Clock>,
        log_max: usize,
    ) -> Injector {
        let start_ms = clock.now_ms();
        let counts = schedule
            .faults
            .iter()
            .map(|f| FaultCount {
                fault: f.name.clone(),
                kind: f.kind.name().to_owned(),
                target: f.target,
                calls: 0,
                fired: 0,
                resets_applied: 0,
                delayed_ms: 0,
            })
            .collect();
        Injector {
            killer: None,
            kill_points: schedule
                .faults
                .iter()
                .any(|f| matches!(f.kind, FaultKind::Kill { point: Some(_) })),
            calls: schedule.faults.iter().map(|_| AtomicU64::new(0)).collect(),
            log: Mutex::new(Log {
                max: log_max,
                fired: Vec::new(),
                dropped: 0,
                counts,
                skew_logged: vec![None; schedule.faults.len()],
            }),
            schedule,
            decider: Decider::new(seed),
            clock,
            start_ms: AtomicU64::new(start_ms),
        }
    }

    /// Like [`Injector::new`], but nothing is active until
    /// [`Injector::start_at`] says when the run started (a booking instance
    /// is started before the rehearsal's load, which the schedule's times
    /// count from).
    pub fn dormant(schedule: Schedule, seed: u64, clock: Arc<dyn Clock>) -> Injector {
        let injector = Injector::new(schedule, seed, clock);
        injector.start_ms.store(DORMANT, Ordering::SeqCst);
        injector
    }

    /// Sets the run's start, ms on the injector's clock (Unix ms for the
    /// system clock); the schedule's windows count from it.
    pub fn start_at(&self, start_ms: u64) {
        assert_ne!(start_ms, DORMANT, "a start of u64::MAX ms is no start");
        self.start_ms.store(start_ms, Ordering::SeqCst);
    }

    /// The run's start, ms on the injector's clock; `None` while dormant.
    pub fn started_at(&self) -> Option<u64> {
        Some(self.start_ms.load(Ordering::SeqCst)).filter(|s| *s != DORMANT)
    }

    /// Arms the kill points: `killer` runs when an instance passes a point
    /// a `kill` fault names inside its window.
    pub fn with_killer(mut self, killer: Killer) -> Injector {
        self.killer = Some(killer);
        self
    }

    /// Ms since the run started; `None` while dormant.
    fn elapsed(&self) -> Option<u64> {
        let start = self.started_at()?;
        Some(self.clock.now_ms().saturating_sub(start))
    }

    /// The schedule.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// The run seed.
    pub fn seed(&self) -> u64 {
        self.decider.seed()
    }

    /// Now, ms from the run's start (0 while dormant).
    pub fn now_ms(&self) -> u64 {
        self.elapsed().unwrap_or(0)
    }

    /// The fired faults kept, in firing order.
    pub fn fired(&self) -> Vec<FiredFault> {
        self.log.lock().fired.clone()
    }

    /// Fired faults not kept because the log was full.
    pub fn dropped(&self) -> u64 {
        self.log.lock().dropped
    }

    /// Every fault's totals, in schedule order.
    pub fn counts(&self) -> Vec<FaultCount> {
        self.log.lock().counts.clone()
    }

    fn record(&self, fired: FiredFault) {
        tracing::debug!(
            fault = %fired.fault,
            target = %fired.target,
            op = %fired.op,
            effect = ?fired.effect,
            "fault fired"
        );
        let mut log = self.log.lock();
        if let Some(c) = log.counts.get_mut(fired.fault_index) {
            c.fired += 1;
            match fired.effect {
                Effect::Delayed { ms } | Effect::Hung { ms } => c.delayed_ms += ms,
                Effect::TimedOut { after_ms } => c.delayed_ms += after_ms,
                Effect::Reset { applied: true } => c.resets_applied += 1,
                _ => {}
            }
        }
        if log.fired.len() < log.max {
            log.fired.push(fired);
        } else {
            log.dropped += 1;
        }
    }

    fn note_call(&self, index: usize) -> u64 {
        let call = self
            .calls
            .get(index)
            .map_or(0, |c| c.fetch_add(1, Ordering::SeqCst));
        if let Some(c) = self.log.lock().counts.get_mut(index) {
            c.calls += 1;
        }
        call
    }

    /// Decides how a call to `op` of `target` from `instance` goes: sleeps
    /// through the latencies and hangs that fire, and stops at the first
    /// failing fault that fires. With a `budget` (the gateway's `within`), the
    /// delays are cut at the budget and the call fails as timed out there.
    pub async fn intercept(
        &self,
        target: Target,
        op: &str,
        instance: Option<&str>,
        budget: Option<Duration>,
    ) -> Verdict {
        let Some(arrived_ms) = self.elapsed() else {
            return Verdict::Proceed {
                spent: Duration::ZERO,
            };
        };
        let active: Vec<usize> = self
            .schedule
            .active_for(arrived_ms, target, op, instance)
            .into_iter()
            .map(|(i, _)| i)
            .collect();
        let mut spent = Duration::ZERO;
        for index in active {
            let Some(spec) = self.schedule.faults.get(index) else {
                continue;
            };
            let call = self.note_call(index);
            let decision = self.decider.decide(spec, index, call);
            if !decision.fires {
                continue;
            }
            let fired = |effect: Effect| FiredFault {
                at_ms: self.now_ms(),
                fault: spec.name.clone(),
                fault_index: index,
                target,
                op: op.to_owned(),
                instance: instance.map(str::to_owned),
                effect,
            };
            let (wait_ms, fail) = match spec.kind {
                FaultKind::Latency { .. } => {
                    self.record(fired(Effect::Delayed {
                        ms: decision.delay_ms,
                    }));
                    (decision.delay_ms, None)
                }
                FaultKind::Hang { ms } => {
                    let ms = ms.unwrap_or_else(|| {
                        spec.window_at(arrived_ms)
                            .map_or(0, |(_, _, closes)| closes.saturating_sub(self.now_ms()))
                    });
                    self.record(fired(Effect::Hung { ms }));
                    (ms, None)
                }
                FaultKind::Timeout { after_ms } => {
                    self.record(fired(Effect::TimedOut { after_ms }));
                    (after_ms, Some(Failure::Timeout { after_ms }))
                }
                FaultKind::Error => {
                    self.record(fired(Effect::Failed));
                    (0, Some(Failure::Error))
                }
                FaultKind::Throttle => {
                    self.record(fired(Effect::Throttled));
                    (0, Some(Failure::Throttle))
                }
                FaultKind::Reset => {
                    self.record(fired(Effect::Reset {
                        applied: decision.applied,
                    }));
                    return Verdict::Reset {
                        fault: spec.name.clone(),
                        applied: decision.applied,
                    };
                }
                // only the clock reads skews, and the other kinds act on
                // processes, links and rules: validation keeps them off the
                // ports
                FaultKind::ClockSkew { .. }
                | FaultKind::Kill { .. }
                | FaultKind::Pause
                | FaultKind::Restart
                | FaultKind::Bandwidth { .. }
                | FaultKind::SlowClose { .. }
                | FaultKind::Slicer { .. }
                | FaultKind::Rule => (0, None),
            };
            let wait = Duration::from_millis(wait_ms);
            if let Some(budget) = budget {
                let left = budget.saturating_sub(spent);
                if wait >= left && (wait > Duration::ZERO || left == Duration::ZERO) {
                    tokio::time::sleep(left).await;
                    return Verdict::Fail {
                        fault: spec.name.clone(),
                        failure: Failure::Timeout {
                            after_ms: budget.as_millis() as u64,
                        },
                    };
                }
            }
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
                spent += wait;
            }
            if let Some(failure) = fail {
                return Verdict::Fail {
                    fault: spec.name.clone(),
                    failure,
                };
            }
        }
        Verdict::Proceed { spent }
    }

    /// The skew of the clock of `instance` now, ms: the sum of the active
    /// `clock_skew` faults. Logged once per fault window.
    pub fn skew_ms(&self, instance: Option<&str>) -> i64 {
        let Some(now) = self.elapsed() else {
            return 0;
        };
        let mut total = 0i64;
        for (index, spec) in self
            .schedule
            .active_for(now, Target::Clock, "now_ms", instance)
        {
            let FaultKind::ClockSkew { ms } = spec.kind else {
                continue;
            };
            total = total.saturating_add(ms);
            let repetition = spec.window_at(now).map(|(r, _, _)| r);
            let first_read = {
                let mut log = self.log.lock();
                if let Some(c) = log.counts.get_mut(index) {
                    c.calls += 1;
                }
                match log.skew_logged.get_mut(index) {
                    Some(last) if *last != repetition => {
                        *last = repetition;
                        true
                    }
                    _ => false,
                }
            };
            if first_read {
                self.record(FiredFault {
                    at_ms: now,
                    fault: spec.name.clone(),
                    fault_index: index,
                    target: Target::Clock,
                    op: "now_ms".into(),
                    instance: instance.map(str::to_owned),
                    effect: Effect::Skewed { ms },
                });
            }
        }
        total
    }
}

impl Injector {
    /// Called by a wrapper after `op` of `target` returned (`ok`: it
    /// succeeded): if a `kill` fault with a point at this call is active for
    /// `instance`, logs it and runs the killer (which does not return in a
    /// booking server). Without a killer the point is logged and the call
    /// goes on.
    pub fn after_call(&self, target: Target, op: &str, instance: Option<&str>, ok: bool) {
        if !self.kill_points {
            return;
        }
        let Some(now) = self.elapsed() else {
            return;
        };
        for (index, spec) in self
            .schedule
            .active_for(now, Target::Instance, "", instance)
        {
            let FaultKind::Kill { point: Some(point) } = spec.kind else {
                continue;
            };
            if point.site() != (target, op) || (point.needs_success() && !ok) {
                continue;
            }
            self.note_call(index);
            self.record(FiredFault {
                at_ms: now,
                fault: spec.name.clone(),
                fault_index: index,
                target: Target::Instance,
                op: op.to_owned(),
                instance: instance.map(str::to_owned),
                effect: Effect::Killed { point },
            });
            match &self.killer {
                Some(kill) => {
                    tracing::warn!(fault = %spec.name, %point, "kill point reached: killing this instance");
                    kill(&spec.name);
                }
                None => {
                    tracing::warn!(fault = %spec.name, %point, "kill point reached, but nothing to kill")
                }
            }
        }
    }
}

/// A [`Clock`] that follows `tokio::time` (so it stops and jumps with paused
/// time in tests), reading `epoch_ms` when made.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    base: tokio::time::Instant,
    epoch_ms: u64,
}

impl TokioClock {
    /// A clock reading `epoch_ms` now.
    pub fn new(epoch_ms: u64) -> TokioClock {
        TokioClock {
            base: tokio::time::Instant::now(),
            epoch_ms,
        }
    }
}

impl Clock for TokioClock {
    fn now_ms(&self) -> u64 {
        self.epoch_ms
            .saturating_add(self.base.elapsed().as_millis() as u64)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::schedule::{Delay, FaultSpec};
    use booking::ManualClock;

    fn spec(name: &str, target: Target, kind: FaultKind) -> FaultSpec {
        FaultSpec {
            name: name.into(),
            target,
            ops: None,
            instances: None,
            kind,
            start_ms: 0,
            duration_ms: 1_000,
            every_ms: None,
            probability: 1.0,
            stream: None,
            rule: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn delays_add_up_and_the_first_failure_ends_the_call() {
        let schedule = Schedule {
            faults: vec![
                spec(
                    "slow",
                    Target::Ledger,
                    FaultKind::Latency {
                        delay: Delay::Fixed { ms: 30 },
                    },
                ),
                spec("down", Target::Ledger, FaultKind::Error),
                spec("throttled", Target::Ledger, FaultKind::Throttle),
            ],
            ..Schedule::default()
        };
        schedule.validate().unwrap();
        let inj = Injector::new(schedule, 1, Arc::new(TokioClock::new(5_000)));
        let t0 = tokio::time::Instant::now();
        let v = inj.intercept(Target::Ledger, "admit", None, None).await;
        assert_eq!(
            v,
            Verdict::Fail {
                fault: "down".into(),
                failure: Failure::Error
            }
        );
        assert_eq!(t0.elapsed(), Duration::from_millis(30));
        let counts = inj.counts();
        assert_eq!(
            (counts[0].fired, counts[1].fired, counts[2].fired),
            (1, 1, 0)
        );
        assert_eq!(counts[2].calls, 0, "never reached");
        assert_eq!(counts[0].delayed_ms, 30);
        assert_eq!(inj.fired().len(), 2);
        assert_eq!(inj.fired()[1].at_ms, 30);
        let json = serde_json::to_value(&inj.fired()[0]).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"at_ms": 0, "fault": "slow", "fault_index": 0,
                "target": "ledger", "op": "admit", "effect": "delayed", "ms": 30})
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_budget_cuts_delays_and_turns_them_into_a_timeout() {
        let schedule = Schedule {
            faults: vec![spec(
                "slow",
                Target::Gateway,
                FaultKind::Latency {
                    delay: Delay::Fixed { ms: 500 },
                },
            )],
            ..Schedule::default()
        };
        let inj = Injector::new(schedule, 1, Arc::new(TokioClock::new(0)));
        let t0 = tokio::time::Instant::now();
        let v = inj
            .intercept(
                Target::Gateway,
                "execute",
                None,
                Some(Duration::from_millis(200)),
            )
            .await;
        assert_eq!(
            v,
            Verdict::Fail {
                fault: "slow".into(),
                failure: Failure::Timeout { after_ms: 200 }
            }
        );
        assert_eq!(t0.elapsed(), Duration::from_millis(200));
        let v = inj
            .intercept(
                Target::Gateway,
                "execute",
                None,
                Some(Duration::from_millis(900)),
            )
            .await;
        assert_eq!(
            v,
            Verdict::Proceed {
                spent: Duration::from_millis(500)
            }
        );
    }

    #[test]
    fn the_log_is_bounded_but_the_counts_are_not() {
        let schedule = Schedule {
            faults: vec![spec(
                "skew",
                Target::Clock,
                FaultKind::ClockSkew { ms: -40 },
            )],
            ..Schedule::default()
        };
        let clock = ManualClock::new(1_000);
        let inj = Injector::with_log_max(schedule.clone(), 1, Arc::new(clock.clone()), 1);
        assert_eq!(inj.skew_ms(None), -40);
        assert_eq!(inj.skew_ms(Some("api-1")), -40);
        assert_eq!(inj.fired().len(), 1, "logged once per window");
        clock.advance_ms(1_000);
        assert_eq!(inj.skew_ms(None), 0, "window closed");
        assert_eq!(inj.counts()[0].calls, 2);

        let repeating = Schedule {
            faults: vec![FaultSpec {
                every_ms: Some(2_000),
                ..schedule.faults[0].clone()
            }],
            ..Schedule::default()
        };
        let clock = ManualClock::new(0);
        let inj = Injector::with_log_max(repeating, 1, Arc::new(clock.clone()), 1);
        assert_eq!(inj.skew_ms(None), -40);
        clock.advance_ms(2_000);
        assert_eq!(inj.skew_ms(None), -40);
        assert_eq!(inj.fired().len(), 1, "bounded");
        assert_eq!(inj.dropped(), 1);
        assert_eq!(inj.counts()[0].fired, 2);
    }

    #[test]
    fn a_dormant_injector_fires_nothing_until_its_run_starts() {
        let schedule = Schedule {
            faults: vec![spec("down", Target::Ledger, FaultKind::Error)],
            ..Schedule::default()
        };
        let clock = ManualClock::new(1_000);
        let inj = Injector::dormant(schedule, 1, Arc::new(clock.clone()));
        assert_eq!(inj.started_at(), None);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let call = || rt.block_on(inj.intercept(Target::Ledger, "admit", None, None));
        assert!(matches!(call(), Verdict::Proceed { .. }), "dormant");
        // the window is [0, 1_000) from the start
        inj.start_at(900);
        assert_eq!(inj.now_ms(), 100);
        assert!(matches!(call(), Verdict::Fail { .. }));
        clock.advance_ms(1_000);
        assert!(matches!(call(), Verdict::Proceed { .. }), "window closed");
    }

    #[test]
    fn an_armed_kill_point_runs_the_killer_once_per_passing_call_inside_its_window() {
        let mut kill = spec(
            "die",
            Target::Instance,
            FaultKind::Kill {
                point: Some(KillPoint::AfterEnqueue),
            },
        );
        kill.instances = Some(vec!["instance-1".into()]);
        kill.start_ms = 100;
        kill.duration_ms = 100;
        let schedule = Schedule {
            faults: vec![kill],
            ..Schedule::default()
        };
        schedule.validate().unwrap();
        let clock = ManualClock::new(0);
        let killed = Arc::new(Mutex::new(Vec::<String>::new()));
        let k = killed.clone();
        let inj = Injector::new(schedule, 1, Arc::new(clock.clone()))
            .with_killer(Arc::new(move |f: &str| k.lock().push(f.to_owned())));
        let site = |inj: &Injector, instance, ok| {
            inj.after_call(Target::Queue, "send", Some(instance), ok)
        };
        site(&inj, "instance-1", true);
        assert!(killed.lock().is_empty(), "before the window");
        clock.advance_ms(150);
        inj.after_call(Target::Ledger, "admit", Some("instance-1"), true);
        site(&inj, "instance-0", true);
        site(&inj, "instance-1", false);
        assert!(
            killed.lock().is_empty(),
            "another point, another instance, a failed send"
        );
        site(&inj, "instance-1", true);
        assert_eq!(*killed.lock(), vec!["die".to_owned()]);
        assert_eq!(inj.counts()[0].fired, 1);
        assert!(matches!(
            inj.fired()[0].effect,
            Effect::Killed {
                point: KillPoint::AfterEnqueue
            }
        ));
        clock.advance_ms(100);
        site(&inj, "instance-1", true);
        assert_eq!(killed.lock().len(), 1, "after the window");
    }
}
