//! CPU seconds per process, read from `/proc`: this process
//! (`/proc/self/stat`, user plus system time, without the sampler thread's
//! own) and each of its child processes (`/proc/<pid>/stat`, found in
//! `/proc/self/task/*/children`), sampled every [`SAMPLE_EVERY`] on a thread
//! of its own.
//!
//! A run reads the CPU each component used over any window afterwards
//! ([`window`]): a child killed when its run ended keeps its last sample, so
//! the window of a rehearsal's rush, known only from its report, is read
//! when the report is in hand. Linux only: elsewhere the samples are empty
//! and every figure is 0.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use chrono::{DateTime, Utc};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// How often the sampler reads `/proc`.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// Clock ticks per second of `/proc/<pid>/stat`'s times (`USER_HZ`: 100 on
/// every Linux architecture this runs on; `getconf CLK_TCK`).
pub const TICKS_PER_S: f64 = 100.0;

/// What one `/proc/<pid>/stat` line says: the command name, the parent,
/// user plus system time in ticks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    /// The command name (`comm`, at most 15 bytes).
    pub comm: String,
    /// The parent's pid.
    pub ppid: u32,
    /// `utime + stime`, clock ticks.
    pub ticks: u64,
}

/// Reads a `/proc/<pid>/stat` line (pure): the name is in parentheses and
/// may hold spaces or parentheses itself, so fields are counted from the
/// last `)`. `None` if the line is not one.
pub fn parse_stat(line: &str) -> Option<Stat> {
    let open = line.find('(')?;
    let close = line.rfind(')')?;
    let comm = line.get(open + 1..close)?.to_owned();
    let rest: Vec<&str> = line.get(close + 1..)?.split_whitespace().collect();
    // rest[0] is field 3 (state): ppid is field 4, utime 14, stime 15
    let ppid = rest.get(1)?.parse().ok()?;
    let utime: u64 = rest.get(11)?.parse().ok()?;
    let stime: u64 = rest.get(12)?.parse().ok()?;
    Some(Stat {
        comm,
        ppid,
        ticks: utime + stime,
    })
}

/// `/proc/<pid>/stat` of a process, `None` if it is gone.
pub fn stat_of(pid: u32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// This process's stat.
pub fn own_stat() -> Option<Stat> {
    parse_stat(&std::fs::read_to_string("/proc/self/stat").ok()?)
}

/// The calling thread's ticks (`/proc/thread-self/stat`).
fn thread_ticks() -> Option<u64> {
    parse_stat(&std::fs::read_to_string("/proc/thread-self/stat").ok()?).map(|s| s.ticks)
}

/// The pids of this process's children (alive or not yet reaped).
pub fn children() -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The CPU time of every process at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// When.
    pub at: DateTime<Utc>,
    /// This process's ticks, the sampler thread's own left out.
    pub this_process: u64,
    /// Each child's name and ticks, by pid.
    pub children: BTreeMap<u32, (String, u64)>,
}

/// Takes one sample now (`sampler_ticks`: the sampler thread's own, left
/// out of this process's).
fn sample(sampler_ticks: u64) -> Sample {
    let at = Utc::now();
    let this_process = own_stat().map_or(0, |s| s.ticks.saturating_sub(sampler_ticks));
    let children = children()
        .into_iter()
        .filter_map(|pid| stat_of(pid).map(|s| (pid, (s.comm, s.ticks))))
        .collect();
    Sample {
        at,
        this_process,
        children,
    }
}

/// Samples every [`SAMPLE_EVERY`] on a thread of its own until stopped
/// (or dropped).
#[derive(Debug)]
pub struct Sampler {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<Sample>>>,
    thread: Option<JoinHandle<()>>,
}

impl Sampler {
    /// Starts sampling (the first sample is taken at once).
    pub fn start() -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let (s, out) = (stop.clone(), samples.clone());
        let thread = std::thread::Builder::new()
            .name("cpu-sampler".into())
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    let own = thread_ticks().unwrap_or(0);
                    out.lock().push(sample(own));
                    std::thread::sleep(SAMPLE_EVERY);
                }
                let own = thread_ticks().unwrap_or(0);
                out.lock().push(sample(own));
            })
            .ok();
        Sampler {
            stop,
            samples,
            thread,
        }
    }

    /// The samples so far.
    pub fn samples(&self) -> Vec<Sample> {
        self.samples.lock().clone()
    }

    /// Stops sampling (after a last sample) and returns every sample.
    pub fn stop(mut self) -> Vec<Sample> {
        self.halt();
        self.samples.lock().clone()
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.halt();
    }
}

/// CPU seconds of one process over a window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessCpu {
    /// Its pid.
    pub pid: u32,
    /// Its command name.
    pub comm: String,
    /// CPU seconds (user + system) in the window.
    pub cpu_s: f64,
}

