//! Verdicts: figures of a run, held to the profile's [`Thresholds`], become
//! [`Verdict`]s (the audit's own type; its invariants are listed in
//! `booking_audit::invariants`). Every function here is pure; the rehearsal gathers
//! the figures ([`crate::rehearse`]) and these decide. The verdicts on the
//! load's figures are defined once in [`reports::verdicts`] (`reports
//! merge` judges a sharded run's merged figures with them); these pass the
//! profile's bounds.
//!
//! The names are stable (CI and the tests refer to them):
//!
//! | name | figure | passes when |
//! |---|---|---|
//! | the audit's ([`from_audit`]) | violations | at most the profile's (0) |
//! | `rush_rate` | bookings started per second during the rush | at least `rush_rate_min` |
//! | `booking_p99_ms` | p99 booking latency from the intended start | at most `booking_p99_ms_max` |
//! | `queue_age_max_ms` | oldest queued message seen during the run | at most `queue_age_ms_max` |
//! | `server_error_pct` | 5xx or unanswered, % of requests | at most `server_error_pct_max` |
//! | `at_cap_when_demand_exceeded` | seats short of the cap at the level's peak, summed over levels that turned a candidate away | at most 0 |
//! | `never_above_cap_during_run` | seats over the cap at the level's peak, summed | at most 0 |
//! | `sale_settled` | HELD records and queued messages left when the settle bound ran out | at most 0 |
//! | `redis_pool_waits` | Redis connection requests that found every connection of their pool in use, % of all (the fleet's pools summed; on Redis only) | at most `redis_pool_wait_pct_max` |
//! | `approved_payers_told_paid` | redirects of payers who approved at the checkout answered `not_paid` | at most 0 |

use std::collections::{BTreeMap, BTreeSet};

use booking_audit::verdict::quote;
pub use booking_audit::{AT_LEAST, AT_MOST, DETAILS_MAX, Verdict};
use reports::LoadFigures;

use crate::profile::Thresholds;

pub use reports::verdicts::{
    APPROVED_TOLD_PAID, BOOKING_P99, BOOKING_TRANSACTION, QUEUE_AGE, RUSH_RATE, SERVER_ERRORS,
    approved_payers_told_paid, error_pct,
};
/// The bounds a fault schedule may relax (`[relax]`), by verdict name.
pub const RELAXABLE: [&str; 4] = [RUSH_RATE, BOOKING_P99, QUEUE_AGE, SERVER_ERRORS];

/// `thresholds` with a schedule's `relax` applied, and what was relaxed
/// (`by`: the schedule's name). Names outside [`RELAXABLE`] are left alone
/// (the profile refuses them before a run).
pub fn relaxed(
    thresholds: &Thresholds,
    relax: &std::collections::BTreeMap<String, f64>,
    by: &str,
) -> (Thresholds, Vec<reports::Relaxed>) {
    let mut t = thresholds.clone();
    let mut out = Vec::new();
    for (name, bound) in relax {
        let slot = match name.as_str() {
            RUSH_RATE => &mut t.rush_rate_min,
            BOOKING_P99 => &mut t.booking_p99_ms_max,
            QUEUE_AGE => &mut t.queue_age_ms_max,
            SERVER_ERRORS => &mut t.server_error_pct_max,
            _ => continue,
        };
        out.push(reports::Relaxed {
            verdict: name.clone(),
            bound: *bound,
            default_bound: *slot,
            by: by.to_owned(),
        });
        *slot = *bound;
    }
    (t, out)
}
/// The name of the at-cap invariant.
pub const AT_CAP: &str = "at_cap_when_demand_exceeded";
/// The name of the never-above-cap invariant.
pub const NEVER_ABOVE_CAP: &str = "never_above_cap_during_run";
/// The name of the pool-waits verdict.
pub const POOL_WAITS: &str = "redis_pool_waits";

