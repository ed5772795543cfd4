//! Kills of a process fleet's instances during the rush: the `--kill SPEC`
//! grammar ([`KillSpec`], parsed by a pure function), the driver that fires
//! each kill when its share of the rush's arrivals has been sent and starts
//! the instance again after its down time ([`KillDriver`]), and the two
//! verdicts that keep the proof honest:
//!
//! | name | figure | passes when |
//! |---|---|---|
//! | `kills_done` | scheduled kills that did not happen, or whose instance did not come back and answer | at most 0 |
//! | `connection_errors_outside_kills` | connection errors seen by the load outside every kill's window (from the kill to [`WINDOW_GRACE`] after the instance answered again); on every run, so without kills any connection error fails it | at most 0 |
//!
//! A spec is `INSTANCE@rush=FRACTION[,down_ms=MS]`, e.g.
//! `0@rush=0.4,down_ms=1000`: SIGKILL instance 0 once 40 % of the rush's
//! arrivals have been sent, start it again (same port, same config) 1,000 ms
//! later.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use booking_audit::Verdict;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::load::LiveStats;

/// The down time when a spec gives none, ms.
pub const DOWN_MS_DEFAULT: u64 = 1_000;
/// The longest down time a spec may ask for, ms.
pub const DOWN_MS_MAX: u64 = 600_000;
/// A kill's window ends this long after its instance answered again (the
/// load balancer's health check needs a probe to see it back).
pub const WINDOW_GRACE: Duration = Duration::from_secs(1);
/// How often the driver looks at the arrivals sent.
pub const WATCH_EVERY: Duration = Duration::from_millis(2);
/// The name of the kills verdict.
pub const KILLS_DONE: &str = "kills_done";
/// The name of the connection-error verdict.
pub const CONNECTION_ERRORS_OUTSIDE_KILLS: &str = "connection_errors_outside_kills";

/// Why a kill spec was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum KillSpecError {
    /// No `@` between the instance and the moment.
    #[error(
        "kill {0:?}: expected INSTANCE@rush=FRACTION[,down_ms=MS], e.g. 0@rush=0.4,down_ms=1000"
    )]
    Shape(String),
    /// The instance is not a number.
    #[error("kill {spec:?}: instance {instance:?} is not a number (0 is the first instance)")]
    Instance {
        /// The spec.
        spec: String,
        /// What stood for the instance.
        instance: String,
    },
    /// A key other than `rush` and `down_ms`.
    #[error("kill {spec:?}: unknown key {key:?} (keys: rush, down_ms)")]
    UnknownKey {
        /// The spec.
        spec: String,
        /// The key.
        key: String,
    },
    /// A key given twice.
    #[error("kill {spec:?}: {key} given twice")]
    Duplicate {
        /// The spec.
        spec: String,
        /// The key.
        key: String,
    },
    /// A value that does not read, or is out of range.
    #[error("kill {spec:?}: {key}={value:?}: {why}")]
    Value {
        /// The spec.
        spec: String,
        /// The key.
        key: String,
        /// The value.
        value: String,
        /// What is wrong with it.
        why: String,
    },
    /// No `rush=` moment.
    #[error(
        "kill {0:?}: no moment: give rush=FRACTION (0.4: when 40 % of the rush's arrivals have been sent)"
    )]
    NoMoment(String),
}

/// One kill: which instance, when, for how long.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct KillSpec {
    /// The instance (0-based).
    pub instance: usize,
    /// The share of the rush's arrivals sent when it is killed, in `[0, 1]`.
    pub rush: f64,
    /// How long it stays down before it is started again.
    pub down: Duration,
}

impl KillSpec {
    /// The number of arrivals sent at which it fires, of `rush_arrivals`.
    pub fn at_arrivals(&self, rush_arrivals: u64) -> u64 {
        (self.rush * rush_arrivals as f64).round() as u64
    }
}

