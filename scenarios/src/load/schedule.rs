//! The arrival schedule: pure, and deterministic for a seed.
//!
//! Intended start times are evenly spaced: the rush's `i`-th arrival at
//! `i / rate`, then the late stream's `j`-th at `rush_secs + j / late_rate`.
//! Evenly spaced (not Poisson) is wrk2's constant-throughput stream: a
//! target rate is met second by second, and any lateness is the system's,
//! not the dice's.
//!
//! For each arrival, in order, one ChaCha8 stream seeded with `seed` draws:
//! whether it repeats an earlier candidate (`duplicate_fraction`), and if so
//! which (uniform over those used so far), else the next unused candidate in
//! the order given; its level (weighted by cap, so demand follows supply);
//! and its retry coin (`retry_fraction`). Payers follow the
//! [`PayerMix`](super::PayerMix) along a low-discrepancy sequence from a
//! seeded start, so every stretch of arrivals has close to the mix's shares.
//!
//! A load spread over several generator processes runs one [`shard`] of the
//! same schedule in each: arrival `k` goes to shard `k % count`, so the
//! shards are disjoint, together exactly the schedule, and each is an evenly
//! spaced stream at `rate / count` interleaved with the others. Every shard
//! computes the whole schedule (from the same seed) and keeps its part;
//! [`fingerprint`] names the whole, so shards of different schedules are
//! told apart.

use std::time::Duration;

use rand::Rng;
use rand::SeedableRng;
use rand::distributions::{Distribution, WeightedIndex};
use rand_chacha::ChaCha8Rng;

use super::{Arrival, LoadError, LoadProfile, PayerKind, Phase};

/// The arrivals of `profile`, in intended-start order.
///
/// `candidates` are used in the order given (the first `n` distinct ones);
/// `levels` are `(level, cap)`, and a level's share of the demand is its
/// share of the seats. Fails if the profile is out of range, no level has
/// seats, or the arrivals need more distinct candidates than given.
pub fn schedule(
    profile: &LoadProfile,
    candidates: &[String],
    levels: &[(String, u32)],
    seed: u64,
) -> Result<Vec<Arrival>, LoadError> {
    profile.validate()?;
    let level_pick = WeightedIndex::new(levels.iter().map(|(_, cap)| u64::from(*cap)))
        .map_err(|_| LoadError::NoLevels)?;
    let mut payers = PayerSequence::new(profile.mix.fractions());
    let times = intended_times(profile);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    payers.start(rng.r#gen());
    let mut fresh = 0usize;
    let mut arrivals = Vec::with_capacity(times.len());
    for (at, phase) in times {
        let repeat = fresh > 0 && rng.gen_bool(profile.duplicate_fraction);
        let candidate = if repeat {
            rng.gen_range(0..fresh)
        } else {
            fresh += 1;
            fresh - 1
        };
        let level = level_pick.sample(&mut rng);
        let payer = payers.next_kind();
        let retry_if_busy = rng.gen_bool(profile.retry_fraction);
        let Some(candidate) = candidates.get(candidate) else {
            continue; // counted below
        };
        arrivals.push(Arrival {
            at,
            candidate: candidate.clone(),
            level: levels[level].0.clone(),
            payer,
            phase,
            retry_if_busy,
        });
    }
    if fresh > candidates.len() {
        return Err(LoadError::TooFewCandidates {
            needed: fresh,
            available: candidates.len(),
        });
    }
    Ok(arrivals)
}

/// Shard `index` of `count` of `arrivals`: the arrivals `k` with
/// `k % count == index`, in order, their intended starts unchanged
/// (nothing for an index not below `count`; `count` 0 is taken as 1).
pub fn shard(arrivals: &[Arrival], index: u32, count: u32) -> Vec<Arrival> {
    let count = count.max(1) as usize;
    if index as usize >= count {
        return Vec::new();
    }
    arrivals
        .iter()
        .skip(index as usize)
        .step_by(count)
        .cloned()
        .collect()
}

/// A name of the whole schedule: 64-bit FNV-1a, hex, over every arrival's
/// intended start, candidate, level, payer, phase and retry coin. Stable
/// across builds and machines (no std hasher), so shards on different
/// machines agree.
pub fn fingerprint(arrivals: &[Arrival]) -> String {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(PRIME);
        }
    };
    eat(&(arrivals.len() as u64).to_le_bytes());
    for a in arrivals {
        eat(&a.at.as_nanos().to_le_bytes());
        for text in [a.candidate.as_str(), a.level.as_str(), a.payer.as_str()] {
            eat(text.as_bytes());
            eat(&[0]);
        }
        eat(&[u8::from(a.phase == Phase::Late), u8::from(a.retry_if_busy)]);
    }
    format!("{h:016x}")
}