/// What every process used over a window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// The window's length, s.
    pub wall_s: f64,
    /// This process, CPU seconds (the sampler's own thread left out).
    pub this_process_s: f64,
    /// Each child that ran in the window.
    pub children: Vec<ProcessCpu>,
}

impl Usage {
    /// CPU seconds of the children whose command name is `comm`, summed,
    /// and how many there were.
    pub fn children_named(&self, comm: &str) -> (f64, usize) {
        self.children
            .iter()
            .filter(|c| c.comm == comm)
            .fold((0.0, 0), |(s, n), c| (s + c.cpu_s, n + 1))
    }
}

/// The last sample at or before `t`.
fn at_or_before(samples: &[Sample], t: DateTime<Utc>) -> Option<&Sample> {
    samples.iter().rev().find(|s| s.at <= t)
}

/// What each process used between `from` and `to` (pure): for each, its
/// last sample at or before `to` less its last sample at or before `from`
/// (0 when it had not started by then). A process gone before `to` counts up
/// to its last sample.
pub fn window(samples: &[Sample], from: DateTime<Utc>, to: DateTime<Utc>) -> Usage {
    let wall_s = (to - from).num_milliseconds().max(0) as f64 / 1e3;
    // a window opened before the first sample counts from that sample
    let before = at_or_before(samples, from).or(samples.first());
    let inside: Vec<&Sample> = samples.iter().filter(|s| s.at <= to).collect();
    let Some(end) = inside.last() else {
        return Usage {
            wall_s,
            ..Usage::default()
        };
    };
    let secs = |ticks: u64| ticks as f64 / TICKS_PER_S;
    let this_process_s = secs(
        end.this_process
            .saturating_sub(before.map_or(end.this_process, |b| b.this_process)),
    );
    // every child seen up to `to`, at its last sample
    let mut last: BTreeMap<u32, (&str, u64)> = BTreeMap::new();
    for s in &inside {
        for (pid, (comm, ticks)) in &s.children {
            last.insert(*pid, (comm.as_str(), *ticks));
        }
    }
    let children = last
        .into_iter()
        .filter_map(|(pid, (comm, ticks))| {
            let start = before
                .and_then(|b| b.children.get(&pid))
                .map_or(0, |(_, t)| *t);
            // a pid gone before `from` is not in the window
            let seen_after_from = inside
                .iter()
                .any(|s| s.at > from && s.children.contains_key(&pid));
            seen_after_from.then(|| ProcessCpu {
                pid,
                comm: comm.to_owned(),
                cpu_s: secs(ticks.saturating_sub(start)),
            })
        })
        .collect();
    Usage {
        wall_s,
        this_process_s,
        children,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_stat_line_is_read_from_its_last_parenthesis() {
        let line =
            "4242 (my (odd) name) S 17 4242 4242 0 -1 4194560 1 0 0 0 250 31 7 9 20 0 3 0 1 2 3";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                comm: "my (odd) name".into(),
                ppid: 17,
                ticks: 281,
            })
        );
        assert_eq!(parse_stat("no stat"), None);
        assert_eq!(parse_stat("1 (x) S 1 2"), None, "too few fields");
    }

    #[test]
    fn this_process_is_read() {
        let s = own_stat().unwrap();
        assert!(!s.comm.is_empty());
        assert!(s.ppid > 0);
    }

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_700_000_000_000 + ms).unwrap()
    }

    fn s(ms: i64, me: u64, kids: &[(u32, &str, u64)]) -> Sample {
        Sample {
            at: at(ms),
            this_process: me,
            children: kids
                .iter()
                .map(|(p, c, t)| (*p, ((*c).to_owned(), *t)))
                .collect(),
        }
    }

    #[test]
    fn a_window_counts_each_process_from_its_sample_before_to_its_last() {
        let samples = vec![
            s(0, 100, &[(7, "booking", 50), (9, "gone", 5)]),
            s(100, 110, &[(7, "booking", 60)]),
            s(200, 130, &[(7, "booking", 80), (8, "redis-server", 3)]),
            // the booking process is killed: its last sample stands
            s(300, 150, &[(8, "redis-server", 9)]),
            s(400, 170, &[]),
        ];
        let u = window(&samples, at(50), at(350));
        assert!((u.wall_s - 0.3).abs() < 1e-9);
        // 150 at 300 less 100 at 0
        assert!((u.this_process_s - 0.5).abs() < 1e-9, "{u:?}");
        let by: BTreeMap<u32, f64> = u.children.iter().map(|c| (c.pid, c.cpu_s)).collect();
        assert_eq!(
            by.len(),
            2,
            "the process gone before the window is out: {by:?}"
        );
        assert!((by[&7] - 0.3).abs() < 1e-9, "80 - 50 ticks");
        assert!((by[&8] - 0.09).abs() < 1e-9, "started inside: from 0");
        assert_eq!(u.children_named("booking"), (by[&7], 1));
        assert_eq!(window(&[], at(0), at(1)).children, vec![]);
    }
}