/// Parses `INSTANCE@rush=FRACTION[,down_ms=MS]` (keys in any order).
pub fn parse_kill(spec: &str) -> Result<KillSpec, KillSpecError> {
    let s = spec.trim();
    let (instance, rest) = s
        .split_once('@')
        .ok_or_else(|| KillSpecError::Shape(spec.to_owned()))?;
    let instance: usize = instance
        .trim()
        .parse()
        .map_err(|_| KillSpecError::Instance {
            spec: spec.to_owned(),
            instance: instance.to_owned(),
        })?;
    let mut rush: Option<f64> = None;
    let mut down_ms: Option<u64> = None;
    for part in rest.split(',') {
        let (key, value) = part
            .split_once('=')
            .ok_or_else(|| KillSpecError::Shape(spec.to_owned()))?;
        let (key, value) = (key.trim(), value.trim());
        let bad = |why: &str| KillSpecError::Value {
            spec: spec.to_owned(),
            key: key.to_owned(),
            value: value.to_owned(),
            why: why.to_owned(),
        };
        let duplicate = || KillSpecError::Duplicate {
            spec: spec.to_owned(),
            key: key.to_owned(),
        };
        match key {
            "rush" => {
                let f: f64 = value.parse().map_err(|_| bad("not a number"))?;
                if !(0.0..=1.0).contains(&f) {
                    return Err(bad("a share of the rush's arrivals, in [0, 1]"));
                }
                if rush.replace(f).is_some() {
                    return Err(duplicate());
                }
            }
            "down_ms" => {
                let ms: u64 = value.parse().map_err(|_| bad("not a whole number of ms"))?;
                if ms > DOWN_MS_MAX {
                    return Err(bad(&format!("at most {DOWN_MS_MAX} ms")));
                }
                if down_ms.replace(ms).is_some() {
                    return Err(duplicate());
                }
            }
            _ => {
                return Err(KillSpecError::UnknownKey {
                    spec: spec.to_owned(),
                    key: key.to_owned(),
                });
            }
        }
    }
    let rush = rush.ok_or_else(|| KillSpecError::NoMoment(spec.to_owned()))?;
    Ok(KillSpec {
        instance,
        rush,
        down: Duration::from_millis(down_ms.unwrap_or(DOWN_MS_DEFAULT)),
    })
}

impl FromStr for KillSpec {
    type Err = KillSpecError;

    fn from_str(s: &str) -> Result<KillSpec, KillSpecError> {
        parse_kill(s)
    }
}

impl fmt::Display for KillSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}@rush={},down_ms={}",
            self.instance,
            self.rush,
            self.down.as_millis()
        )
    }
}

impl TryFrom<String> for KillSpec {
    type Error = KillSpecError;

    fn try_from(s: String) -> Result<KillSpec, KillSpecError> {
        parse_kill(&s)
    }
}

impl From<KillSpec> for String {
    fn from(k: KillSpec) -> String {
        k.to_string()
    }
}

/// What happened to one scheduled kill.
#[derive(Debug, Clone, PartialEq)]
pub struct KillRecord {
    /// The spec.
    pub spec: KillSpec,
    /// Arrivals sent at which it was due.
    pub due_at_arrivals: u64,
    /// Arrivals sent when it fired (`None`: it never fired).
    pub fired_at_arrivals: Option<u64>,
    /// Just before SIGKILL was sent.
    pub killed_at: Option<Instant>,
    /// When the instance was started again.
    pub restarted_at: Option<Instant>,
    /// When the started instance first answered.
    pub answered_at: Option<Instant>,
    /// What went wrong, if anything.
    pub error: Option<String>,
}

impl KillRecord {
    fn due(spec: &KillSpec, rush_arrivals: u64) -> KillRecord {
        KillRecord {
            spec: spec.clone(),
            due_at_arrivals: spec.at_arrivals(rush_arrivals),
            fired_at_arrivals: None,
            killed_at: None,
            restarted_at: None,
            answered_at: None,
            error: None,
        }
    }

    /// Whether it fired and its instance came back and answered.
    pub fn done(&self) -> bool {
        self.killed_at.is_some() && self.answered_at.is_some() && self.error.is_none()
    }

    /// From the kill to [`WINDOW_GRACE`] after the instance answered again
    /// (open-ended if it never did); `None` if it never fired.
    pub fn window(&self) -> Option<(Instant, Option<Instant>)> {
        Some((self.killed_at?, self.answered_at.map(|a| a + WINDOW_GRACE)))
    }

    /// One line for a human.
    pub fn describe(&self, t0: Instant) -> String {
        let ms = |t: Option<Instant>| {
            t.map_or_else(
                || "never".to_owned(),
                |t| format!("{} ms", t.saturating_duration_since(t0).as_millis()),
            )
        };
        let mut s = format!(
            "kill {}: due at arrival {}, fired at {} (arrival {}), restarted at {}, answered at {}",
            self.spec,
            self.due_at_arrivals,
            ms(self.killed_at),
            self.fired_at_arrivals
                .map_or_else(|| "-".to_owned(), |n| n.to_string()),
            ms(self.restarted_at),
            ms(self.answered_at),
        );
        if let Some(e) = &self.error {
            s.push_str(&format!(": {e}"));
        }
        s
    }
}

