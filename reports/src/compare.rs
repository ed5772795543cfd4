//! Comparing two runs: their key figures side by side with deltas, the
//! latency percentiles of every transaction both measured (read from their
//! HDR histograms), and the invariants whose verdict changed.

use std::collections::BTreeSet;

use crate::figures::{booking_p99_ms, duration_ms, paid_total};
use crate::hdr;
use crate::model::{Report, TransactionFigures};

/// Which way a figure should move for the second run to be better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    /// More is better (throughput, seats paid).
    Higher,
    /// Less is better (latency, errors, queue age).
    Lower,
    /// Neither (a count that depends on the profile).
    Neither,
}

/// Whether a change is an improvement, a regression, or neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trend {
    /// The figure moved the better way.
    Improved,
    /// The figure moved the worse way.
    Regressed,
    /// Unchanged, or a figure with no better direction.
    Neutral,
}

/// One figure of both runs.
#[derive(Debug, Clone, PartialEq)]
pub struct FigureDelta {
    /// What it is (`rush rate`, `booking p99`, …).
    pub name: String,
    /// Its unit (`bookings/s`, `ms`, `count`).
    pub unit: String,
    /// The first run's figure.
    pub a: f64,
    /// The second run's figure.
    pub b: f64,
    /// Which way is better.
    pub better: Better,
}

impl FigureDelta {
    /// `b - a`.
    pub fn delta(&self) -> f64 {
        self.b - self.a
    }

    /// The change relative to `a`, percent; `None` when `a` is 0.
    pub fn delta_pct(&self) -> Option<f64> {
        (self.a != 0.0).then(|| (self.b - self.a) / self.a.abs() * 100.0)
    }

    /// Whether the change is for the better.
    pub fn trend(&self) -> Trend {
        let d = self.delta();
        match self.better {
            _ if d == 0.0 || !d.is_finite() => Trend::Neutral,
            Better::Neither => Trend::Neutral,
            Better::Higher if d > 0.0 => Trend::Improved,
            Better::Lower if d < 0.0 => Trend::Improved,
            _ => Trend::Regressed,
        }
    }
}

/// One invariant in both runs (`None`: the run did not check it).
#[derive(Debug, Clone, PartialEq)]
pub struct InvariantDelta {
    /// Its name.
    pub name: String,
    /// Verdict in the first run.
    pub a: Option<bool>,
    /// Verdict in the second run.
    pub b: Option<bool>,
    /// Figure in the first run.
    pub a_figure: Option<f64>,
    /// Figure in the second run.
    pub b_figure: Option<f64>,
    /// Its unit, from whichever run checked it.
    pub unit: String,
}

impl InvariantDelta {
    /// Whether the verdict differs (a run that did not check it counts as different).
    pub fn changed(&self) -> bool {
        self.a != self.b
    }
}

/// Two runs compared.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// The first run's id.
    pub a_run: String,
    /// The second run's id.
    pub b_run: String,
    /// Whether the first run passed.
    pub a_passed: bool,
    /// Whether the second run passed.
    pub b_passed: bool,
    /// Key figures of both.
    pub figures: Vec<FigureDelta>,
    /// Every invariant of either run: the first's in order, then those only the second checked.
    pub invariants: Vec<InvariantDelta>,
    /// The latency percentiles of every transaction both runs measured, in
    /// the first run's order.
    pub percentiles: Vec<TransactionPercentiles>,
}

/// The percentiles a comparison shows, in order: the key of a gate's figure
/// name (`<transaction>_<key>_ms`) and the label.
pub const PERCENTILES: [(&str, &str); 5] = [
    ("p50", "p50"),
    ("p90", "p90"),
    ("p99", "p99"),
    ("p999", "p99.9"),
    ("max", "max"),
];

/// The latency percentiles of one transaction in one run, ms.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Percentiles {
    /// How many completed.
    pub count: u64,
    /// p50, p90, p99, p99.9 and max, in [`PERCENTILES`] order.
    pub values: [f64; 5],
    /// Whether they were read from the run's HDR histogram (`false`: an
    /// older report without one, or one that did not decode: the figures
    /// the report wrote down).
    pub from_hdr: bool,
}

