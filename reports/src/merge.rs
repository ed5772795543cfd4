//! `reports merge`: the reports of the shards of one sharded load
//! (`scenarios rehearse --shard INDEX/COUNT`) joined into one report of the
//! whole run.
//!
//! What the merged report holds, and where each figure comes from:
//!
//! | part | how |
//! |---|---|
//! | counts (`requests`, errors, arrivals, transactions' `count` and `errors`, holds created) | summed over the shards |
//! | latency percentiles (per transaction) | from the shards' HDR histograms added together ([`crate::hdr`]), never from their percentiles |
//! | the rush's achieved rate | every shard's rush starts on the shared wall clock: all rush arrivals over the span from the first start to the last |
//! | timeline | on shard 0's sampling grid, on the shared wall clock: rates summed, each second's p50/p99 from the samples' histograms added, the sale's state (holds, paid, seats left, queue) as shard 0 read it, `released` from every shard's holds created |
//! | phases | shard 0's, on the shared wall clock, with the rush and the late stream widened to every shard's |
//! | `rush_rate`, `booking_p99_ms`, `server_error_pct` | judged again on the merged figures against the whole run's bounds ([`crate::verdicts`], the rehearsal's own definitions) |
//! | `approved_payers_told_paid`, `connection_errors_outside_kills` | the shards' counts summed, judged against the same bound |
//! | the audit's invariants, the level peaks, `sale_settled`, the queue, the sale | shard 0's: it judged the deployment's state once, after every shard's schedule was over |
//!
//! Refused, with the reason: a report that is not a shard's; shards of
//! different schedules, seeds, targets, shard counts or bounds; the same
//! shard twice; a shard missing; shards whose schedules did not start
//! together (from different runs of the same schedule); a transaction or
//! sample without its histogram (a report written before histograms).

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::hdr::{self, HdrError};
use crate::model::{
    LoadFigures, Merged, Phase, Report, SCHEMA, Sample, ShardInfo, TransactionFigures, Verdict,
};
use crate::verdicts::{
    self, APPROVED_TOLD_PAID, BOOKING_P99, RUSH_RATE, SERVER_ERRORS, achieved_rate,
};

/// The verdict on connection errors outside kill windows (the rehearsal's
/// `scenarios::kills`): a count per shard, summed.
pub const CONNECTION_ERRORS_OUTSIDE_KILLS: &str = "connection_errors_outside_kills";
/// The verdicts judged again on the merged load figures, against the bound
/// the shards wrote down for the whole run.
pub const JUDGED_AGAIN: [&str; 3] = [RUSH_RATE, BOOKING_P99, SERVER_ERRORS];
/// Count verdicts whose figures are summed over the shards.
pub const SUMMED: [&str; 2] = [APPROVED_TOLD_PAID, CONNECTION_ERRORS_OUTSIDE_KILLS];
/// The load's phases, run by every shard: their spans are widened to all
/// the shards'.
pub const LOAD_PHASES: [&str; 2] = ["rush", "late"];
/// The most the shards' schedule zeros may lie apart on the wall clock:
/// further apart, they were not one run.
pub const ZERO_SKEW_MAX_MS: f64 = 10_000.0;

