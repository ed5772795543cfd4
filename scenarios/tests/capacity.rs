//! `scenarios capacity` in tiny steps: the search climbs the ladder until a
//! verdict breaks, bisects the gap, stops by itself within its step budget,
//! writes what it found, and leaves no process behind. The break is made
//! certain by a fleet that cannot go fast: 8 goose users, so the top rate's
//! rush needs bookings answered in well under a millisecond.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use booking_server::config::StackKind;
use scenarios::capacity::{self, CapacityReport, Plan, Stop};
use scenarios::{Profile, Progress};

fn redis_installed() -> bool {
    std::process::Command::new("redis-server")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn plan(ladder: &[f64], bisections: u32) -> Plan {
    Plan {
        ladder: ladder.to_vec(),
        bisections,
        resolution: 0.1,
        min_rate: 25.0,
        max_steps: 6,
        budget_s: 300.0,
        rush_secs: 1.5,
        late_secs: 0.5,
        time_scale: Some(0.005),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_search_finds_a_ceiling_and_stops() {
    let out = std::env::temp_dir().join(format!("capacity-{:016x}", rand::random::<u64>()));
    let base = Profile::load(
        Some("ci"),
        &[
            format!("out={:?}", out.display().to_string()),
            "load.users=8".to_owned(),
        ],
    )
    .unwrap();

    let climb = plan(&[50.0, 200.0, 800.0, 3_200.0, 12_800.0], 1);
    let (report, path) = capacity::run(&base, &climb, &[StackKind::Embedded], Progress::Quiet)
        .await
        .unwrap();
    let s = &report.stacks[0];
    let rates: Vec<(f64, bool)> = s.steps.iter().map(|st| (st.rate, st.held)).collect();
    assert_eq!(s.error, None, "{rates:?}");
    assert_eq!(s.stack, "embedded");
    assert!(s.steps.len() <= climb.max_steps, "{rates:?}");
    assert_eq!(s.stop, Stop::Ceiling, "{rates:?}");
    let held = s.highest_held.expect("50/s holds");
    let broke = s.broke_at.expect("12,800/s on 8 users breaks");
    assert!(held < broke, "{rates:?}");
    assert!(!s.broke.is_empty(), "what broke is named");
    // the climb stopped at the first break, then one bisection between
    let first_break = rates.iter().position(|(_, h)| !h).unwrap();
    assert_eq!(rates.len(), first_break + 2, "one bisection: {rates:?}");
    let (mid, _) = rates[first_break + 1];
    assert!(
        mid > rates[first_break - 1].0 && mid < rates[first_break].0,
        "{rates:?}"
    );
    for st in &s.steps {
        assert_eq!(st.held, st.broken.is_empty(), "{st:?}");
        let this = &st.rush_cpu[0];
        assert!(this.component.starts_with("this process"), "{st:?}");
        assert!(this.cpu_s > 0.0, "the rush used CPU: {st:?}");
        assert!(st.rush_s > 0.0 && st.wall_s >= st.rush_s, "{st:?}");
    }
    // written as returned, and printed
    let back: CapacityReport =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(back, report);
    let table = capacity::table(&report);
    assert!(table.contains("highest sustained"), "{table}");
    eprintln!("{table}");

    if redis_installed() {
        // two steps on Redis: a private redis-server per step, its CPU
        // counted, and stopped with the step
        let short = plan(&[50.0, 12_800.0], 0);
        let (report, _) = capacity::run(&base, &short, &[StackKind::Redis], Progress::Quiet)
            .await
            .unwrap();
        let s = &report.stacks[0];
        assert_eq!(s.error, None, "{s:?}");
        assert_eq!(s.steps.len(), 2, "{s:?}");
        assert_eq!(s.stop, Stop::Ceiling);
        assert_eq!(s.highest_held, Some(50.0), "{s:?}");
        for st in &s.steps {
            let redis = st
                .step_cpu
                .iter()
                .find(|c| c.component == "redis-server")
                .unwrap_or_else(|| panic!("no redis-server CPU: {st:?}"));
            assert_eq!(redis.processes, 1);
        }
    }
    let left: Vec<u32> = scenarios::cpu::children()
        .into_iter()
        .filter(|p| scenarios::cpu::stat_of(*p).is_some())
        .collect();
    assert!(left.is_empty(), "processes left: {left:?}");
    std::fs::remove_dir_all(&out).unwrap();
}
