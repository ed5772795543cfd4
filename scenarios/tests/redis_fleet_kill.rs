//! Issue 13's proof: two `booking serve --stack redis` OS processes on a
//! private `redis-server` (AOF on), a short rehearsal, and `kill -9` of one
//! instance mid-rush at five moments, each followed by a restart on the same
//! port: every verdict of the rehearsal holds (connection errors during a
//! kill's gap are counted apart and failed over; nothing else is relaxed).
//!
//! Beside it, the mechanics: kill specs, processes stopped after a run (their
//! ports refuse connections), the ops routes needing the run's token, and a
//! failed start cleaning up what it started.
//!
//! The tests run the `booking` binary of this build (`target/<profile>/booking`).
//! `scripts/test` (`cargo test --workspace`) builds it before any test runs;
//! alone, build it first: `cargo build -p booking-server --bin booking`.
//! `redis-server` comes from `scripts/setup`; these tests never skip.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use scenarios::kills::{self, KillSpecError, parse_kill};
use scenarios::processes::{self, ProcessError, ProcessFleet};
use scenarios::rehearse::RunPlace;
use scenarios::{Profile, Progress};

/// The kill moments: shares of the rush's arrivals sent.
const MOMENTS: [f64; 5] = [0.1, 0.3, 0.5, 0.7, 0.9];
/// How long the killed instance stays down each time.
const DOWN_MS: u64 = 300;
/// The test's rush: the CI profile's 200 bookings/s, for long enough that
/// five kills (each down [`DOWN_MS`] plus a debug build's start) fit in it.
const RUSH_SECS: f64 = 10.0;

fn out_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("{name}-{:016x}", rand::random::<u64>()))
}

/// The newest modification time of the files under `dir` that a build
/// reads (`.rs`, `.lua`, `.toml`; no tests, benches or examples).
fn newest_source(dir: &Path, newest: &mut Option<(SystemTime, PathBuf)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            let skip = ["target", "tests", "benches", "examples"];
            if path
                .file_name()
                .is_some_and(|n| !skip.iter().any(|s| n == *s))
            {
                newest_source(&path, newest);
            }
            continue;
        }
        let source = path
            .extension()
            .is_some_and(|x| x == "rs" || x == "toml" || x == "lua");
        if let (true, Ok(m)) = (source, e.metadata().and_then(|m| m.modified()))
            && newest.as_ref().is_none_or(|(t, _)| m > *t)
        {
            *newest = Some((m, path));
        }
    }
}