/// Why shard reports could not be merged (nothing is written then).
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// Nothing to merge.
    #[error("no report to merge")]
    Empty,
    /// A report of a whole (unsharded) run.
    #[error("{run} is not a shard's report (it was not run with --shard INDEX/COUNT)")]
    NotAShard {
        /// Its run id.
        run: String,
    },
    /// Two shards disagree on what they ran.
    #[error("{run} and {other} are not shards of one run: {what} differ ({a} vs {b})")]
    Mismatch {
        /// What differs (`schedule`, `seed`, `target`, …).
        what: &'static str,
        /// The first shard's run id.
        run: String,
        /// The other shard's run id.
        other: String,
        /// The first shard's value.
        a: String,
        /// The other's.
        b: String,
    },
    /// The same shard twice.
    #[error("shard {index} of {count} is given twice ({run} and {other})")]
    Duplicate {
        /// The shard.
        index: u32,
        /// Shards in all.
        count: u32,
        /// One run id.
        run: String,
        /// The other.
        other: String,
    },
    /// A shard is out of range.
    #[error("{run} says it is shard {index} of {count}")]
    OutOfRange {
        /// Its run id.
        run: String,
        /// Its index.
        index: u32,
        /// Shards in all.
        count: u32,
    },
    /// Not every shard is given.
    #[error("shard(s) {missing:?} of {count} missing: a merge needs every shard")]
    Missing {
        /// The shards not given.
        missing: Vec<u32>,
        /// Shards in all.
        count: u32,
    },
    /// Shards of different runs of the same schedule.
    #[error(
        "{run} and {other} did not run together: their schedules started {apart_ms:.0} ms apart (at most {ZERO_SKEW_MAX_MS:.0})"
    )]
    NotTogether {
        /// Shard 0's run id.
        run: String,
        /// The other's.
        other: String,
        /// How far apart their zeros were.
        apart_ms: f64,
    },
    /// A figure the merge needs has no histogram.
    #[error("{run}: {what} has no latency histogram (a report written before histograms)")]
    NoHistogram {
        /// Its run id.
        run: String,
        /// Which transaction or sample.
        what: String,
    },
    /// A histogram did not decode.
    #[error("{run}: {what}: {source}")]
    Hdr {
        /// Its run id.
        run: String,
        /// Which transaction or sample.
        what: String,
        /// Why.
        source: HdrError,
    },
    /// A verdict to judge again has no whole-run bound.
    #[error("{run}: no whole-run bound for {verdict}")]
    NoBound {
        /// Shard 0's run id.
        run: String,
        /// The verdict.
        verdict: String,
    },
}

/// A shard report and its shard.
struct Shard<'a> {
    report: &'a Report,
    info: &'a ShardInfo,
    /// ms from the merged run's zero to this run's `t_ms = 0`.
    offset_ms: f64,
}

/// The shards, checked and in shard order.
fn checked(reports: &[Report]) -> Result<Vec<(&Report, &ShardInfo)>, MergeError> {
    let mut shards = Vec::with_capacity(reports.len());
    for r in reports {
        let info = r.shard.as_ref().ok_or_else(|| MergeError::NotAShard {
            run: r.run_id.clone(),
        })?;
        shards.push((r, info));
    }
    let (first, fi) = *shards.first().ok_or(MergeError::Empty)?;
    for &(r, i) in &shards[1..] {
        let differ = |what: &'static str, a: String, b: String| -> Result<(), MergeError> {
            if a == b {
                Ok(())
            } else {
                Err(MergeError::Mismatch {
                    what,
                    run: first.run_id.clone(),
                    other: r.run_id.clone(),
                    a,
                    b,
                })
            }
        };
        differ("seeds", first.seed.to_string(), r.seed.to_string())?;
        differ("schedules", fi.schedule.clone(), i.schedule.clone())?;
        differ("targets", fi.target.clone(), i.target.clone())?;
        differ("shard counts", fi.count.to_string(), i.count.to_string())?;
        differ(
            "arrivals",
            fi.arrivals_total.to_string(),
            i.arrivals_total.to_string(),
        )?;
        differ(
            "bounds",
            format!("{:?}", fi.bounds),
            format!("{:?}", i.bounds),
        )?;
    }
    let count = fi.count;
    let mut by_index: BTreeMap<u32, &Report> = BTreeMap::new();
    for &(r, i) in &shards {
        if i.index >= count {
            return Err(MergeError::OutOfRange {
                run: r.run_id.clone(),
                index: i.index,
                count,
            });
        }
        if let Some(other) = by_index.insert(i.index, r) {
            return Err(MergeError::Duplicate {
                index: i.index,
                count,
                run: other.run_id.clone(),
                other: r.run_id.clone(),
            });
        }
    }
    let missing: Vec<u32> = (0..count).filter(|i| !by_index.contains_key(i)).collect();
    if !missing.is_empty() {
        return Err(MergeError::Missing { missing, count });
    }
    shards.sort_by_key(|(_, i)| i.index);
    let (zero_run, zero) = (shards[0].0, shards[0].1.zero_unix_ms);
    for &(r, i) in &shards[1..] {
        let apart_ms = (i.zero_unix_ms - zero).abs();
        if apart_ms > ZERO_SKEW_MAX_MS {
            return Err(MergeError::NotTogether {
                run: zero_run.run_id.clone(),
                other: r.run_id.clone(),
                apart_ms,
            });
        }
    }
    Ok(shards)
}

