//! The comparison page of two runs (`reports compare`): their figures side
//! by side with the trend of each, and the charts of both runs on one axis.

use super::*;
use crate::compare::{Better, FigureDelta, PERCENTILES, TransactionPercentiles};

/// Colour for a delta cell.
fn trend_class(t: Trend) -> &'static str {
    match t {
        Trend::Improved => "up",
        Trend::Regressed => "down",
        Trend::Neutral => "muted",
    }
}

/// The overlay plots of a comparison: `(heading, svg)`.
pub fn comparison_charts(a: &Report, b: &Report) -> Vec<(String, String)> {
    let (ca, cb) = (PALETTE[0], "#ea580c");
    let la = format!("A {}", a.run_id);
    let lb = format!("B {}", b.run_id);
    type Get = fn(&Sample) -> f64;
    let plots: [(&str, &str, Get); 6] = [
        ("Requests per second", "requests/s", |s| s.requests_per_s),
        ("Bookings per second", "bookings/s", |s| s.bookings_per_s),
        ("Booking latency p99", "ms", |s| s.p99_ms),
        ("Paid bookings", "bookings", |s| s.paid as f64),
        ("Seats left, all levels", "seats", |s| {
            s.seats_left.values().sum::<u64>() as f64
        }),
        ("Queue age", "ms", |s| s.queue_age_ms as f64),
    ];
    plots
        .iter()
        .map(|&(title, unit, get)| {
            let c = LineChart {
                title: title.to_owned(),
                x_label: "seconds since start".to_owned(),
                y_label: unit.to_owned(),
                series: vec![
                    series(&la, ca, false, &a.timeline, get),
                    series(&lb, cb, true, &b.timeline, get),
                ],
                bands: vec![],
                faults: vec![],
                rules: vec![],
            };
            (title.to_owned(), c.to_svg())
        })
        .collect()
}

