#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Writing, re-rendering and comparing run folders.

mod common;

use std::fs;

use common::xml::attr;
use common::{ReportBuilder, Scratch, sample_path};
use reports::{ReportError, compare, load_report, render_dir, write_run};

/// The line charts and the bar chart of a run page.
const PLOTS: usize = 6;

/// The page's headline: everything before `</header>`.
fn headline(html: &str) -> &str {
    &html[..html.find("</header>").expect("a header")]
}

#[test]
fn writes_a_run_folder_that_round_trips() {
    let dir = Scratch::new("write");
    let report = ReportBuilder::new()
        .failing(
            "ledger_matches_records",
            3.0,
            "3 bookings missing from the ledger",
        )
        .fault(30_000, "latency", "ledger", "12 retries")
        .build();
    let out = dir.path().join("runs/20261202T184318Z-7");
    let written = write_run(&out, &report).unwrap();
    for p in [
        written.json.as_ref().unwrap(),
        &written.html,
        &written.markdown,
    ] {
        assert!(p.is_file(), "{}", p.display());
    }
    assert_eq!(load_report(&out).unwrap(), report);

    let html = fs::read_to_string(&written.html).unwrap();
    assert_eq!(html.matches("<svg").count(), PLOTS);
    for title in [
        "Throughput",
        "Booking latency",
        "Holds, paid, released",
        "Seats left per level",
        "Admission queue",
        "Seats per level at the end",
    ] {
        assert!(html.contains(&format!("<h3>{title}")), "{title}");
    }
    let head = headline(&html);
    assert!(head.contains("FAILED"));
    assert!(head.contains("ledger_matches_records"));
    assert!(
        !head.contains("booking_p99_ms"),
        "only failed invariants in the headline"
    );
    assert!(html.contains("12 retries"));
    assert!(html.contains(r#"href="./goose-report.html""#));
    assert!(!html.contains("NaN"));
    assert!(!html.contains("<script") && !html.contains("http://") && !html.contains("https://"));

    let md = fs::read_to_string(&written.markdown).unwrap();
    assert!(md.starts_with("## Rehearsal 20261202T184318Z-7: FAILED"));
    assert!(md.contains("**Failed:** `ledger_matches_records`"));
    // Failed invariants first in the table.
    let first_row = md
        .lines()
        .find(|l| l.starts_with("| ✓") || l.starts_with("| ✗"))
        .unwrap();
    assert!(
        first_row.starts_with("| ✗ | `ledger_matches_records` | 3 | ≤ 0 | 3 bookings missing"),
        "{first_row}"
    );
    assert!(md.contains("| Rush rate | 1,999.96 of 2,000 bookings/s (100.0%) |"));
    assert!(md.contains("| Booking p99 | 31.74 ms |"));
    assert!(md.contains("| Paid | 20,676 of 20,700 seats |"));
    assert!(md.contains("| Queue age max | 4 ms |"));
}

#[test]
fn a_passing_run_says_so() {
    let dir = Scratch::new("pass");
    let w = write_run(dir.path(), &ReportBuilder::new().build()).unwrap();
    let html = fs::read_to_string(&w.html).unwrap();
    let head = headline(&html);
    assert!(head.contains("PASSED") && !head.contains("FAILED"));
    assert!(head.contains("6 of 6 invariants held"));
}

#[test]
fn report_strings_cannot_inject_markup() {
    let evil = r#""><script>alert(1)</script><img src=x onerror=alert(2)>"#;
    let report = ReportBuilder::new()
        .failing(
            "ledger_matches_records",
            1.0,
            &format!("candidate {evil} booked twice"),
        )
        .fault(1000, evil, evil, evil)
        .with(|r| {
            r.run_id = evil.into();
            r.profile_name = evil.into();
            r.stack = evil.into();
            r.started_at = evil.into();
            r.phases[1].name = evil.into();
            r.sale.levels[0].level = evil.into();
            r.sale.paid_by_path.insert(evil.into(), 1);
            r.load.transactions[0].name = evil.into();
            r.versions.insert(evil.into(), evil.into());
            r.files.push(evil.into());
            r.invariants[0].name = evil.into();
            r.invariants[0].unit = evil.into();
            for s in &mut r.timeline {
                s.seats_left.insert(evil.into(), 1);
            }
            r.profile = serde_json::json!({ "name": evil });
        })
        .build();
    let dir = Scratch::new("escape");
    let w = write_run(dir.path(), &report).unwrap();
    let html = fs::read_to_string(&w.html).unwrap();
    assert!(!html.contains("<script"), "a script tag got through");
    assert!(!html.contains("<img"), "an img tag got through");
    assert!(
        html.contains("&quot;&gt;&lt;script&gt;"),
        "quotes escaped too"
    );
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    // The page is still whole: every plot drawn, closed at the end.
    assert_eq!(html.matches("<svg").count(), PLOTS);
    assert_eq!(html.matches("</svg>").count(), PLOTS);
    assert!(html.trim_end().ends_with("</html>"));
    // And the Markdown table still has its columns.
    let md = fs::read_to_string(&w.markdown).unwrap();
    let row = md.lines().find(|l| l.contains("candidate")).unwrap();
    assert_eq!(row.matches(" | ").count(), 4, "{row}");
}

#[test]
fn rendering_is_deterministic() {
    let report = ReportBuilder::new().build();
    assert_eq!(
        reports::html::render_report(&report),
        reports::html::render_report(&report)
    );
    assert_eq!(
        reports::markdown::render_summary(&report),
        reports::markdown::render_summary(&report)
    );
}

#[test]
fn the_sample_fixture_renders() {
    let dir = Scratch::new("sample");
    fs::copy(sample_path(), dir.path().join("report.json")).unwrap();
    let before = fs::read(dir.path().join("report.json")).unwrap();
    let w = render_dir(dir.path()).unwrap();
    assert_eq!(w.json, None);
    assert_eq!(
        fs::read(dir.path().join("report.json")).unwrap(),
        before,
        "report.json untouched"
    );

    let r = load_report(dir.path()).unwrap();
    assert!(r.passed);
    // written before histograms and shards: it reads without them
    assert!(r.load.transactions.iter().all(|t| t.hdr.is_none()));
    assert!(r.timeline.iter().all(|x| x.booking_hdr.is_none()));
    assert!(r.shard.is_none() && r.merged.is_none());
    assert_eq!(r.profile["instances"], 2);
    assert_eq!(r.profile["candidates"], 40_000);
    assert!(r.timeline.len() > 60);

    let html = fs::read_to_string(&w.html).unwrap();
    assert_eq!(html.matches("<svg").count(), PLOTS);
    assert!(headline(&html).contains("PASSED"));
    assert!(html.contains("20,647"), "paid");
    let md = fs::read_to_string(&w.markdown).unwrap();
    assert!(md.contains("PASSED"));
    assert!(md.contains("| Booking p99 | 31.743 ms |"));
    // Rendering the JSON file itself writes beside it.
    let w2 = render_dir(&dir.path().join("report.json")).unwrap();
    assert_eq!(w2.html, w.html);
}

#[test]
fn an_older_minimal_report_still_renders() {
    // No versions, faults, timeline, files, units, bounds or details, and a
    // field this crate has never heard of.
    let json = r#"{
      "schema": 0,
      "run_id": "20250101T000000Z-1",
      "profile_name": "old",
      "profile": null,
      "seed": 1,
      "stack": "embedded",
      "started_at": "2025-01-01T00:00:00Z",
      "finished_at": "2025-01-01T00:01:00Z",
      "passed": false,
      "operator": "someone",
      "phases": [{"name": "rush", "start_ms": 0, "end_ms": 25000}],
      "load": {"requests": 10, "server_errors": 1, "target_rate": 100.0, "achieved_rate": 90.0,
               "arrivals_scheduled": 10, "arrivals_started": 10, "arrivals_dropped": 0,
               "arrivals_late": 0, "transactions": []},
      "sale": {"seats": 100, "levels": [], "holds_created": 5, "paid_by_path": {},
               "released": 0, "extended": 0, "resold": 0, "alerts": 0, "emails": 0},
      "queue": {"oldest_age_max_ms": 0, "dead_letters": 0},
      "invariants": [{"name": "rush_rate", "passed": false, "figure": 90.0, "threshold": 95.0}]
    }"#;
    let dir = Scratch::new("older");
    fs::write(dir.path().join("report.json"), json).unwrap();
    let w = render_dir(dir.path()).unwrap();
    let r = load_report(dir.path()).unwrap();
    assert!(r.timeline.is_empty() && r.faults.is_empty() && r.files.is_empty());
    assert_eq!(r.invariants[0].bound, "at_most");
    let html = fs::read_to_string(&w.html).unwrap();
    assert!(headline(&html).contains("rush_rate"));
    assert!(html.contains("no samples"));
    assert_eq!(html.matches("<svg").count(), PLOTS);
    assert!(
        fs::read_to_string(&w.markdown)
            .unwrap()
            .contains("**Failed:** `rush_rate`")
    );
}

#[test]
fn bad_input_is_reported_with_its_position() {
    let dir = Scratch::new("bad");
    let missing = load_report(&dir.path().join("nope")).unwrap_err();
    assert!(matches!(missing, ReportError::Read { .. }));
    assert!(missing.is_bad_input());

    fs::write(
        dir.path().join("report.json"),
        "{\n  \"schema\": 1,\n  oops\n}",
    )
    .unwrap();
    match render_dir(dir.path()).unwrap_err() {
        ReportError::Json { line, column, .. } => assert_eq!((line, column), (3, 3)),
        e => panic!("{e}"),
    }
    let e = load_report(dir.path()).unwrap_err();
    assert!(e.is_bad_input());
    assert!(e.to_string().contains("line 3 column 3"), "{e}");
}

#[test]
fn compares_two_runs() {
    let a = ReportBuilder::new().build();
    let b = ReportBuilder::new()
        .failing("booking_p99_ms", 75.0, "p99 75 ms")
        .with(|r| {
            r.run_id = "20261203T090000Z-8".into();
            r.load.achieved_rate = 1500.0;
            r.load.transactions[0].p99_ms = 75.0;
            for s in &mut r.timeline {
                s.p99_ms *= 3.0;
            }
        })
        .build();
    let c = compare(&a, &b);
    let changed: Vec<&str> = c.changed().map(|i| i.name.as_str()).collect();
    assert_eq!(changed, ["booking_p99_ms"]);

    let md = reports::markdown::render_comparison(&c);
    assert!(md.starts_with("## A 20261202T184318Z-7 (PASSED) vs B 20261203T090000Z-8 (FAILED)"));
    assert!(
        md.contains("| `booking_p99_ms` | passed | failed | 31.74 ms | 75 ms |"),
        "{md}"
    );
    assert!(
        md.contains("| rush rate | 1,999.96 bookings/s | 1,500 bookings/s | -499.96 | -25% |"),
        "{md}"
    );
    assert!(
        md.contains("| booking p99 | 31.74 ms | 75 ms | +43.26 | +136.3% |"),
        "{md}"
    );

    let html = reports::html::render_comparison(&a, &b, &c);
    assert!(headline(&html).contains("booking_p99_ms"));
    assert_eq!(html.matches("<svg").count(), 6);
    assert_eq!(
        html.matches("stroke-dasharray=\"6 4\"").count(),
        6,
        "B dashed in every plot"
    );
    assert!(
        html.contains(r#"class="num down">+43.26"#),
        "a regression is red"
    );
}

#[test]
fn every_run_folder_gets_a_junit_file_naming_the_failed_verdicts() {
    let dir = Scratch::new("junit");
    let report = ReportBuilder::new()
        .failing("booking_p99_ms", 120.5, "54000 bookings <slow> & \"late\"")
        .build();
    let w = write_run(dir.path(), &report).unwrap();
    assert_eq!(w.junit, dir.path().join(reports::JUNIT_XML));
    let xml = fs::read_to_string(&w.junit).unwrap();
    common::xml::check(&xml).unwrap();
    let tags = common::xml::tags(&xml);
    let suite = tags.iter().find(|t| t.0 == "testsuite").unwrap();
    assert_eq!(attr(suite, "tests"), report.invariants.len().to_string());
    assert_eq!(attr(suite, "failures"), "1");
    assert_eq!(attr(suite, "time"), "90.000");
    let cases: Vec<&str> = tags
        .iter()
        .filter(|t| t.0 == "testcase")
        .map(|t| attr(t, "name"))
        .collect();
    let names: Vec<&str> = report.invariants.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(cases, names);
    let failures: Vec<_> = tags.iter().filter(|t| t.0 == "failure").collect();
    assert_eq!(failures.len(), 1);
    assert_eq!(
        attr(failures[0], "message"),
        "booking_p99_ms: 120.5 ms, bound ≤ 50 ms — 54000 bookings <slow> & \"late\""
    );
    // the failure sits in the failed verdict's case
    let at = xml.find("<failure").unwrap();
    let case = xml[..at].rfind("<testcase").unwrap();
    assert!(xml[case..at].contains("name=\"booking_p99_ms\""));

    // `reports render` writes it again from report.json
    fs::remove_file(&w.junit).unwrap();
    let again = render_dir(dir.path()).unwrap();
    assert_eq!(fs::read_to_string(&again.junit).unwrap(), xml);
    // a passing run's file has no failure
    let ok = write_run(&dir.path().join("ok"), &ReportBuilder::new().build()).unwrap();
    let xml = fs::read_to_string(&ok.junit).unwrap();
    assert!(!xml.contains("<failure"), "{xml}");
    assert!(xml.contains("failures=\"0\""));
}
