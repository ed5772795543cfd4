//! Figures derived from a [`Report`], shared by the HTML, Markdown and
//! comparison renderings, and number formatting that all of them use.

use chrono::{DateTime, Duration, SecondsFormat};

use crate::model::{Fault, Relaxed, Report, TransactionFigures, Verdict};

/// The transaction whose latency the headline quotes.
pub const BOOKING: &str = "booking";

/// The latency figures of transaction `name`.
pub fn transaction<'a>(r: &'a Report, name: &str) -> Option<&'a TransactionFigures> {
    r.load.transactions.iter().find(|t| t.name == name)
}

/// Booking p99, ms: from the booking transaction, else from the
/// `booking_p99_ms` invariant.
pub fn booking_p99_ms(r: &Report) -> Option<f64> {
    transaction(r, BOOKING)
        .map(|t| t.p99_ms)
        .or_else(|| r.invariant("booking_p99_ms").map(|i| i.figure))
}

/// What a sharded run says of itself: which shard of how many (a shard's
/// report) or which shards it was merged from (a merged report); `None` for
/// a whole run.
pub fn sharding(r: &Report) -> Option<String> {
    if let Some(s) = &r.shard {
        return Some(format!(
            "shard {} of {} of schedule {} against {}: this generator's share of the load only{}; `reports merge` joins the shards",
            s.index,
            s.count,
            s.schedule,
            s.target,
            if s.index == 0 {
                " (the sale's state, the audit and the level verdicts are the whole run's)"
            } else {
                ""
            }
        ));
    }
    r.merged.as_ref().map(|m| {
        format!(
            "merged from {} shards ({}) of schedule {} against {}: percentiles from the shards' histograms added, counts summed",
            m.count,
            m.runs.join(", "),
            m.schedule,
            m.target
        )
    })
}

/// PAID bookings over every confirm path.
pub fn paid_total(r: &Report) -> u64 {
    r.sale.paid_by_path.values().sum()
}

/// How long the run took, ms: the wall-clock difference when both timestamps
/// parse, else the end of the last phase.
pub fn duration_ms(r: &Report) -> u64 {
    let wall = DateTime::parse_from_rfc3339(&r.started_at)
        .ok()
        .zip(DateTime::parse_from_rfc3339(&r.finished_at).ok())
        .and_then(|(s, f)| u64::try_from((f - s).num_milliseconds()).ok());
    wall.unwrap_or_else(|| r.phases.iter().map(|p| p.end_ms).max().unwrap_or(0))
}

/// The wall-clock time `ms` after the run started, RFC 3339 UTC to the
/// millisecond, if `started_at` parses.
pub fn wall_clock(r: &Report, ms: u64) -> Option<String> {
    let start = DateTime::parse_from_rfc3339(&r.started_at).ok()?;
    let t = start.checked_add_signed(Duration::milliseconds(i64::try_from(ms).ok()?))?;
    Some(t.to_utc().to_rfc3339_opts(SecondsFormat::Millis, true))
}

/// The invariants, failed ones first, otherwise in report order.
pub fn failed_first(r: &Report) -> Vec<&Verdict> {
    let mut v: Vec<&Verdict> = r.invariants.iter().collect();
    v.sort_by_key(|i| i.passed);
    v
}

/// `value` with thousands separators and at most three decimals, trailing
/// zeros dropped: `104971` → `104,971`, `1999.9633` → `1,999.963`.
pub fn fmt_num(value: f64) -> String {
    if !value.is_finite() {
        return value.to_string();
    }
    let s = format!("{:.3}", value.abs());
    let (int, frac) = s.split_once('.').unwrap_or((&s, ""));
    let frac = frac.trim_end_matches('0');
    let mut grouped = String::with_capacity(int.len() + int.len() / 3);
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    let sign = if value < 0.0 && (int != "0" || !frac.is_empty()) {
        "-"
    } else {
        ""
    };
    if frac.is_empty() {
        format!("{sign}{grouped}")
    } else {
        format!("{sign}{grouped}.{frac}")
    }
}

/// An integer with thousands separators.
pub fn fmt_int(value: u64) -> String {
    fmt_num(value as f64)
}

/// A figure with its unit (`count` is left out): `31.743 ms`, `0`.
pub fn with_unit(value: f64, unit: &str) -> String {
    match unit {
        "" | "count" => fmt_num(value),
        "%" => format!("{}%", fmt_num(value)),
        u => format!("{} {u}", fmt_num(value)),
    }
}

