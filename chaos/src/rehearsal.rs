//! The zoo's rehearsal rows: a short rehearsal of the in-process fleet over
//! HTTP (the `ci` profile and the case's overrides) with one bug switched
//! on, judged by the audit and the rehearsal's verdicts.

use std::path::Path;
use std::time::Instant;

use booking::Bug;
use scenarios::{Profile, Progress};

use crate::netem::DelayProxy;
use crate::zoo::{Judged, ZooCase, ZooRow, row};

/// A Redis to rehearse on behind a delay proxy: its URL, and what keeps it
/// alive (the proxy, and a private server if one had to be started).
async fn delayed_redis(
    one_way_ms: u64,
) -> Result<(String, (DelayProxy, Option<scenarios::fleet::RedisProcess>)), String> {
    let (url, process) = scenarios::fleet::ensure_redis(&Profile::default().stack.redis_url)
        .map_err(|e| e.to_string())?;
    let hostport =
        scenarios::fleet::redis_host_port(&url).ok_or_else(|| format!("not a redis URL: {url}"))?;
    let upstream = tokio::net::lookup_host(&hostport)
        .await
        .map_err(|e| format!("{hostport}: {e}"))?
        .next()
        .ok_or_else(|| format!("{hostport}: no address"))?;
    let proxy = DelayProxy::start(upstream, std::time::Duration::from_millis(one_way_ms))
        .await
        .map_err(|e| format!("delay proxy: {e}"))?;
    Ok((format!("redis://{}", proxy.addr), (proxy, process)))
}

/// The profile the zoo rehearses a case on: `ci`, the case's overrides, the
/// run folder under `out`, and `bugs`.
pub fn profile(sets: &[String], bugs: &[Bug], out: &Path) -> Result<Profile, String> {
    let mut all = vec![format!("out={:?}", out.display().to_string())];
    all.extend(sets.iter().cloned());
    let mut profile = Profile::load(Some("ci"), &all).map_err(|e| e.to_string())?;
    profile.bugs = bugs.to_vec();
    Ok(profile)
}

/// One rehearsal with `bugs`, judged.
pub async fn run_rehearsal(sets: &[String], bugs: &[Bug], out: &Path) -> Result<Judged, String> {
    let profile = profile(sets, bugs, out)?;
    let outcome = scenarios::rehearse(&profile, Progress::Quiet)
        .await
        .map_err(|e| e.to_string())?;
    let report = &outcome.report;
    tracing::info!(bugs = ?bugs, passed = report.passed, run = %report.run_id, "zoo rehearsal");
    Ok(Judged {
        failed: report
            .failed()
            .map(|i| (i.name.clone(), i.detail.clone()))
            .collect(),
        passed: report.passed,
        virtual_secs: None,
    })
}

/// A rehearsal case: the bugged run, then (with `control`) the same run
/// without the bug. With `redis_one_way_ms`, Redis (the machine's, or a
/// private `redis-server`) is reached through a [`DelayProxy`].
pub async fn run_rehearsal_case(
    case: &ZooCase,
    sets: &[String],
    redis_one_way_ms: Option<u64>,
    out: &Path,
    control: bool,
) -> ZooRow {
    let started = Instant::now();
    let mut sets = sets.to_vec();
    let _redis = match redis_one_way_ms {
        None => None,
        Some(ms) => match delayed_redis(ms).await {
            Ok((url, kept)) => {
                sets.push(format!("stack.redis_url={url:?}"));
                Some(kept)
            }
            Err(e) => return row(case, Err(e), 0.0, None),
        },
    };
    let sets = &sets[..];
    let bugged = run_rehearsal(sets, &[case.bug], out).await;
    let secs = started.elapsed().as_secs_f64();
    let control_passed = if control {
        Some(
            run_rehearsal(sets, &[], out)
                .await
                .map(|j| j.passed)
                .unwrap_or(false),
        )
    } else {
        None
    };
    row(case, bugged, secs, control_passed)
}