impl Percentiles {
    /// The percentiles of `t`: from its HDR histogram when it has one that
    /// decodes, else its written figures.
    pub fn of(t: &TransactionFigures) -> Percentiles {
        match t.hdr.as_deref().map(hdr::decode) {
            Some(Ok(h)) => {
                let f = hdr::figures(&t.name, &h, t.errors);
                Percentiles {
                    count: f.count,
                    values: [f.p50_ms, f.p90_ms, f.p99_ms, f.p999_ms, f.max_ms],
                    from_hdr: true,
                }
            }
            _ => Percentiles {
                count: t.count,
                values: [t.p50_ms, t.p90_ms, t.p99_ms, t.p999_ms, t.max_ms],
                from_hdr: false,
            },
        }
    }

    /// The percentile of key `key` (`p50`, …, `max`; see [`PERCENTILES`]).
    pub fn get(&self, key: &str) -> Option<f64> {
        PERCENTILES
            .iter()
            .position(|(k, _)| *k == key)
            .map(|i| self.values[i])
    }
}

/// One transaction's percentiles in both runs.
#[derive(Debug, Clone, PartialEq)]
pub struct TransactionPercentiles {
    /// The transaction.
    pub name: String,
    /// In the first run.
    pub a: Percentiles,
    /// In the second run.
    pub b: Percentiles,
}

/// The percentiles of every transaction both runs measured, in `a`'s order.
pub fn percentiles(a: &Report, b: &Report) -> Vec<TransactionPercentiles> {
    a.load
        .transactions
        .iter()
        .filter_map(|ta| {
            let tb = b.load.transactions.iter().find(|t| t.name == ta.name)?;
            Some(TransactionPercentiles {
                name: ta.name.clone(),
                a: Percentiles::of(ta),
                b: Percentiles::of(tb),
            })
        })
        .collect()
}

impl Comparison {
    /// The invariants whose verdict changed.
    pub fn changed(&self) -> impl Iterator<Item = &InvariantDelta> {
        self.invariants.iter().filter(|i| i.changed())
    }

    /// The figure called `name`.
    pub fn figure(&self, name: &str) -> Option<&FigureDelta> {
        self.figures.iter().find(|f| f.name == name)
    }
}

/// How a run's figure is read.
pub type Getter = fn(&Report) -> f64;

/// The fixed figures compared, in order: name, unit, better direction,
/// getter (`booking p99` is 0 for a run without it).
pub fn fixed_figures() -> [(&'static str, &'static str, Better, Getter); 18] {
    [
        ("duration", "s", Better::Neither, |r| {
            duration_ms(r) as f64 / 1000.0
        }),
        ("target rate", "bookings/s", Better::Neither, |r| {
            r.load.target_rate
        }),
        ("rush rate", "bookings/s", Better::Higher, |r| {
            r.load.achieved_rate
        }),
        ("requests", "count", Better::Neither, |r| {
            r.load.requests as f64
        }),
        ("server errors", "count", Better::Lower, |r| {
            r.load.server_errors as f64
        }),
        ("arrivals late", "count", Better::Lower, |r| {
            r.load.arrivals_late as f64
        }),
        ("arrivals dropped", "count", Better::Lower, |r| {
            r.load.arrivals_dropped as f64
        }),
        ("booking p99", "ms", Better::Lower, |r| {
            booking_p99_ms(r).unwrap_or(0.0)
        }),
        ("holds created", "count", Better::Neither, |r| {
            r.sale.holds_created as f64
        }),
        ("paid", "count", Better::Higher, |r| paid_total(r) as f64),
        ("released", "count", Better::Neither, |r| {
            r.sale.released as f64
        }),
        ("extended", "count", Better::Neither, |r| {
            r.sale.extended as f64
        }),
        ("resold", "count", Better::Neither, |r| r.sale.resold as f64),
        ("alerts", "count", Better::Lower, |r| r.sale.alerts as f64),
        ("emails", "count", Better::Neither, |r| r.sale.emails as f64),
        ("queue age max", "ms", Better::Lower, |r| {
            r.queue.oldest_age_max_ms as f64
        }),
        ("dead letters", "count", Better::Lower, |r| {
            r.queue.dead_letters as f64
        }),
        ("invariants failed", "count", Better::Lower, |r| {
            r.failed().count() as f64
        }),
    ]
}

