//! Test helpers: a builder of realistic reports and scratch folders.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod xml;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use reports::{
    Fault, InvariantResult, LevelFigures, LoadFigures, Phase, QueueFigures, Report, SaleFigures,
    Sample, ShardInfo, TransactionFigures,
};

/// A scratch folder removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    /// A fresh, empty folder named after the test.
    pub fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("reports-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The sample fixture's path.
pub fn sample_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sample-report.json")
}

fn inv(
    name: &str,
    figure: f64,
    threshold: f64,
    unit: &str,
    bound: &str,
    detail: &str,
) -> InvariantResult {
    let passed = match bound {
        "at_least" => figure >= threshold,
        _ => figure <= threshold,
    };
    InvariantResult {
        name: name.into(),
        passed,
        figure,
        threshold,
        unit: unit.into(),
        bound: bound.into(),
        detail: detail.into(),
    }
}

/// Builds reports like a 2-instance, 40,000-candidate rehearsal writes.
#[derive(Debug, Clone)]
pub struct ReportBuilder {
    report: Report,
}

impl Default for ReportBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl ReportBuilder {
    /// A passing run: 2,000 bookings/s for 25 s, six levels, 90 samples.
    pub fn new() -> Self {
        let levels = [
            ("floor", 1200u64),
            ("lower", 2500),
            ("club", 3500),
            ("upper", 4000),
            ("balcony", 4500),
            ("gallery", 5000),
        ];
        let seats: u64 = levels.iter().map(|l| l.1).sum();
        let timeline: Vec<Sample> = (1..=90u64)
            .map(|s| {
                let rush = s <= 26;
                let sold = (s as f64 / 18.0).min(1.0);
                Sample {
                    t_ms: s * 1000 + 17,
                    bookings_per_s: if rush {
                        2000.0
                    } else if s < 70 {
                        100.0
                    } else {
                        0.0
                    },
                    requests_per_s: if rush {
                        4700.0
                    } else if s < 70 {
                        260.0
                    } else {
                        0.0
                    },
                    p50_ms: if s < 70 { 1.1 } else { 0.0 },
                    p99_ms: if rush {
                        18.0 + (s % 5) as f64
                    } else if s < 70 {
                        6.0
                    } else {
                        0.0
                    },
                    holds: if s < 60 { 3000 - s * 40 } else { 0 },
                    paid: (sold * 20_600.0) as u64,
                    released: (s * 50).min(4200),
                    seats_left: levels
                        .iter()
                        .map(|(l, cap)| ((*l).to_owned(), ((1.0 - sold) * *cap as f64) as u64 + 2))
                        .collect(),
                    queue_age_ms: if rush { s % 3 } else { 0 },
                    ..Sample::default()
                }
            })
            .collect();
        let report = Report {
            schema: reports::SCHEMA,
            run_id: "20261202T184318Z-7".into(),
            profile_name: "default".into(),
            profile: serde_json::json!({"candidates": 40000, "instances": 2, "load": {"rate": 2000.0}}),
            seed: 7,
            stack: "embedded".into(),
            versions: BTreeMap::from([
                ("scenarios".to_owned(), "0.1.0".to_owned()),
                ("git_commit".to_owned(), "2302db7ef560".to_owned()),
            ]),
            started_at: "2026-12-02T18:43:18.410Z".into(),
            finished_at: "2026-12-02T18:44:48.410Z".into(),
            passed: true,
            phases: vec![
                Phase {
                    name: "setup".into(),
                    start_ms: 0,
                    end_ms: 180,
                },
                Phase {
                    name: "rush".into(),
                    start_ms: 1133,
                    end_ms: 26_133,
                },
                Phase {
                    name: "late".into(),
                    start_ms: 26_133,
                    end_ms: 81_144,
                },
                Phase {
                    name: "settle".into(),
                    start_ms: 81_144,
                    end_ms: 88_741,
                },
                Phase {
                    name: "audit".into(),
                    start_ms: 88_741,
                    end_ms: 89_459,
                },
            ],
            load: LoadFigures {
                requests: 104_971,
                server_errors: 0,
                connection_errors: 0,
                target_rate: 2000.0,
                achieved_rate: 1999.96,
                arrivals_scheduled: 54_000,
                arrivals_started: 54_000,
                arrivals_dropped: 0,
                arrivals_late: 630,
                transactions: vec![
                    TransactionFigures {
                        name: "booking".into(),
                        count: 54_000,
                        errors: 0,
                        mean_ms: 2.38,
                        p50_ms: 1.17,
                        p90_ms: 3.0,
                        p99_ms: 31.74,
                        p999_ms: 91.6,
                        max_ms: 126.3,
                        ..TransactionFigures::default()
                    },
                    TransactionFigures {
                        name: "checkout".into(),
                        count: 24_895,
                        errors: 0,
                        mean_ms: 1.99,
                        p50_ms: 0.19,
                        p90_ms: 1.68,
                        p99_ms: 59.1,
                        p999_ms: 91.0,
                        max_ms: 185.6,
                        ..TransactionFigures::default()
                    },
                ],
                ..LoadFigures::default()
            },
            sale: SaleFigures {
                seats,
                levels: levels
                    .iter()
                    .map(|(l, cap)| LevelFigures {
                        level: (*l).into(),
                        cap: *cap,
                        taken: cap - 4,
                        paid: cap - 4,
                    })
                    .collect(),
                holds_created: 24_895,
                paid_by_path: BTreeMap::from([
                    ("callback".to_owned(), 20_638),
                    ("webhook".to_owned(), 38),
                ]),
                released: 4248,
                extended: 0,
                resold: 4195,
                alerts: 0,
                emails: 20_676,
                mail: None,
            },
            queue: QueueFigures {
                oldest_age_max_ms: 4,
                dead_letters: 0,
            },
            invariants: vec![
                inv("admissions_within_cap", 0.0, 0.0, "count", "at_most", ""),
                inv("ledger_matches_records", 0.0, 0.0, "count", "at_most", ""),
                inv(
                    "rush_rate",
                    1999.96,
                    1950.0,
                    "bookings/s",
                    "at_least",
                    "target 2000/s",
                ),
                inv(
                    "booking_p99_ms",
                    31.74,
                    50.0,
                    "ms",
                    "at_most",
                    "54000 bookings",
                ),
                inv(
                    "queue_age_max_ms",
                    4.0,
                    4000.0,
                    "ms",
                    "at_most",
                    "351 samples",
                ),
                inv(
                    "server_error_pct",
                    0.0,
                    0.01,
                    "%",
                    "at_most",
                    "0 of 104971 requests",
                ),
            ],
            faults: vec![],
            relaxed: vec![],
            timeline,
            files: vec!["goose-report.html".into(), "goose-report.json".into()],
            ..Report::default()
        };
        Self { report }
    }

