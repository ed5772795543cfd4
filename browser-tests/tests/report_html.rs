//! The rehearsal's `report.html`, written by the `reports` crate from the
//! sample report made to fail, opened from disk (`file://`) in headless
//! Chromium that has no network: it loads nothing else, every plot's SVG is
//! there and drawn (child elements with a size), and the failed verdict is
//! what the page shows first.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use browser_tests::{Browser, artifacts_dir};
use serde_json::Value;

/// The sample report (`reports/tests/fixtures/`), with its last invariant
/// failed, so the page must bring it to the top.
fn failed_report() -> (reports::Report, String) {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../reports/tests/fixtures/sample-report.json");
    let mut r = reports::load_report(&path).unwrap();
    assert!(r.invariants.len() >= 3, "the fixture has invariants");
    assert!(r.invariants.iter().all(|i| i.passed), "the fixture passed");
    let last = r.invariants.last_mut().unwrap();
    last.passed = false;
    last.detail = "made to fail by the browser test".into();
    let name = last.name.clone();
    r.passed = false;
    (r, name)
}

const PAGE_SHOWS: &str = r#"
const main = document.querySelector("main");
const first = main.firstElementChild;
const charts = Array.from(document.querySelectorAll("svg"));
const firstRow = document.querySelector("table tbody tr");
const table = document.querySelector("table");
return {
  title: document.title,
  first_tag: first.tagName.toLowerCase(),
  first_class: first.className,
  first_h1: document.querySelector("h1").textContent,
  h1_in_first: first.contains(document.querySelector("h1")),
  failed_line: (first.querySelector(".failed") || {textContent: ""}).textContent,
  header_bottom: first.getBoundingClientRect().bottom,
  table_top: table.getBoundingClientRect().top,
  first_row_class: firstRow.className,
  first_row_name: firstRow.querySelector("code").textContent,
  resources: performance.getEntriesByType("resource").map((e) => e.name),
  charts: charts.map((svg) => {
    const box = svg.getBoundingClientRect();
    const drawn = Array.from(svg.querySelectorAll("path, rect, line, polyline, circle, text"))
      .filter((el) => { const b = el.getBBox(); return b.width > 0 || b.height > 0; }).length;
    return {
      label: svg.getAttribute("aria-label") || "",
      width: box.width,
      height: box.height,
      children: svg.childElementCount,
      drawn: drawn,
    };
  }),
};
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_renders_its_plots_from_disk_and_shows_the_failure_first() {
    let Some(browser) = Browser::start("report", (1280, 900)).await.unwrap() else {
        return;
    };
    let result = async {
        let (report, failed) = failed_report();
        let dir = artifacts_dir()?.join("report-failed");
        let written = reports::write_run(&dir, &report)?;
        let html = std::fs::canonicalize(&written.html)?;
        browser
            .client
            .goto(&format!("file://{}", html.display()))
            .await?;
        let shows: Value = browser.eval(PAGE_SHOWS, vec![]).await?;
        browser.screenshot("failed-report").await?;

        // the failed verdict first: the page's first element is the red
        // verdict header, its h1 is the page's first, and it names the failure
        assert!(
            shows["title"].as_str().unwrap().starts_with("FAILED"),
            "{shows:#}"
        );
        assert_eq!(shows["first_tag"], "header");
        assert_eq!(shows["first_class"], "verdict bad");
        assert_eq!(shows["first_h1"], "FAILED");
        assert_eq!(shows["h1_in_first"], true);
        let line = shows["failed_line"].as_str().unwrap();
        assert!(
            line.starts_with("Failed: ") && line.contains(&failed),
            "{line}"
        );
        assert!(
            shows["header_bottom"].as_f64() <= shows["table_top"].as_f64(),
            "the verdict is above every table: {shows:#}"
        );
        // and in the invariants' table the failed one leads, though last in the report
        assert_eq!(shows["first_row_class"], "failed");
        assert_eq!(shows["first_row_name"], failed.as_str());

        // self-contained: nothing else was loaded
        assert_eq!(shows["resources"], serde_json::json!([]), "{shows:#}");

        // every plot is drawn
        let charts = shows["charts"].as_array().unwrap();
        let expected = reports::html::report_charts(&report).len();
        assert!(expected >= 3, "the sample has plots");
        assert!(
            charts.len() >= expected,
            "{} svgs for {expected} plots",
            charts.len()
        );
        for c in charts {
            assert!(
                c["width"].as_f64() > Some(0.0) && c["height"].as_f64() > Some(0.0),
                "{c}"
            );
            assert!(c["children"].as_u64() > Some(0), "{c}");
            assert!(
                c["drawn"].as_u64() > Some(0),
                "a plot with nothing drawn: {c}"
            );
        }
        eprintln!(
            "{} plots drawn; failed verdict {failed} first",
            charts.len()
        );
        anyhow::Ok(())
    }
    .await;
    browser.close().await;
    result.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passed_report_says_passed_first() {
    let Some(browser) = Browser::start("report-passed", (1280, 900)).await.unwrap() else {
        return;
    };
    let result = async {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../reports/tests/fixtures/sample-report.json");
        let report = reports::load_report(&path)?;
        let dir = artifacts_dir()?.join("report-passed");
        let written = reports::write_run(&dir, &report)?;
        let html = std::fs::canonicalize(&written.html)?;
        browser
            .client
            .goto(&format!("file://{}", html.display()))
            .await?;
        let shows: Value = browser.eval(PAGE_SHOWS, vec![]).await?;
        assert_eq!(shows["first_class"], "verdict ok", "{shows:#}");
        assert_eq!(shows["first_h1"], "PASSED");
        assert_eq!(shows["failed_line"], "");
        assert_eq!(shows["first_row_class"], "");
        anyhow::Ok(())
    }
    .await;
    browser.close().await;
    result.unwrap();
}
