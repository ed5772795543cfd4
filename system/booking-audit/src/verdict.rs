//! [`Verdict`]: one checked invariant or threshold, the one type every
//! audit, checker, threshold and report uses.

use serde::{Deserialize, Serialize};

/// `bound` of a verdict that passes at or below its threshold.
pub const AT_MOST: &str = "at_most";
/// `bound` of a verdict that passes at or above its threshold.
pub const AT_LEAST: &str = "at_least";
/// The unit of a count of violations (or of anything counted).
pub const COUNT: &str = "count";
/// Violations quoted in a detail at most.
pub const DETAILS_MAX: usize = 10;

/// One checked invariant or threshold: passed iff the figure is on the
/// passing side of the threshold.
///
/// The JSON is `report.json`'s and `/ops/audit`'s: `name`, `passed`,
/// `figure`, `threshold`, `unit`, `bound`, `detail`. A verdict written
/// before `threshold`, `unit` or `bound` existed reads as `0`, `""` and
/// `at_most`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// Its name (stable: CI, reports and tests refer to it).
    pub name: String,
    /// Whether it held.
    pub passed: bool,
    /// The measured figure (a count of violations unless said otherwise).
    pub figure: f64,
    /// The threshold the figure was held to.
    #[serde(default)]
    pub threshold: f64,
    /// The figure's unit (`count`, `seats`, `ms`, `%`, `bookings/s`).
    #[serde(default)]
    pub unit: String,
    /// [`AT_MOST`] or [`AT_LEAST`]: which side of the threshold passes.
    #[serde(default = "at_most")]
    pub bound: String,
    /// What was checked and the first violations, for a human.
    #[serde(default)]
    pub detail: String,
}

fn at_most() -> String {
    AT_MOST.to_owned()
}

impl Verdict {
    /// Passes when `figure <= threshold`.
    pub fn at_most(name: &str, figure: f64, threshold: f64, unit: &str, detail: String) -> Verdict {
        Verdict {
            name: name.to_owned(),
            passed: figure <= threshold,
            figure,
            threshold,
            unit: unit.to_owned(),
            bound: AT_MOST.to_owned(),
            detail,
        }
    }

    /// Passes when `figure >= threshold`.
    pub fn at_least(
        name: &str,
        figure: f64,
        threshold: f64,
        unit: &str,
        detail: String,
    ) -> Verdict {
        Verdict {
            name: name.to_owned(),
            passed: figure >= threshold,
            figure,
            threshold,
            unit: unit.to_owned(),
            bound: AT_LEAST.to_owned(),
            detail,
        }
    }

    /// A count of violations held to `max`; the detail quotes the first
    /// [`DETAILS_MAX`].
    pub fn violations(name: &str, violations: &[String], max: u64) -> Verdict {
        Verdict::at_most(
            name,
            violations.len() as f64,
            max as f64,
            COUNT,
            quote(violations),
        )
    }

    /// No violation allowed: [`Verdict::violations`] held to 0, the detail
    /// opening with what was checked (`checked`), so a passing verdict says
    /// what it looked at.
    pub fn none_of(name: &str, checked: &str, violations: &[String]) -> Verdict {
        let mut v = Verdict::violations(name, violations, 0);
        v.detail = if violations.is_empty() {
            checked.to_owned()
        } else {
            format!("{checked}; {}", v.detail)
        };
        v
    }

    /// The same verdict under another name.
    pub fn named(mut self, name: &str) -> Verdict {
        self.name = name.to_owned();
        self
    }

    /// The same figure judged again against `threshold` (same bound).
    pub fn judged_against(mut self, threshold: f64) -> Verdict {
        self.passed = if self.bound == AT_LEAST {
            self.figure >= threshold
        } else {
            self.figure <= threshold
        };
        self.threshold = threshold;
        self
    }
}

/// The first [`DETAILS_MAX`] lines joined by `; `, and how many more.
pub fn quote(lines: &[String]) -> String {
    let mut s = lines
        .iter()
        .take(DETAILS_MAX)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join("; ");
    if lines.len() > DETAILS_MAX {
        s.push_str(&format!("; and {} more", lines.len() - DETAILS_MAX));
    }
    s
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn bounds_pass_on_their_side_of_the_threshold() {
        assert!(Verdict::at_most("x", 2.0, 2.0, COUNT, String::new()).passed);
        assert!(!Verdict::at_most("x", 2.1, 2.0, COUNT, String::new()).passed);
        assert!(Verdict::at_least("x", 2.0, 2.0, COUNT, String::new()).passed);
        assert!(!Verdict::at_least("x", 1.9, 2.0, COUNT, String::new()).passed);
        let v = Verdict::at_least("x", 3.0, 2.0, COUNT, String::new()).judged_against(4.0);
        assert!(!v.passed && v.threshold == 4.0);
        let v = Verdict::violations("x", &["a".into(), "b".into()], 0).judged_against(2.0);
        assert!(v.passed);
    }

    #[test]
    fn details_quote_the_first_violations_and_count_the_rest() {
        let many: Vec<String> = (0..25).map(|i| format!("v{i}")).collect();
        let v = Verdict::none_of("x", "25 things", &many);
        assert!(!v.passed);
        assert_eq!(v.figure, 25.0);
        assert!(v.detail.starts_with("25 things; v0; v1"), "{}", v.detail);
        assert!(v.detail.ends_with("v9; and 15 more"), "{}", v.detail);
        assert_eq!(Verdict::none_of("x", "nothing", &[]).detail, "nothing");
    }

    #[test]
    fn older_json_without_threshold_unit_or_bound_reads() {
        let v: Verdict =
            serde_json::from_str(r#"{"name":"n","passed":true,"figure":0,"detail":"d"}"#).unwrap();
        assert_eq!(
            (v.threshold, v.bound.as_str(), v.unit.as_str()),
            (0.0, AT_MOST, "")
        );
        let back: Verdict = serde_json::from_str(&serde_json::to_string(&v).unwrap()).unwrap();
        assert_eq!(back, v);
    }
}
