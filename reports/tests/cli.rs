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

#[test]
fn merge_joins_shards_into_a_run_folder_and_refuses_what_is_not_one_run() {
    let dir = Scratch::new("cli-merge");
    for i in 0..2 {
        let shard = ReportBuilder::new().shard(i, 2).build();
        reports::write_run(&dir.path().join(format!("shard-{i}")), &shard).unwrap();
    }
    let out_dir = dir.path().join("merged");
    let merge = |shards: &[&str], out: &std::path::Path| {
        let mut args: Vec<std::ffi::OsString> = vec!["merge".into()];
        args.extend(shards.iter().map(|s| dir.path().join(s).into_os_string()));
        args.push("--out".into());
        args.push(out.into());
        let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        reports(&refs)
    };
    let out = merge(&["shard-1", "shard-0"], &out_dir);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let merged = reports::load_report(&out_dir).unwrap();
    assert_eq!(merged.load.arrivals_started, 54_000);
    let booking = &merged.load.transactions[0];
    assert_eq!(booking.count, 54_000);
    // half the bookings took 1 ms, half 2 ms: the merged p99 is the slower
    // shard's, its p50 the faster one's
    assert!((booking.p50_ms - 1.0).abs() < 0.01, "{booking:?}");
    assert!((booking.p99_ms - 2.0).abs() < 0.01, "{booking:?}");
    assert!(out_dir.join("report.html").is_file());
    let md = fs::read_to_string(out_dir.join("summary.md")).unwrap();
    assert!(md.contains("merged from 2 shards"), "{md}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("PASSED"));

    // the same shard twice, and a whole run's report: exit 2, nothing written
    let refused = dir.path().join("refused");
    let out = merge(&["shard-0", "shard-0"], &refused);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("shard 0 of 2 is given twice"), "{err}");
    fs::copy(sample_path(), dir.path().join("whole.json")).unwrap();
    let out = merge(&["shard-0", "whole.json"], &refused);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not a shard's report"), "{err}");
    assert!(!refused.exists());
}

/// A run whose transactions carry HDR histograms: `n` latencies 1..=n ms
/// scaled by `scale`, rush rate `rate`.
fn run_with_latencies(run: &str, scale: f64, rate: f64) -> reports::Report {
    ReportBuilder::new()
        .with(|r| {
            r.run_id = run.into();
            r.load.achieved_rate = rate;
            for t in &mut r.load.transactions {
                let mut h = reports::hdr::histogram();
                for ms in 1..=200u64 {
                    h.record((ms as f64 * 1_000.0 * scale) as u64).unwrap();
                }
                *t = reports::hdr::figures(&t.name, &h, 0);
            }
        })
        .build()
}

#[test]
fn compare_gates_fail_a_regression_pass_equal_runs_and_refuse_unknown_figures() {
    let dir = Scratch::new("cli-gates");
    let a = dir.path().join("a");
    let b = dir.path().join("b");
    reports::write_run(&a, &run_with_latencies("base", 1.0, 2000.0)).unwrap();
    // 20 % slower, rush rate 1 % lower
    reports::write_run(&b, &run_with_latencies("slow", 1.2, 1980.0)).unwrap();
    let gates = |a: &std::path::Path, b: &std::path::Path, gates: &[&str]| {
        let mut args: Vec<&std::ffi::OsStr> =
            vec!["compare".as_ref(), a.as_os_str(), b.as_os_str()];
        for g in gates {
            args.push("--fail-on".as_ref());
            args.push(g.as_ref());
        }
        reports(&args)
    };

    let out = gates(&a, &b, &["booking_p99_ms=+10%", "rush_rate=-2%"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with("- ")).collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert!(
        lines[0].starts_with("- FAIL booking_p99_ms=+10%: A 198.015 ms, B 237.695 ms")
            && lines[0].contains("change +20%"),
        "{stdout}"
    );
    assert!(
        lines[1].starts_with("- PASS rush_rate=-2%: A 2,000 bookings/s, B 1,980"),
        "{stdout}"
    );
    // the percentiles of both runs side by side
    assert!(stdout.contains("### Latency percentiles, ms"), "{stdout}");
    assert!(
        stdout.contains(
            "| `booking` | A | 200 | 100.031 | 180.095 | 198.015 | 200.063 | 200.063 | HDR |"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "| `booking` | B | 200 | 120.063 | 216.063 | 237.695 | 240.127 | 240.127 | HDR |"
        ),
        "{stdout}"
    );
    // the allowance wide enough: it passes
    let out = gates(&a, &b, &["booking_p99_ms=+25%", "checkout_max_ms=+50"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // two equal runs pass every gate, even a zero allowance
    let out = gates(
        &a,
        &a,
        &["booking_p99_ms=+0%", "rush_rate=-0%", "checkout_p50_ms=+0"],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert_eq!(stdout.matches("- PASS ").count(), 3, "{stdout}");

    // an unknown figure: exit 2, the known ones listed, nothing judged
    let out = gates(&a, &b, &["bookng_p99_ms=+10%"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no figure \"bookng_p99_ms\""), "{err}");
    assert!(
        err.contains("booking_p999_ms, booking_p99_ms, checkout_max_ms"),
        "{err}"
    );
    assert!(err.contains("rush_rate"), "{err}");
    assert!(out.stdout.is_empty());
    // a gate without a sign: clap refuses it, exit 2
    let out = gates(&a, &b, &["booking_p99_ms=10%"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs a sign"));
    // a figure only one run has
    let c = dir.path().join("c");
    let mut lacking = run_with_latencies("no-checkout", 1.0, 2000.0);
    lacking.load.transactions.retain(|t| t.name != "checkout");
    reports::write_run(&c, &lacking).unwrap();
    let out = gates(&a, &c, &["checkout_p99_ms=+10%"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("in run A but not in run B"), "{err}");
}