/// The crate folders `crate_dir` depends on by path (normal dependencies,
/// directly or through `[workspace.dependencies]`), itself included,
/// transitively: what the `booking` binary is built from in this workspace.
fn path_crates(crate_dir: &Path, workspace: &toml::Table, seen: &mut Vec<PathBuf>) {
    let Ok(dir) = crate_dir.canonicalize() else {
        return;
    };
    if seen.contains(&dir) {
        return;
    }
    seen.push(dir.clone());
    let manifest: toml::Table = std::fs::read_to_string(dir.join("Cargo.toml"))
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or_default();
    let Some(deps) = manifest.get("dependencies").and_then(|d| d.as_table()) else {
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (name, spec) in deps {
        let local = spec
            .get("path")
            .and_then(|p| p.as_str())
            .map(|p| dir.join(p));
        let inherited = spec
            .get("workspace")
            .and_then(|w| w.as_bool())
            .filter(|w| *w)
            .and_then(|_| workspace.get(name))
            .and_then(|d| d.get("path"))
            .and_then(|p| p.as_str())
            .map(|p| root.join(p));
        if let Some(path) = local.or(inherited) {
            path_crates(&path, workspace, seen);
        }
    }
}

/// The `booking` binary of this build; fails, saying how to build it, if it
/// is missing or older than a source of a crate it is built from.
fn booking_binary() -> PathBuf {
    let bin = processes::default_booking_bin().unwrap();
    let built = std::fs::metadata(&bin)
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| {
            panic!(
                "{} is missing: run `cargo build -p booking-server --bin booking` (scripts/test builds it)",
                bin.display()
            )
        });
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let workspace: toml::Table = std::fs::read_to_string(root.join("Cargo.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let workspace_deps = workspace
        .get("workspace")
        .and_then(|w| w.get("dependencies"))
        .and_then(|d| d.as_table())
        .cloned()
        .unwrap_or_default();
    let mut crates = Vec::new();
    path_crates(
        &root.join("system/booking-server"),
        &workspace_deps,
        &mut crates,
    );
    assert!(
        crates.len() > 5,
        "booking-server's path dependencies: {crates:?}"
    );
    let mut newest = None;
    for dir in &crates {
        newest_source(dir, &mut newest);
    }
    if let Some((t, path)) = newest {
        assert!(
            t <= built,
            "{} is older than {}: run `cargo build -p booking-server --bin booking`",
            bin.display(),
            path.display()
        );
    }
    bin
}

fn refuses(port: u16) -> bool {
    // a killed process's socket may take a moment to close
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let refused = TcpStream::connect_timeout(
            &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            Duration::from_millis(200),
        )
        .is_err();
        if refused || Instant::now() > until {
            return refused;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn profile(out: &Path, extra: &[String]) -> Profile {
    let mut sets = vec![
        format!("out={:?}", out.display().to_string()),
        "fleet=\"processes\"".to_owned(),
        "stack.kind=\"redis\"".to_owned(),
        "instances=2".to_owned(),
    ];
    sets.extend_from_slice(extra);
    Profile::load(Some("ci"), &sets).unwrap()
}

#[test]
fn kill_specs_are_parsed_and_refused_clearly() {
    let k = parse_kill("1@rush=0.4,down_ms=1000").unwrap();
    assert_eq!(
        (k.instance, k.rush, k.down),
        (1, 0.4, Duration::from_secs(1))
    );
    assert_eq!(k.at_arrivals(1_200), 480);
    assert!(matches!(
        parse_kill("1@rush=1.4"),
        Err(KillSpecError::Value { .. })
    ));
    assert!(matches!(parse_kill("1"), Err(KillSpecError::Shape(_))));
    let e = parse_kill("x@rush=0.4").unwrap_err().to_string();
    assert!(e.contains("instance"), "{e}");
    // the profile refuses a kill of an instance the fleet lacks
    let out = out_dir("kill-spec");
    let e = Profile::load(
        Some("ci"),
        &[
            format!("out={:?}", out.display().to_string()),
            "fleet=\"processes\"".into(),
            "stack.kind=\"redis\"".into(),
            "kills=[\"5@rush=0.5\"]".into(),
        ],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("instance 5 of 2"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_booking_binary_is_named_with_how_to_build_it() {
    let out = out_dir("no-binary");
    let p = profile(&out, &["booking_bin=\"/nonexistent/booking\"".into()]);
    let err = ProcessFleet::start(&p, &out).await.unwrap_err();
    assert!(matches!(err, ProcessError::NoBinary(_)), "{err}");
    assert!(
        err.to_string()
            .contains("cargo build -p booking-server --bin booking"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// A `booking` that copies its config where the test can read it and exits:
/// the start fails, and the private `redis-server` it had started is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_start_stops_what_it_started() {
    use std::os::unix::fs::PermissionsExt;
    let out = out_dir("failed-start");
    std::fs::create_dir_all(&out).unwrap();
    let seen = out.join("seen.toml");
    let fake = out.join("booking");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\n[ \"$1 $2\" = \"serve --config\" ] || exit 9\ncp \"$3\" {:?}\necho 'fake booking: refusing to start' >&2\nexit 3\n",
            seen.display().to_string()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let p = profile(
        &out,
        &[format!("booking_bin={:?}", fake.display().to_string())],
    );
    let err = ProcessFleet::start(&p, &out).await.unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, ProcessError::Instance { index: 0, .. }),
        "{text}"
    );
    assert!(text.contains("exited"), "{text}");
    assert!(
        text.contains("fake booking: refusing to start"),
        "the log's tail: {text}"
    );

    // what the instance was given: the sale on the private Redis, with a token
    let config = booking_server::ServerConfig::from_file(&seen).unwrap();
    assert_eq!(config.stack.kind, booking_server::StackKind::Redis);
    assert_eq!(config.admin_token.as_deref().map(str::len), Some(32));
    assert!(config.key_prefix.starts_with("rehearse-"));
    assert_eq!(
        config.public_url,
        format!("http://127.0.0.1:{}", config.listen.port())
    );
    let redis_port: u16 = config
        .stack
        .redis_url
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        refuses(redis_port),
        "the private redis-server on {redis_port} still answers"
    );
    assert!(out.join("redis.log").is_file());
    std::fs::remove_dir_all(&out).unwrap();
}

/// THE test: five kill moments of instance 0 in one rehearsal on two
/// processes; every verdict holds, the kills happened, and afterwards
/// nothing listens.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_of_an_instance_mid_rush_loses_nothing() {
    let bin = booking_binary();
    let out = out_dir("redis-fleet-kill");
    let specs: Vec<String> = MOMENTS
        .iter()
        .map(|m| format!("\"0@rush={m},down_ms={DOWN_MS}\""))
        .collect();
    let p = profile(
        &out,
        &[
            format!("booking_bin={:?}", bin.display().to_string()),
            format!("load.rush_secs={RUSH_SECS}"),
            format!("kills=[{}]", specs.join(", ")),
        ],
    );
    let started = Instant::now();
    let place = RunPlace::new(&p).unwrap();
    let (fleet_processes, fleet) = ProcessFleet::start(&p, &place.dir).await.unwrap();
    let ports = fleet_processes.ports();
    let redis_port = fleet_processes.redis_port().await.unwrap();
    assert_eq!(ports.len(), 2);
    assert_eq!(
        fleet_processes.ops_index(),
        1,
        "the ops go to the instance no kill names"
    );

    // the ops routes are on the admin listener only, and need the run's token
    let status = reqwest::get(format!("{}/ops/status", fleet_processes.urls()[1]))
        .await
        .unwrap()
        .status();
    assert_eq!(status.as_u16(), 404, "no ops route on the public listener");
    let status = reqwest::get(format!("{}/ops/status", fleet_processes.admin_urls()[1]))
        .await
        .unwrap()
        .status();
    assert_eq!(status.as_u16(), 401);

    let outcome = processes::run(fleet_processes, fleet, &p, Progress::Quiet, place).await;
    // stopped, whatever the outcome
    for port in ports.iter().copied().chain([redis_port]) {
        assert!(refuses(port), "port {port} still answers after the run");
    }
    let outcome = outcome.unwrap();
    let report = &outcome.report;
    let failed: Vec<_> = report.failed().collect();
    assert!(
        failed.is_empty(),
        "failed in {}: {failed:#?}\nfaults: {:#?}",
        outcome.dir.display(),
        report.faults
    );
    for name in [
        kills::KILLS_DONE,
        kills::CONNECTION_ERRORS_OUTSIDE_KILLS,
        "gateway_completed_have_paid_booking",
        "ledger_matches_records",
        "one_email_per_paid",
        "approved_payers_told_paid",
        "sale_settled",
    ] {
        assert!(
            report.invariant(name).is_some_and(|v| v.passed),
            "{name} missing or failed"
        );
    }
    assert_eq!(report.stack, "redis-processes");
    assert_eq!(report.faults.len(), MOMENTS.len(), "{:#?}", report.faults);
    let rush_arrivals = p.load.rush_arrivals() as u64;
    for (fault, moment) in report.faults.iter().zip(MOMENTS) {
        assert_eq!(fault.target, "instance-0");
        assert!(
            fault.effect.contains(&format!(
                "due at {}",
                (moment * rush_arrivals as f64).round() as u64
            )),
            "{fault:?}"
        );
        assert!(
            fault.duration_ms >= DOWN_MS,
            "down at least its down time: {fault:?}"
        );
    }
    // each kill was seen by the load (and failed over), only inside its window
    assert!(
        report.load.connection_errors >= MOMENTS.len() as u64,
        "{:?}",
        report.load
    );
    assert_eq!(report.load.server_errors, 0);
    let paid: u64 = report.sale.paid_by_path.values().sum();
    assert!(paid > 0, "{:?}", report.sale);
    // one email per PAID booking across the fleet: a kill between a send
    // and its mark may add one repeat, sent `recovered` by the email sweep
    // (what `one_email_per_paid` allows and checks); none is lost
    assert!(
        report.sale.emails >= paid,
        "{} emails for {paid} PAID bookings",
        report.sale.emails
    );
    // the instance's log shows each start
    let log = std::fs::read_to_string(outcome.dir.join("instance-0.log")).unwrap();
    assert_eq!(
        log.matches("--- sellout: instance 0 start #").count(),
        MOMENTS.len() + 1
    );
    assert!(report.files.iter().any(|f| f == "instance-1.log"));
    eprintln!(
        "five kills: {} connection errors, whole test {:.1} s",
        report.load.connection_errors,
        started.elapsed().as_secs_f64()
    );
    std::fs::remove_dir_all(&out).unwrap();
}