/// `kills_done`: every scheduled kill happened and its instance came back
/// and answered.
pub fn kills_done(records: &[KillRecord], t0: Instant) -> Verdict {
    let missed: Vec<String> = records
        .iter()
        .filter(|r| !r.done())
        .map(|r| r.describe(t0))
        .collect();
    let mut v = Verdict::violations(KILLS_DONE, &missed, 0);
    if missed.is_empty() {
        v.detail = format!(
            "{} kill(s), each fired and its instance answered again",
            records.len()
        );
    }
    v
}

/// Every kill's window ([`KillRecord::window`]), for those that fired.
pub fn kill_windows(records: &[KillRecord]) -> Vec<(Instant, Option<Instant>)> {
    records.iter().filter_map(KillRecord::window).collect()
}

/// The connection errors outside every kill's window.
pub fn errors_outside(errors: &[Instant], records: &[KillRecord]) -> Vec<Instant> {
    crate::conductor::outside(errors, &kill_windows(records))
}

/// `connection_errors_outside_kills`: no connection error outside a kill's
/// window (`errors`: when each connection error was seen).
pub fn connection_errors_outside_kills(
    errors: &[Instant],
    records: &[KillRecord],
    t0: Instant,
) -> Verdict {
    connection_errors_outside(errors, &kill_windows(records), t0)
}

/// `connection_errors_outside_kills`: no connection error outside the
/// `windows` of the kills and process faults of the run.
pub fn connection_errors_outside(
    errors: &[Instant],
    windows: &[(Instant, Option<Instant>)],
    t0: Instant,
) -> Verdict {
    let outside: Vec<String> = crate::conductor::outside(errors, windows)
        .iter()
        .map(|e| {
            format!(
                "connection error at {} ms",
                e.saturating_duration_since(t0).as_millis()
            )
        })
        .collect();
    let mut v = Verdict::violations(CONNECTION_ERRORS_OUTSIDE_KILLS, &outside, 0);
    if outside.is_empty() {
        v.detail = format!(
            "{} connection error(s), all inside a kill's or a process fault's window",
            errors.len()
        );
    }
    v
}

/// A boxed future, for [`Restartable`].
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Instances that can be killed and started again (a process fleet).
pub trait Restartable: Send + Sync + fmt::Debug {
    /// SIGKILLs the instance and waits for it to be gone.
    fn kill(&self, instance: usize) -> BoxFuture<'_, Result<(), String>>;
    /// Starts the instance again (same port, same config); returns once it
    /// has started (not yet answering).
    fn restart(&self, instance: usize) -> BoxFuture<'_, Result<(), String>>;
    /// Waits until the instance answers.
    fn wait_answering(&self, instance: usize) -> BoxFuture<'_, Result<(), String>>;
    /// How many instances there are.
    fn instances(&self) -> usize;
}

/// Fires the kills of a run while the load runs.
#[derive(Debug, Clone)]
pub struct KillDriver {
    specs: Vec<KillSpec>,
    fleet: Arc<dyn Restartable>,
    /// One lock per instance: two kills of one instance never overlap.
    locks: Arc<Vec<tokio::sync::Mutex<()>>>,
}

impl KillDriver {
    /// A driver of `specs` on `fleet`; refuses a spec naming an instance the
    /// fleet does not have.
    pub fn new(specs: Vec<KillSpec>, fleet: Arc<dyn Restartable>) -> Result<KillDriver, String> {
        let n = fleet.instances();
        if let Some(bad) = specs.iter().find(|s| s.instance >= n) {
            return Err(format!(
                "kill {bad}: instance {} of a fleet of {n} (0 is the first)",
                bad.instance
            ));
        }
        Ok(KillDriver {
            specs,
            fleet,
            locks: Arc::new((0..n).map(|_| tokio::sync::Mutex::new(())).collect()),
        })
    }

    /// The specs.
    pub fn specs(&self) -> &[KillSpec] {
        &self.specs
    }

