#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Faults on the plots and in the tables, and thresholds a fault schedule
//! relaxed.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{ReportBuilder, xml};
use reports::html::{render_report, report_charts};
use reports::markdown::render_summary;
use reports::{Fault, Relaxed, Report, parse_report};

/// Two overlapping faults, an instantaneous one and one that could not be
/// carried out, in that order.
fn chaos_report() -> Report {
    let kill = Fault {
        at_ms: 10_000,
        duration_ms: 30_000,
        what: "kill -9 instance 1".into(),
        target: "instance-1".into(),
        effect: "answered again 2.1 s after the kill".into(),
        fault: "kill-instance-one".into(),
        kind: "kill".into(),
        fired: 1,
        reactions: BTreeMap::from([
            ("restarts".to_owned(), 1),
            ("connection_errors".to_owned(), 12),
        ]),
        error: None,
    };
    let pause = Fault {
        at_ms: 20_000,
        duration_ms: 15_000,
        what: "pause".into(),
        target: "redis".into(),
        fault: "redis-pause".into(),
        kind: "pause".into(),
        fired: 1,
        reactions: BTreeMap::from([("extensions".to_owned(), 40)]),
        ..Fault::default()
    };
    let rule = Fault {
        at_ms: 30_000,
        duration_ms: 0,
        what: "gateway_rule".into(),
        target: "gateway".into(),
        fault: "decline-burst".into(),
        kind: "gateway_rule".into(),
        fired: 40,
        ..Fault::default()
    };
    let failed = Fault {
        at_ms: 50_000,
        duration_ms: 5_000,
        what: "latency".into(),
        target: "redis".into(),
        fault: "slow-link".into(),
        kind: "toxic:latency".into(),
        error: Some("toxiproxy <unreachable>".into()),
        ..Fault::default()
    };
    ReportBuilder::new()
        .failing(
            "ledger_matches_records",
            3.0,
            "3 bookings missing from the ledger",
        )
        .with(|r| {
            r.faults = vec![kill, pause, rule, failed];
            r.relaxed = vec![Relaxed {
                verdict: "booking_p99_ms".into(),
                bound: 200.0,
                default_bound: 50.0,
                by: "kill-one-instance".into(),
            }];
            let p99 = r
                .invariants
                .iter_mut()
                .find(|i| i.name == "booking_p99_ms")
                .unwrap();
            p99.threshold = 200.0;
        })
        .build()
}

/// Attribute `name` of the first `<tag …>` in `s`, as a number.
fn attr(s: &str, tag: &str, name: &str) -> Option<f64> {
    let start = s.find(&format!("<{tag} "))?;
    let el = &s[start..start + s[start..].find('>')?];
    let key = format!(" {name}=\"");
    let v = &el[el.find(&key)? + key.len()..];
    v[..v.find('"')?].parse().ok()
}

/// The text of the first `<tag>…</tag>` in `s`.
fn text<'a>(s: &'a str, tag: &str) -> &'a str {
    let start = s.find(&format!("<{tag}")).unwrap();
    let open = start + s[start..].find('>').unwrap() + 1;
    &s[open..open + s[open..].find(&format!("</{tag}>")).unwrap()]
}

/// The fault labels of `svg`, drawn over the lines: `(label, y, title)`.
fn fault_labels(svg: &str) -> Vec<(&str, f64, &str)> {
    let Some(start) = svg.find(r#"<g class="fault-labels">"#) else {
        return vec![];
    };
    let group = &svg[start..start + svg[start..].find("</g>").unwrap()];
    group
        .match_indices("<text ")
        .map(|(i, _)| {
            let el = &group[i..i + group[i..].find("</text>").unwrap()];
            let label = &el[el.find("</title>").unwrap() + "</title>".len()..];
            (label, attr(el, "text", "y").unwrap(), text(el, "title"))
        })
        .collect()
}

