//! What a simulated sale did: [`SimReport`], and [`SimError`] when it could
//! not give one.

use booking_audit::Verdict;
use serde::{Deserialize, Serialize};

/// What a simulated sale did, and whether every check held.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimReport {
    /// The seed.
    pub seed: u64,
    /// Virtual time from the opening to the end of the settle period, s.
    pub virtual_secs: u64,
    /// Wall time of the whole run, ms (the one figure that is not the seed's).
    pub wall_ms: u64,
    /// `POST /bookings` requests made (first tries, repeats, retries, rebooks).
    pub requests: u64,
    /// Admissions the ledger counted.
    pub admitted: u64,
    /// Admissions undone by their token (a step after the admission failed,
    /// or the reconciler cleaned a stale pending one).
    pub undone: u64,
    /// PAID bookings at the end.
    pub paid: u64,
    /// Seats given back by payment-guarded releases (reconciler, safety net).
    pub released: u64,
    /// Holds the reconciler extended.
    pub extended: u64,
    /// Alerts raised.
    pub alerts: u64,
    /// Emails delivered.
    pub emails: u64,
    /// What became of the emails: delivered, recovered by the sweep,
    /// repeats, missing, owed, failed tries.
    #[serde(default)]
    pub email_figures: booking_audit::EmailFigures,
    /// Messages the worker found already written (a redelivery after a
    /// failed delete, or a duplicate send).
    pub redelivered: u64,
    /// Messages in the dead-letter queue.
    pub dead_letters: u64,
    /// Injected faults that fired.
    pub faults_fired: u64,
    /// Each fault of the schedule: calls it saw, firings, resets that
    /// reached the backend, delay added.
    #[serde(default)]
    pub faults: Vec<crate::injector::FaultCount>,
    /// Every check: the invariants, then the history's checkers.
    pub checks: Vec<Verdict>,
    /// Whether every check passed.
    pub passed: bool,
}

impl SimReport {
    /// The names of the checks that failed.
    pub fn failed(&self) -> Vec<&str> {
        self.checks
            .iter()
            .filter(|c| !c.passed)
            .map(|c| c.name.as_str())
            .collect()
    }

    /// The check called `name`.
    pub fn check(&self, name: &str) -> Option<&Verdict> {
        self.checks.iter().find(|c| c.name == name)
    }

    /// Whether `other` is the same sale: every figure but the wall time,
    /// each fault's counts (a skewed clock's reads included) and every
    /// check's figure and detail.
    pub fn same_sale(&self, other: &SimReport) -> bool {
        SimReport {
            wall_ms: other.wall_ms,
            ..self.clone()
        } == *other
    }

    /// One line: the figures and the failed checks.
    pub fn summary(&self) -> String {
        format!(
            "seed {}: {} virtual s in {} ms wall; {} requests, {} admitted, {} undone, \
             {} paid, {} released, {} extended, {} alerts, {} emails, {} redelivered, \
             {} dead letters, {} faults fired; emails: {}; {}",
            self.seed,
            self.virtual_secs,
            self.wall_ms,
            self.requests,
            self.admitted,
            self.undone,
            self.paid,
            self.released,
            self.extended,
            self.alerts,
            self.emails,
            self.redelivered,
            self.dead_letters,
            self.faults_fired,
            self.email_figures.line(),
            if self.passed {
                "every check passed".to_owned()
            } else {
                format!("FAILED {}", self.failed().join(", "))
            }
        )
    }
}

/// Why a simulation could not give a report.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The configuration cannot describe a sale.
    #[error("invalid simulation: {0}")]
    Invalid(String),
    /// The runtime could not be built.
    #[error("runtime: {0}")]
    Runtime(#[from] std::io::Error),
    /// A backend refused to set the sale up.
    #[error("setting the sale up: {0}")]
    Setup(String),
    /// The sale did not reach quiescence within the virtual-time limit.
    #[error("no quiescence after {virtual_secs} virtual s: {waiting_on}")]
    NoQuiescence {
        /// Virtual time spent.
        virtual_secs: u64,
        /// What was still going on.
        waiting_on: String,
    },
}
