//! `--shard INDEX/COUNT`: two `scenarios rehearse` processes, each one
//! shard of the same schedule, against one running deployment (an
//! in-process fleet reached as if remote, as in `rehearse_target.rs`);
//! `reports merge` joins their reports into the whole run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use scenarios::fleet::Fleet;
use scenarios::{Profile, load, profile};

/// A child process killed if the test ends without waiting for it.
struct Shard {
    child: Child,
    stderr: mpsc::Receiver<String>,
}

impl Drop for Shard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `scenarios rehearse --profile ci --target … --shard INDEX/2`, its stderr
/// lines forwarded (and drained, so the child never blocks on them).
fn start_shard(index: u32, fleet: &Fleet, out: &Path) -> Shard {
    let mut child = Command::new(env!("CARGO_BIN_EXE_scenarios"))
        .args(["rehearse", "--profile", "ci", "--target"])
        .arg(&fleet.booking_urls[0])
        .arg("--target-admin")
        .arg(&fleet.admin_urls[0])
        .arg("--target-gateway")
        .arg(&fleet.gateway_url)
        .arg("--out")
        .arg(out)
        .arg("--shard")
        .arg(format!("{index}/2"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("[shard {index}] {line}");
            let _ = tx.send(line);
        }
    });
    Shard { child, stderr: rx }
}

/// Waits (bounded) for the shard to exit; its exit code.
async fn finish(mut shard: Shard) -> Option<i32> {
    for _ in 0..600 {
        if let Some(status) = shard.child.try_wait().unwrap() {
            return status.code();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("the shard did not finish within 5 minutes");
}

/// The run folder of shard `index` under `out`.
fn run_dir(out: &Path, index: u32) -> PathBuf {
    let suffix = format!("-shard{index}of2");
    std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(&suffix))
        .unwrap_or_else(|| panic!("no run folder of shard {index} in {}", out.display()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_shards_against_one_fleet_merge_into_the_whole_run() {
    let out = std::env::temp_dir().join(format!("rehearse-shards-{:016x}", rand::random::<u64>()));
    let out_set = format!("out={:?}", out.display().to_string());
    let deployment = Profile::load(Some("ci"), std::slice::from_ref(&out_set)).unwrap();
    let fleet = Fleet::start(&deployment).await.unwrap();

    // shard 1 first: it must be watching the sale before shard 0 opens it
    let waiting = start_shard(1, &fleet, &out);
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let line = waiting
            .stderr
            .recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
            .expect("shard 1 never said it was waiting for the sale to open");
        if line.contains("waiting for shard 0 to open the sale") {
            break;
        }
    }
    let coordinator = start_shard(0, &fleet, &out);
    let (one, zero) = tokio::join!(finish(waiting), finish(coordinator));

    let shards = [
        reports::load_report(&run_dir(&out, 0)).unwrap(),
        reports::load_report(&run_dir(&out, 1)).unwrap(),
    ];
    for (code, s) in [zero, one].iter().zip(&shards) {
        let failed: Vec<_> = s.failed().collect();
        assert_eq!(*code, Some(0), "{}: {failed:#?}", s.run_id);
    }
    // the whole schedule, as an unsharded run would have it
    let p = Profile::load(Some("ci"), &[]).unwrap();
    let candidates = profile::candidates(p.seed, p.candidates);
    let whole = load::schedule(&p.load, &candidates, &p.level_caps(), p.seed).unwrap();
    let total = whole.len() as u64;
    for (i, s) in shards.iter().enumerate() {
        let info = s.shard.as_ref().unwrap();
        assert_eq!(info.index as usize, i);
        assert_eq!(info.arrivals_total, total);
        assert_eq!(info.schedule, load::schedule::fingerprint(&whole));
        let mine = load::schedule::shard(&whole, info.index, 2).len() as u64;
        assert_eq!(s.load.arrivals_scheduled, mine, "shard {i}");
        assert_eq!(s.load.arrivals_started, mine, "shard {i}");
    }
    // shard 0 alone judged the sale; shard 1 only its share of the load
    assert!(shards[0].invariant("ledger_matches_records").is_some());
    assert!(shards[0].invariant("sale_settled").is_some());
    assert!(shards[1].invariant("ledger_matches_records").is_none());
    assert!(shards[1].invariant("rush_rate").is_some());
    let zeros: Vec<f64> = shards
        .iter()
        .map(|s| s.shard.as_ref().unwrap().zero_unix_ms)
        .collect();
    assert!(
        (zeros[0] - zeros[1]).abs() < 1_000.0,
        "the schedules started together: {zeros:?}"
    );

    let merged = reports::merge(&shards).unwrap();
    let failed: Vec<_> = merged.failed().collect();
    assert!(failed.is_empty(), "failed: {failed:#?}");
    assert!(merged.passed);
    // every arrival of the schedule exactly once
    let l = &merged.load;
    assert_eq!(l.arrivals_scheduled, total);
    assert_eq!(l.arrivals_started, total);
    assert_eq!(l.arrivals_dropped, 0);
    let booking = l.transactions.iter().find(|t| t.name == "booking").unwrap();
    assert_eq!(booking.count, total, "one booking latency per arrival");
    assert_eq!(l.rush_started, p.load.rush_arrivals() as u64);
    let rate = merged.invariant("rush_rate").unwrap();
    assert_eq!(
        rate.threshold, p.thresholds.rush_rate_min,
        "the whole run's bound"
    );
    assert!(rate.figure > 0.9 * p.load.rate, "{rate:?}");
    for name in [
        "ledger_matches_records",
        "gateway_completed_have_paid_booking",
        "at_cap_when_demand_exceeded",
        "never_above_cap_during_run",
        "sale_settled",
        "booking_p99_ms",
        "server_error_pct",
    ] {
        assert!(merged.invariant(name).is_some(), "{name} missing");
    }
    // every hold the shards were given is a payment at the gateway, once
    let ledger = fleet.gateway_ledger().await.unwrap().unwrap();
    assert_eq!(merged.sale.holds_created, ledger.payments.len() as u64);
    let paid: u64 = merged.sale.paid_by_path.values().sum();
    let records = fleet
        .first()
        .unwrap()
        .stack
        .records
        .scan_all()
        .await
        .unwrap();
    assert_eq!(records.len() as u64, paid);
    assert!(!merged.timeline.is_empty());

    let written = reports::write_run(&out.join("merged"), &merged).unwrap();
    assert!(written.html.is_file() && written.markdown.is_file());
    fleet.stop().await;
    std::fs::remove_dir_all(&out).unwrap();
}
