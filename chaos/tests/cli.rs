#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The `chaos` binary as CI runs it: the bounded matrix and the whole zoo
//! must pass, and `chaos run` must fail on a bug and name the check.

use std::process::Command;

fn chaos(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_chaos"))
        .args(args)
        .output()
        .expect("chaos runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    println!("{stdout}");
    (out.status.code().unwrap_or(-1), stdout)
}

fn out_dir(what: &str) -> String {
    std::env::temp_dir()
        .join(format!("chaos-{what}-{:016x}", rand::random::<u64>()))
        .display()
        .to_string()
}

#[test]
fn the_ci_matrix_passes_every_schedule_and_seed() {
    let out = out_dir("matrix");
    let (code, stdout) = chaos(&["matrix", "--profile", "ci", "--out", &out]);
    assert_eq!(code, 0, "{stdout}");
    // 6 schedules × 3 seeds, one line each
    assert_eq!(stdout.lines().filter(|l| l.contains(" ok ")).count(), 18);
    assert!(!stdout.contains("FAIL"));
    assert!(stdout.contains("simulated sales per minute"));
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{out}/matrix.json")).unwrap())
            .unwrap();
    assert_eq!(summary["runs"].as_array().unwrap().len(), 18);
    // the JUnit file for CI: one case per schedule × seed, none failed
    let junit = std::fs::read_to_string(format!("{out}/matrix.junit.xml")).unwrap();
    assert!(junit.starts_with("<?xml"), "{junit}");
    assert!(
        junit.contains(r#"<testsuite name="chaos matrix" tests="18" failures="0""#),
        "{junit}"
    );
    assert_eq!(junit.matches("<testcase ").count(), 18);
    assert!(junit.contains(r#"name="seed 3" classname="chaos.matrix.gateway-trouble""#));
    // the faults fired: a matrix whose faults never fire proves nothing
    assert!(
        summary["runs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["schedule"] != "calm")
            .all(|r| !r["summary"].as_str().unwrap().contains(" 0 faults fired")),
        "{summary:#}"
    );
}

#[test]
fn every_bug_of_the_zoo_is_caught_by_its_invariant() {
    let out = out_dir("zoo");
    // every bug, each named
    let mut args = vec!["zoo".to_owned(), "--out".to_owned(), out.clone()];
    for bug in booking::Bug::ALL {
        args.push("--bug".to_owned());
        args.push(bug.name().to_owned());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, stdout) = chaos(&args);
    assert_eq!(code, 0, "{stdout}");
    assert!(
        stdout.contains("20 of 20 zoo rows caught (16 bugs)"),
        "{stdout}"
    );
    assert!(!stdout.contains("NOT CAUGHT"));
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(format!("{out}/zoo.json")).unwrap()).unwrap();
    // the JUnit file: a case per row that it was caught, none failed
    let junit = std::fs::read_to_string(format!("{out}/zoo.junit.xml")).unwrap();
    assert!(junit.contains(r#"failures="0""#), "{junit}");
    assert_eq!(junit.matches(" caught\" classname=").count(), 20, "{junit}");
    // token_grant_per_instance has a rehearsal row and a sim row
    assert_eq!(rows.len(), 20);
    // the redirect bugs are caught in virtual time as well as over HTTP
    for bug in [
        "trust_redirect_cancel",
        "trust_redirect_success",
        "execute_after_deadline",
    ] {
        let harnesses: Vec<&serde_json::Value> = rows
            .iter()
            .filter(|r| r["bug"] == bug)
            .map(|r| &r["harness"])
            .collect();
        assert_eq!(harnesses, ["sim", "rehearsal"], "{bug}");
    }
    // an instance that keeps its dead Redis connections is caught by the
    // errors it still answers long after the restart, not by a run that
    // could not be judged
    let lost = rows
        .iter()
        .find(|r| r["bug"] == "ignore_lost_redis_connection")
        .unwrap();
    assert_eq!(
        lost["caught_by"],
        serde_json::json!(["server_errors_outside_faults"]),
        "{lost:#}"
    );
    for r in &rows {
        assert_eq!(r["caught"], true, "{r:#}");
        if r["harness"] == "sim" {
            assert_eq!(r["control_passed"], true, "{r:#}");
        }
    }
}

#[test]
fn a_run_with_a_bug_fails_and_names_the_check_a_clean_one_passes() {
    let (code, stdout) = chaos(&[
        "run",
        "--schedule",
        "calm",
        "--seed",
        "6",
        "--candidates",
        "1000",
    ]);
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("every check passed"));
    let (code, stdout) = chaos(&[
        "run",
        "--schedule",
        "calm",
        "--seed",
        "6",
        "--candidates",
        "1000",
        "--bug",
        "paid_keeps_ttl",
    ]);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("FAIL completed_is_paid"), "{stdout}");
    let (code, _) = chaos(&["run", "--schedule", "no-such-schedule"]);
    assert_eq!(code, 2);
    let (code, _) = chaos(&["run", "--bug", "no_such_bug"]);
    assert_eq!(code, 2);
}

/// The example schedule takes the mailer down for 5 s: the confirmations
/// of the bookings paid in that window fail (each an `email_failed`
/// alert), stay owed, and the email sweep sends them once the mailer is
/// back: no email is lost. Every other fault of the schedule is absorbed
/// too.
#[test]
fn a_schedule_file_runs_its_faults_are_reported_and_a_mailer_outage_is_absorbed() {
    let (code, stdout) = chaos(&[
        "run",
        "--schedule",
        concat!(env!("CARGO_MANIFEST_DIR"), "/schedules/example.toml"),
        "--seed",
        "3",
        "--candidates",
        "1000",
    ]);
    assert_eq!(code, 0, "{stdout}");
    for fault in [
        "redis-spikes",
        "dynamodb-throttles",
        "sqs-paused",
        "execute-resets",
        "mailer-down",
    ] {
        assert!(stdout.contains(fault), "{fault} missing:\n{stdout}");
    }
    assert!(stdout.contains("holds extended"));
    assert!(stdout.contains("every check passed"), "{stdout}");
    // the outage failed sends (alerted), and every PAID booking got its email
    let figure = |what: &str| -> u64 {
        let end = stdout.find(&format!(" {what},")).expect(what);
        let start = stdout[..end].rfind(' ').map_or(0, |i| i + 1);
        stdout[start..end].parse().expect(what)
    };
    assert!(figure("paid") > 0);
    assert_eq!(figure("emails"), figure("paid"), "{stdout}");
    assert!(figure("alerts") > 0, "email_failed alerts: {stdout}");
    for absorbed in [
        "within_caps",
        "count_is_paid",
        "completed_is_paid",
        "unique_ids",
        "one_email_per_paid",
        "total_queue",
    ] {
        assert!(
            stdout.contains(&format!("ok   {absorbed}")),
            "{absorbed}:\n{stdout}"
        );
    }
}
