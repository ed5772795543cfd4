//! The sale's shape, as pure functions of a seed: who arrives when and at
//! which level ([`plan_arrivals`]), and what each payer does
//! ([`PayerMix::draw`]). Nothing here touches the system.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// The admissions' shape (the article's: 40,000 candidates, 2,000
/// admissions/s for 25 s, then late arrivals).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadShape {
    /// Candidates on the list.
    pub candidates: usize,
    /// Requests in the burst (first attempts and repeats).
    pub burst_requests: usize,
    /// Burst requests per second.
    pub burst_rate_per_s: u32,
    /// Share of candidates who arrive only after the burst, 0..=1.
    pub late_share: f64,
    /// Late arrivals come within this long after the burst, ms.
    pub late_window_ms: u64,
    /// Relative demand for each level (a candidate's first choice).
    pub demand: Vec<f64>,
}

/// One `POST /bookings` of the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Arrival {
    /// When, ms from the sale's opening.
    pub at_ms: u64,
    /// Which candidate (index into the list).
    pub candidate: usize,
    /// The level asked for (index into the levels).
    pub level: usize,
    /// A repeat of a request the candidate made earlier (a double click, a
    /// refresh).
    pub repeat: bool,
}

/// A deterministic generator for one purpose of one run: the run's seed
/// mixed with `stream` and `index`.
pub fn rng_for(seed: u64, stream: u64, index: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(mix(mix(seed ^ mix(stream)) ^ index))
}

/// SplitMix64's finaliser.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A weighted choice among `weights` (all zero or empty: index 0).
pub fn weighted(weights: &[f64], rng: &mut impl Rng) -> usize {
    let total: f64 = weights.iter().filter(|w| **w > 0.0).sum();
    if total <= 0.0 {
        return 0;
    }
    let mut x = rng.gen_range(0.0..total);
    for (i, w) in weights.iter().enumerate() {
        if *w <= 0.0 {
            continue;
        }
        if x < *w {
            return i;
        }
        x -= *w;
    }
    weights.len().saturating_sub(1)
}

/// Every arrival of the sale, in time order: the burst (each early
/// candidate's first request, with repeats of candidates already arrived
/// mixed in, `burst_rate_per_s` a second) and then the late candidates,
/// spread uniformly over the late window.
pub fn plan_arrivals(shape: &LoadShape, seed: u64) -> Vec<Arrival> {
    let mut rng = rng_for(seed, 1, 0);
    let n = shape.candidates;
    let levels = shape.demand.len().max(1);
    let preferred: Vec<usize> = (0..n).map(|_| weighted(&shape.demand, &mut rng)).collect();
    let mut order: Vec<usize> = (0..n).collect();
    // Fisher-Yates with the run's generator
    for i in (1..n).rev() {
        let j = rng.gen_range(0..=i);
        order.swap(i, j);
    }
    let late = ((n as f64) * shape.late_share.clamp(0.0, 1.0)).round() as usize;
    let early = n - late.min(n);
    let burst = shape.burst_requests.max(early);
    let rate = u64::from(shape.burst_rate_per_s.max(1));
    let mut out = Vec::with_capacity(burst + late);
    let mut next_new = 0usize;
    for slot in 0..burst {
        let at_ms = slot as u64 * 1_000 / rate;
        let left_new = early - next_new;
        let left_slots = burst - slot;
        let new = next_new == 0 || rng.gen_range(0..left_slots) < left_new;
        if new && next_new < early {
            let c = order[next_new];
            next_new += 1;
            out.push(Arrival {
                at_ms,
                candidate: c,
                level: preferred[c] % levels,
                repeat: false,
            });
        } else {
            let c = order[rng.gen_range(0..next_new)];
            out.push(Arrival {
                at_ms,
                candidate: c,
                level: preferred[c] % levels,
                repeat: true,
            });
        }
    }
    let burst_end = burst as u64 * 1_000 / rate;
    for &c in &order[early..] {
        out.push(Arrival {
            at_ms: burst_end + rng.gen_range(0..shape.late_window_ms.max(1)),
            candidate: c,
            level: preferred[c] % levels,
            repeat: false,
        });
    }
    out.sort_by_key(|a| a.at_ms);
    out
}

/// What a payer does once admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Behaviour {
    /// Pays within three minutes.
    PayNow,
    /// Pays in the last ninety seconds before the deadline.
    PayLate,
    /// Never comes back.
    Abandon,
    /// Approves at the gateway, but the callback never arrives: the payment
    /// stays authorized, never executed.
    ApproveOnly,
    /// Cancels at the gateway.
    Cancel,
    /// The wallet refuses.
    Fail,
    /// Cancels at the gateway, then edits the redirect back to claim
    /// `status=success`.
    CancelForgeSuccess,
    /// Pays, and edits the redirect back to claim `status=cancel`.
    PayForgeCancel,
    /// Approves in the hold's last ninety seconds; the redirect back comes
    /// up to half a minute after the deadline.
    PayAfterDeadline,
}

