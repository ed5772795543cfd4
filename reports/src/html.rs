//! `report.html` and the comparison page: one self-contained page each
//! (inline CSS, inline SVG plots, no scripts, no fonts, no network). Every
//! string that comes from a report goes through [`escape`].

use std::fmt::Write as _;

use crate::compare::{Comparison, Trend};
use crate::figures::{
    booking_p99_ms, duration_ms, failed_first, fault_for, fault_line, fmt_int, fmt_num, fmt_secs,
    paid_total, pct, relaxed_bounds, threshold, wall_clock, with_unit,
};
use crate::model::{Report, Sample};
use crate::svg::{Band, BarChart, BarSeries, FaultBand, LineChart, LineSeries, PALETTE, Rule};

/// Escapes `s` for HTML text and double- or single-quoted attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A link to a file of the run folder: always relative (`./name`), so a
/// name such as `javascript:…` cannot become a script URL.
fn file_link(name: &str) -> String {
    let href: String = name
        .chars()
        .map(|c| match c {
            ' ' => "%20".to_owned(),
            '#' => "%23".to_owned(),
            '?' => "%3F".to_owned(),
            c => c.to_string(),
        })
        .collect();
    format!(r#"<a href="./{}">{}</a>"#, escape(&href), escape(name))
}

const CSS: &str = r#"
:root{--ok:#15803d;--bad:#b91c1c;--ink:#111827;--mute:#6b7280;--line:#e5e7eb;--bg:#f3f5f8}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--ink);font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif}
main{max-width:1280px;margin:0 auto;padding:0 20px 40px}
header.verdict{color:#fff;padding:22px 28px;border-radius:0 0 14px 14px;margin-bottom:18px}
header.verdict.ok{background:linear-gradient(135deg,#15803d,#16a34a)}
header.verdict.bad{background:linear-gradient(135deg,#991b1b,#dc2626)}
header.verdict h1{margin:0;font-size:30px;letter-spacing:.02em}
header.verdict .sub{opacity:.92;margin-top:4px}
header.verdict .failed{margin-top:10px;font-weight:600}
header.verdict code{background:rgba(255,255,255,.18);color:#fff}
code{font:12.5px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#eef1f5;padding:1px 5px;border-radius:4px}
section{background:#fff;border-radius:12px;box-shadow:0 1px 3px rgba(0,0,0,.07);padding:16px 20px;margin:16px 0}
h2{font-size:17px;margin:0 0 12px}
h3{font-size:14px;margin:0 0 6px;color:#374151}
.tiles{display:grid;grid-template-columns:repeat(auto-fill,minmax(190px,1fr));gap:12px}
.tile{background:#fff;border-radius:12px;box-shadow:0 1px 3px rgba(0,0,0,.07);padding:12px 16px;border-top:4px solid #cbd5e1}
.tile.ok{border-top-color:var(--ok)}.tile.bad{border-top-color:var(--bad)}
.tile .k{color:var(--mute);font-size:12px;text-transform:uppercase;letter-spacing:.04em}
.tile .v{font-size:24px;font-weight:650;margin-top:2px;white-space:nowrap}
.tile .n{color:var(--mute);font-size:12px}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:16px}
.charts figure{margin:0;background:#fff;border-radius:12px;box-shadow:0 1px 3px rgba(0,0,0,.07);padding:14px 16px 8px}
svg.chart{width:100%;height:auto;display:block}
svg .grid{stroke:#eef0f3;stroke-width:1}
svg .axis{stroke:#9ca3af;stroke-width:1}
svg .tick{font-size:11px;fill:var(--mute)}
svg .legend{font-size:12px;fill:#374151}
svg .unit{font-size:11px;fill:var(--mute)}
svg .band{fill:#f8fafc}svg .band.alt{fill:#eef2f7}
svg .phase{font-size:10px;fill:#94a3b8}
svg .fault-band{fill:rgba(234,88,12,.13);stroke:rgba(234,88,12,.45);stroke-width:1}
svg .fault-mark{stroke:#ea580c;stroke-width:1.5}
svg .fault-label{font-size:10px;fill:#c2410c;stroke:#fff;stroke-width:3px;stroke-linejoin:round;paint-order:stroke}
svg .fault.failed .fault-band{fill:rgba(220,38,38,.08);stroke:#dc2626;stroke-dasharray:3 2}
svg .fault.failed .fault-mark{stroke:#dc2626;stroke-dasharray:3 2}
svg .fault-label.failed{fill:#b91c1c}
svg .rule{stroke:#dc2626;stroke-width:1.2;stroke-dasharray:4 3}
svg .rule-label{font-size:10.5px;fill:#dc2626}
svg .frame{fill:#fafafa;stroke:var(--line)}
svg .empty{font-size:13px;fill:#9ca3af}
table{border-collapse:collapse;width:100%}
th,td{padding:6px 10px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
th{font-size:12px;color:var(--mute);font-weight:600;text-transform:uppercase;letter-spacing:.03em;background:#fafbfc}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.failed td{background:#fef2f2}
td.error{color:var(--bad);font-weight:600;overflow-wrap:anywhere}
.relaxed{color:#b45309;font-size:12px;white-space:nowrap}
h3.relaxed-head{margin-top:16px}
.reactions{white-space:nowrap}
.pass{color:var(--ok);font-weight:700;white-space:nowrap}.fail{color:var(--bad);font-weight:700;white-space:nowrap}
.detail{color:#4b5563;font-size:12.5px;max-width:520px;overflow-wrap:anywhere}
.cols{display:grid;grid-template-columns:repeat(auto-fit,minmax(380px,1fr));gap:16px}
.cols section{margin:0}
.muted{color:var(--mute)}
.up{color:var(--ok)}.down{color:var(--bad)}
.bar{display:block;height:8px;border-radius:4px;background:#16a34a}
.barbg{display:inline-block;width:90px;height:8px;border-radius:4px;background:#e5e7eb;margin-right:8px;vertical-align:middle;overflow:hidden}
details pre{background:#f8fafc;border:1px solid var(--line);border-radius:8px;padding:10px;overflow:auto;font-size:12px;max-height:480px}
footer{color:var(--mute);font-size:12px;text-align:center;margin-top:20px}
"#;

/// The page's head and opening tags.
fn open_page(out: &mut String, title: &str) {
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
<title>{}</title><style>{CSS}</style></head><body>",
        escape(title)
    );
}

/// A ✓ or ✗ cell.
fn verdict_cell(passed: bool) -> &'static str {
    if passed {
        r#"<td class="pass">✓ passed</td>"#
    } else {
        r#"<td class="fail">✗ failed</td>"#
    }
}

/// One key-figure tile; `ok` colours its top edge.
fn tile(out: &mut String, key: &str, value: &str, note: &str, ok: Option<bool>) {
    let class = match ok {
        Some(true) => "tile ok",
        Some(false) => "tile bad",
        None => "tile",
    };
    let _ = write!(
        out,
        r#"<div class="{class}"><div class="k">{}</div><div class="v">{}</div><div class="n">{}</div></div>"#,
        escape(key),
        escape(value),
        escape(note)
    );
}

/// The verdict of the invariant `name`, if the run checked it.
fn verdict_of(r: &Report, name: &str) -> Option<bool> {
    r.invariant(name).map(|i| i.passed)
}

/// A series of `(seconds, value)` from the timeline.
fn series(
    label: &str,
    color: &str,
    dashed: bool,
    timeline: &[Sample],
    get: impl Fn(&Sample) -> f64,
) -> LineSeries {
    LineSeries {
        label: label.to_owned(),
        color: color.to_owned(),
        dashed,
        points: timeline
            .iter()
            .map(|s| (s.t_ms as f64 / 1000.0, get(s)))
            .collect(),
    }
}

/// The level names seen anywhere in the timeline or the sale, in order.
fn level_names(r: &Report) -> Vec<String> {
    let mut names: Vec<String> = r.sale.levels.iter().map(|l| l.level.clone()).collect();
    for s in &r.timeline {
        for k in s.seats_left.keys() {
            if !names.contains(k) {
                names.push(k.clone());
            }
        }
    }
    names
}

/// The threshold of invariant `name` as a reference line.
fn rule(r: &Report, name: &str, label: &str) -> Vec<Rule> {
    r.invariant(name)
        .map(|i| Rule {
            label: format!("{label} {}", threshold(i)),
            y: i.threshold,
        })
        .into_iter()
        .collect()
}

/// The run's faults as bands on the time plots (x in seconds).
pub fn fault_bands(r: &Report) -> Vec<FaultBand> {
    r.faults
        .iter()
        .map(|f| FaultBand {
            label: f.name().to_owned(),
            title: fault_line(f),
            x0: f.at_ms as f64 / 1000.0,
            x1: f.end_ms() as f64 / 1000.0,
            failed: f.failed(),
        })
        .collect()
}

/// The run's plots: `(heading, svg)`.
pub fn report_charts(r: &Report) -> Vec<(String, String)> {
    let bands: Vec<Band> = r
        .phases
        .iter()
        .map(|p| Band {
            label: p.name.clone(),
            x0: p.start_ms as f64 / 1000.0,
            x1: p.end_ms as f64 / 1000.0,
        })
        .collect();
    let faults = fault_bands(r);
    let t = &r.timeline;
    let chart = |title: &str, y_label: &str, series: Vec<LineSeries>, rules: Vec<Rule>| LineChart {
        title: title.to_owned(),
        x_label: "seconds since start".to_owned(),
        y_label: y_label.to_owned(),
        series,
        bands: bands.clone(),
        faults: faults.clone(),
        rules,
    };
    let mut rate_rules = Vec::new();
    if r.load.target_rate > 0.0 {
        rate_rules.push(Rule {
            label: format!("target {} bookings/s", fmt_num(r.load.target_rate)),
            y: r.load.target_rate,
        });
    }
    let levels = level_names(r);
    let charts = [
        chart(
            "Throughput",
            "per second",
            vec![
                series("requests/s", PALETTE[0], false, t, |s| s.requests_per_s),
                series("bookings/s", PALETTE[2], false, t, |s| s.bookings_per_s),
            ],
            rate_rules,
        ),
        chart(
            "Booking latency",
            "ms",
            vec![
                series("p50", PALETTE[5], false, t, |s| s.p50_ms),
                series("p99", PALETTE[4], false, t, |s| s.p99_ms),
            ],
            rule(r, "booking_p99_ms", "p99"),
        ),
        chart(
            "Holds, paid, released",
            "bookings",
            vec![
                series("holds live", PALETTE[3], false, t, |s| s.holds as f64),
                series("paid", PALETTE[2], false, t, |s| s.paid as f64),
                series("released", PALETTE[1], false, t, |s| s.released as f64),
            ],
            vec![],
        ),
        chart(
            "Seats left per level",
            "seats",
            levels
                .iter()
                .enumerate()
                .map(|(i, l)| {
                    series(l, PALETTE[i % PALETTE.len()], false, t, |s| {
                        s.seats_left.get(l).copied().unwrap_or(0) as f64
                    })
                })
                .collect(),
            vec![],
        ),
        chart(
            "Admission queue: age of the oldest message",
            "ms",
            vec![series("queue age", PALETTE[6], false, t, |s| {
                s.queue_age_ms as f64
            })],
            rule(r, "queue_age_max_ms", "max"),
        ),
    ];
    let mut out: Vec<(String, String)> = charts
        .iter()
        .map(|c| (c.title.clone(), c.to_svg()))
        .collect();
    let bars = BarChart {
        title: "Seats per level at the end".to_owned(),
        y_label: "seats".to_owned(),
        categories: r.sale.levels.iter().map(|l| l.level.clone()).collect(),
        series: vec![
            BarSeries {
                label: "cap".to_owned(),
                color: "#cbd5e1".to_owned(),
                values: r.sale.levels.iter().map(|l| l.cap as f64).collect(),
            },
            BarSeries {
                label: "taken".to_owned(),
                color: PALETTE[3].to_owned(),
                values: r.sale.levels.iter().map(|l| l.taken as f64).collect(),
            },
            BarSeries {
                label: "paid".to_owned(),
                color: PALETTE[2].to_owned(),
                values: r.sale.levels.iter().map(|l| l.paid as f64).collect(),
            },
        ],
    };
    out.push((bars.title.clone(), bars.to_svg()));
    out
}

/// The invariant table, failed first.
fn invariant_table(out: &mut String, r: &Report) {
    out.push_str(
        r#"<table><thead><tr><th>Invariant</th><th>Verdict</th><th class="num">Figure</th><th class="num">Threshold</th><th>Detail</th></tr></thead><tbody>"#,
    );
    for i in failed_first(r) {
        let relaxed = r
            .relaxed(&i.name)
            .map(|x| {
                format!(
                    r#"<br><span class="relaxed">relaxed by <code>{}</code> (default {})</span>"#,
                    escape(&x.by),
                    escape(&relaxed_bounds(r, x).1)
                )
            })
            .unwrap_or_default();
        let _ = write!(
            out,
            r#"<tr{}><td><code>{}</code></td>{}<td class="num">{}</td><td class="num">{}{relaxed}</td><td class="detail">{}</td></tr>"#,
            if i.passed { "" } else { r#" class="failed""# },
            escape(&i.name),
            verdict_cell(i.passed),
            escape(&with_unit(i.figure, &i.unit)),
            escape(&threshold(i)),
            escape(&i.detail)
        );
    }
    if r.invariants.is_empty() {
        out.push_str(r#"<tr><td colspan="5" class="muted">No invariants were checked.</td></tr>"#);
    }
    out.push_str("</tbody></table>");
}

/// The thresholds a fault schedule relaxed (nothing when none was).
fn relaxed_table(out: &mut String, r: &Report) {
    if r.relaxed.is_empty() {
        return;
    }
    out.push_str(
        r#"<h3 class="relaxed-head">Thresholds relaxed by a fault schedule</h3><table class="relaxed-table"><thead><tr><th>Verdict</th><th class="num">Bound used</th><th class="num">Default bound</th><th>Relaxed by</th></tr></thead><tbody>"#,
    );
    for x in &r.relaxed {
        let (used, default) = relaxed_bounds(r, x);
        let _ = write!(
            out,
            r#"<tr><td><code>{}</code></td><td class="num">{}</td><td class="num">{}</td><td><code>{}</code></td></tr>"#,
            escape(&x.verdict),
            escape(&used),
            escape(&default),
            escape(&x.by)
        );
    }
    out.push_str("</tbody></table>");
}

/// The faults injected, those that could not be carried out first.
fn fault_table(out: &mut String, r: &Report) {
    if r.faults.is_empty() {
        out.push_str(r#"<p class="muted">None: a plain rehearsal.</p>"#);
        return;
    }
    out.push_str(
        r#"<table class="faults"><thead><tr><th class="num">At</th><th class="num">For</th><th>Name</th><th>Kind</th><th>Where</th><th class="num">Fired</th><th>Reactions</th><th>Effect</th><th>Error</th></tr></thead><tbody>"#,
    );
    for f in r.faults_failed_first() {
        let kind = if f.kind.is_empty() || f.what.is_empty() || f.what == f.kind {
            format!("<code>{}</code>", escape(f.kind_or_what()))
        } else {
            format!(
                r#"<code>{}</code><div class="detail">{}</div>"#,
                escape(&f.kind),
                escape(&f.what)
            )
        };
        let reactions = if f.reactions.is_empty() {
            r#"<span class="muted">–</span>"#.to_owned()
        } else {
            f.reactions
                .iter()
                .map(|(k, n)| {
                    format!(
                        r#"<span class="reactions"><code>{}</code> {}</span>"#,
                        escape(k),
                        fmt_int(*n)
                    )
                })
                .collect::<Vec<_>>()
                .join("<br>")
        };
        let name = if f.fault.is_empty() {
            r#"<span class="muted">–</span>"#.to_owned()
        } else {
            format!("<strong>{}</strong>", escape(&f.fault))
        };
        let (row, error) = match &f.error {
            Some(e) => (
                r#" class="failed""#,
                format!(r#"<td class="error">✗ {}</td>"#, escape(e)),
            ),
            None => ("", "<td></td>".to_owned()),
        };
        let _ = write!(
            out,
            r#"<tr{row}><td class="num">{}</td><td class="num">{}</td><td>{name}</td><td>{kind}</td><td>{}</td><td class="num">{}</td><td>{reactions}</td><td class="detail">{}</td>{error}</tr>"#,
            fmt_secs(f.at_ms),
            fault_for(f),
            escape(&f.target),
            if f.from_schedule() {
                fmt_int(f.fired)
            } else {
                "–".to_owned()
            },
            escape(&f.effect)
        );
    }
    out.push_str("</tbody></table>");
}

/// Rows of `(label, value)` as a two-column table.
fn kv_table(out: &mut String, rows: &[(String, String)]) {
    out.push_str("<table><tbody>");
    for (k, v) in rows {
        let _ = write!(
            out,
            r#"<tr><td>{}</td><td class="num">{}</td></tr>"#,
            escape(k),
            escape(v)
        );
    }
    out.push_str("</tbody></table>");
}

/// The whole `report.html` for `r`.
pub fn render_report(r: &Report) -> String {
    let mut out = String::with_capacity(64 * 1024);
    let verdict = if r.passed { "PASSED" } else { "FAILED" };
    open_page(&mut out, &format!("{verdict} · rehearsal {}", r.run_id));
    let failed: Vec<_> = r.failed().collect();
    let _ = write!(
        out,
        r#"<main><header class="verdict {}"><h1>{verdict}</h1><div class="sub">Rehearsal <strong>{}</strong> · profile <strong>{}</strong> · stack <strong>{}</strong> · seed {} · {} · {} of {} invariants held</div>"#,
        if r.passed { "ok" } else { "bad" },
        escape(&r.run_id),
        escape(&r.profile_name),
        escape(&r.stack),
        r.seed,
        fmt_secs(duration_ms(r)),
        r.invariants.len() - failed.len(),
        r.invariants.len(),
    );
    if !failed.is_empty() {
        out.push_str(r#"<div class="failed">Failed: "#);
        for (n, i) in failed.iter().enumerate() {
            let _ = write!(
                out,
                "{}<code>{}</code> ({} against {})",
                if n > 0 { ", " } else { "" },
                escape(&i.name),
                escape(&with_unit(i.figure, &i.unit)),
                escape(&threshold(i))
            );
        }
        out.push_str("</div>");
    } else if !r.passed {
        out.push_str(
            r#"<div class="failed">The run failed, although every invariant listed held.</div>"#,
        );
    }
    let not_done = r.faults.iter().filter(|f| f.failed()).count();
    if not_done > 0 {
        let _ = write!(
            out,
            r#"<div class="failed">{not_done} of {} faults could not be carried out.</div>"#,
            r.faults.len()
        );
    }
    if !r.relaxed.is_empty() {
        out.push_str(r#"<div class="sub">Thresholds relaxed by a fault schedule: "#);
        for (n, x) in r.relaxed.iter().enumerate() {
            let _ = write!(
                out,
                "{}<code>{}</code> (by <code>{}</code>)",
                if n > 0 { ", " } else { "" },
                escape(&x.verdict),
                escape(&x.by)
            );
        }
        out.push_str("</div>");
    }
    if let Some(s) = crate::figures::sharding(r) {
        let _ = write!(
            out,
            r#"<div class="sub">Sharded load: {}</div>"#,
            escape(&s)
        );
    }
    let _ = write!(
        out,
        r#"<div class="sub">{} → {}</div></header>"#,
        escape(&r.started_at),
        escape(&r.finished_at)
    );

    // Key figures.
    out.push_str(r#"<div class="tiles">"#);
    let l = &r.load;
    tile(
        &mut out,
        "Rush rate",
        &format!("{}/s", fmt_num((l.achieved_rate * 100.0).round() / 100.0)),
        &format!(
            "target {}/s{}",
            fmt_num(l.target_rate),
            pct(l.achieved_rate, l.target_rate)
                .map(|p| format!(" · {p}"))
                .unwrap_or_default()
        ),
        verdict_of(r, "rush_rate"),
    );
    if let Some(p99) = booking_p99_ms(r) {
        let note = r
            .invariant("booking_p99_ms")
            .map(threshold)
            .unwrap_or_default();
        tile(
            &mut out,
            "Booking p99",
            &format!("{} ms", fmt_num(p99)),
            &note,
            verdict_of(r, "booking_p99_ms"),
        );
    }
    tile(
        &mut out,
        "Requests",
        &fmt_int(l.requests),
        &format!("{} server errors", fmt_int(l.server_errors)),
        verdict_of(r, "server_error_pct"),
    );
    let paid = paid_total(r);
    tile(
        &mut out,
        "Seats paid",
        &fmt_int(paid),
        &format!(
            "of {}{}",
            fmt_int(r.sale.seats),
            pct(paid as f64, r.sale.seats as f64)
                .map(|p| format!(" · {p}"))
                .unwrap_or_default()
        ),
        None,
    );
    tile(
        &mut out,
        "Released",
        &fmt_int(r.sale.released),
        &format!(
            "{} resold · {} extended",
            fmt_int(r.sale.resold),
            fmt_int(r.sale.extended)
        ),
        None,
    );
    tile(
        &mut out,
        "Queue age max",
        &format!("{} ms", fmt_int(r.queue.oldest_age_max_ms)),
        &format!("{} dead letters", fmt_int(r.queue.dead_letters)),
        verdict_of(r, "queue_age_max_ms"),
    );
    out.push_str("</div>");

    // Invariants.
    out.push_str("<section><h2>Invariants and thresholds</h2>");
    invariant_table(&mut out, r);
    relaxed_table(&mut out, r);
    out.push_str("</section>");

    // Plots.
    out.push_str(r#"<div class="charts">"#);
    for (title, svg) in report_charts(r) {
        let _ = write!(out, "<figure><h3>{}</h3>{svg}</figure>", escape(&title));
    }
    out.push_str("</div>");

    // Faults, with what each fired and what the system did about it.
    out.push_str(r#"<section id="faults"><h2>Faults injected</h2>"#);
    fault_table(&mut out, r);
    out.push_str("</section>");

    // Latency per transaction.
    out.push_str(
        r#"<section><h2>Latency per transaction</h2><p class="muted">Measured from each arrival's intended start, in ms.</p><table><thead><tr><th>Transaction</th><th class="num">Count</th><th class="num">Errors</th><th class="num">Mean</th><th class="num">p50</th><th class="num">p90</th><th class="num">p99</th><th class="num">p99.9</th><th class="num">Max</th></tr></thead><tbody>"#,
    );
    for t in &l.transactions {
        let _ = write!(
            out,
            r#"<tr><td><code>{}</code></td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td><td class="num"><strong>{}</strong></td><td class="num">{}</td><td class="num">{}</td></tr>"#,
            escape(&t.name),
            fmt_int(t.count),
            fmt_int(t.errors),
            fmt_num(t.mean_ms),
            fmt_num(t.p50_ms),
            fmt_num(t.p90_ms),
            fmt_num(t.p99_ms),
            fmt_num(t.p999_ms),
            fmt_num(t.max_ms)
        );
    }
    if l.transactions.is_empty() {
        out.push_str(r#"<tr><td colspan="9" class="muted">No transactions recorded.</td></tr>"#);
    }
    out.push_str("</tbody></table></section>");

    // Sale and load figures side by side.
    out.push_str(r#"<div class="cols"><section><h2>Sale</h2>"#);
    let s = &r.sale;
    let mut rows = vec![
        ("Seats".to_owned(), fmt_int(s.seats)),
        ("Holds created".to_owned(), fmt_int(s.holds_created)),
        ("Paid".to_owned(), fmt_int(paid)),
    ];
    for (path, n) in &s.paid_by_path {
        rows.push((format!("↳ by {path}"), fmt_int(*n)));
    }
    rows.extend([
        ("Released".to_owned(), fmt_int(s.released)),
        ("Extended".to_owned(), fmt_int(s.extended)),
        ("Resold".to_owned(), fmt_int(s.resold)),
        ("Alerts".to_owned(), fmt_int(s.alerts)),
        ("Emails".to_owned(), fmt_int(s.emails)),
    ]);
    if let Some(m) = &s.mail {
        rows.extend([
            (
                format!("↳ delivered by {}", m.kind),
                format!(
                    "{} for {} PAID ({} Message-IDs, {} recovered, {} repeats)",
                    fmt_int(m.delivered),
                    fmt_int(m.paid),
                    fmt_int(m.message_ids),
                    fmt_int(m.recovered),
                    fmt_int(m.repeats)
                ),
            ),
            ("↳ read from".to_owned(), m.read_from.clone()),
        ]);
    }
    kv_table(&mut out, &rows);
    out.push_str(r#"</section><section><h2>Load</h2>"#);
    kv_table(
        &mut out,
        &[
            (
                "Target rate".to_owned(),
                format!("{} bookings/s", fmt_num(l.target_rate)),
            ),
            (
                "Achieved rate".to_owned(),
                format!("{} bookings/s", fmt_num(l.achieved_rate)),
            ),
            ("Requests".to_owned(), fmt_int(l.requests)),
            ("Server errors".to_owned(), fmt_int(l.server_errors)),
            (
                "Arrivals scheduled".to_owned(),
                fmt_int(l.arrivals_scheduled),
            ),
            ("Arrivals started".to_owned(), fmt_int(l.arrivals_started)),
            ("Arrivals late".to_owned(), fmt_int(l.arrivals_late)),
            ("Arrivals dropped".to_owned(), fmt_int(l.arrivals_dropped)),
            (
                "Queue age max".to_owned(),
                format!("{} ms", fmt_int(r.queue.oldest_age_max_ms)),
            ),
            ("Dead letters".to_owned(), fmt_int(r.queue.dead_letters)),
        ],
    );
    out.push_str("</section></div>");

    // Levels.
    out.push_str(
        r#"<section><h2>Levels at the end</h2><table><thead><tr><th>Level</th><th class="num">Cap</th><th class="num">Taken</th><th class="num">Paid</th><th class="num">Left</th><th>Filled</th></tr></thead><tbody>"#,
    );
    for lv in &s.levels {
        let fill = if lv.cap > 0 {
            (lv.taken as f64 / lv.cap as f64).min(1.0)
        } else {
            0.0
        };
        let _ = write!(
            out,
            r#"<tr><td>{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td><td><span class="barbg"><span class="bar" style="width:{:.0}px"></span></span>{}</td></tr>"#,
            escape(&lv.level),
            fmt_int(lv.cap),
            fmt_int(lv.taken),
            fmt_int(lv.paid),
            fmt_int(lv.cap.saturating_sub(lv.taken)),
            fill * 90.0,
            pct(lv.taken as f64, lv.cap as f64).unwrap_or_else(|| "–".to_owned())
        );
    }
    if s.levels.is_empty() {
        out.push_str(r#"<tr><td colspan="6" class="muted">No levels recorded.</td></tr>"#);
    }
    out.push_str("</tbody></table></section>");

    // Phases.
    out.push_str(
        r#"<section><h2>Phases</h2><table><thead><tr><th>Phase</th><th class="num">Start</th><th class="num">End</th><th class="num">Duration</th><th>Wall clock (UTC)</th></tr></thead><tbody>"#,
    );
    for p in &r.phases {
        let wall = match (wall_clock(r, p.start_ms), wall_clock(r, p.end_ms)) {
            (Some(a), Some(b)) => format!("{} → {}", time_of_day(&a), time_of_day(&b)),
            _ => "–".to_owned(),
        };
        let _ = write!(
            out,
            r#"<tr><td>{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td><td class="muted">{}</td></tr>"#,
            escape(&p.name),
            fmt_secs(p.start_ms),
            fmt_secs(p.end_ms),
            fmt_secs(p.end_ms.saturating_sub(p.start_ms)),
            escape(&wall)
        );
    }
    out.push_str("</tbody></table></section>");

    // Versions, files, profile.
    out.push_str(r#"<div class="cols"><section><h2>Versions</h2>"#);
    let versions: Vec<(String, String)> = r
        .versions
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if versions.is_empty() {
        out.push_str(r#"<p class="muted">Not recorded.</p>"#);
    } else {
        kv_table(&mut out, &versions);
    }
    out.push_str("</section><section><h2>Files of this run</h2><ul>");
    out.push_str(r#"<li><a href="./report.json">report.json</a></li><li><a href="./summary.md">summary.md</a></li>"#);
    for f in &r.files {
        let _ = write!(out, "<li>{}</li>", file_link(f));
    }
    out.push_str("</ul></section></div>");
    let profile = serde_json::to_string_pretty(&r.profile).unwrap_or_default();
    let _ = write!(
        out,
        r#"<section><details><summary><strong>Profile as run</strong> <span class="muted">(<code>{}</code>)</span></summary><pre>{}</pre></details></section>"#,
        escape(&r.profile_name),
        escape(&profile)
    );
    let _ = writeln!(
        out,
        "<footer>Rendered by reports {} from report.json (schema {}).</footer></main></body></html>",
        env!("CARGO_PKG_VERSION"),
        r.schema
    );
    out
}

/// `2026-12-02T18:43:18.410Z` → `18:43:18.410`.
fn time_of_day(rfc3339: &str) -> &str {
    rfc3339
        .split_once('T')
        .map(|(_, t)| t.trim_end_matches('Z'))
        .unwrap_or(rfc3339)
}

/// A signed number: `+12.5`, `-3`, `0`.
pub(crate) fn signed(v: f64) -> String {
    if v > 0.0 {
        format!("+{}", fmt_num(v))
    } else {
        fmt_num(v)
    }
}

/// `passed`, `failed` or `not checked`.
pub(crate) fn verdict_word(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "passed",
        Some(false) => "failed",
        None => "not checked",
    }
}

mod compare;

pub use compare::{comparison_charts, render_comparison};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            escape(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        assert_eq!(escape("plain"), "plain");
        assert_eq!(escape(""), "");
    }

    #[test]
    fn file_links_stay_relative() {
        let l = file_link("javascript:alert(1)");
        assert!(l.contains(r#"href="./javascript:alert(1)""#), "{l}");
        let l = file_link(r#"a"><script>x</script>"#);
        assert!(!l.contains("<script>"), "{l}");
        assert_eq!(
            file_link("goose report.html"),
            r#"<a href="./goose%20report.html">goose report.html</a>"#
        );
    }

    #[test]
    fn time_of_day_strips_the_date() {
        assert_eq!(time_of_day("2026-12-02T18:43:18.410Z"), "18:43:18.410");
        assert_eq!(time_of_day("garbage"), "garbage");
    }

    #[test]
    fn signed_numbers() {
        assert_eq!(signed(2.5), "+2.5");
        assert_eq!(signed(-3.0), "-3");
        assert_eq!(signed(0.0), "0");
    }
}
