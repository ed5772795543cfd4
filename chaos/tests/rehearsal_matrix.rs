#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `chaos matrix --rehearsal --profile ci` as CI runs it: every short
//! built-in rehearsal schedule on a process fleet of three `booking serve`
//! instances over a private redis-server (the `booking` binary of this
//! build), each judged by the full audit and the fault verdicts; and the
//! windows really were carried out.

use std::process::Command;

#[test]
fn the_ci_rehearsal_matrix_passes_and_every_fault_fired() {
    let out = std::env::temp_dir()
        .join(format!("chaos-rmatrix-{:016x}", rand::random::<u64>()))
        .display()
        .to_string();
    let run = Command::new(env!("CARGO_BIN_EXE_chaos"))
        .args(["matrix", "--rehearsal", "--profile", "ci", "--out", &out])
        .output()
        .expect("chaos runs");
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    println!("{stdout}");
    eprintln!("{}", String::from_utf8_lossy(&run.stderr));
    assert_eq!(run.status.code(), Some(0), "{stdout}");
    let n = chaos::rehearsal_matrix::CI_SCHEDULES.len();
    assert!(
        stdout.contains(&format!("{n} of {n} rehearsals passed")),
        "{stdout}"
    );
    let runs: Vec<serde_json::Value> = serde_json::from_str(
        &std::fs::read_to_string(format!("{out}/rehearsal-matrix.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(runs.len(), n);
    // each run's report: its faults fired, were undone, and its verdicts
    // include the fault verdicts
    for r in &runs {
        let dir = r["run"].as_str().unwrap();
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(format!("{dir}/report.json")).unwrap())
                .unwrap();
        let schedule = r["schedule"].as_str().unwrap();
        let faults = report["faults"].as_array().unwrap();
        assert!(!faults.is_empty(), "{schedule}: no fault in the report");
        for f in faults {
            assert!(
                f["fired"].as_u64().unwrap_or(0) >= 1,
                "{schedule}: {f} never fired"
            );
            assert!(f["error"].is_null(), "{schedule}: {f}");
        }
        let names: Vec<&str> = report["invariants"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap())
            .collect();
        for must in [
            "faults_done",
            "server_errors_outside_faults",
            "ledger_matches_records",
            "one_email_per_paid",
        ] {
            assert!(names.contains(&must), "{schedule}: no {must}");
        }
        assert!(
            !report["relaxed"].as_array().unwrap().is_empty(),
            "{schedule}: its relaxed bounds are in the report"
        );
    }
    let _ = std::fs::remove_dir_all(&out);
}