/// How payers behave: weights of each [`Behaviour`] and the probabilities of
/// what can go wrong on the way back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PayerMix {
    /// Weight of [`Behaviour::PayNow`].
    pub pay_now: f64,
    /// Weight of [`Behaviour::PayLate`].
    pub pay_late: f64,
    /// Weight of [`Behaviour::Abandon`].
    pub abandon: f64,
    /// Weight of [`Behaviour::ApproveOnly`].
    pub approve_only: f64,
    /// Weight of [`Behaviour::Cancel`].
    pub cancel: f64,
    /// Weight of [`Behaviour::Fail`].
    pub fail: f64,
    /// Weight of [`Behaviour::CancelForgeSuccess`].
    #[serde(default)]
    pub cancel_forge_success: f64,
    /// Weight of [`Behaviour::PayForgeCancel`].
    #[serde(default)]
    pub pay_forge_cancel: f64,
    /// Weight of [`Behaviour::PayAfterDeadline`].
    #[serde(default)]
    pub pay_after_deadline: f64,
    /// The API instance dies after executing the payment, before HELD→PAID.
    pub callback_crash: f64,
    /// The gateway's webhook is never delivered.
    pub webhook_lost: f64,
    /// The webhook is delivered twice at once.
    pub webhook_twice: f64,
    /// The webhook arrives at the same moment as the callback.
    pub webhook_with_callback: f64,
    /// A payer whose payment was cancelled or failed books again.
    pub rebook: f64,
}

impl Default for PayerMix {
    fn default() -> PayerMix {
        PayerMix {
            pay_now: 0.70,
            pay_late: 0.08,
            abandon: 0.08,
            approve_only: 0.03,
            cancel: 0.07,
            fail: 0.04,
            cancel_forge_success: 0.0,
            pay_forge_cancel: 0.0,
            pay_after_deadline: 0.0,
            callback_crash: 0.03,
            webhook_lost: 0.2,
            webhook_twice: 0.1,
            webhook_with_callback: 0.1,
            rebook: 0.5,
        }
    }
}

impl PayerMix {
    /// One payer's behaviour.
    pub fn draw(&self, rng: &mut impl Rng) -> Behaviour {
        const ALL: [Behaviour; 9] = [
            Behaviour::PayNow,
            Behaviour::PayLate,
            Behaviour::Abandon,
            Behaviour::ApproveOnly,
            Behaviour::Cancel,
            Behaviour::Fail,
            Behaviour::CancelForgeSuccess,
            Behaviour::PayForgeCancel,
            Behaviour::PayAfterDeadline,
        ];
        let weights = [
            self.pay_now,
            self.pay_late,
            self.abandon,
            self.approve_only,
            self.cancel,
            self.fail,
            self.cancel_forge_success,
            self.pay_forge_cancel,
            self.pay_after_deadline,
        ];
        ALL[weighted(&weights, rng)]
    }
}

/// A coin with probability `p` (clamped to 0..=1; NaN is 0).
pub fn coin(p: f64, rng: &mut impl Rng) -> bool {
    let p = if p.is_nan() { 0.0 } else { p.clamp(0.0, 1.0) };
    rng.gen_bool(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn shape() -> LoadShape {
        LoadShape {
            candidates: 1_000,
            burst_requests: 1_250,
            burst_rate_per_s: 2_000,
            late_share: 0.1,
            late_window_ms: 60_000,
            demand: vec![3.0, 1.0],
        }
    }

    #[test]
    fn every_candidate_arrives_once_first_and_repeats_follow_their_first() {
        let plan = plan_arrivals(&shape(), 7);
        assert_eq!(plan.len(), 1_250 + 100);
        let mut first: BTreeMap<usize, u64> = BTreeMap::new();
        for a in &plan {
            if a.repeat {
                let f = first.get(&a.candidate).copied();
                assert!(
                    f.is_some_and(|f| f <= a.at_ms),
                    "a repeat before its first: {a:?}"
                );
            } else {
                assert!(first.insert(a.candidate, a.at_ms).is_none(), "{a:?}");
            }
        }
        assert_eq!(first.len(), 1_000);
        assert!(plan.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
        // the burst at 2,000/s: 1,250 requests in 625 ms; the late after it
        let burst: Vec<_> = plan.iter().filter(|a| a.at_ms < 625).collect();
        assert_eq!(burst.len(), 1_250);
        assert_eq!(plan.iter().filter(|a| a.repeat).count(), 1_250 - 900);
        assert!(plan.iter().all(|a| a.at_ms < 625 + 60_000));
        // demand 3:1
        let zero = plan.iter().filter(|a| !a.repeat && a.level == 0).count();
        assert!((650..850).contains(&zero), "{zero}");
    }

    #[test]
    fn plans_are_the_seeds() {
        assert_eq!(plan_arrivals(&shape(), 3), plan_arrivals(&shape(), 3));
        assert_ne!(plan_arrivals(&shape(), 3), plan_arrivals(&shape(), 4));
    }

    #[test]
    fn weighted_choices_follow_the_weights_and_skip_zeroes() {
        let mut rng = rng_for(1, 2, 3);
        let mut n = [0usize; 3];
        for _ in 0..10_000 {
            n[weighted(&[1.0, 0.0, 3.0], &mut rng)] += 1;
        }
        assert_eq!(n[1], 0);
        assert!((2_200..2_800).contains(&n[0]), "{n:?}");
        assert_eq!(weighted(&[], &mut rng), 0);
        assert_eq!(weighted(&[0.0, 0.0], &mut rng), 0);
        let only_cancel = PayerMix {
            pay_now: 0.0,
            pay_late: 0.0,
            abandon: 0.0,
            approve_only: 0.0,
            cancel: 1.0,
            fail: 0.0,
            ..PayerMix::default()
        };
        assert_eq!(only_cancel.draw(&mut rng), Behaviour::Cancel);
        let only_forgers = PayerMix {
            cancel: 0.0,
            pay_forge_cancel: 1.0,
            ..only_cancel
        };
        assert_eq!(only_forgers.draw(&mut rng), Behaviour::PayForgeCancel);
        assert!(!coin(f64::NAN, &mut rng));
        assert!(coin(2.0, &mut rng));
    }
}