/// Payer kinds along a golden-ratio (low-discrepancy) sequence from a seeded
/// start: each kind's share of any run of arrivals is within a few arrivals
/// of its fraction (i.i.d. draws would wander by √n), and the kinds are
/// still interleaved without a visible period.
#[derive(Debug, Clone)]
struct PayerSequence {
    cumulative: [f64; PayerKind::ALL.len()],
    u: f64,
}

/// The golden ratio's fractional part.
const GOLDEN: f64 = 0.618_033_988_749_894_9;

impl PayerSequence {
    fn new(fractions: [f64; PayerKind::ALL.len()]) -> PayerSequence {
        let mut cumulative = [0.0; PayerKind::ALL.len()];
        let mut sum = 0.0;
        for (c, f) in cumulative.iter_mut().zip(fractions) {
            sum += f;
            *c = sum;
        }
        PayerSequence { cumulative, u: 0.0 }
    }

    fn start(&mut self, u: f64) {
        self.u = u.fract();
    }

    fn next_kind(&mut self) -> PayerKind {
        self.u = (self.u + GOLDEN).fract();
        let u = self.u * self.cumulative[7];
        let i = self
            .cumulative
            .iter()
            .position(|c| *c > u)
            .unwrap_or_else(|| {
                // rounding at the top: the last kind with a share
                let last = self.cumulative[7];
                self.cumulative.iter().position(|c| *c >= last).unwrap_or(0)
            });
        PayerKind::ALL[i]
    }
}

