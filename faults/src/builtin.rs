//! The built-in rehearsal schedules (`scenarios rehearse --faults NAME`,
//! `chaos matrix --rehearsal`), compiled in from `schedules/rehearsal/`.
//! Their times count from the start of the load; all but `headline` are
//! written for the short `ci` profile (a 6 s rush, then 8 s of late
//! arrivals), `headline` for the default profile (a 25 s rush at 2,000
//! bookings/s).

use std::path::Path;

use crate::schedule::{Schedule, ScheduleError};

/// `(name, TOML)` of every built-in rehearsal schedule.
pub const REHEARSAL: &[(&str, &str)] = &[
    (
        "headline",
        include_str!("../schedules/rehearsal/headline.toml"),
    ),
    (
        "kill-after-admission",
        include_str!("../schedules/rehearsal/kill-after-admission.toml"),
    ),
    (
        "kill-after-create",
        include_str!("../schedules/rehearsal/kill-after-create.toml"),
    ),
    (
        "kill-after-enqueue",
        include_str!("../schedules/rehearsal/kill-after-enqueue.toml"),
    ),
    (
        "kill-during-execute",
        include_str!("../schedules/rehearsal/kill-during-execute.toml"),
    ),
    (
        "kill-after-paid",
        include_str!("../schedules/rehearsal/kill-after-paid.toml"),
    ),
    (
        "redis-pause",
        include_str!("../schedules/rehearsal/redis-pause.toml"),
    ),
    (
        "redis-restart",
        include_str!("../schedules/rehearsal/redis-restart.toml"),
    ),
    (
        "redis-restart-instance-0-restarted",
        include_str!("../schedules/rehearsal/redis-restart-instance-0-restarted.toml"),
    ),
    (
        "instance-pause-restart",
        include_str!("../schedules/rehearsal/instance-pause-restart.toml"),
    ),
    (
        "link-trouble",
        include_str!("../schedules/rehearsal/link-trouble.toml"),
    ),
    (
        "redis-link-blackhole",
        include_str!("../schedules/rehearsal/redis-link-blackhole.toml"),
    ),
    (
        "ports-and-gateway",
        include_str!("../schedules/rehearsal/ports-and-gateway.toml"),
    ),
];

/// The names of the built-in rehearsal schedules.
pub fn rehearsal_names() -> Vec<&'static str> {
    REHEARSAL.iter().map(|(n, _)| *n).collect()
}

/// A built-in rehearsal schedule by name, or a TOML file: `(name,
/// schedule)`, the name being the file's stem for a file.
pub fn rehearsal(name_or_file: &str) -> Result<(String, Schedule), ScheduleError> {
    if let Some((name, text)) = REHEARSAL.iter().find(|(n, _)| *n == name_or_file) {
        return Ok(((*name).to_owned(), Schedule::from_toml(text)?));
    }
    let path = Path::new(name_or_file);
    if !path.exists() {
        return Err(ScheduleError::Io {
            path: name_or_file.to_owned(),
            why: format!(
                "neither a built-in rehearsal schedule ({}) nor a file",
                rehearsal_names().join(", ")
            ),
        });
    }
    let schedule = Schedule::load(path)?;
    let name = path.file_stem().map_or_else(
        || name_or_file.to_owned(),
        |s| s.to_string_lossy().into_owned(),
    );
    Ok((name, schedule))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::schedule::{FaultKind, KillPoint, Scope, Target};

    #[test]
    fn every_built_in_schedule_is_valid_and_describes_itself() {
        for (name, _) in REHEARSAL {
            let (n, s) = rehearsal(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(n, *name);
            assert!(s.description.is_some(), "{name} has no description");
            assert!(!s.faults.is_empty(), "{name} has no fault");
        }
        assert!(rehearsal("no-such-schedule").is_err());
    }

    #[test]
    fn each_kill_point_has_its_own_schedule() {
        for p in KillPoint::ALL {
            let (_, s) = rehearsal(&format!("kill-{}", p.name().replace('_', "-"))).unwrap();
            assert_eq!(s.faults.len(), 1);
            assert_eq!(s.faults[0].kind, FaultKind::Kill { point: Some(p) });
        }
    }

    #[test]
    fn the_headline_is_the_issues_headline() {
        let (_, s) = rehearsal("headline").unwrap();
        let by = |t: Target| s.faults.iter().find(|f| f.target == t).unwrap();
        let kill = by(Target::Instance);
        assert_eq!((kill.start_ms, kill.duration_ms), (10_000, 5_000));
        let pause = by(Target::RedisServer);
        assert_eq!(
            (pause.start_ms, pause.duration_ms, pause.kind),
            (20_000, 2_000, FaultKind::Pause)
        );
        let slow = by(Target::GatewayLink);
        assert_eq!(slow.duration_ms, 5_000);
        assert!(s.scopes().contains(&Scope::Process));
    }
}
