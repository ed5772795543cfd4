//! Regression gates of `reports compare A B --fail-on FIGURE=±N%`: how far
//! a figure of run B may move from run A's in the bad direction before the
//! comparison fails (exit 1).
//!
//! - `booking_p99_ms=+10%`: B may be at most 10 % above A (fails when
//!   `B > A·1.10`);
//! - `rush_rate=-2%`: B may be at most 2 % below A (fails when `B < A·0.98`);
//! - `booking_p99_ms=+5`: B may be at most 5 units (here ms) above A.
//!
//! The figures ([`figures`]) are the comparison's fixed figures in
//! snake_case, with `_ms`/`_s` for those in milliseconds or seconds
//! (`rush_rate`, `server_errors`, `queue_age_max_ms`, `duration_s`, …), and
//! every transaction's percentiles read from its HDR histogram:
//! `<transaction>_p50_ms`, `_p90_ms`, `_p99_ms`, `_p999_ms`, `_max_ms`.
//! Parsing ([`Gate::parse`]) and the decision ([`judge`]) are pure.

use std::collections::BTreeMap;
use std::fmt;

use crate::compare::{PERCENTILES, Percentiles, fixed_figures};
use crate::figures::{booking_p99_ms, fmt_num, with_unit};
use crate::html::signed;
use crate::model::Report;

/// Which way B may move, at most by the allowance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// `+`: B may rise at most so much (latency, errors).
    Up,
    /// `-`: B may fall at most so much (throughput, seats paid).
    Down,
}

/// How much B may move.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Allowance {
    /// Percent of A's figure.
    Percent(f64),
    /// Units of the figure.
    Absolute(f64),
}

/// One `--fail-on FIGURE=±N%` gate.
#[derive(Debug, Clone, PartialEq)]
pub struct Gate {
    /// The figure's name (`booking_p99_ms`).
    pub figure: String,
    /// Which way is bad.
    pub direction: Direction,
    /// How far it may go.
    pub allowance: Allowance,
}

/// Why gates could not be judged.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GateError {
    /// The gate is not `FIGURE=±N%` or `FIGURE=±N`.
    #[error(
        "bad gate {spec:?}: {why} (expected FIGURE=+N% or FIGURE=-N%, or ±N in the figure's units, e.g. booking_p99_ms=+10%)"
    )]
    Syntax {
        /// The gate as given.
        spec: String,
        /// What is wrong with it.
        why: String,
    },
    /// No run has a figure of that name.
    #[error("no figure {name:?} in either run; known figures: {}", known.join(", "))]
    Unknown {
        /// The name given.
        name: String,
        /// Every figure either run has, sorted.
        known: Vec<String>,
    },
    /// One run has the figure, the other not (a transaction only one measured).
    #[error("figure {name:?} is in run {has} but not in run {lacks}: the gate cannot compare them")]
    Missing {
        /// The figure.
        name: String,
        /// The run that has it (`A` or `B`).
        has: char,
        /// The run that lacks it.
        lacks: char,
    },
}

impl Gate {
    /// Parses `FIGURE=+N%`, `FIGURE=-N%`, `FIGURE=+N` or `FIGURE=-N` (N a
    /// non-negative number; the sign is required: it says which way is bad).
    pub fn parse(spec: &str) -> Result<Gate, GateError> {
        let bad = |why: &str| GateError::Syntax {
            spec: spec.to_owned(),
            why: why.to_owned(),
        };
        let (figure, change) = spec.split_once('=').ok_or_else(|| bad("no `=`"))?;
        let figure = figure.trim();
        if figure.is_empty() {
            return Err(bad("no figure name before `=`"));
        }
        let change = change.trim();
        let (direction, rest) = if let Some(r) = change.strip_prefix('+') {
            (Direction::Up, r)
        } else if let Some(r) = change.strip_prefix('-') {
            (Direction::Down, r)
        } else {
            return Err(bad(
                "the change needs a sign: +N% lets B rise at most N %, -N% lets it fall at most N %",
            ));
        };
        let (number, percent) = match rest.trim().strip_suffix('%') {
            Some(n) => (n.trim(), true),
            None => (rest.trim(), false),
        };
        let n: f64 = number
            .parse()
            .map_err(|_| bad(&format!("{number:?} is not a number")))?;
        if !n.is_finite() || n < 0.0 || number.starts_with(['+', '-']) {
            return Err(bad(&format!(
                "{number:?} is not a finite number of at least 0"
            )));
        }
        Ok(Gate {
            figure: figure.to_owned(),
            direction,
            allowance: if percent {
                Allowance::Percent(n)
            } else {
                Allowance::Absolute(n)
            },
        })
    }