/// Each `<g class="fault…">…</g>` of `svg`.
fn fault_groups(svg: &str) -> Vec<&str> {
    svg.match_indices(r#"<g class="fault"#)
        .filter(|(i, _)| !svg[*i..].starts_with(r#"<g class="fault-labels""#))
        .map(|(i, _)| &svg[i..i + svg[i..].find("</g>").unwrap() + 4])
        .collect()
}

/// The x axis of a line chart, read back from its ticks: seconds to pixels.
fn x_scale(svg: &str) -> impl Fn(f64) -> f64 {
    // An x tick: `<line x1="PX" … class="axis"/><text … class="tick"
    // text-anchor="middle">LABEL</text>`.
    let mut ticks: Vec<(f64, f64)> = Vec::new();
    for (i, _) in svg.match_indices(r#"class="tick" text-anchor="middle">"#) {
        let line = svg[..i].rfind("<line ").unwrap();
        let px = attr(&svg[line..], "line", "x1").unwrap();
        let label = text(&svg[svg[..i].rfind("<text").unwrap()..], "text");
        ticks.push((px, label.parse().unwrap()));
    }
    assert!(ticks.len() >= 2, "{svg}");
    let ((p0, v0), (p1, v1)) = (ticks[0], ticks[ticks.len() - 1]);
    move |v| p0 + (v - v0) / (v1 - v0) * (p1 - p0)
}

fn near(a: f64, b: f64) -> bool {
    // Coordinates are written with one decimal.
    (a - b).abs() <= 0.051
}

#[test]
fn every_time_plot_draws_each_fault_where_and_when_it_was() {
    let r = chaos_report();
    let charts = report_charts(&r);
    let lines: Vec<&(String, String)> = charts
        .iter()
        .filter(|(_, svg)| svg.contains("<polyline"))
        .collect();
    assert_eq!(lines.len(), 5, "the five time plots");
    for (title, svg) in lines {
        xml::check(svg).unwrap_or_else(|e| panic!("{title}: {e}\n{svg}"));
        let px = x_scale(svg);
        let g = fault_groups(svg);
        let labels = fault_labels(svg);
        assert_eq!(g.len(), r.faults.len(), "{title}");
        assert_eq!(labels.len(), r.faults.len(), "{title}");
        for ((g, label), f) in g.iter().zip(&labels).zip(&r.faults) {
            let (at, end) = (f.at_ms as f64 / 1000.0, f.end_ms() as f64 / 1000.0);
            if f.duration_ms == 0 {
                assert!(!g.contains("<rect"), "{title}: {g}");
                assert!(near(attr(g, "line", "x1").unwrap(), px(at)), "{title}: {g}");
            } else {
                let x = attr(g, "rect", "x").unwrap();
                let w = attr(g, "rect", "width").unwrap();
                assert!(near(x, px(at)), "{title}: x {x} for {at} s");
                assert!(
                    near(w, px(end) - px(at)),
                    "{title}: width {w} for {at}..{end} s"
                );
            }
            let t = text(g, "title");
            assert!(t.starts_with(&f.fault), "{t}");
            assert!(t.contains(&format!("({})", f.kind)), "{t}");
            assert!(t.contains(&format!("on {}", f.target)), "{t}");
            assert_eq!(label.0, f.fault);
            assert_eq!(label.2, t);
        }
        // The kill and the pause overlap, and so do their labels: two rows.
        assert_ne!(labels[0].1, labels[1].1);
        assert!(text(g[0], "title").contains("at 10.0 s for 30.0 s, fired 1"));
        assert!(text(g[2], "title").ends_with("at 30.0 s, fired 40"));
        assert!(g[3].starts_with(r#"<g class="fault failed">"#));
        assert!(
            text(g[3], "title").contains("could not be carried out: toxiproxy &lt;unreachable&gt;")
        );
    }
    // No faults, no fault bands.
    let plain = report_charts(&ReportBuilder::new().build());
    assert!(plain.iter().all(|(_, svg)| !svg.contains("class=\"fault")));
}

#[test]
fn the_page_lists_faults_failed_first_and_the_relaxed_thresholds() {
    let r = chaos_report();
    let html = render_report(&r);
    for svg in xml::svgs(&html) {
        xml::check(svg).unwrap();
    }
    assert!(html.contains("1 of 4 faults could not be carried out."));

    // The fault table: the failed fault first, in red.
    let table = &html[html.find(r#"<table class="faults">"#).unwrap()..];
    let table = &table[..table.find("</table>").unwrap()];
    let rows: Vec<&str> = table.split("<tr").skip(2).collect();
    assert_eq!(rows.len(), 4);
    assert!(rows[0].starts_with(r#" class="failed">"#), "{}", rows[0]);
    assert!(rows[0].contains("<strong>slow-link</strong>"));
    assert!(rows[0].contains(r#"<td class="error">✗ toxiproxy &lt;unreachable&gt;</td>"#));
    // Then the others in report order, with what each fired and caused.
    assert!(rows[1].contains("<strong>kill-instance-one</strong>"));
    assert!(rows[1].contains(r#"<td class="num">10.0 s</td><td class="num">30.0 s</td>"#));
    assert!(rows[1].contains("<code>kill</code>"));
    assert!(rows[1].contains("kill -9 instance 1"));
    assert!(rows[1].contains("<td>instance-1</td>"));
    assert!(rows[1].contains(
        r#"<span class="reactions"><code>connection_errors</code> 12</span><br><span class="reactions"><code>restarts</code> 1</span>"#
    ));
    assert!(rows[1].contains("answered again 2.1 s after the kill"));
    assert!(rows[3].contains("<strong>decline-burst</strong>"));
    assert!(rows[3].contains(r#"<td class="num">instant</td>"#));
    assert!(rows[3].contains(r#"<td class="num">40</td>"#));

    // The relaxed threshold: in its own table and on the verdict's row.
    assert!(html.contains(
        r#"<tr><td><code>booking_p99_ms</code></td><td class="num">≤ 200 ms</td><td class="num">≤ 50 ms</td><td><code>kill-one-instance</code></td></tr>"#
    ));
    let verdicts = &html[html.find("<h2>Invariants and thresholds</h2>").unwrap()..];
    let verdict_rows: Vec<&str> = verdicts[..verdicts.find("</table>").unwrap()]
        .split("<tr")
        .skip(2)
        .collect();
    // A failed verdict is still first.
    assert!(verdict_rows[0].contains("ledger_matches_records"));
    let p99 = verdict_rows
        .iter()
        .find(|r| r.contains("<code>booking_p99_ms</code>"))
        .unwrap();
    assert!(
        p99.contains(r#"relaxed by <code>kill-one-instance</code> (default ≤ 50 ms)"#),
        "{p99}"
    );
    // The relaxed table sits with the verdicts, before the plots.
    assert!(
        html.find("Thresholds relaxed by a fault schedule</h3>")
            .unwrap()
            < html.find("<svg").unwrap()
    );
}

#[test]
fn the_summary_has_faults_and_relaxed_thresholds_only_when_there_are_any() {
    let md = render_summary(&chaos_report());
    assert!(md.contains("### Faults\n\n4 injected, **1 could not be carried out**.\n"));
    let lines: Vec<&str> = md.lines().filter(|l| l.starts_with("- ")).collect();
    assert_eq!(
        lines,
        [
            "- ✗ `slow-link` (toxic:latency) on redis, at 50.0 s for 5.0 s, fired 0; **could not be carried out:** `toxiproxy <unreachable>`",
            "- • `kill-instance-one` (kill) on instance-1, at 10.0 s for 30.0 s, fired 1; reactions: connection_errors 12, restarts 1 — answered again 2.1 s after the kill",
            "- • `redis-pause` (pause) on redis, at 20.0 s for 15.0 s, fired 1; reactions: extensions 40",
            "- • `decline-burst` (gateway_rule) on gateway, at 30.0 s, fired 40",
        ]
    );
    assert!(md.contains(
        "### Relaxed thresholds\n\n| Verdict | Bound used | Default bound | Relaxed by |\n|---|---:|---:|---|\n| `booking_p99_ms` | ≤ 200 ms | ≤ 50 ms | `kill-one-instance` |\n"
    ));
    assert!(
        md.contains("| ≤ 200 ms (relaxed by `kill-one-instance`) |"),
        "{md}"
    );

    let plain = render_summary(&ReportBuilder::new().build());
    assert!(
        !plain.contains("Faults") && !plain.contains("injected"),
        "{plain}"
    );
    assert!(!plain.contains("Relaxed") && !plain.contains("relaxed"));
}

#[test]
fn older_faults_without_the_new_fields_still_read_and_render() {
    let mut json = serde_json::to_value(ReportBuilder::new().build()).unwrap();
    let obj = json.as_object_mut().unwrap();
    obj.remove("relaxed");
    obj.insert(
        "faults".into(),
        serde_json::json!([{
            "at_ms": 30000, "duration_ms": 5000, "what": "kill -9 (1@rush=0.4)",
            "target": "instance-1", "effect": "answered again 812 ms after the kill"
        }, {
            "at_ms": 40000, "duration_ms": 0, "what": "latency", "target": "ledger"
        }]),
    );
    let r = parse_report(&json.to_string(), Path::new("old.json")).unwrap();
    assert!(r.relaxed.is_empty());
    let f = &r.faults[0];
    assert_eq!((f.fault.as_str(), f.kind.as_str(), f.fired), ("", "", 0));
    assert!(f.reactions.is_empty() && f.error.is_none());
    assert_eq!(f.end_ms(), 35_000);
    assert_eq!(r.faults[1].effect, "");
    assert_eq!(r.faults[1].end_ms(), 40_000);

    // An old fault is named by what it was.
    let html = render_report(&r);
    assert!(html.contains("<code>kill -9 (1@rush=0.4)</code>"));
    let (_, svg) = &report_charts(&r)[0];
    xml::check(svg).unwrap();
    assert_eq!(fault_labels(svg)[0].0, "kill -9 (1@rush=0.4)");
    assert!(render_summary(&r).contains("- • `kill -9 (1@rush=0.4)` on instance-1, at 30.0 s for 5.0 s — answered again 812 ms after the kill\n"));

    // The new fields round-trip.
    let r = chaos_report();
    let back = parse_report(&serde_json::to_string(&r).unwrap(), Path::new("new.json")).unwrap();
    assert_eq!(back, r);
}