/// `redis_pool_waits`: connection requests that waited, as a percentage of
/// all, over every Redis pool of the fleet, against its ceiling; the detail
/// names each pool that waited, worst first, with its size, the time its
/// callers waited and how many gave up.
pub fn pool_waits(pools: &[(String, booking::PoolFigures)], thresholds: &Thresholds) -> Verdict {
    let mut all = booking::PoolFigures::default();
    for (_, f) in pools {
        all += *f;
    }
    let (gets, waits) = (all.gets, all.waits);
    let mut waited: Vec<&(String, booking::PoolFigures)> =
        pools.iter().filter(|(_, f)| f.waits > 0).collect();
    waited.sort_by(|a, b| b.1.wait_pct().total_cmp(&a.1.wait_pct()));
    let named: Vec<String> = waited
        .iter()
        .map(|(name, f)| {
            format!(
                "{name}: {:.1} % of {} waited ({:.1} s in all, {} gave up; {} connections over the fleet)",
                f.wait_pct(),
                f.gets,
                f.wait_micros as f64 / 1e6,
                f.timeouts,
                f.max_size
            )
        })
        .collect();
    let detail = if named.is_empty() {
        format!("no wait in {gets} connection requests")
    } else {
        format!(
            "{waits} of {gets} connection requests waited; {}",
            named.join("; ")
        )
    };
    at_most(
        POOL_WAITS,
        all.wait_pct(),
        thresholds.redis_pool_wait_pct_max,
        "%",
        detail,
    )
}

/// The name of the quiescence invariant.
pub const SETTLED: &str = "sale_settled";

/// `figure <= threshold`.
pub fn at_most(name: &str, figure: f64, threshold: f64, unit: &str, detail: String) -> Verdict {
    Verdict::at_most(name, figure, threshold, unit, detail)
}

/// `figure >= threshold`.
pub fn at_least(name: &str, figure: f64, threshold: f64, unit: &str, detail: String) -> Verdict {
    Verdict::at_least(name, figure, threshold, unit, detail)
}

/// A count invariant: at most `max` violations, the first few quoted.
pub fn count_at_most(name: &str, violations: &[String], max: u64) -> Verdict {
    Verdict::violations(name, violations, max)
}

/// One of the audit's invariants, judged again against the profile's bound
/// for it (the audit's own bound is 0).
pub fn from_audit(invariant: &Verdict, thresholds: &Thresholds) -> Verdict {
    let max = thresholds.audit_max(&invariant.name);
    Verdict {
        unit: booking_audit::COUNT.to_owned(),
        bound: AT_MOST.to_owned(),
        ..invariant.clone()
    }
    .judged_against(max as f64)
}

/// `rush_rate`: the achieved rush rate against its floor.
pub fn rush_rate(load: &LoadFigures, thresholds: &Thresholds) -> Verdict {
    reports::verdicts::rush_rate(load, thresholds.rush_rate_min)
}

/// `booking_p99_ms`: the booking transaction's p99 against its ceiling; a
/// run that measured no booking fails it.
pub fn booking_p99(load: &LoadFigures, thresholds: &Thresholds) -> Verdict {
    reports::verdicts::booking_p99(load, thresholds.booking_p99_ms_max)
}

/// `queue_age_max_ms`: the oldest queued message seen, against its ceiling.
/// (Only where the queue can be watched: a remote target's cannot.)
pub fn queue_age(max_ms: u64, samples: u64, thresholds: &Thresholds) -> Verdict {
    reports::verdicts::queue_age(max_ms, samples, thresholds.queue_age_ms_max)
}

/// `server_error_pct`: 5xx and unanswered requests against their ceiling.
pub fn server_errors(load: &LoadFigures, thresholds: &Thresholds) -> Verdict {
    reports::verdicts::server_errors(load, thresholds.server_error_pct_max)
}

/// The whole run's bounds of the verdicts `reports merge` judges again on a
/// sharded run's merged figures, by name.
pub fn merge_bounds(thresholds: &Thresholds) -> BTreeMap<String, f64> {
    BTreeMap::from([
        (RUSH_RATE.to_owned(), thresholds.rush_rate_min),
        (BOOKING_P99.to_owned(), thresholds.booking_p99_ms_max),
        (SERVER_ERRORS.to_owned(), thresholds.server_error_pct_max),
    ])
}

