//! The score table: per file and per package, caught / missed / timeout /
//! unviable and the score, and the verdict against the minimum. Pure.
//!
//! The score is the share of viable mutants the tests noticed:
//! `(caught + timeout) / (caught + missed + timeout)`; unviable mutants
//! (they do not build) are out of it.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::outcomes::{Outcome, Row};

/// Counts of one file, one package or the whole run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Caught by a failing test.
    pub caught: u32,
    /// Survived every test.
    pub missed: u32,
    /// Hung the tests past the per-mutant timeout.
    pub timeout: u32,
    /// Did not build.
    pub unviable: u32,
}

impl Counts {
    fn add(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Caught => self.caught += 1,
            Outcome::Missed => self.missed += 1,
            Outcome::Timeout => self.timeout += 1,
            Outcome::Unviable => self.unviable += 1,
        }
    }

    /// Mutants that built: the score's denominator.
    pub fn viable(&self) -> u32 {
        self.caught + self.missed + self.timeout
    }

    /// Percent of viable mutants noticed; `None` with no viable mutant.
    pub fn score(&self) -> Option<f64> {
        let viable = self.viable();
        (viable > 0).then(|| f64::from(self.caught + self.timeout) * 100.0 / f64::from(viable))
    }
}

/// One line of the table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Line {
    /// The package.
    pub package: String,
    /// The file, or `None` on the package's total line.
    pub file: Option<String>,
    /// Its counts.
    pub counts: Counts,
}

/// The table of a run and its verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Per file, each package's files followed by the package's total.
    pub lines: Vec<Line>,
    /// The minimum score each package must reach, percent.
    pub min_score: f64,
    /// The packages below it, with their score.
    pub below: Vec<(String, f64)>,
    /// Every missed mutant's name, in file and line order.
    pub missed: Vec<String>,
}

impl Summary {
    /// Whether every package reached the minimum.
    pub fn passed(&self) -> bool {
        self.below.is_empty()
    }
}

/// The table of `rows` and the verdict at `min_score` percent.
pub fn summarize(rows: &[Row], min_score: f64) -> Summary {
    assert!(
        (0.0..=100.0).contains(&min_score),
        "a score is a percent: {min_score}"
    );
    let mut by_file: BTreeMap<(&str, &str), Counts> = BTreeMap::new();
    for r in rows {
        by_file
            .entry((&r.package, &r.file))
            .or_default()
            .add(r.outcome);
    }
    let mut lines = Vec::new();
    let mut below = Vec::new();
    let mut package_total: Option<(&str, Counts)> = None;
    let mut close = |total: Option<(&str, Counts)>, lines: &mut Vec<Line>| {
        if let Some((package, counts)) = total {
            lines.push(Line {
                package: package.to_owned(),
                file: None,
                counts,
            });
            if let Some(score) = counts.score().filter(|s| *s < min_score) {
                below.push((package.to_owned(), score));
            }
        }
    };
    for ((package, file), counts) in &by_file {
        if package_total.is_some_and(|(p, _)| p != *package) {
            close(package_total.take(), &mut lines);
        }
        let total = &mut package_total.get_or_insert((package, Counts::default())).1;
        total.caught += counts.caught;
        total.missed += counts.missed;
        total.timeout += counts.timeout;
        total.unviable += counts.unviable;
        lines.push(Line {
            package: (*package).to_owned(),
            file: Some((*file).to_owned()),
            counts: *counts,
        });
    }
    close(package_total, &mut lines);
    let mut missed: Vec<&Row> = rows
        .iter()
        .filter(|r| r.outcome == Outcome::Missed)
        .collect();
    missed.sort_by(|a, b| (&a.file, a.line, &a.name).cmp(&(&b.file, b.line, &b.name)));
    Summary {
        lines,
        min_score,
        below,
        missed: missed.into_iter().map(|r| r.name.clone()).collect(),
    }
}

