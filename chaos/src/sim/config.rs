//! What a simulated sale is: [`SimConfig`] (the article's sale by default),
//! and the checks that it can describe one.

use std::time::Duration;

use booking::{Bugs, Settings};
use serde::{Deserialize, Serialize};

use super::plan::{LoadShape, PayerMix};
use super::report::SimError;
use crate::schedule::Schedule;

/// The epoch the virtual clock starts at (ms).
pub const EPOCH_MS: u64 = 1_800_000_000_000;

/// The article's seats: six levels summing to 20,700.
pub const ARTICLE_CAPS: [u32; 6] = [6_000, 5_000, 4_000, 3_000, 1_700, 1_000];

/// The article's candidates.
pub const ARTICLE_CANDIDATES: usize = 40_000;

/// One simulated sale.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimConfig {
    /// The seed: arrivals, payers, fault coins.
    pub seed: u64,
    /// The admissions' shape.
    pub load: LoadShape,
    /// Seats per level (level `i` is named `level-{i+1}`).
    pub caps: Vec<u32>,
    /// How payers behave.
    pub payers: PayerMix,
    /// The faults.
    pub schedule: Schedule,
    /// The bug zoo's switches (none: production).
    pub bugs: Bugs,
    /// The system's numbers (the article's by default: 10-minute holds,
    /// 20-second sweeps).
    pub settings: Settings,
    /// Worker instances.
    pub workers: usize,
    /// Reconciler instances (one leads; the others wait for the lock).
    pub reconcilers: usize,
    /// API instances, each with its own status writer (`sim-api-{i}`, the
    /// name faults' `instances` use) poked after every admission and undo.
    pub api_instances: usize,
    /// How often the TTL service deletes what expired a sweep window ago.
    pub ttl_every: Duration,
    /// How long the gateway's token grant and refresh calls take to answer.
    /// Every API instance takes the fleet's token through its own
    /// `TokenManager` before each payment call, so the burst's first
    /// requests on every instance wait for the first grant.
    #[serde(default = "default_grant_latency")]
    pub grant_latency: Duration,
    /// A sale not quiescent after this much virtual time fails.
    pub virtual_limit: Duration,
}

impl SimConfig {
    /// The article's sale: 40,000 candidates, 20,700 seats over six levels,
    /// 2,000 admissions/s for 25 s, then late arrivals over 20 minutes; no
    /// faults, no bugs.
    pub fn article(seed: u64) -> SimConfig {
        SimConfig::scaled(seed, ARTICLE_CANDIDATES)
    }

    /// The article's sale with `candidates` candidates: seats, burst and
    /// late arrivals scale with them (the rate stays 2,000/s).
    pub fn scaled(seed: u64, candidates: usize) -> SimConfig {
        let ratio = candidates as f64 / ARTICLE_CANDIDATES as f64;
        let caps = ARTICLE_CAPS
            .iter()
            .map(|c| ((f64::from(*c) * ratio).round() as u32).max(1))
            .collect();
        SimConfig {
            seed,
            load: LoadShape {
                candidates,
                burst_requests: (candidates as f64 * 1.25).round() as usize,
                burst_rate_per_s: 2_000,
                late_share: 0.05,
                late_window_ms: 20 * 60 * 1_000,
                demand: vec![0.24, 0.2, 0.18, 0.16, 0.12, 0.1],
            },
            caps,
            payers: PayerMix::default(),
            schedule: Schedule::default(),
            bugs: Bugs::none(),
            settings: Settings::default(),
            workers: 2,
            reconcilers: 2,
            api_instances: 2,
            ttl_every: Duration::from_secs(10),
            grant_latency: default_grant_latency(),
            virtual_limit: Duration::from_secs(8 * 60 * 60),
        }
    }
}

fn default_grant_latency() -> Duration {
    Duration::from_millis(300)
}

pub(super) fn validate(config: &SimConfig) -> Result<(), SimError> {
    let bad = |why: &str| Err(SimError::Invalid(why.to_owned()));
    if config.caps.is_empty() {
        return bad("no level");
    }
    if config.load.demand.len() != config.caps.len() {
        return bad("one demand weight per level");
    }
    if config.load.candidates == 0 {
        return bad("no candidate");
    }
    if config.workers == 0 || config.reconcilers == 0 {
        return bad("at least one worker and one reconciler");
    }
    if config.ttl_every.is_zero() || config.settings.sweep_interval.is_zero() {
        return bad("zero intervals");
    }
    config
        .schedule
        .validate()
        .map_err(|e| SimError::Invalid(e.to_string()))
}
