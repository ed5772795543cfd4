//! `summary.md` for CI logs, and the comparison as Markdown.

use std::fmt::Write as _;

use crate::compare::{Comparison, PERCENTILES, Percentiles, TransactionPercentiles};
use crate::figures::{
    booking_p99_ms, duration_ms, failed_first, fmt_int, fmt_num, fmt_secs, paid_total, pct,
    reactions_text, relaxed_bounds, sharding, threshold, with_unit,
};
use crate::html::{signed, verdict_word};
use crate::model::Report;

/// Makes `s` safe inside a Markdown table cell: no line breaks, pipes escaped.
pub fn cell(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('|', "\\|")
        .replace(['\r', '\n'], " ")
}

/// `s` as inline code, with a fence long enough for any backticks inside.
fn code(s: &str) -> String {
    let s = cell(s);
    let mut run = 0;
    let mut longest = 0;
    for c in s.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat(longest + 1);
    let pad = if longest > 0 { " " } else { "" };
    format!("{fence}{pad}{s}{pad}{fence}")
}

/// The short Markdown summary of a run.
pub fn render_summary(r: &Report) -> String {
    let mut out = String::new();
    let failed: Vec<_> = r.failed().collect();
    let _ = writeln!(
        out,
        "## Rehearsal {}: {}\n",
        cell(&r.run_id),
        if r.passed { "PASSED ✓" } else { "FAILED ✗" }
    );
    let _ = writeln!(
        out,
        "Profile {}, stack {}, seed {}, {}; {} of {} invariants held.\n",
        code(&r.profile_name),
        code(&r.stack),
        r.seed,
        fmt_secs(duration_ms(r)),
        r.invariants.len() - failed.len(),
        r.invariants.len()
    );
    if let Some(s) = sharding(r) {
        let _ = writeln!(out, "Sharded load: {}.\n", cell(&s));
    }
    if !failed.is_empty() {
        let names: Vec<String> = failed.iter().map(|i| code(&i.name)).collect();
        let _ = writeln!(out, "**Failed:** {}\n", names.join(", "));
    }
    let l = &r.load;
    let paid = paid_total(r);
    out.push_str("| Figure | Value |\n|---|---:|\n");
    let _ = writeln!(
        out,
        "| Rush rate | {} of {} bookings/s{} |",
        fmt_num(l.achieved_rate),
        fmt_num(l.target_rate),
        pct(l.achieved_rate, l.target_rate)
            .map(|p| format!(" ({p})"))
            .unwrap_or_default()
    );
    let p99 = booking_p99_ms(r)
        .map(|v| format!("{} ms", fmt_num(v)))
        .unwrap_or_else(|| "–".into());
    let _ = writeln!(out, "| Booking p99 | {p99} |");
    let _ = writeln!(
        out,
        "| Requests | {} ({} server errors) |",
        fmt_int(l.requests),
        fmt_int(l.server_errors)
    );
    let _ = writeln!(
        out,
        "| Paid | {} of {} seats |",
        fmt_int(paid),
        fmt_int(r.sale.seats)
    );
    let _ = writeln!(
        out,
        "| Released | {} ({} resold) |",
        fmt_int(r.sale.released),
        fmt_int(r.sale.resold)
    );
    let _ = writeln!(
        out,
        "| Queue age max | {} ms |",
        fmt_int(r.queue.oldest_age_max_ms)
    );
    let _ = writeln!(out, "| Dead letters | {} |", fmt_int(r.queue.dead_letters));
    out.push('\n');
    out.push_str("| | Invariant | Figure | Threshold | Detail |\n|---|---|---:|---:|---|\n");
    for i in failed_first(r) {
        let relaxed = r
            .relaxed(&i.name)
            .map(|x| format!(" (relaxed by {})", code(&x.by)))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {}{relaxed} | {} |",
            if i.passed { "✓" } else { "✗" },
            code(&i.name),
            cell(&with_unit(i.figure, &i.unit)),
            cell(&threshold(i)),
            cell(&i.detail)
        );
    }
    relaxed_section(&mut out, r);
    faults_section(&mut out, r);
    out
}

/// The thresholds a fault schedule relaxed, if any was.
fn relaxed_section(out: &mut String, r: &Report) {
    if r.relaxed.is_empty() {
        return;
    }
    out.push_str("\n### Relaxed thresholds\n\n| Verdict | Bound used | Default bound | Relaxed by |\n|---|---:|---:|---|\n");
    for x in &r.relaxed {
        let (used, default) = relaxed_bounds(r, x);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            code(&x.verdict),
            cell(&used),
            cell(&default),
            code(&x.by)
        );
    }
}