    /// Fires every kill when `live` has sent its share of `rush_arrivals`
    /// and starts its instance again after its down time. A kill not yet due
    /// when `load_done` turns true never fires; a kill under way is finished
    /// (its instance back and answering) before this returns.
    pub async fn run(
        &self,
        live: Arc<LiveStats>,
        rush_arrivals: u64,
        load_done: watch::Receiver<bool>,
    ) -> Vec<KillRecord> {
        let mut tasks = tokio::task::JoinSet::new();
        for (i, spec) in self.specs.iter().enumerate() {
            let this = self.clone();
            let spec = spec.clone();
            let live = live.clone();
            let done = load_done.clone();
            tasks.spawn(async move { (i, this.one(&spec, &live, rush_arrivals, done).await) });
        }
        let mut records: Vec<Option<KillRecord>> = vec![None; self.specs.len()];
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok((i, r)) => records[i] = Some(r),
                Err(e) => tracing::error!(error = %e, "kill task failed"),
            }
        }
        records
            .into_iter()
            .zip(&self.specs)
            .map(|(r, spec)| {
                r.unwrap_or_else(|| KillRecord {
                    error: Some("its task failed".into()),
                    ..KillRecord::due(spec, rush_arrivals)
                })
            })
            .collect()
    }

    async fn one(
        &self,
        spec: &KillSpec,
        live: &LiveStats,
        rush_arrivals: u64,
        mut load_done: watch::Receiver<bool>,
    ) -> KillRecord {
        let mut record = KillRecord::due(spec, rush_arrivals);
        let sent = || live.arrivals_started.load(Ordering::Relaxed);
        let mut tick = tokio::time::interval(WATCH_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while sent() < record.due_at_arrivals {
            tokio::select! {
                _ = load_done.wait_for(|d| *d) => {
                    record.error = Some(format!(
                        "the load ended at arrival {} before it was due",
                        sent()
                    ));
                    tracing::warn!(kill = %spec, "{}", record.error.as_deref().unwrap_or_default());
                    return record;
                }
                _ = tick.tick() => {}
            }
        }
        let _one_at_a_time = self.locks[spec.instance].lock().await;
        record.fired_at_arrivals = Some(sent());
        record.killed_at = Some(Instant::now());
        if let Err(e) = self.fleet.kill(spec.instance).await {
            record.error = Some(format!("kill: {e}"));
            return record;
        }
        tracing::info!(
            kill = %spec,
            arrivals = record.fired_at_arrivals.unwrap_or_default(),
            "instance {} killed (SIGKILL)",
            spec.instance
        );
        tokio::time::sleep(spec.down).await;
        if let Err(e) = self.fleet.restart(spec.instance).await {
            record.error = Some(format!("restart: {e}"));
            return record;
        }
        record.restarted_at = Some(Instant::now());
        tracing::info!(kill = %spec, "instance {} started again", spec.instance);
        match self.fleet.wait_answering(spec.instance).await {
            Ok(()) => {
                record.answered_at = Some(Instant::now());
                tracing::info!(
                    kill = %spec,
                    down_ms = record
                        .answered_at
                        .zip(record.killed_at)
                        .map(|(a, k)| a.saturating_duration_since(k).as_millis() as u64),
                    "instance {} answers again",
                    spec.instance
                );
            }
            Err(e) => record.error = Some(format!("after restart: {e}")),
        }
        record
    }
}