/// One level as the run saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LevelPeak {
    /// The level.
    pub level: String,
    /// Its cap.
    pub cap: u64,
    /// Candidates whose first booking asked for this level and who never got
    /// a hold on it: demand beyond what it could hold at that moment.
    pub turned_away: u64,
    /// The most seats it ever counted (samples and status writes).
    pub peak: u64,
}

/// `at_cap_when_demand_exceeded`: a level that turned candidates away must
/// have been at its cap (a level refusing while below it stopped early).
/// Figure: seats short of the cap at the peak, summed over those levels.
pub fn at_cap_when_demand_exceeded(levels: &[LevelPeak]) -> Verdict {
    let mut short = 0u64;
    let mut details = Vec::new();
    for l in levels.iter().filter(|l| l.turned_away > 0) {
        if l.peak < l.cap {
            short += l.cap - l.peak;
            details.push(format!(
                "{}: peak {} of {}, {} candidates turned away",
                l.level, l.peak, l.cap, l.turned_away
            ));
        }
    }
    let mut r = at_most(AT_CAP, short as f64, 0.0, "seats", quote(&details));
    if details.is_empty() {
        r.detail = levels
            .iter()
            .map(|l| {
                format!(
                    "{}: peak {} of {}, {} turned away",
                    l.level, l.peak, l.cap, l.turned_away
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
    }
    r
}

/// `never_above_cap_during_run`: no level ever counted more than its cap.
/// Figure: seats over the cap at the peak, summed.
pub fn never_above_cap(levels: &[LevelPeak]) -> Verdict {
    let mut over = 0u64;
    let mut details = Vec::new();
    for l in levels.iter().filter(|l| l.peak > l.cap) {
        over += l.peak - l.cap;
        details.push(format!("{}: peak {} of {}", l.level, l.peak, l.cap));
    }
    at_most(NEVER_ABOVE_CAP, over as f64, 0.0, "seats", quote(&details))
}

/// What was left when the settle phase ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Leftovers {
    /// HELD records whose deadline (plus a sweep) had passed.
    pub overdue_holds: u64,
    /// Messages still queued or in flight.
    pub queued: u64,
    /// Whether the counters had stopped changing.
    pub quiet: bool,
}

/// `sale_settled`: the sale went quiet within the settle bound: no overdue
/// hold left unreleased, the queue drained, the counters still.
pub fn sale_settled(left: Leftovers, waited_ms: u64) -> Verdict {
    let figure = left.overdue_holds + left.queued + u64::from(!left.quiet);
    at_most(
        SETTLED,
        figure as f64,
        0.0,
        "count",
        format!(
            "after {waited_ms} ms: {} overdue holds, {} queued, {}",
            left.overdue_holds,
            left.queued,
            if left.quiet {
                "quiet"
            } else {
                "still changing"
            }
        ),
    )
}

/// Each candidate's first ask, grouped by level: `asks` in arrival order,
/// (level, candidate); a candidate counts only for the level it asked for
/// first (a later ask finds it holding or paid, whatever the level).
pub fn first_asks<'a>(
    asks: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> BTreeMap<String, BTreeSet<String>> {
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (level, candidate) in asks {
        if seen.insert(candidate) {
            out.entry(level.to_owned())
                .or_default()
                .insert(candidate.to_owned());
        }
    }
    out
}

/// Per level, the first askers who never got a hold on it.
pub fn turned_away(
    first_asks: &BTreeMap<String, BTreeSet<String>>,
    admitted: &BTreeMap<String, BTreeSet<String>>,
) -> BTreeMap<String, u64> {
    first_asks
        .iter()
        .map(|(level, askers)| {
            let n = match admitted.get(level) {
                Some(a) => askers.difference(a).count(),
                None => askers.len(),
            };
            (level.clone(), n as u64)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use reports::TransactionFigures;

    fn thresholds() -> Thresholds {
        Thresholds::default()
    }

    fn load(rate: f64, p99: f64, requests: u64, errors: u64) -> LoadFigures {
        LoadFigures {
            requests,
            server_errors: errors,
            target_rate: 2_000.0,
            achieved_rate: rate,
            transactions: vec![TransactionFigures {
                name: BOOKING_TRANSACTION.to_owned(),
                count: 100,
                p99_ms: p99,
                ..TransactionFigures::default()
            }],
            ..LoadFigures::default()
        }
    }

    #[test]
    fn pool_waits_are_judged_over_every_pool_and_name_the_worst() {
        let pool = |gets, waits, micros, timeouts| booking::PoolFigures {
            max_size: 8,
            gets,
            waits,
            wait_micros: micros,
            timeouts,
            ..booking::PoolFigures::default()
        };
        let quiet = vec![
            ("ledger".to_owned(), pool(10_000, 0, 0, 0)),
            ("queue".to_owned(), pool(5_000, 0, 0, 0)),
        ];
        let v = pool_waits(&quiet, &thresholds());
        assert!(v.passed, "{v:?}");
        assert_eq!((v.name.as_str(), v.figure), (POOL_WAITS, 0.0));
        assert!(v.detail.contains("no wait in 15000"), "{}", v.detail);
        // 10 % of all requests is the bound: 1,500 of 15,000 passes, 1,501 fails
        let at = vec![
            ("ledger".to_owned(), pool(10_000, 1_500, 1, 0)),
            ("queue".to_owned(), pool(5_000, 0, 0, 0)),
        ];
        assert!(pool_waits(&at, &thresholds()).passed);
        let over = vec![
            ("ledger".to_owned(), pool(10_000, 1_000, 2_000_000, 0)),
            ("queue".to_owned(), pool(5_000, 501, 500_000, 3)),
        ];
        let v = pool_waits(&over, &thresholds());
        assert!(!v.passed);
        assert!((v.figure - 1_501.0 * 100.0 / 15_000.0).abs() < 1e-9);
        // the worst pool (by its own share) comes first, with its causes
        let queue_at = v
            .detail
            .find("queue: 10.0 % of 5000 waited (0.5 s in all, 3 gave up")
            .unwrap();
        let ledger_at = v
            .detail
            .find("ledger: 10.0 % of 10000 waited (2.0 s in all, 0 gave up")
            .unwrap();
        assert!(queue_at < ledger_at, "{}", v.detail);
    }

    #[test]
    fn the_rush_rate_fails_below_its_floor() {
        assert!(rush_rate(&load(1_950.0, 1.0, 1, 0), &thresholds()).passed);
        let r = rush_rate(&load(1_949.9, 1.0, 1, 0), &thresholds());
        assert!(!r.passed);
        assert_eq!((r.name.as_str(), r.bound.as_str()), (RUSH_RATE, AT_LEAST));
    }

    #[test]
    fn booking_p99_fails_over_its_ceiling_or_unmeasured() {
        assert!(booking_p99(&load(2_000.0, 50.0, 1, 0), &thresholds()).passed);
        assert!(!booking_p99(&load(2_000.0, 50.1, 1, 0), &thresholds()).passed);
        let none = LoadFigures::default();
        let r = booking_p99(&none, &thresholds());
        assert!(!r.passed);
        assert_eq!(r.name, BOOKING_P99);
    }

    #[test]
    fn queue_age_fails_over_its_ceiling() {
        assert!(queue_age(3_999, 10, &thresholds()).passed);
        assert!(queue_age(4_000, 10, &thresholds()).passed);
        assert!(!queue_age(4_001, 10, &thresholds()).passed);
    }

    #[test]
    fn server_errors_fail_over_one_in_ten_thousand() {
        assert!(server_errors(&load(2_000.0, 1.0, 100_000, 10), &thresholds()).passed);
        let r = server_errors(&load(2_000.0, 1.0, 100_000, 11), &thresholds());
        assert!(!r.passed);
        assert!((r.figure - 0.011).abs() < 1e-9);
        assert_eq!(error_pct(0, 0), 0.0);
    }

    #[test]
    fn audit_invariants_are_judged_against_the_profile() {
        let inv = Verdict::at_most(
            "no_throttling",
            2.0,
            0.0,
            booking_audit::COUNT,
            "2 writes".into(),
        );
        let r = from_audit(&inv, &thresholds());
        assert!(!r.passed);
        assert_eq!((r.figure, r.threshold), (2.0, 0.0));
        let mut t = thresholds();
        t.audit.insert("no_throttling".into(), 2);
        assert!(from_audit(&inv, &t).passed);
        let clean = Verdict { figure: 0.0, ..inv };
        assert!(from_audit(&clean, &thresholds()).passed);
    }

    fn peak(level: &str, cap: u64, turned_away: u64, peak: u64) -> LevelPeak {
        LevelPeak {
            level: level.into(),
            cap,
            turned_away,
            peak,
        }
    }

    #[test]
    fn a_level_that_turned_candidates_away_must_have_been_full() {
        assert!(at_cap_when_demand_exceeded(&[peak("a", 10, 5, 10)]).passed);
        assert!(
            at_cap_when_demand_exceeded(&[peak("a", 10, 0, 5)]).passed,
            "nobody turned away"
        );
        let r = at_cap_when_demand_exceeded(&[peak("a", 10, 3, 7), peak("b", 5, 9, 5)]);
        assert!(!r.passed);
        assert_eq!(r.figure, 3.0);
        assert!(r.detail.contains("a: peak 7 of 10"), "{}", r.detail);
    }

    #[test]
    fn no_level_may_go_over_its_cap() {
        assert!(never_above_cap(&[peak("a", 10, 20, 10)]).passed);
        let r = never_above_cap(&[peak("a", 10, 20, 12)]);
        assert!(!r.passed);
        assert_eq!(r.figure, 2.0);
    }

    #[test]
    fn an_unsettled_sale_fails() {
        let quiet = Leftovers {
            quiet: true,
            ..Leftovers::default()
        };
        assert!(sale_settled(quiet, 10).passed);
        assert!(
            !sale_settled(
                Leftovers {
                    overdue_holds: 1,
                    ..quiet
                },
                10
            )
            .passed
        );
        assert!(!sale_settled(Leftovers { queued: 1, ..quiet }, 10).passed);
        assert!(!sale_settled(Leftovers::default(), 10).passed);
    }

    #[test]
    fn a_candidate_counts_for_its_first_level_only() {
        let f = first_asks([("a", "x"), ("b", "x"), ("a", "y"), ("b", "z")]);
        assert_eq!(f["a"], BTreeSet::from(["x".to_owned(), "y".to_owned()]));
        assert_eq!(f["b"], BTreeSet::from(["z".to_owned()]));
        let admitted = BTreeMap::from([("a".to_owned(), BTreeSet::from(["x".to_owned()]))]);
        let t = turned_away(&f, &admitted);
        assert_eq!(t["a"], 1);
        assert_eq!(t["b"], 1);
    }

    #[test]
    fn details_are_bounded() {
        let many: Vec<String> = (0..25).map(|i| format!("v{i}")).collect();
        let r = count_at_most("x", &many, 0);
        assert!(r.detail.ends_with("; and 15 more"), "{}", r.detail);
        assert_eq!(r.figure, 25.0);
    }

    #[test]
    fn a_schedule_relaxes_only_the_bounds_it_names_and_says_so() {
        let relax = BTreeMap::from([
            (BOOKING_P99.to_owned(), 2_500.0),
            (RUSH_RATE.to_owned(), 1_500.0),
            ("one_email_per_paid".to_owned(), 9.0),
        ]);
        let (t, relaxed) = relaxed(&thresholds(), &relax, "headline");
        assert_eq!(t.booking_p99_ms_max, 2_500.0);
        assert_eq!(t.rush_rate_min, 1_500.0);
        assert_eq!(t.queue_age_ms_max, thresholds().queue_age_ms_max);
        assert_eq!(t.audit, thresholds().audit, "the audit is never relaxed");
        assert_eq!(relaxed.len(), 2);
        let p99 = relaxed.iter().find(|r| r.verdict == BOOKING_P99).unwrap();
        assert_eq!(
            (p99.bound, p99.default_bound, p99.by.as_str()),
            (2_500.0, 50.0, "headline")
        );
        // the relaxed bound is what the verdict then holds the figure to
        assert!(booking_p99(&load(2_000.0, 2_400.0, 10, 0), &t).passed);
        assert!(!booking_p99(&load(2_000.0, 2_400.0, 10, 0), &thresholds()).passed);
    }
}