/// One line per fault injected (those not carried out first) with what the
/// system did about it, if any fault was injected.
fn faults_section(out: &mut String, r: &Report) {
    if r.faults.is_empty() {
        return;
    }
    let not_done = r.faults.iter().filter(|f| f.failed()).count();
    let _ = write!(out, "\n### Faults\n\n{} injected", r.faults.len());
    if not_done > 0 {
        let _ = write!(out, ", **{not_done} could not be carried out**");
    }
    out.push_str(".\n\n");
    for f in r.faults_failed_first() {
        let _ = write!(
            out,
            "- {} {}",
            if f.failed() { "✗" } else { "•" },
            code(f.name())
        );
        let kind = f.kind_or_what();
        if kind != f.name() && !kind.is_empty() {
            let _ = write!(out, " ({})", cell(kind));
        }
        if !f.target.is_empty() {
            let _ = write!(out, " on {}", cell(&f.target));
        }
        let _ = write!(out, ", at {}", fmt_secs(f.at_ms));
        if f.duration_ms > 0 {
            let _ = write!(out, " for {}", fmt_secs(f.duration_ms));
        }
        if f.from_schedule() {
            let _ = write!(out, ", fired {}", fmt_int(f.fired));
        }
        let reactions = reactions_text(f);
        if !reactions.is_empty() {
            let _ = write!(out, "; reactions: {}", cell(&reactions));
        }
        if !f.effect.is_empty() {
            let _ = write!(out, " — {}", cell(&f.effect));
        }
        if let Some(e) = &f.error {
            let _ = write!(out, "; **could not be carried out:** {}", code(e));
        }
        out.push('\n');
    }
}

/// The comparison as Markdown: verdicts, changed invariants, figures with deltas.
pub fn render_comparison(c: &Comparison) -> String {
    let mut out = String::new();
    let word = |p: bool| if p { "PASSED" } else { "FAILED" };
    let _ = writeln!(
        out,
        "## A {} ({}) vs B {} ({})\n",
        cell(&c.a_run),
        word(c.a_passed),
        cell(&c.b_run),
        word(c.b_passed)
    );
    let changed: Vec<_> = c.changed().collect();
    if changed.is_empty() {
        out.push_str("No invariant changed verdict.\n\n");
    } else {
        out.push_str("Invariants that changed verdict:\n\n| Invariant | A | B | Figure A | Figure B |\n|---|---|---|---:|---:|\n");
        for i in &changed {
            let fig = |v: Option<f64>| {
                v.map(|x| with_unit(x, &i.unit))
                    .unwrap_or_else(|| "–".into())
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                code(&i.name),
                verdict_word(i.a),
                verdict_word(i.b),
                cell(&fig(i.a_figure)),
                cell(&fig(i.b_figure))
            );
        }
        out.push('\n');
    }
    out.push_str("| Figure | A | B | Δ | Δ % |\n|---|---:|---:|---:|---:|\n");
    for f in &c.figures {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            cell(&f.name),
            cell(&with_unit(f.a, &f.unit)),
            cell(&with_unit(f.b, &f.unit)),
            signed(f.delta()),
            f.delta_pct()
                .map(|p| format!("{}%", signed((p * 10.0).round() / 10.0)))
                .unwrap_or_else(|| "–".into())
        );
    }
    percentiles_section(&mut out, &c.percentiles);
    out
}

/// The change from `a` to `b`, percent to one decimal (`–` from 0).
pub(crate) fn change_pct(a: f64, b: f64) -> String {
    if a == 0.0 {
        return "–".to_owned();
    }
    format!("{}%", signed(((b - a) / a.abs() * 1000.0).round() / 10.0))
}

/// Where a run's percentiles came from, for the table: `HDR` or `written`.
pub(crate) fn source(p: &Percentiles) -> &'static str {
    if p.from_hdr { "HDR" } else { "written" }
}

/// Each transaction both runs measured: its percentiles in A, in B and
/// the change, one row each.
fn percentiles_section(out: &mut String, rows: &[TransactionPercentiles]) {
    if rows.is_empty() {
        return;
    }
    out.push_str("\n### Latency percentiles, ms\n\nRead from each run's HDR histogram (`written`: an older report without one, its written figures).\n\n| Transaction | Run | Count |");
    for (_, label) in PERCENTILES {
        let _ = write!(out, " {label} |");
    }
    out.push_str(" Source |\n|---|---|---:|");
    out.push_str(&"---:|".repeat(PERCENTILES.len()));
    out.push_str("---|\n");
    for t in rows {
        for (run, p) in [("A", &t.a), ("B", &t.b)] {
            let _ = write!(out, "| {} | {run} | {} |", code(&t.name), fmt_int(p.count));
            for v in p.values {
                let _ = write!(out, " {} |", fmt_num(v));
            }
            let _ = writeln!(out, " {} |", source(p));
        }
        let _ = write!(
            out,
            "| {} | Δ % | {} |",
            code(&t.name),
            change_pct(t.a.count as f64, t.b.count as f64)
        );
        for (a, b) in t.a.values.iter().zip(t.b.values) {
            let _ = write!(out, " {} |", change_pct(*a, b));
        }
        out.push_str(" |\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_cannot_break_the_table() {
        assert_eq!(cell("a|b\nc"), "a\\|b c");
        assert_eq!(code("x"), "`x`");
        assert_eq!(code("a`b"), "`` a`b ``");
    }
}