/// The table as Markdown: a row per file, a bold total per package, then
/// the verdict and the missed mutants.
pub fn render(summary: &Summary) -> String {
    let mut out = String::new();
    out.push_str("| package | file | caught | missed | timeout | unviable | score |\n");
    out.push_str("|---|---|---:|---:|---:|---:|---:|\n");
    for line in &summary.lines {
        let c = line.counts;
        let score = c
            .score()
            .map_or_else(|| "–".to_owned(), |s| format!("{s:.1} %"));
        match &line.file {
            Some(file) => {
                let _ = writeln!(
                    out,
                    "| {} | {file} | {} | {} | {} | {} | {score} |",
                    line.package, c.caught, c.missed, c.timeout, c.unviable
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "| **{}** | **total** | **{}** | **{}** | **{}** | **{}** | **{score}** |",
                    line.package, c.caught, c.missed, c.timeout, c.unviable
                );
            }
        }
    }
    out.push('\n');
    if summary.passed() {
        let _ = writeln!(
            out,
            "Every package at {:.0} % or more of viable mutants caught.",
            summary.min_score
        );
    } else {
        for (package, score) in &summary.below {
            let _ = writeln!(
                out,
                "BELOW {:.0} %: {package} at {score:.1} %",
                summary.min_score
            );
        }
    }
    if !summary.missed.is_empty() {
        let _ = writeln!(out, "\nMissed ({}):", summary.missed.len());
        for name in &summary.missed {
            let _ = writeln!(out, "- {name}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(package: &str, file: &str, line: u32, outcome: Outcome) -> Row {
        Row {
            package: package.into(),
            file: file.into(),
            line,
            name: format!("{file}:{line}"),
            outcome,
        }
    }

    #[test]
    fn scores_each_file_and_package_on_viable_mutants_only() {
        let mut rows = vec![
            row("b", "b/x.rs", 1, Outcome::Missed),
            row("b", "b/x.rs", 2, Outcome::Unviable),
        ];
        rows.extend((3..12).map(|l| row("b", "b/x.rs", l, Outcome::Caught)));
        rows.push(row("a", "a/y.rs", 1, Outcome::Timeout));
        rows.push(row("a", "a/y.rs", 2, Outcome::Missed));
        let s = summarize(&rows, 90.0);
        let files: Vec<_> = s
            .lines
            .iter()
            .map(|l| (l.package.as_str(), l.file.as_deref(), l.counts.score()))
            .collect();
        assert_eq!(
            files,
            vec![
                ("a", Some("a/y.rs"), Some(50.0)),
                ("a", None, Some(50.0)),
                ("b", Some("b/x.rs"), Some(90.0)),
                ("b", None, Some(90.0)),
            ]
        );
        // 9 caught of 10 viable is exactly 90 %: not below
        assert_eq!(s.below, vec![("a".to_owned(), 50.0)]);
        assert!(!s.passed());
        assert_eq!(s.missed, vec!["a/y.rs:2", "b/x.rs:1"]);
    }

    #[test]
    fn a_package_just_below_the_minimum_fails_and_the_table_says_so() {
        let mut rows: Vec<_> = (0..89)
            .map(|l| row("p", "p/f.rs", l, Outcome::Caught))
            .collect();
        rows.extend((89..100).map(|l| row("p", "p/f.rs", l, Outcome::Missed)));
        let s = summarize(&rows, 90.0);
        assert_eq!(s.below, vec![("p".to_owned(), 89.0)]);
        let text = render(&s);
        assert!(
            text.contains("| **p** | **total** | **89** | **11** | **0** | **0** | **89.0 %** |"),
            "{text}"
        );
        assert!(text.contains("BELOW 90 %: p at 89.0 %"), "{text}");
        assert!(text.contains("Missed (11):"), "{text}");
    }

    #[test]
    fn all_unviable_has_no_score_and_does_not_fail() {
        let s = summarize(&[row("p", "p/f.rs", 1, Outcome::Unviable)], 90.0);
        assert!(s.passed());
        assert_eq!(s.lines[0].counts.score(), None);
    }
}