/// Joins the reports of every shard of one sharded run into the report of
/// the whole run (see the module docs for where each figure comes from).
/// The order of `reports` does not matter.
pub fn merge(reports: &[Report]) -> Result<Report, MergeError> {
    let checked = checked(reports)?;
    let base_ms = checked
        .iter()
        .map(|(_, i)| i.t0_unix_ms)
        .fold(f64::INFINITY, f64::min);
    let shards: Vec<Shard<'_>> = checked
        .into_iter()
        .map(|(report, info)| Shard {
            report,
            info,
            offset_ms: info.t0_unix_ms - base_ms,
        })
        .collect();
    let coordinator = &shards[0];
    let c = coordinator.report;
    let load = merged_load(&shards)?;
    let timeline = merged_timeline(&shards)?;
    let invariants = merged_verdicts(&shards, &load)?;
    let mut sale = c.sale.clone();
    sale.holds_created = shards.iter().map(|s| s.report.sale.holds_created).sum();
    let taken: u64 = sale.levels.iter().map(|l| l.taken).sum();
    sale.released = sale.holds_created.saturating_sub(taken);
    let started_at = chrono::DateTime::from_timestamp_millis(base_ms.round() as i64)
        .map(|t| t.to_rfc3339())
        .unwrap_or_else(|| c.started_at.clone());
    let finished_at = shards
        .iter()
        .filter_map(|s| chrono::DateTime::parse_from_rfc3339(&s.report.finished_at).ok())
        .max()
        .map(|t| t.to_utc().to_rfc3339())
        .unwrap_or_else(|| c.finished_at.clone());
    let info = coordinator.info;
    let mut versions = c.versions.clone();
    versions.insert("shards".to_owned(), info.count.to_string());
    let passed = invariants.iter().all(|v| v.passed);
    Ok(Report {
        schema: SCHEMA,
        run_id: format!("{}-merged-{}", c.run_id, info.count),
        profile_name: c.profile_name.clone(),
        profile: c.profile.clone(),
        seed: c.seed,
        stack: c.stack.clone(),
        versions,
        started_at,
        finished_at,
        passed,
        phases: merged_phases(&shards),
        load,
        sale,
        queue: c.queue.clone(),
        invariants,
        faults: c.faults.clone(),
        relaxed: c.relaxed.clone(),
        timeline,
        files: Vec::new(),
        shard: None,
        merged: Some(Merged {
            count: info.count,
            schedule: info.schedule.clone(),
            target: info.target.clone(),
            runs: shards.iter().map(|s| s.report.run_id.clone()).collect(),
        }),
    })
}

fn decode(run: &str, what: &str, hdr: Option<&String>) -> Result<Histogram<u64>, MergeError> {
    let text = hdr.ok_or_else(|| MergeError::NoHistogram {
        run: run.to_owned(),
        what: what.to_owned(),
    })?;
    hdr::decode(text).map_err(|source| MergeError::Hdr {
        run: run.to_owned(),
        what: what.to_owned(),
        source,
    })
}

fn added(run: &str, what: &str, parts: &[Histogram<u64>]) -> Result<Histogram<u64>, MergeError> {
    hdr::add(parts).map_err(|source| MergeError::Hdr {
        run: run.to_owned(),
        what: what.to_owned(),
        source,
    })
}