    /// The bound B is held to, from A's figure: `a·(1 ± N/100)` or `a ± N`.
    pub fn limit(&self, a: f64) -> f64 {
        let by = match self.allowance {
            Allowance::Percent(p) => a.abs() * p / 100.0,
            Allowance::Absolute(n) => n,
        };
        match self.direction {
            Direction::Up => a + by,
            Direction::Down => a - by,
        }
    }
}

impl fmt::Display for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = match self.direction {
            Direction::Up => '+',
            Direction::Down => '-',
        };
        match self.allowance {
            Allowance::Percent(p) => write!(f, "{}={sign}{}%", self.figure, fmt_num(p)),
            Allowance::Absolute(n) => write!(f, "{}={sign}{}", self.figure, fmt_num(n)),
        }
    }
}

/// Whether B stays within the gate: `b <= limit` for `+`, `b >= limit` for
/// `-`, with a relative slack of 1e-9 so that exactly the allowed change
/// passes despite floating point (`100 · 1.10` is `110.00000000000001`). A
/// figure that is not a finite number fails.
pub fn judge(gate: &Gate, a: f64, b: f64) -> bool {
    if !(a.is_finite() && b.is_finite()) {
        return false;
    }
    let limit = gate.limit(a);
    let slack = 1e-9 * a.abs().max(b.abs()).max(limit.abs());
    match gate.direction {
        Direction::Up => b <= limit + slack,
        Direction::Down => b >= limit - slack,
    }
}

/// A figure's value and unit.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// Its value.
    pub value: f64,
    /// Its unit (`ms`, `count`, `bookings/s`, …).
    pub unit: String,
}

/// `name` in snake_case: lower case, every run of other characters than
/// letters and digits one `_`.
pub fn snake(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if c.is_alphanumeric() {
            out.extend(c.to_lowercase());
        } else if !out.ends_with('_') {
            out.push('_');
        }
    }
    out.trim_matches('_').to_owned()
}

/// The gate name of a comparison figure: snake_case, `_ms` or `_s` added
/// for a figure in milliseconds or seconds (`booking p99` → `booking_p99_ms`).
pub fn figure_name(name: &str, unit: &str) -> String {
    let base = snake(name);
    match unit {
        "ms" => format!("{base}_ms"),
        "s" => format!("{base}_s"),
        _ => base,
    }
}

/// Every figure of `r` a gate can name: each transaction's percentiles
/// (from its HDR histogram), then the comparison's fixed figures
/// (`booking_p99_ms` only when the run measured it).
pub fn figures(r: &Report) -> BTreeMap<String, Figure> {
    let mut out = BTreeMap::new();
    for t in &r.load.transactions {
        let p = Percentiles::of(t);
        for ((key, _), value) in PERCENTILES.iter().zip(p.values) {
            out.insert(
                format!("{}_{key}_ms", snake(&t.name)),
                Figure {
                    value,
                    unit: "ms".to_owned(),
                },
            );
        }
    }
    for (name, unit, _, get) in fixed_figures() {
        let value = if name == "booking p99" {
            // a run without it lacks it (rather than having 0)
            match booking_p99_ms(r) {
                Some(v) => v,
                None => continue,
            }
        } else {
            get(r)
        };
        out.entry(figure_name(name, unit)).or_insert(Figure {
            value,
            unit: unit.to_owned(),
        });
    }
    out
}

/// One gate judged.
#[derive(Debug, Clone, PartialEq)]
pub struct Judged {
    /// The gate.
    pub gate: Gate,
    /// A's figure.
    pub a: f64,
    /// B's figure.
    pub b: f64,
    /// The figure's unit.
    pub unit: String,
    /// Whether B stayed within it.
    pub passed: bool,
}

impl Judged {
    /// Its line: `PASS booking_p99_ms=+10%: A 31.74 ms, B 33 ms, change
    /// +3.97% (+1.26 ms), allowed up to 34.914 ms`.
    pub fn line(&self) -> String {
        let change_pct = if self.a != 0.0 {
            format!(
                "{}%",
                signed(((self.b - self.a) / self.a.abs() * 1000.0).round() / 10.0)
            )
        } else {
            "–".to_owned()
        };
        let unit = |v: f64| with_unit(v, &self.unit);
        let delta = self.b - self.a;
        let delta = match self.unit.as_str() {
            "" | "count" => signed(delta),
            "%" => format!("{}%", signed(delta)),
            u => format!("{} {u}", signed(delta)),
        };
        format!(
            "{} {}: A {}, B {}, change {change_pct} ({delta}), allowed {} {}",
            if self.passed { "PASS" } else { "FAIL" },
            self.gate,
            unit(self.a),
            unit(self.b),
            match self.gate.direction {
                Direction::Up => "up to",
                Direction::Down => "down to",
            },
            unit(self.gate.limit(self.a))
        )
    }
}

