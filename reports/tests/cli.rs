#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The `reports` binary: exit codes and output.

mod common;

use std::fs;
use std::process::{Command, Output};

use common::{ReportBuilder, Scratch, sample_path};

fn reports(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_reports"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn render_rewrites_the_pages() {
    let dir = Scratch::new("cli-render");
    fs::copy(sample_path(), dir.path().join("report.json")).unwrap();
    let out = reports(&["render".as_ref(), dir.path().as_os_str()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dir.path().join("report.html").is_file());
    assert!(dir.path().join("summary.md").is_file());
    assert!(String::from_utf8_lossy(&out.stdout).contains("report.html"));
}

#[test]
fn bad_input_exits_2_with_a_message() {
    let dir = Scratch::new("cli-bad");
    let missing = dir.path().join("missing");
    let out = reports(&["render".as_ref(), missing.as_os_str()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot read") && err.contains("missing"),
        "{err}"
    );

    let bad = dir.path().join("bad.json");
    fs::write(&bad, "{\"schema\": 1,\n\"run_id\": }").unwrap();
    let out = reports(&[
        "compare".as_ref(),
        bad.as_os_str(),
        sample_path().as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.json") && err.contains("line 2 column"),
        "{err}"
    );

    let out = reports(&["render".as_ref()]);
    assert_eq!(out.status.code(), Some(2), "clap: a run is required");
}

#[test]
fn compare_prints_markdown_and_writes_html() {
    let dir = Scratch::new("cli-compare");
    let b = ReportBuilder::new()
        .failing("server_error_pct", 0.5, "525 of 104971 requests")
        .build();
    reports::write_run(&dir.path().join("b"), &b).unwrap();
    let page = dir.path().join("cmp.html");
    let out = reports(&[
        "compare".as_ref(),
        sample_path().as_os_str(),
        dir.path().join("b").as_os_str(),
        "--out".as_ref(),
        page.as_os_str(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(
        md.contains("(PASSED) vs B 20261202T184318Z-7 (FAILED)"),
        "{md}"
    );
    assert!(
        md.contains("| `server_error_pct` | passed | failed |"),
        "{md}"
    );
    let html = fs::read_to_string(&page).unwrap();
    assert!(html.contains("<svg"));
}
