//! `scenarios rehearse --mail smtp|ses` through the real binary: the
//! confirmation emails go through a real mail server and the audit counts
//! what it delivered, exactly one per PAID booking, each its own booking
//! and Message-ID, read back here from the server itself (the sink's
//! Maildir in the run folder; moto's SES).
//!
//! - the `ci` profile on the embedded stack with `--mail smtp`
//!   (`scripts/smtp-sink`, which needs the venv of `scripts/setup`);
//! - a short `--stack aws --mail ses` run on the local servers (dynoxide,
//!   fauxqs or moto, moto for S3 and SES, the back office on this
//!   machine's PostgreSQL), shrunk as `booking-aws-local`'s rehearsal test
//!   is for a debug build;
//! - `--mail ses` without `--stack aws`, refused before anything starts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use booking_smtp::Delivered;
use reports::Report;

fn scenarios() -> Command {
    Command::new(env!("CARGO_BIN_EXE_scenarios"))
}

fn temp_out(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "rehearse-mail-{tag}-{:016x}",
        rand::random::<u64>()
    ))
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr (tail)\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .rev()
            .take(40)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n")
    )
}

/// The one run folder under `out` and its report.
fn the_run(out: &Path) -> (PathBuf, Report) {
    let runs: Vec<PathBuf> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let dir = runs[0].clone();
    let report: Report =
        serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap();
    (dir, report)
}

/// PAID bookings at the end, as the report counts them.
fn paid(report: &Report) -> u64 {
    report.sale.paid_by_path.values().sum()
}

/// What the report and the mail server must agree on: one email per PAID
/// booking, each for its own payment with its own Message-ID, and the
/// audit's verdict passed.
fn assert_one_email_per_paid(report: &Report, delivered: &[Delivered], stdout: &str) {
    let paid = paid(report);
    assert!(paid >= 20, "a sale with PAID bookings: {paid}");
    let verdict = report
        .invariants
        .iter()
        .find(|i| i.name == "one_email_per_paid")
        .expect("one_email_per_paid judged");
    assert!(verdict.passed, "{verdict:?}");
    assert_eq!(verdict.figure, 0.0, "{}", verdict.detail);

    let payments: BTreeSet<&str> = delivered
        .iter()
        .map(|d| d.confirmation.payment_id.as_str())
        .collect();
    let ids: BTreeSet<&str> = delivered.iter().map(|d| d.message_id.as_str()).collect();
    assert_eq!(
        (
            delivered.len() as u64,
            payments.len() as u64,
            ids.len() as u64
        ),
        (paid, paid, paid),
        "emails, their payments and their Message-IDs, against {paid} PAID"
    );
    assert!(
        delivered
            .iter()
            .all(|d| d.confirmation.sale.as_str() == report.profile["sale"]),
        "every email is for the rehearsed sale"
    );

    // the report's figures are the server's
    let mail = report
        .sale
        .mail
        .as_ref()
        .expect("the report's mail figures");
    assert_eq!(
        (
            mail.delivered,
            mail.bookings,
            mail.message_ids,
            mail.paid,
            mail.repeats
        ),
        (paid, paid, paid, paid, 0),
        "{mail:?}"
    );
    assert_eq!(report.sale.emails, paid);
    // and the summary printed says so
    assert!(
        stdout.contains(&format!(
            "{} emails delivered for {} PAID bookings",
            fmt(paid),
            fmt(paid)
        )),
        "{stdout}"
    );
}

/// `1,234`.
fn fmt(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The command lines of the running processes that mention `path`.
fn processes_naming(path: &Path) -> Vec<String> {
    let needle = path.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&needle))
        .collect()
}