/// The report's fault entries of `records` (times since `t0`).
pub fn faults(
    records: &[KillRecord],
    connection_errors: &[Instant],
    t0: Instant,
) -> Vec<reports::Fault> {
    records
        .iter()
        .map(|r| {
            let at = r.killed_at.unwrap_or(t0);
            let in_window = r.window().map_or(0, |(from, to)| {
                connection_errors
                    .iter()
                    .filter(|e| **e >= from && to.is_none_or(|to| **e <= to))
                    .count()
            });
            let effect = match (r.fired_at_arrivals, r.answered_at) {
                (Some(n), Some(a)) => format!(
                    "fired at arrival {n} (due at {}); answered again {} ms after the kill; {in_window} connection error(s) in its window",
                    r.due_at_arrivals,
                    a.saturating_duration_since(at).as_millis()
                ),
                _ => format!(
                    "not done: {}",
                    r.error.as_deref().unwrap_or("never fired")
                ),
            };
            reports::Fault {
                at_ms: at.saturating_duration_since(t0).as_millis() as u64,
                duration_ms: r
                    .answered_at
                    .map_or(0, |a| a.saturating_duration_since(at).as_millis() as u64),
                what: format!("kill -9 ({})", r.spec),
                target: format!("instance-{}", r.spec.instance),
                effect,
                ..Default::default()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use parking_lot::Mutex;

    #[test]
    fn specs_parse_with_keys_in_any_order_and_a_default_down_time() {
        let k = parse_kill("0@rush=0.4,down_ms=1000").unwrap();
        assert_eq!(
            k,
            KillSpec {
                instance: 0,
                rush: 0.4,
                down: Duration::from_millis(1_000)
            }
        );
        let k = parse_kill(" 2@down_ms=250, rush=1 ").unwrap();
        assert_eq!((k.instance, k.rush, k.down.as_millis()), (2, 1.0, 250));
        let k = parse_kill("1@rush=0").unwrap();
        assert_eq!(k.down, Duration::from_millis(DOWN_MS_DEFAULT));
        assert_eq!(k.to_string(), "1@rush=0,down_ms=1000");
        assert_eq!(parse_kill(&k.to_string()).unwrap(), k, "round trip");
        assert_eq!(k.at_arrivals(1_200), 0);
        assert_eq!(parse_kill("0@rush=0.4").unwrap().at_arrivals(1_200), 480);
        assert_eq!(parse_kill("0@rush=0.1").unwrap().at_arrivals(5), 1);
    }

    #[test]
    fn bad_specs_are_refused_with_what_is_wrong() {
        let err = |s: &str| parse_kill(s).unwrap_err();
        assert!(matches!(err("rush=0.4"), KillSpecError::Shape(_)));
        assert!(matches!(err("a@rush=0.4"), KillSpecError::Instance { .. }));
        assert!(matches!(err("-1@rush=0.4"), KillSpecError::Instance { .. }));
        assert!(matches!(err("0@rush"), KillSpecError::Shape(_)));
        assert!(matches!(err("0@down_ms=5"), KillSpecError::NoMoment(_)));
        assert!(matches!(
            err("0@rush=0.4,when=1"),
            KillSpecError::UnknownKey { key, .. } if key == "when"
        ));
        assert!(matches!(
            err("0@rush=0.4,rush=0.5"),
            KillSpecError::Duplicate { .. }
        ));
        for bad in ["0@rush=1.5", "0@rush=-0.1", "0@rush=x", "0@rush=NaN"] {
            assert!(
                matches!(err(bad), KillSpecError::Value { key, .. } if key == "rush"),
                "{bad}"
            );
        }
        for bad in [
            "0@rush=0.4,down_ms=-1",
            "0@rush=0.4,down_ms=1.5",
            "0@rush=0.4,down_ms=600001",
        ] {
            assert!(
                matches!(err(bad), KillSpecError::Value { key, .. } if key == "down_ms"),
                "{bad}"
            );
        }
        let message = err("0@rush=2").to_string();
        assert!(
            message.contains("[0, 1]") && message.contains("0@rush=2"),
            "{message}"
        );
    }

    #[test]
    fn specs_read_from_a_profile_as_strings() {
        #[derive(Deserialize)]
        struct P {
            kills: Vec<KillSpec>,
        }
        let p: P = toml::from_str(r#"kills = ["1@rush=0.5,down_ms=20"]"#).unwrap();
        assert_eq!(p.kills[0].instance, 1);
        assert!(toml::from_str::<P>(r#"kills = ["1@rush=5"]"#).is_err());
        assert_eq!(
            serde_json::to_string(&p.kills[0]).unwrap(),
            "\"1@rush=0.5,down_ms=20\""
        );
    }

    fn record(spec: &str, killed: Option<u64>, answered: Option<u64>, t0: Instant) -> KillRecord {
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        KillRecord {
            fired_at_arrivals: killed.map(|_| 10),
            killed_at: killed.map(at),
            restarted_at: answered.map(at),
            answered_at: answered.map(at),
            ..KillRecord::due(&parse_kill(spec).unwrap(), 100)
        }
    }

    #[test]
    fn connection_errors_count_only_outside_every_kills_window() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let records = [
            record("0@rush=0.1", Some(1_000), Some(2_000), t0),
            record("1@rush=0.9", Some(5_000), None, t0),
        ];
        let errors = [
            at(999), // before the first kill: outside
            at(1_000),
            at(2_900), // within the grace after it answered
            at(3_100), // past the grace: outside
            at(9_000), // the second never answered: open window
        ];
        let outside = errors_outside(&errors, &records);
        assert_eq!(outside, vec![at(999), at(3_100)]);
        let v = connection_errors_outside_kills(&errors, &records, t0);
        assert!(!v.passed);
        assert_eq!(v.figure, 2.0);
        assert!(v.detail.contains("999 ms"), "{}", v.detail);
        let v = connection_errors_outside_kills(&errors[1..3], &records, t0);
        assert!(v.passed, "{v:?}");
        // with no kill, every connection error is outside
        assert_eq!(errors_outside(&errors, &[]).len(), errors.len());
    }

    #[test]
    fn kills_are_done_only_when_fired_and_answering_again() {
        let t0 = Instant::now();
        let good = record("0@rush=0.1", Some(10), Some(20), t0);
        assert!(kills_done(std::slice::from_ref(&good), t0).passed);
        let never = record("0@rush=0.5", None, None, t0);
        let dead = record("1@rush=0.5", Some(10), None, t0);
        let failed = KillRecord {
            error: Some("restart: no".into()),
            ..good.clone()
        };
        let v = kills_done(&[good, never, dead, failed], t0);
        assert!(!v.passed);
        assert_eq!(v.figure, 3.0);
        let f = faults(
            &[record("1@rush=0.2,down_ms=5", Some(100), Some(400), t0)],
            &[t0 + Duration::from_millis(150), t0],
            t0,
        );
        assert_eq!((f[0].at_ms, f[0].duration_ms), (100, 300));
        assert_eq!(f[0].target, "instance-1");
        assert!(
            f[0].effect.contains("1 connection error"),
            "{}",
            f[0].effect
        );
    }

    /// A fleet that records what was done to it.
    #[derive(Debug, Default)]
    struct Fake {
        log: Mutex<Vec<String>>,
        refuse_restart: bool,
    }

    impl Restartable for Fake {
        fn kill(&self, i: usize) -> BoxFuture<'_, Result<(), String>> {
            self.log.lock().push(format!("kill {i}"));
            Box::pin(async { Ok(()) })
        }
        fn restart(&self, i: usize) -> BoxFuture<'_, Result<(), String>> {
            self.log.lock().push(format!("restart {i}"));
            let refuse = self.refuse_restart;
            Box::pin(async move {
                if refuse {
                    Err("port taken".to_owned())
                } else {
                    Ok(())
                }
            })
        }
        fn wait_answering(&self, i: usize) -> BoxFuture<'_, Result<(), String>> {
            self.log.lock().push(format!("answers {i}"));
            Box::pin(async { Ok(()) })
        }
        fn instances(&self) -> usize {
            2
        }
    }

    #[tokio::test]
    async fn the_driver_fires_at_its_share_of_the_rush_and_restarts() {
        let fake = Arc::new(Fake::default());
        let specs = vec![
            parse_kill("1@rush=0.5,down_ms=1").unwrap(),
            parse_kill("0@rush=0.9,down_ms=1").unwrap(),
        ];
        assert!(KillDriver::new(vec![parse_kill("2@rush=0").unwrap()], fake.clone()).is_err());
        let driver = KillDriver::new(specs, fake.clone()).unwrap();
        let live = Arc::new(LiveStats::default());
        let (done_tx, done_rx) = watch::channel(false);
        let run = tokio::spawn({
            let driver = driver.clone();
            let live = live.clone();
            async move { driver.run(live, 100, done_rx).await }
        });
        live.arrivals_started.store(49, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(fake.log.lock().is_empty(), "not due before 50 arrivals");
        live.arrivals_started.store(50, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            *fake.log.lock(),
            vec!["kill 1", "restart 1", "answers 1"],
            "one kill, then its restart"
        );
        // the load ends before 90 arrivals: the second never fires
        done_tx.send_replace(true);
        let records = run.await.unwrap();
        assert!(records[0].done(), "{records:?}");
        assert_eq!(records[0].fired_at_arrivals, Some(50));
        assert!(!records[1].done());
        assert!(
            records[1]
                .error
                .as_deref()
                .unwrap()
                .contains("before it was due")
        );

        let refusing = Arc::new(Fake {
            refuse_restart: true,
            ..Fake::default()
        });
        let driver = KillDriver::new(vec![parse_kill("0@rush=0").unwrap()], refusing).unwrap();
        let (_tx, rx) = watch::channel(false);
        let records = driver.run(Arc::new(LiveStats::default()), 10, rx).await;
        assert!(!records[0].done());
        assert!(records[0].error.as_deref().unwrap().contains("port taken"));
    }
}