    /// Makes invariant `name` fail with `figure` and `detail`.
    pub fn failing(mut self, name: &str, figure: f64, detail: &str) -> Self {
        let i = self
            .report
            .invariants
            .iter_mut()
            .find(|i| i.name == name)
            .unwrap();
        i.figure = figure;
        i.passed = false;
        i.detail = detail.into();
        self.report.passed = false;
        self
    }

    /// Adds an injected fault.
    pub fn fault(mut self, at_ms: u64, what: &str, target: &str, effect: &str) -> Self {
        self.report.faults.push(Fault {
            at_ms,
            duration_ms: 5000,
            what: what.into(),
            target: target.into(),
            effect: effect.into(),
            ..Fault::default()
        });
        self
    }

    /// Makes it shard `index` of `count` of one sharded run: its
    /// transactions and samples get histograms (latencies `1..=count` ms
    /// apart per shard), its share of the arrivals, the whole run's bounds.
    pub fn shard(mut self, index: u32, count: u32) -> Self {
        let r = &mut self.report;
        let latency_us = 1_000 * (u64::from(index) + 1);
        for t in &mut r.load.transactions {
            let mut h = reports::hdr::histogram();
            h.record_n(latency_us, t.count / u64::from(count)).unwrap();
            *t = reports::hdr::figures(&t.name, &h, 0);
        }
        for x in &mut r.timeline {
            let mut h = reports::hdr::histogram();
            h.record_n(latency_us, 10).unwrap();
            x.booking_hdr = Some(reports::hdr::encode(&h));
        }
        let l = &mut r.load;
        l.arrivals_scheduled /= u64::from(count);
        l.arrivals_started /= u64::from(count);
        l.rush_started = 50_000 / u64::from(count);
        l.rush_first_ms = 1_133.0 + f64::from(index) * 0.5;
        l.rush_last_ms = 26_132.5 + f64::from(index) * 0.5;
        r.run_id = format!("20261202T184318Z-7-shard{index}");
        r.shard = Some(ShardInfo {
            index,
            count,
            schedule: "5eed5eed5eed5eed".into(),
            arrivals_total: 54_000,
            rate: 2_000.0,
            target: "http://127.0.0.1:8080".into(),
            t0_unix_ms: 1.8e12,
            zero_unix_ms: 1.8e12 + 1_133.0,
            bounds: BTreeMap::from([
                ("rush_rate".to_owned(), 1_950.0),
                ("booking_p99_ms".to_owned(), 50.0),
                ("server_error_pct".to_owned(), 0.01),
            ]),
        });
        self
    }

    /// Edits the report directly.
    pub fn with(mut self, f: impl FnOnce(&mut Report)) -> Self {
        f(&mut self.report);
        self
    }

    /// The report.
    pub fn build(self) -> Report {
        self.report
    }
}