/// Judges every gate on runs `a` and `b`; an unknown figure, or one only
/// one run has, is an error (and nothing is judged).
pub fn check(gates: &[Gate], a: &Report, b: &Report) -> Result<Vec<Judged>, GateError> {
    let (fa, fb) = (figures(a), figures(b));
    gates
        .iter()
        .map(|g| match (fa.get(&g.figure), fb.get(&g.figure)) {
            (Some(x), Some(y)) => Ok(Judged {
                gate: g.clone(),
                a: x.value,
                b: y.value,
                unit: x.unit.clone(),
                passed: judge(g, x.value, y.value),
            }),
            (Some(_), None) => Err(GateError::Missing {
                name: g.figure.clone(),
                has: 'A',
                lacks: 'B',
            }),
            (None, Some(_)) => Err(GateError::Missing {
                name: g.figure.clone(),
                has: 'B',
                lacks: 'A',
            }),
            (None, None) => {
                let mut known: Vec<String> = fa.keys().chain(fb.keys()).cloned().collect();
                known.sort();
                known.dedup();
                Err(GateError::Unknown {
                    name: g.figure.clone(),
                    known,
                })
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::model::TransactionFigures;

    fn gate(spec: &str) -> Gate {
        Gate::parse(spec).unwrap()
    }

    #[test]
    fn gates_parse_with_a_sign_a_number_and_maybe_a_percent() {
        assert_eq!(
            gate("booking_p99_ms=+10%"),
            Gate {
                figure: "booking_p99_ms".into(),
                direction: Direction::Up,
                allowance: Allowance::Percent(10.0),
            }
        );
        assert_eq!(
            gate(" rush_rate = -2.5 % "),
            Gate {
                figure: "rush_rate".into(),
                direction: Direction::Down,
                allowance: Allowance::Percent(2.5),
            }
        );
        assert_eq!(
            gate("booking_p99_ms=+5").allowance,
            Allowance::Absolute(5.0)
        );
        assert_eq!(gate("x=-0").direction, Direction::Down);
        assert_eq!(
            gate("booking_p99_ms=+10%").to_string(),
            "booking_p99_ms=+10%"
        );
        assert_eq!(gate("paid=-3").to_string(), "paid=-3");
        for (spec, why) in [
            ("booking_p99_ms", "no `=`"),
            ("=+10%", "no figure name"),
            ("booking_p99_ms=10%", "needs a sign"),
            ("booking_p99_ms=+ten%", "not a number"),
            ("booking_p99_ms=+%", "not a number"),
            ("booking_p99_ms=+-3%", "at least 0"),
            ("booking_p99_ms=+inf%", "finite"),
        ] {
            let e = Gate::parse(spec).unwrap_err();
            assert!(
                matches!(&e, GateError::Syntax { why: w, .. } if w.contains(why)),
                "{spec}: {e}"
            );
            assert!(e.to_string().contains("FIGURE=+N%"), "{e}");
        }
    }

    #[test]
    fn exactly_the_allowed_change_passes_and_just_over_fails() {
        let up = gate("booking_p99_ms=+10%");
        assert!(judge(&up, 100.0, 110.0));
        assert!(!judge(&up, 100.0, 110.01));
        assert!(judge(&up, 100.0, 50.0), "better is fine");
        // floating point: 0.7 · 1.1 is not exactly 0.77
        assert!(judge(&up, 0.7, 0.77));
        assert!(!judge(&up, 0.7, 0.7701));
        let down = gate("rush_rate=-2%");
        assert!(judge(&down, 2000.0, 1960.0));
        assert!(!judge(&down, 2000.0, 1959.9));
        assert!(judge(&down, 2000.0, 2500.0));
        let abs = gate("booking_p99_ms=+5");
        assert!(judge(&abs, 30.0, 35.0));
        assert!(!judge(&abs, 30.0, 35.001));
        let abs_down = gate("paid=-3");
        assert!(judge(&abs_down, 10.0, 7.0));
        assert!(!judge(&abs_down, 10.0, 6.0));
        // from 0, +10% allows no rise at all; a non-number never passes
        let zero = gate("server_errors=+10%");
        assert!(judge(&zero, 0.0, 0.0));
        assert!(!judge(&zero, 0.0, 1.0));
        assert!(!judge(&up, 1.0, f64::NAN));
        assert!(!judge(&up, f64::INFINITY, 1.0));
    }

    fn report(booking_p99: Option<f64>, rate: f64) -> Report {
        let mut r = Report::default();
        r.load.achieved_rate = rate;
        if let Some(p99) = booking_p99 {
            let mut h = crate::hdr::histogram();
            for ms in 1..=100u64 {
                h.record(ms * 1_000).unwrap();
            }
            let mut t = crate::hdr::figures("booking", &h, 0);
            // the written figure differs: the gate reads the histogram
            t.p99_ms = p99;
            r.load.transactions.push(t);
        }
        r.load.transactions.push(TransactionFigures {
            name: "Check Out".into(),
            p99_ms: 7.0,
            ..TransactionFigures::default()
        });
        r
    }

    #[test]
    fn figures_are_named_in_snake_case_with_percentiles_from_the_histograms() {
        assert_eq!(snake("queue age max"), "queue_age_max");
        assert_eq!(snake(" Check-Out!! now "), "check_out_now");
        assert_eq!(figure_name("queue age max", "ms"), "queue_age_max_ms");
        assert_eq!(figure_name("duration", "s"), "duration_s");
        assert_eq!(figure_name("rush rate", "bookings/s"), "rush_rate");
        let f = figures(&report(Some(1.0), 1990.0));
        for name in [
            "booking_p50_ms",
            "booking_p90_ms",
            "booking_p99_ms",
            "booking_p999_ms",
            "booking_max_ms",
            "check_out_p99_ms",
            "rush_rate",
            "server_errors",
            "queue_age_max_ms",
            "duration_s",
            "invariants_failed",
        ] {
            assert!(f.contains_key(name), "{name}: {:?}", f.keys());
        }
        // from the histogram (99 ms), not the written 1 ms
        assert!((f["booking_p99_ms"].value - 99.0).abs() < 0.1);
        assert_eq!(f["booking_p99_ms"].unit, "ms");
        assert!((f["booking_max_ms"].value - 100.0).abs() < 0.1);
        // no histogram: the written figure
        assert_eq!(f["check_out_p99_ms"].value, 7.0);
        assert_eq!(f["rush_rate"].value, 1990.0);
        // a run that did not measure bookings has no booking_p99_ms
        assert!(!figures(&report(None, 1.0)).contains_key("booking_p99_ms"));
    }

    #[test]
    fn check_judges_every_gate_or_says_which_name_is_wrong() {
        let a = report(Some(1.0), 2000.0);
        let b = report(Some(1.0), 1900.0);
        let judged = check(
            &[gate("rush_rate=-2%"), gate("booking_p99_ms=+10%")],
            &a,
            &b,
        )
        .unwrap();
        assert_eq!(judged.len(), 2);
        assert!(!judged[0].passed && judged[1].passed);
        assert_eq!(
            judged[0].line(),
            "FAIL rush_rate=-2%: A 2,000 bookings/s, B 1,900 bookings/s, change -5% (-100 bookings/s), allowed down to 1,960 bookings/s"
        );
        assert!(
            judged[1]
                .line()
                .starts_with("PASS booking_p99_ms=+10%: A 99")
        );

        match check(&[gate("bookng_p99_ms=+10%")], &a, &b).unwrap_err() {
            GateError::Unknown { name, known } => {
                assert_eq!(name, "bookng_p99_ms");
                assert!(known.contains(&"booking_p99_ms".to_owned()));
                assert!(known.windows(2).all(|w| w[0] < w[1]), "sorted, once each");
            }
            e => panic!("{e}"),
        }
        let without = report(None, 2000.0);
        let e = check(&[gate("booking_p99_ms=+10%")], &a, &without).unwrap_err();
        assert_eq!(
            e,
            GateError::Missing {
                name: "booking_p99_ms".into(),
                has: 'A',
                lacks: 'B'
            }
        );
        assert!(e.to_string().contains("in run A but not in run B"));
        assert!(matches!(
            check(&[gate("booking_p99_ms=+10%")], &without, &a),
            Err(GateError::Missing { has: 'B', .. })
        ));
    }
}