/// The intended start times and phases, evenly spaced.
pub fn intended_times(profile: &LoadProfile) -> Vec<(Duration, Phase)> {
    let rush = profile.rush_arrivals();
    let late = profile.late_arrivals();
    let mut times = Vec::with_capacity(rush + late);
    times.extend((0..rush).map(|i| {
        (
            Duration::from_secs_f64(i as f64 / profile.rate),
            Phase::Rush,
        )
    }));
    times.extend((0..late).map(|j| {
        (
            Duration::from_secs_f64(profile.rush_secs + j as f64 / profile.late_rate),
            Phase::Late,
        )
    }));
    times
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashSet};

    use super::*;
    use crate::load::PayerMix;

    fn candidates(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("cand-{i:05}")).collect()
    }

    fn levels() -> Vec<(String, u32)> {
        vec![("gold".into(), 100), ("silver".into(), 300)]
    }

    fn small() -> LoadProfile {
        LoadProfile {
            rate: 100.0,
            rush_secs: 2.0,
            late_rate: 10.0,
            late_secs: 3.0,
            duplicate_fraction: 0.0,
            ..LoadProfile::default()
        }
    }

    #[test]
    fn counts_spacing_and_phases() {
        let a = schedule(&small(), &candidates(1_000), &levels(), 7).unwrap();
        assert_eq!(a.len(), 200 + 30);
        let rush: Vec<&Arrival> = a.iter().filter(|x| x.phase == Phase::Rush).collect();
        assert_eq!(rush.len(), 200);
        for (i, x) in rush.iter().enumerate() {
            assert_eq!(x.at, Duration::from_secs_f64(i as f64 / 100.0));
        }
        let late: Vec<&Arrival> = a.iter().filter(|x| x.phase == Phase::Late).collect();
        assert_eq!(late.len(), 30);
        assert_eq!(late[0].at, Duration::from_secs(2));
        assert_eq!(late[1].at - late[0].at, Duration::from_millis(100));
        assert!(a.windows(2).all(|w| w[0].at <= w[1].at), "in time order");
    }

    #[test]
    fn the_same_seed_gives_the_same_schedule_and_another_seed_another() {
        let c = candidates(1_000);
        let p = LoadProfile {
            duplicate_fraction: 0.2,
            ..small()
        };
        let a = schedule(&p, &c, &levels(), 42).unwrap();
        let b = schedule(&p, &c, &levels(), 42).unwrap();
        assert_eq!(a, b);
        let other = schedule(&p, &c, &levels(), 43).unwrap();
        assert_ne!(a, other);
    }

    #[test]
    fn candidates_are_distinct_unless_repeats_are_asked_for() {
        let c = candidates(230);
        let a = schedule(&small(), &c, &levels(), 1).unwrap();
        let distinct: HashSet<&str> = a.iter().map(|x| x.candidate.as_str()).collect();
        assert_eq!(distinct.len(), a.len());
        assert_eq!(a[0].candidate, "cand-00000", "taken in the order given");

        let p = LoadProfile {
            rate: 1_000.0,
            rush_secs: 10.0,
            late_secs: 0.0,
            duplicate_fraction: 0.25,
            ..small()
        };
        let a = schedule(&p, &candidates(10_000), &levels(), 1).unwrap();
        let distinct: HashSet<&str> = a.iter().map(|x| x.candidate.as_str()).collect();
        let repeats = a.len() - distinct.len();
        let share = repeats as f64 / a.len() as f64;
        assert!((share - 0.25).abs() < 0.02, "{share}");
    }

    #[test]
    fn too_few_candidates_is_an_error() {
        let err = schedule(&small(), &candidates(229), &levels(), 1).unwrap_err();
        match err {
            LoadError::TooFewCandidates { needed, available } => {
                assert_eq!((needed, available), (230, 229));
            }
            other => panic!("{other:?}"),
        }
        // with repeats, fewer candidates do
        let p = LoadProfile {
            duplicate_fraction: 0.5,
            ..small()
        };
        schedule(&p, &candidates(180), &levels(), 1).unwrap();
    }

    #[test]
    fn no_level_with_seats_is_an_error() {
        let err = schedule(&small(), &candidates(300), &[("gold".into(), 0)], 1).unwrap_err();
        assert!(matches!(err, LoadError::NoLevels), "{err:?}");
        assert!(matches!(
            schedule(&small(), &candidates(300), &[], 1),
            Err(LoadError::NoLevels)
        ));
    }

    #[test]
    fn demand_per_level_follows_the_caps() {
        let p = LoadProfile {
            rate: 1_000.0,
            rush_secs: 10.0,
            late_secs: 0.0,
            ..small()
        };
        let a = schedule(&p, &candidates(10_000), &levels(), 3).unwrap();
        let gold = a.iter().filter(|x| x.level == "gold").count() as f64 / a.len() as f64;
        assert!((gold - 0.25).abs() < 0.015, "{gold}");
    }

    #[test]
    fn the_payer_mix_is_honoured_over_ten_thousand_arrivals() {
        let p = LoadProfile {
            rate: 1_000.0,
            rush_secs: 10.0,
            late_secs: 0.0,
            mix: PayerMix {
                pay_now: 0.5,
                pay_late: 0.1,
                abandon: 0.1,
                cancel: 0.1,
                fail: 0.05,
                press_back: 0.05,
                second_tab: 0.05,
                forge_cancel: 0.05,
                forge_success: 0.0,
            },
            ..small()
        };
        let a = schedule(&p, &candidates(10_000), &levels(), 9).unwrap();
        assert_eq!(a.len(), 10_000);
        // any thousand in a row are close to the mix too
        let window = &a[3_000..4_000];
        let pay_now = window
            .iter()
            .filter(|x| x.payer == PayerKind::PayNow)
            .count();
        assert!((490..=510).contains(&pay_now), "{pay_now}");
        let mut seen: BTreeMap<PayerKind, usize> = BTreeMap::new();
        for x in &a {
            *seen.entry(x.payer).or_default() += 1;
        }
        for kind in PayerKind::ALL {
            let share = seen.get(&kind).copied().unwrap_or(0) as f64 / a.len() as f64;
            let want = p.mix.fraction(kind);
            assert!((share - want).abs() < 0.002, "{kind:?}: {share} vs {want}");
        }
        // a kind with no share never appears
        let only = LoadProfile {
            mix: PayerMix {
                pay_now: 1.0,
                pay_late: 0.0,
                abandon: 0.0,
                cancel: 0.0,
                fail: 0.0,
                press_back: 0.0,
                second_tab: 0.0,
                forge_cancel: 0.0,
                forge_success: 0.0,
            },
            ..p
        };
        let a = schedule(&only, &candidates(10_000), &levels(), 9).unwrap();
        assert!(a.iter().all(|x| x.payer == PayerKind::PayNow));
    }

    #[test]
    fn the_retry_coin_follows_the_fraction() {
        let p = LoadProfile {
            rate: 1_000.0,
            rush_secs: 10.0,
            late_secs: 0.0,
            retry_fraction: 0.3,
            ..small()
        };
        let a = schedule(&p, &candidates(10_000), &levels(), 5).unwrap();
        let share = a.iter().filter(|x| x.retry_if_busy).count() as f64 / a.len() as f64;
        assert!((share - 0.3).abs() < 0.015, "{share}");
        let all = schedule(&small(), &candidates(1_000), &levels(), 5).unwrap();
        assert!(all.iter().all(|x| x.retry_if_busy), "retry_fraction 1.0");
    }

    #[test]
    fn shards_are_disjoint_and_together_exactly_the_schedule() {
        let p = LoadProfile {
            duplicate_fraction: 0.2,
            ..small()
        };
        let whole = schedule(&p, &candidates(1_000), &levels(), 42).unwrap();
        assert_eq!(whole.len(), 230);
        for count in [1u32, 2, 3, 7] {
            let shards: Vec<Vec<Arrival>> = (0..count).map(|i| shard(&whole, i, count)).collect();
            let sizes: Vec<usize> = shards.iter().map(Vec::len).collect();
            assert_eq!(
                sizes.iter().sum::<usize>(),
                whole.len(),
                "{count}: {sizes:?}"
            );
            assert!(
                sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1,
                "balanced: {sizes:?}"
            );
            // interleaved back in order, the shards are the schedule
            let mut joined = Vec::new();
            for k in 0..whole.len() {
                let (i, j) = (k % count as usize, k / count as usize);
                joined.push(shards[i][j].clone());
            }
            assert_eq!(joined, whole, "{count} shards");
        }
        // shard 1 of 2 of a 100/s rush: every other arrival, 20 ms apart
        let odd = shard(&whole, 1, 2);
        assert_eq!(odd[0].at, Duration::from_millis(10));
        assert_eq!(odd[1].at - odd[0].at, Duration::from_millis(20));
        assert_eq!(shard(&whole, 0, 0), whole, "0 shards read as 1");
        assert!(shard(&whole, 5, 2).is_empty());
    }

    #[test]
    fn the_fingerprint_names_the_whole_schedule() {
        let c = candidates(1_000);
        let a = schedule(&small(), &c, &levels(), 42).unwrap();
        let b = schedule(&small(), &c, &levels(), 42).unwrap();
        assert_eq!(fingerprint(&a), fingerprint(&b));
        assert_eq!(fingerprint(&a).len(), 16);
        let other_seed = schedule(&small(), &c, &levels(), 43).unwrap();
        assert_ne!(fingerprint(&a), fingerprint(&other_seed));
        let mut one_changed = a.clone();
        one_changed[100].retry_if_busy = !one_changed[100].retry_if_busy;
        assert_ne!(fingerprint(&a), fingerprint(&one_changed));
        assert_ne!(fingerprint(&a), fingerprint(&a[..229]));
        // a fixed value: the same on every machine and build
        assert_eq!(fingerprint(&[]), "a8c7f832281a39c5");
    }

    #[test]
    fn an_invalid_profile_is_refused() {
        let p = LoadProfile {
            rate: -5.0,
            ..small()
        };
        assert!(matches!(
            schedule(&p, &candidates(10), &levels(), 1),
            Err(LoadError::Profile(_))
        ));
    }
}