/// The transactions, in the order they first appear (shard 0's first).
fn merged_transactions(shards: &[Shard<'_>]) -> Result<Vec<TransactionFigures>, MergeError> {
    let mut names: Vec<&str> = Vec::new();
    for s in shards {
        for t in &s.report.load.transactions {
            if !names.contains(&t.name.as_str()) {
                names.push(&t.name);
            }
        }
    }
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let mut parts = Vec::new();
        let mut errors = 0;
        for s in shards {
            for t in s.report.load.transactions.iter().filter(|t| t.name == name) {
                parts.push(decode(&s.report.run_id, name, t.hdr.as_ref())?);
                errors += t.errors;
            }
        }
        let all = added(&shards[0].report.run_id, name, &parts)?;
        out.push(hdr::figures(name, &all, errors));
    }
    Ok(out)
}

fn merged_load(shards: &[Shard<'_>]) -> Result<LoadFigures, MergeError> {
    let sum = |f: fn(&LoadFigures) -> u64| shards.iter().map(|s| f(&s.report.load)).sum::<u64>();
    let rate = shards[0].info.rate;
    let rush_started = sum(|l| l.rush_started);
    // every shard's rush starts on the shared clock
    let starts: Vec<(f64, f64)> = shards
        .iter()
        .filter(|s| s.report.load.rush_started > 0)
        .map(|s| {
            let l = &s.report.load;
            (l.rush_first_ms + s.offset_ms, l.rush_last_ms + s.offset_ms)
        })
        .collect();
    let first = starts.iter().map(|s| s.0).fold(f64::INFINITY, f64::min);
    let last = starts.iter().map(|s| s.1).fold(f64::NEG_INFINITY, f64::max);
    let (first, last) = if starts.is_empty() {
        (0.0, 0.0)
    } else {
        (first, last)
    };
    let span = Duration::from_secs_f64(((last - first) / 1_000.0).max(0.0));
    Ok(LoadFigures {
        requests: sum(|l| l.requests),
        server_errors: sum(|l| l.server_errors),
        connection_errors: sum(|l| l.connection_errors),
        target_rate: rate,
        achieved_rate: achieved_rate(rush_started, span, rate),
        arrivals_scheduled: sum(|l| l.arrivals_scheduled),
        arrivals_started: sum(|l| l.arrivals_started),
        arrivals_dropped: sum(|l| l.arrivals_dropped),
        arrivals_late: sum(|l| l.arrivals_late),
        rush_started,
        rush_first_ms: first,
        rush_last_ms: last,
        transactions: merged_transactions(shards)?,
    })
}

/// `t_ms` of a shard's sample on the merged clock.
fn shared_ms(s: &Shard<'_>, t_ms: u64) -> f64 {
    t_ms as f64 + s.offset_ms
}

fn to_ms(v: f64) -> u64 {
    if v.is_finite() && v > 0.0 {
        v.round() as u64
    } else {
        0
    }
}

/// The timeline on shard 0's sampling grid: each other shard's sample goes
/// to the grid sample nearest it on the shared clock.
fn merged_timeline(shards: &[Shard<'_>]) -> Result<Vec<Sample>, MergeError> {
    let grid = &shards[0];
    let grid_ms: Vec<f64> = grid
        .report
        .timeline
        .iter()
        .map(|x| shared_ms(grid, x.t_ms))
        .collect();
    if grid_ms.is_empty() {
        return Ok(Vec::new());
    }
    let nearest = |t: f64| -> usize {
        let i = grid_ms.partition_point(|g| *g < t);
        match (i.checked_sub(1), grid_ms.get(i)) {
            (Some(before), Some(after)) if (t - grid_ms[before]) <= (after - t) => before,
            (Some(before), None) => before,
            _ => i,
        }
    };
    // per grid cell, per shard: its samples there
    let mut cells: Vec<Vec<Vec<&Sample>>> = vec![vec![Vec::new(); shards.len()]; grid_ms.len()];
    for (k, s) in shards.iter().enumerate() {
        for x in &s.report.timeline {
            // shard 0's own samples land on themselves
            cells[nearest(shared_ms(s, x.t_ms))][k].push(x);
        }
    }
    let mut admitted_so_far: Vec<u64> = vec![0; shards.len()];
    let mut out = Vec::with_capacity(grid_ms.len());
    for (cell, own) in cells.iter().zip(&grid.report.timeline) {
        let mut sample = Sample {
            t_ms: to_ms(shared_ms(grid, own.t_ms)),
            holds: own.holds,
            paid: own.paid,
            seats_left: own.seats_left.clone(),
            queue_age_ms: own.queue_age_ms,
            ..Sample::default()
        };
        let mut parts = Vec::new();
        for (k, xs) in cell.iter().enumerate() {
            let run = &shards[k].report.run_id;
            if let Some(last) = xs.last() {
                admitted_so_far[k] = last.admitted;
            }
            if xs.is_empty() {
                continue;
            }
            // a shard sampled twice in one cell: its mean rate there
            let n = xs.len() as f64;
            sample.bookings_per_s += xs.iter().map(|x| x.bookings_per_s).sum::<f64>() / n;
            sample.requests_per_s += xs.iter().map(|x| x.requests_per_s).sum::<f64>() / n;
            for x in xs {
                let what = format!("the sample at {} ms", x.t_ms);
                parts.push(decode(run, &what, x.booking_hdr.as_ref())?);
            }
        }
        let all = added(&grid.report.run_id, "a timeline sample", &parts)?;
        (sample.p50_ms, sample.p99_ms) = hdr::p50_p99_ms(&all);
        sample.booking_hdr = Some(hdr::encode(&all));
        sample.admitted = admitted_so_far.iter().sum();
        let taken = own.holds + own.paid;
        sample.released = sample.admitted.saturating_sub(taken);
        out.push(sample);
    }
    Ok(out)
}

/// Shard 0's phases on the shared clock (it set the sale up, closed,
/// settled and audited it), the load's widened to every shard's: the rush
/// from the first shard's start to the last shard's end, the late stream
/// from there to the last shard's end.
fn merged_phases(shards: &[Shard<'_>]) -> Vec<Phase> {
    let on_clock = |s: &Shard<'_>, p: &Phase| Phase {
        name: p.name.clone(),
        start_ms: to_ms(shared_ms(s, p.start_ms)),
        end_ms: to_ms(shared_ms(s, p.end_ms)),
    };
    let span = |name: &str| {
        shards
            .iter()
            .flat_map(|s| {
                s.report
                    .phases
                    .iter()
                    .filter(move |p| p.name == name)
                    .map(move |p| on_clock(s, p))
            })
            .reduce(|a, b| Phase {
                start_ms: a.start_ms.min(b.start_ms),
                end_ms: a.end_ms.max(b.end_ms),
                ..a
            })
    };
    let rush = span(LOAD_PHASES[0]);
    let late = span(LOAD_PHASES[1]);
    let mut phases: Vec<Phase> = shards[0]
        .report
        .phases
        .iter()
        .map(|p| match (p.name.as_str(), &rush, &late) {
            (name, Some(r), _) if name == LOAD_PHASES[0] => r.clone(),
            (name, rush, Some(l)) if name == LOAD_PHASES[1] => Phase {
                start_ms: rush.as_ref().map_or(l.start_ms, |r| r.end_ms),
                ..l.clone()
            },
            _ => on_clock(&shards[0], p),
        })
        .collect();
    phases.sort_by_key(|p| (p.start_ms, p.end_ms));
    phases
}

/// Shard 0's verdicts, those over the load's figures judged again on the
/// merged figures, the count verdicts summed.
fn merged_verdicts(shards: &[Shard<'_>], load: &LoadFigures) -> Result<Vec<Verdict>, MergeError> {
    let c = shards[0].report;
    let bound = |name: &str| {
        shards[0]
            .info
            .bounds
            .get(name)
            .copied()
            .ok_or_else(|| MergeError::NoBound {
                run: c.run_id.clone(),
                verdict: name.to_owned(),
            })
    };
    let summed = |name: &str| -> (f64, Vec<String>) {
        let mut total = 0.0;
        let mut each = Vec::new();
        for s in shards {
            if let Some(v) = s.report.invariant(name) {
                total += v.figure;
                each.push(format!("shard {}: {}", s.info.index, v.figure));
            }
        }
        (total, each)
    };
    let mut out = Vec::with_capacity(c.invariants.len());
    for v in &c.invariants {
        let merged = match v.name.as_str() {
            RUSH_RATE => verdicts::rush_rate(load, bound(RUSH_RATE)?),
            BOOKING_P99 => verdicts::booking_p99(load, bound(BOOKING_P99)?),
            SERVER_ERRORS => verdicts::server_errors(load, bound(SERVER_ERRORS)?),
            APPROVED_TOLD_PAID => {
                let (total, _) = summed(APPROVED_TOLD_PAID);
                verdicts::approved_payers_told_paid(total.round() as u64)
            }
            name if SUMMED.contains(&name) => {
                let (total, each) = summed(name);
                Verdict {
                    figure: total,
                    detail: format!("summed over the shards ({})", each.join(", ")),
                    ..v.clone()
                }
                .judged_against(v.threshold)
            }
            _ => v.clone(),
        };
        out.push(merged);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::hdr::histogram;
    use crate::model::{LevelFigures, SaleFigures};

    /// Latencies, µs, of a run's bookings: a long-tailed spread.
    fn latencies(n: u64) -> Vec<u64> {
        (0..n)
            .map(|i| {
                let x = (i * 7_919) % 10_007;
                500 + x * x / 20 + if i % 97 == 0 { 2_000_000 } else { 0 }
            })
            .collect()
    }

    #[test]
    fn the_merged_histograms_of_two_halves_are_the_histogram_of_the_whole() {
        let all = latencies(20_000);
        let mut whole = histogram();
        let mut halves = [histogram(), histogram()];
        for (k, v) in all.iter().enumerate() {
            whole.record(*v).unwrap();
            halves[k % 2].record(*v).unwrap();
        }
        // through the report's encoding, as a merge reads them
        let decoded: Vec<Histogram<u64>> = halves
            .iter()
            .map(|h| hdr::decode(&hdr::encode(h)).unwrap())
            .collect();
        let merged = hdr::add(&decoded).unwrap();
        assert_eq!(merged, whole);
        let (m, w) = (
            hdr::figures("booking", &merged, 0),
            hdr::figures("booking", &whole, 0),
        );
        assert_eq!(
            (m.count, m.p50_ms, m.p90_ms, m.p99_ms, m.p999_ms, m.max_ms),
            (w.count, w.p50_ms, w.p90_ms, w.p99_ms, w.p999_ms, w.max_ms)
        );
        assert_eq!(m, w);
        // while the mean of the halves' p99s is not the whole's
        let p99 = |h: &Histogram<u64>| h.value_at_quantile(0.99);
        let mut skewed = [histogram(), histogram()];
        for v in &all {
            skewed[usize::from(*v > 1_000_000)].record(*v).unwrap();
        }
        let averaged = (p99(&skewed[0]) + p99(&skewed[1])) / 2;
        assert_ne!(averaged, p99(&whole));
        assert_eq!(p99(&hdr::add(&skewed).unwrap()), p99(&whole));
    }

    /// A shard report of `latencies` (µs) with everything a merge reads.
    fn shard(index: u32, count: u32, lat: &[u64], t0_unix_ms: f64) -> Report {
        let mut h = histogram();
        for v in lat {
            h.record(*v).unwrap();
        }
        let mut bounds = BTreeMap::new();
        bounds.insert(RUSH_RATE.to_owned(), 180.0);
        bounds.insert(BOOKING_P99.to_owned(), 1_000.0);
        bounds.insert(SERVER_ERRORS.to_owned(), 0.01);
        let n = lat.len() as u64;
        let load = LoadFigures {
            requests: 2 * n,
            server_errors: u64::from(index),
            target_rate: 100.0,
            achieved_rate: 100.0,
            arrivals_scheduled: n,
            arrivals_started: n,
            rush_started: n,
            // this shard's arrivals every 10 ms from 1 s, offset by its index
            rush_first_ms: 1_000.0 + 5.0 * f64::from(index),
            rush_last_ms: 1_000.0 + 5.0 * f64::from(index) + 10.0 * (n - 1) as f64,
            transactions: vec![hdr::figures("booking", &h, 0)],
            ..LoadFigures::default()
        };
        let sample = |t_ms: u64| Sample {
            t_ms,
            bookings_per_s: 100.0,
            requests_per_s: 200.0,
            admitted: t_ms / 10,
            holds: 5,
            paid: 10,
            booking_hdr: Some(hdr::encode(&h)),
            ..Sample::default()
        };
        let mut invariants = vec![
            verdicts::rush_rate(&load, 90.0),
            verdicts::booking_p99(&load, 1_000.0),
            verdicts::server_errors(&load, 0.01),
            verdicts::approved_payers_told_paid(u64::from(index)),
        ];
        if index == 0 {
            invariants.insert(
                0,
                Verdict::at_most("ledger_matches_records", 0.0, 0.0, "count", String::new()),
            );
        }
        Report {
            run_id: format!("run-{index}"),
            seed: 7,
            stack: "target".into(),
            started_at: "2026-12-02T18:43:18.410Z".into(),
            finished_at: "2026-12-02T18:44:18.410Z".into(),
            passed: true,
            phases: [
                ("setup", 0, 900),
                ("rush", 1_000, 2_000),
                ("late", 2_000, 3_000),
            ]
            .into_iter()
            .filter(|p| index == 0 || p.0 != "setup")
            .map(|(name, start_ms, end_ms)| Phase {
                name: name.into(),
                start_ms,
                end_ms,
            })
            .collect(),
            load,
            sale: SaleFigures {
                holds_created: 10 * (u64::from(index) + 1),
                levels: vec![LevelFigures {
                    level: "a".into(),
                    cap: 20,
                    taken: 20,
                    paid: 20,
                }],
                ..SaleFigures::default()
            },
            invariants,
            timeline: vec![sample(1_000), sample(2_000)],
            shard: Some(ShardInfo {
                index,
                count,
                schedule: "abc".into(),
                arrivals_total: 2 * n,
                rate: 200.0,
                target: "http://t".into(),
                t0_unix_ms,
                zero_unix_ms: t0_unix_ms + 1_000.0,
                bounds,
            }),
            ..Report::default()
        }
    }

    #[test]
    fn two_shards_merge_into_the_whole_run() {
        let all = latencies(2_000);
        let (a, b): (Vec<u64>, Vec<u64>) = {
            let mut a = Vec::new();
            let mut b = Vec::new();
            for (k, v) in all.iter().enumerate() {
                if k % 2 == 0 { a.push(*v) } else { b.push(*v) }
            }
            (a, b)
        };
        let t0 = 1.8e12;
        let (s0, s1) = (shard(0, 2, &a, t0), shard(1, 2, &b, t0 + 40.0));
        let m = merge(&[s1.clone(), s0.clone()]).unwrap();
        let mut whole = histogram();
        for v in &all {
            whole.record(*v).unwrap();
        }
        let booking = &m.load.transactions[0];
        assert_eq!(booking, &hdr::figures("booking", &whole, 0));
        assert_eq!(m.load.arrivals_started, 2_000);
        assert_eq!(m.load.requests, 4_000);
        assert_eq!(m.load.server_errors, 1);
        assert_eq!(m.load.rush_started, 2_000);
        // shard 1's rush starts 45 ms after shard 0's: 1,000 + 45 + 9,990
        assert_eq!(
            (m.load.rush_first_ms, m.load.rush_last_ms),
            (1_000.0, 11_035.0)
        );
        let want = 2_000.0 / (10.035 + 1.0 / 200.0);
        assert!(
            (m.load.achieved_rate - want).abs() < 1e-9,
            "{}",
            m.load.achieved_rate
        );
        assert_eq!(m.load.target_rate, 200.0);
        // judged again against the whole run's bounds
        let rate = m.invariant(RUSH_RATE).unwrap();
        assert_eq!((rate.threshold, rate.passed), (180.0, true));
        let p99 = m.invariant(BOOKING_P99).unwrap();
        assert_eq!(p99.figure, booking.p99_ms);
        let approved = m.invariant(APPROVED_TOLD_PAID).unwrap();
        assert_eq!((approved.figure, approved.passed), (1.0, false));
        assert!(!m.passed);
        assert_eq!(m.invariants[0].name, "ledger_matches_records");
        assert_eq!(m.sale.holds_created, 30);
        assert_eq!(m.sale.released, 10);
        // the timeline on shard 0's grid: rates summed, latencies merged
        assert_eq!(m.timeline.len(), 2);
        let t = &m.timeline[0];
        assert_eq!(
            (t.t_ms, t.bookings_per_s, t.requests_per_s),
            (1_000, 200.0, 400.0)
        );
        let (p50, p99) = hdr::p50_p99_ms(&whole);
        assert_eq!((t.p50_ms, t.p99_ms), (p50, p99));
        assert_eq!(t.admitted, 200);
        assert_eq!(t.released, 200 - 15);
        // shard 0's phases, the load's widened to shard 1's (40 ms later)
        let phases: Vec<(&str, u64, u64)> = m
            .phases
            .iter()
            .map(|p| (p.name.as_str(), p.start_ms, p.end_ms))
            .collect();
        assert_eq!(
            phases,
            vec![
                ("setup", 0, 900),
                ("rush", 1_000, 2_040),
                ("late", 2_040, 3_040)
            ]
        );
        let merged = m.merged.as_ref().unwrap();
        assert_eq!(merged.runs, vec!["run-0", "run-1"]);
        assert!(m.shard.is_none());
        // a report's round trip keeps it
        let back: Report = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(back, m);
    }

    #[test]
    fn shards_of_different_runs_or_incomplete_sets_are_refused() {
        let lat = latencies(10);
        let t0 = 1.8e12;
        let s0 = shard(0, 2, &lat, t0);
        let s1 = shard(1, 2, &lat, t0);
        let err = |reports: &[Report]| merge(reports).unwrap_err().to_string();

        let mut other_seed = s1.clone();
        other_seed.seed = 8;
        assert!(err(&[s0.clone(), other_seed]).contains("seeds differ"));
        let mut other_schedule = s1.clone();
        other_schedule.shard.as_mut().unwrap().schedule = "def".into();
        assert!(err(&[s0.clone(), other_schedule]).contains("schedules differ"));
        let mut other_target = s1.clone();
        other_target.shard.as_mut().unwrap().target = "http://u".into();
        assert!(err(&[s0.clone(), other_target]).contains("targets differ"));
        let e = err(&[s0.clone(), s0.clone()]);
        assert!(e.contains("shard 0 of 2 is given twice"), "{e}");
        let e = err(std::slice::from_ref(&s0));
        assert!(e.contains("shard(s) [1] of 2 missing"), "{e}");
        let mut later = s1.clone();
        later.shard.as_mut().unwrap().zero_unix_ms += 60_000.0;
        assert!(err(&[s0.clone(), later]).contains("did not run together"));
        let mut whole = s0.clone();
        whole.shard = None;
        assert!(err(&[whole, s1.clone()]).contains("not a shard's report"));
        let mut old = s1.clone();
        old.load.transactions[0].hdr = None;
        let e = err(&[s0.clone(), old]);
        assert!(e.contains("booking has no latency histogram"), "{e}");
        assert!(matches!(merge(&[]), Err(MergeError::Empty)));
        merge(&[s0, s1]).unwrap();
    }
}