/// An invariant's threshold as a bound: `≤ 50 ms`, `≥ 1,950 bookings/s`.
pub fn threshold(i: &Verdict) -> String {
    bound_text(&i.bound, i.threshold, &i.unit)
}

/// `value` as a bound of kind `bound` (`at_most`, `at_least`) in `unit`.
pub fn bound_text(bound: &str, value: f64, unit: &str) -> String {
    let op = match bound {
        "at_most" => "≤",
        "at_least" => "≥",
        other => other,
    };
    format!("{op} {}", with_unit(value, unit))
}

/// A relaxed threshold's bound used and default bound, written like the
/// verdict's threshold when the run checked that verdict, else bare.
pub fn relaxed_bounds(r: &Report, x: &Relaxed) -> (String, String) {
    match r.invariant(&x.verdict) {
        Some(i) => (
            bound_text(&i.bound, x.bound, &i.unit),
            bound_text(&i.bound, x.default_bound, &i.unit),
        ),
        None => (fmt_num(x.bound), fmt_num(x.default_bound)),
    }
}

/// A fault's reactions as `name n` pairs: `undos 3, alerts 1` (`""` when
/// none were counted).
pub fn reactions_text(f: &Fault) -> String {
    f.reactions
        .iter()
        .map(|(k, n)| format!("{k} {}", fmt_int(*n)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How long a fault lasted: `3.4 s`, or `instant`.
pub fn fault_for(f: &Fault) -> String {
    if f.duration_ms == 0 {
        "instant".to_owned()
    } else {
        fmt_secs(f.duration_ms)
    }
}

/// One line about a fault: name, kind, where, when, how often, and whether
/// it could not be done: `kill-one (kill) on instance-1, at 12.0 s for
/// 3.4 s, fired 1` (an older report's fault has no count of firings).
pub fn fault_line(f: &Fault) -> String {
    let mut s = f.name().to_owned();
    let kind = f.kind_or_what();
    if kind != f.name() && !kind.is_empty() {
        s.push_str(&format!(" ({kind})"));
    }
    if !f.target.is_empty() {
        s.push_str(&format!(" on {}", f.target));
    }
    s.push_str(&format!(", at {}", fmt_secs(f.at_ms)));
    if f.duration_ms > 0 {
        s.push_str(&format!(" for {}", fmt_secs(f.duration_ms)));
    }
    if f.from_schedule() {
        s.push_str(&format!(", fired {}", fmt_int(f.fired)));
    }
    if let Some(e) = &f.error {
        s.push_str(&format!("; could not be carried out: {e}"));
    }
    s
}

/// Milliseconds as seconds with one decimal: `89494` → `89.5 s`.
pub fn fmt_secs(ms: u64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

/// `part` of `whole` as a percentage with one decimal, if `whole` is not 0.
pub fn pct(part: f64, whole: f64) -> Option<String> {
    (whole != 0.0 && part.is_finite() && whole.is_finite())
        .then(|| format!("{:.1}%", part / whole * 100.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_grouped_and_trimmed() {
        assert_eq!(fmt_num(0.0), "0");
        assert_eq!(fmt_num(104_971.0), "104,971");
        assert_eq!(fmt_num(1_999.963_307), "1,999.963");
        assert_eq!(fmt_num(31.7), "31.7");
        assert_eq!(fmt_num(0.01), "0.01");
        assert_eq!(fmt_num(-1234.5), "-1,234.5");
        assert_eq!(fmt_num(-0.0001), "0");
        assert_eq!(fmt_num(123.0), "123");
        assert_eq!(fmt_num(1_000_000.0), "1,000,000");
        assert_eq!(fmt_int(20_647), "20,647");
    }

    #[test]
    fn units_and_bounds() {
        let mut i = Verdict {
            name: "booking_p99_ms".into(),
            passed: true,
            figure: 31.743,
            threshold: 50.0,
            unit: "ms".into(),
            bound: "at_most".into(),
            detail: String::new(),
        };
        assert_eq!(threshold(&i), "≤ 50 ms");
        i.bound = "at_least".into();
        i.unit = "count".into();
        assert_eq!(threshold(&i), "≥ 50");
        assert_eq!(with_unit(0.01, "%"), "0.01%");
        assert_eq!(fmt_secs(89_494), "89.5 s");
        assert_eq!(pct(1.0, 4.0).as_deref(), Some("25.0%"));
        assert_eq!(pct(1.0, 0.0), None);
    }
}