/// Each transaction both runs measured: its percentiles in A and B (from
/// their HDR histograms) and the change, coloured by its trend.
fn percentiles_table(out: &mut String, rows: &[TransactionPercentiles]) {
    if rows.is_empty() {
        return;
    }
    out.push_str(
        r#"<section><h2>Latency percentiles, ms</h2><p class="muted">Read from each run's HDR histogram (<em>written</em>: an older report without one, its written figures).</p><table><thead><tr><th>Transaction</th><th>Run</th><th class="num">Count</th>"#,
    );
    for (_, label) in PERCENTILES {
        let _ = write!(out, r#"<th class="num">{}</th>"#, escape(label));
    }
    out.push_str("<th>Source</th></tr></thead><tbody>");
    for t in rows {
        for (run, p) in [("A", &t.a), ("B", &t.b)] {
            let _ = write!(
                out,
                r#"<tr><td><code>{}</code></td><td>{run}</td><td class="num">{}</td>"#,
                escape(&t.name),
                escape(&fmt_int(p.count))
            );
            for v in p.values {
                let _ = write!(out, r#"<td class="num">{}</td>"#, escape(&fmt_num(v)));
            }
            let _ = write!(out, "<td>{}</td></tr>", crate::markdown::source(p));
        }
        let _ = write!(
            out,
            r#"<tr><td><code>{}</code></td><td>Δ %</td><td class="num muted">{}</td>"#,
            escape(&t.name),
            escape(&crate::markdown::change_pct(
                t.a.count as f64,
                t.b.count as f64
            ))
        );
        for (a, b) in t.a.values.iter().zip(t.b.values) {
            let trend = FigureDelta {
                name: String::new(),
                unit: String::new(),
                a: *a,
                b,
                better: Better::Lower,
            }
            .trend();
            let _ = write!(
                out,
                r#"<td class="num {}">{}</td>"#,
                trend_class(trend),
                escape(&crate::markdown::change_pct(*a, b))
            );
        }
        out.push_str("<td></td></tr>");
    }
    out.push_str("</tbody></table></section>");
}

/// The comparison page: both runs side by side with deltas and overlaid plots.
pub fn render_comparison(a: &Report, b: &Report, c: &Comparison) -> String {
    let mut out = String::with_capacity(64 * 1024);
    let changed: Vec<_> = c.changed().collect();
    open_page(&mut out, &format!("A {} vs B {}", c.a_run, c.b_run));
    let class = match (c.a_passed, c.b_passed) {
        (_, false) => "bad",
        _ => "ok",
    };
    let word = |p: bool| if p { "PASSED" } else { "FAILED" };
    let _ = write!(
        out,
        r#"<main><header class="verdict {class}"><h1>A {} · B {}</h1><div class="sub">A = <strong>{}</strong> ({}, {}) · B = <strong>{}</strong> ({}, {})</div>"#,
        word(c.a_passed),
        word(c.b_passed),
        escape(&c.a_run),
        escape(&a.profile_name),
        escape(&a.stack),
        escape(&c.b_run),
        escape(&b.profile_name),
        escape(&b.stack),
    );
    if changed.is_empty() {
        out.push_str(r#"<div class="failed">No invariant changed verdict.</div>"#);
    } else {
        out.push_str(r#"<div class="failed">Changed verdict: "#);
        for (n, i) in changed.iter().enumerate() {
            let _ = write!(
                out,
                "{}<code>{}</code> {} → {}",
                if n > 0 { ", " } else { "" },
                escape(&i.name),
                verdict_word(i.a),
                verdict_word(i.b)
            );
        }
        out.push_str("</div>");
    }
    out.push_str("</header>");

    out.push_str(
        r#"<section><h2>Figures</h2><table><thead><tr><th>Figure</th><th class="num">A</th><th class="num">B</th><th class="num">Δ</th><th class="num">Δ %</th></tr></thead><tbody>"#,
    );
    for f in &c.figures {
        let cls = trend_class(f.trend());
        let _ = write!(
            out,
            r#"<tr><td>{}</td><td class="num">{}</td><td class="num">{}</td><td class="num {cls}">{}</td><td class="num {cls}">{}</td></tr>"#,
            escape(&f.name),
            escape(&with_unit(f.a, &f.unit)),
            escape(&with_unit(f.b, &f.unit)),
            escape(&signed(f.delta())),
            f.delta_pct()
                .map(|p| format!("{}%", signed((p * 10.0).round() / 10.0)))
                .unwrap_or_else(|| "–".to_owned())
        );
    }
    out.push_str("</tbody></table></section>");

    percentiles_table(&mut out, &c.percentiles);

    out.push_str(
        r#"<section><h2>Invariants</h2><table><thead><tr><th>Invariant</th><th>A</th><th>B</th><th class="num">Figure A</th><th class="num">Figure B</th></tr></thead><tbody>"#,
    );
    let mut rows: Vec<_> = c.invariants.iter().collect();
    rows.sort_by_key(|i| !i.changed());
    for i in rows {
        let cell = |v: Option<bool>| match v {
            Some(p) => verdict_cell(p).to_owned(),
            None => r#"<td class="muted">not checked</td>"#.to_owned(),
        };
        let fig = |v: Option<f64>| {
            v.map(|x| with_unit(x, &i.unit))
                .unwrap_or_else(|| "–".to_owned())
        };
        let _ = write!(
            out,
            r#"<tr{}><td><code>{}</code></td>{}{}<td class="num">{}</td><td class="num">{}</td></tr>"#,
            if i.changed() {
                r#" class="failed""#
            } else {
                ""
            },
            escape(&i.name),
            cell(i.a),
            cell(i.b),
            escape(&fig(i.a_figure)),
            escape(&fig(i.b_figure))
        );
    }
    out.push_str("</tbody></table></section>");

    out.push_str(r#"<div class="charts">"#);
    for (title, svg) in comparison_charts(a, b) {
        let _ = write!(out, "<figure><h3>{}</h3>{svg}</figure>", escape(&title));
    }
    let _ = writeln!(
        out,
        "</div><footer>Rendered by reports {}. A solid, B dashed.</footer></main></body></html>",
        env!("CARGO_PKG_VERSION")
    );
    out
}