#[test]
fn the_ci_profile_over_smtp_delivers_one_email_per_paid_booking() {
    let out = temp_out("smtp");
    let run = scenarios()
        .args(["rehearse", "--profile", "ci", "--mail", "smtp", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    println!("{stdout}");
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    let (dir, report) = the_run(&out);
    assert!(report.passed);

    // the sink delivered into the run folder's Maildir, and the report
    // says it read the emails from there
    let maildir = dir.join("maildir");
    let mail = report.sale.mail.as_ref().expect("mail figures");
    assert_eq!(mail.kind, "smtp");
    assert!(
        mail.read_from.contains(&maildir.display().to_string()),
        "{}",
        mail.read_from
    );
    assert!(report.files.iter().any(|f| f == "smtp-sink.log"));
    let delivered = booking_smtp::MaildirLog::new(&maildir).delivered().unwrap();
    assert_one_email_per_paid(&report, &delivered, &stdout);
    assert!(stdout.contains("mail   smtp: "), "{stdout}");

    // the sink was stopped with the rehearsal: no process names its Maildir
    assert_eq!(processes_naming(&maildir), Vec::<String>::new());
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn ses_without_the_aws_stack_is_refused_before_anything_starts() {
    let out = temp_out("refused");
    let run = scenarios()
        .args(["rehearse", "--profile", "ci", "--mail", "ses", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(2), "{}", text(&run));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("--mail ses needs --stack aws"),
        "{}",
        text(&run)
    );
    assert!(!out.exists(), "no run folder for a refused rehearsal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_aws_rehearsal_over_ses_on_moto_delivers_one_email_per_paid_booking() {
    let local = booking_aws_local::LocalAws::start().await.unwrap();
    let e = local.settings().endpoints;
    let postgres = std::env::var("SELLOUT_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "host=127.0.0.1 port=5432 user=postgres dbname=test".to_owned());
    let out = temp_out("ses");
    let set = |k: &str, v: &str| format!("{k}={v:?}");
    let sets = [
        set("stack.aws.sdk.endpoints.dynamodb", &e.dynamodb.unwrap()),
        set(
            "stack.aws.sdk.endpoints.dynamodb_streams",
            &e.dynamodb_streams.unwrap(),
        ),
        set("stack.aws.sdk.endpoints.sqs", &e.sqs.unwrap()),
        set("stack.aws.sdk.endpoints.s3", &e.s3.unwrap()),
        set("stack.aws.sdk.endpoints.ses", &e.ses.clone().unwrap()),
        "stack.aws.sdk.local_credentials=true".to_owned(),
        "stack.aws.sdk.s3_path_style=true".to_owned(),
        "stack.aws.allow_unsupported_settings=true".to_owned(),
        set("stack.postgres_url", &postgres),
        // the ci profile shrunk for a debug build on the local servers
        // (booking-aws-local's rehearsal test): 90 seats, 12 s at 8/s
        "candidates=400".to_owned(),
        "levels.0.cap=20".to_owned(),
        "levels.1.cap=30".to_owned(),
        "levels.2.cap=40".to_owned(),
        "load.rate=8.0".to_owned(),
        "load.rush_secs=12.0".to_owned(),
        "load.late_rate=3.0".to_owned(),
        "load.late_secs=6.0".to_owned(),
        "settle.max_ms=120000".to_owned(),
        "thresholds.rush_rate_min=6.5".to_owned(),
        "thresholds.booking_p99_ms_max=5000.0".to_owned(),
        "thresholds.queue_age_ms_max=30000.0".to_owned(),
    ];
    let mut cmd = scenarios();
    cmd.args([
        "rehearse",
        "--profile",
        "ci",
        "--stack",
        "aws",
        "--mail",
        "ses",
        "--out",
    ])
    .arg(&out);
    for s in &sets {
        cmd.args(["--set", s]);
    }
    let run = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    println!("{stdout}");
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    let (_, report) = the_run(&out);
    assert!(report.passed);
    assert_eq!(report.stack, "aws");

    // read back from moto, from the run's own sender (which the report names)
    let mail = report.sale.mail.as_ref().expect("mail figures");
    assert_eq!(mail.kind, "ses");
    let from = mail
        .read_from
        .rsplit_once("sent from ")
        .map(|(_, f)| f.trim_end_matches(')'))
        .expect("the sender named");
    assert!(
        from.starts_with("rehearsal-") && from.ends_with("@sellout.invalid"),
        "{from}"
    );
    let delivered = booking_aws::SesMotoLog::new(&local.moto.url, from)
        .unwrap()
        .delivered()
        .await
        .unwrap();
    assert_one_email_per_paid(&report, &delivered, &stdout);
    let _ = std::fs::remove_dir_all(&out);
}