/// The figures compared, in order: the fixed ones, then each transaction's p99.
fn figures(a: &Report, b: &Report) -> Vec<FigureDelta> {
    let fixed = fixed_figures();
    let mut out: Vec<FigureDelta> = fixed
        .iter()
        .map(|&(name, unit, better, get)| FigureDelta {
            name: name.to_owned(),
            unit: unit.to_owned(),
            a: get(a),
            b: get(b),
            better,
        })
        .collect();
    // p99 of every transaction either run measured, in first-seen order.
    let mut seen = BTreeSet::new();
    for t in a.load.transactions.iter().chain(&b.load.transactions) {
        if !seen.insert(t.name.clone()) {
            continue;
        }
        let p99 = |r: &Report| {
            r.load
                .transactions
                .iter()
                .find(|x| x.name == t.name)
                .map(|x| x.p99_ms)
        };
        out.push(FigureDelta {
            name: format!("{} p99", t.name),
            unit: "ms".to_owned(),
            a: p99(a).unwrap_or(0.0),
            b: p99(b).unwrap_or(0.0),
            better: Better::Lower,
        });
    }
    // "booking p99" is already there when the booking transaction was measured.
    let mut names = BTreeSet::new();
    out.retain(|f| names.insert(f.name.clone()));
    out
}

/// Compares run `a` (the baseline) with run `b`.
pub fn compare(a: &Report, b: &Report) -> Comparison {
    let mut invariants: Vec<InvariantDelta> = Vec::new();
    for i in a.invariants.iter().chain(&b.invariants) {
        if invariants.iter().any(|d| d.name == i.name) {
            continue;
        }
        let (ia, ib) = (a.invariant(&i.name), b.invariant(&i.name));
        invariants.push(InvariantDelta {
            name: i.name.clone(),
            a: ia.map(|x| x.passed),
            b: ib.map(|x| x.passed),
            a_figure: ia.map(|x| x.figure),
            b_figure: ib.map(|x| x.figure),
            unit: i.unit.clone(),
        });
    }
    Comparison {
        a_run: a.run_id.clone(),
        b_run: b.run_id.clone(),
        a_passed: a.passed,
        b_passed: b.passed,
        figures: figures(a, b),
        invariants,
        percentiles: percentiles(a, b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{TransactionFigures, Verdict};

    fn inv(name: &str, passed: bool, figure: f64) -> Verdict {
        Verdict {
            name: name.into(),
            passed,
            figure,
            threshold: 0.0,
            unit: "count".into(),
            bound: "at_most".into(),
            detail: String::new(),
        }
    }

    fn report(run: &str, rate: f64, p99: f64, invariants: Vec<Verdict>) -> Report {
        let mut r: Report = serde_json::from_value(serde_json::json!({
            "schema": 1, "run_id": run, "profile_name": "p", "profile": {}, "seed": 1,
            "stack": "embedded", "started_at": "x", "finished_at": "y", "passed": true,
            "phases": [], "load": {"requests": 0, "server_errors": 0, "target_rate": 2000.0,
            "achieved_rate": rate, "arrivals_scheduled": 0, "arrivals_started": 0,
            "arrivals_dropped": 0, "arrivals_late": 0, "transactions": []},
            "sale": {"seats": 0, "levels": [], "holds_created": 0, "paid_by_path": {},
            "released": 0, "extended": 0, "resold": 0, "alerts": 0, "emails": 0},
            "queue": {"oldest_age_max_ms": 0, "dead_letters": 0}, "invariants": []
        }))
        .unwrap();
        r.load.transactions.push(TransactionFigures {
            name: "booking".into(),
            p99_ms: p99,
            ..Default::default()
        });
        r.passed = invariants.iter().all(|i| i.passed);
        r.invariants = invariants;
        r
    }

    #[test]
    fn deltas_and_trends() {
        let a = report("a", 2000.0, 40.0, vec![]);
        let mut b = report("b", 1500.0, 20.0, vec![]);
        b.sale.paid_by_path.insert("callback".into(), 10);
        let c = compare(&a, &b);
        let rate = c.figure("rush rate").unwrap();
        assert_eq!(rate.delta(), -500.0);
        assert_eq!(rate.delta_pct(), Some(-25.0));
        assert_eq!(rate.trend(), Trend::Regressed);
        let p99 = c.figure("booking p99").unwrap();
        assert_eq!((p99.a, p99.b), (40.0, 20.0));
        assert_eq!(p99.delta_pct(), Some(-50.0));
        assert_eq!(p99.trend(), Trend::Improved);
        let paid = c.figure("paid").unwrap();
        assert_eq!(paid.delta_pct(), None);
        assert_eq!(paid.trend(), Trend::Improved);
        assert_eq!(c.figure("target rate").unwrap().trend(), Trend::Neutral);
        // booking p99 appears once although it is also a transaction.
        assert_eq!(
            c.figures.iter().filter(|f| f.name == "booking p99").count(),
            1
        );
    }

    #[test]
    fn verdict_changes() {
        let a = report(
            "a",
            1.0,
            1.0,
            vec![
                inv("x", true, 0.0),
                inv("y", true, 0.0),
                inv("old", true, 0.0),
            ],
        );
        let b = report(
            "b",
            1.0,
            1.0,
            vec![
                inv("x", false, 3.0),
                inv("y", true, 0.0),
                inv("new", false, 1.0),
            ],
        );
        let c = compare(&a, &b);
        let names: Vec<&str> = c.invariants.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["x", "y", "old", "new"]);
        let changed: Vec<&str> = c.changed().map(|i| i.name.as_str()).collect();
        assert_eq!(changed, ["x", "old", "new"]);
        assert_eq!(c.invariants[0].b_figure, Some(3.0));
        assert_eq!(c.figure("invariants failed").unwrap().b, 2.0);
        assert!(c.a_passed && !c.b_passed);
    }

    #[test]
    fn percentiles_of_transactions_in_both_runs_come_from_their_histograms() {
        let mut a = report("a", 1.0, 5.0, vec![]);
        let mut b = report("b", 1.0, 5.0, vec![]);
        let mut h = crate::hdr::histogram();
        for ms in 1..=1000u64 {
            h.record(ms * 1_000).unwrap();
        }
        // A's booking from a histogram (its written p99 of 5 ms is ignored),
        // B's an older report's written figures
        a.load.transactions[0] = crate::hdr::figures("booking", &h, 0);
        a.load.transactions[0].p99_ms = 5.0;
        b.load.transactions[0].p50_ms = 2.0;
        a.load.transactions.push(TransactionFigures {
            name: "only-a".into(),
            ..Default::default()
        });
        let c = compare(&a, &b);
        assert_eq!(c.percentiles.len(), 1, "only transactions both measured");
        let t = &c.percentiles[0];
        assert_eq!(t.name, "booking");
        assert!(t.a.from_hdr && !t.b.from_hdr);
        assert_eq!(t.a.count, 1000);
        let p99 = t.a.get("p99").unwrap();
        assert!((p99 - 990.0).abs() < 1.0, "{p99}");
        assert!((t.a.get("max").unwrap() - 1000.0).abs() < 1.0);
        assert_eq!((t.b.get("p50"), t.b.get("p99")), (Some(2.0), Some(5.0)));
        assert_eq!(t.a.get("p75"), None);
        let md = crate::markdown::render_comparison(&c);
        assert!(md.contains("### Latency percentiles, ms"), "{md}");
        assert!(
            md.contains("| `booking` | B | 0 | 2 | 0 | 5 | 0 | 0 | written |"),
            "{md}"
        );
        let html = crate::html::render_comparison(&a, &b, &c);
        assert!(html.contains("<h2>Latency percentiles, ms</h2>"));
        assert!(html.contains(r#"<td class="num">990.207</td>"#), "{html}");
    }
}
