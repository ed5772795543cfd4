//! A Jepsen-style history of a run's operations, and the checkers that read it
//! after the run.
//!
//! Every operation is recorded when it is invoked and again when it completes:
//! ok (with what it did), failed (it did not happen), or unknown (it may have
//! happened: a timeout, a lost answer, an operation still running when the run
//! ended). Checkers are pure functions of the finished history and the final
//! state ([`FinalState`], plain data read from the backends after the run).
//! An unknown outcome counts as *possibly happened*: it widens the bounds a
//! checker allows and never makes a check fail on its own.
//!
//! What the history must hold for the checks to be sound: every admission the
//! clients made, and every release of a seat (the reconciler's and the TTL
//! safety net's payment-guarded undo, the API's undo of an admission whose
//! request then failed), as the ledger saw them; the confirmations the clients
//! were told of; the emails the mailer was asked to send, if the run records
//! them.
//!
//! | checker | passes when |
//! |---|---|
//! | [`counter_bounds`] | every level's final count lies in `[ok admissions − possible releases, possible admissions − ok releases]`, and within its cap |
//! | [`unique_ids`] | no candidate and no payment is in two PAID bookings, no level has more PAID bookings than seats, and no candidate was admitted twice without a possible release in between |
//! | [`total_queue`] | every PAID booking's email was delivered exactly once, no email went out for a booking that is not PAID, every confirmation a client was told of is PAID, every email acknowledged as sent was delivered |
//! | [`no_paid_released`] | no release took a seat back from a booking that is PAID, or was confirmed paid before the release began |

use std::sync::Arc;

use booking::{CandidateHash, Clock, Level, PaymentId};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// What an operation was asked to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum OpKind {
    /// Admit a candidate to a level (`POST /bookings`).
    Admit {
        /// Who.
        candidate: CandidateHash,
        /// Where.
        level: Level,
    },
    /// Confirm a payment (any confirm path: the booking becomes PAID).
    Confirm {
        /// Whose booking.
        candidate: CandidateHash,
        /// Its payment.
        payment: PaymentId,
    },
    /// Give a seat back (an undo or a payment-guarded release).
    Release {
        /// Whose hold.
        candidate: CandidateHash,
        /// The level it was counted in.
        level: Level,
        /// Its payment, if it had one (an undo of a pending admission has none).
        payment: Option<PaymentId>,
    },
    /// Send a booking's confirmation email.
    Email {
        /// Whose booking.
        candidate: CandidateHash,
        /// Its payment.
        payment: PaymentId,
    },
}

/// What a successful operation did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "value", rename_all = "snake_case")]
pub enum OpValue {
    /// An admission counted a seat.
    Admitted {
        /// The payment created for it, if the client saw one.
        payment: Option<PaymentId>,
    },
    /// The system answered without doing it (level full, sale closed, already
    /// holding, a guard that did not match, …).
    Refused {
        /// The answer.
        reason: String,
    },
    /// A confirmation made the booking PAID (or found it PAID with this
    /// payment).
    Paid,
    /// A release gave the seat back.
    Released,
    /// An email went out.
    Sent,
}

/// How an operation ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// It answered.
    Ok {
        /// What it did.
        #[serde(flatten)]
        value: OpValue,
    },
    /// It certainly did not happen.
    Fail {
        /// Why.
        reason: String,
    },
    /// It may or may not have happened (also: still running at the end).
    Unknown,
}

/// One operation of a history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    /// Position in the history, in invocation order.
    pub id: u64,
    /// The client (or system process) that made it.
    pub process: u64,
    /// What it was.
    pub kind: OpKind,
    /// When it was invoked, ms from the run's start.
    pub invoked_ms: u64,
    /// When it completed; `None` if it never did.
    pub completed_ms: Option<u64>,
    /// How it ended.
    pub outcome: Outcome,
}

impl Op {
    /// The value, if it completed ok.
    pub fn value(&self) -> Option<&OpValue> {
        match &self.outcome {
            Outcome::Ok { value } => Some(value),
            _ => None,
        }
    }

    /// Whether it certainly happened with `value`.
    fn did(&self, value: &OpValue) -> bool {
        self.value() == Some(value)
    }

    /// Whether it may have happened with a value matching `value`: ok with
    /// it, or unknown.
    fn maybe(&self, value: impl Fn(&OpValue) -> bool) -> bool {
        match &self.outcome {
            Outcome::Ok { value: v } => value(v),
            Outcome::Fail { .. } => false,
            Outcome::Unknown => true,
        }
    }
}

#[derive(Debug)]
struct Recorder {
    clock: Arc<dyn Clock>,
    start_ms: u64,
    ops: Mutex<Vec<Op>>,
}

/// A thread-safe history recorder; clones share one history.
#[derive(Debug, Clone)]
pub struct History {
    inner: Arc<Recorder>,
}

impl History {
    /// An empty history whose times count from now on `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> History {
        let start_ms = clock.now_ms();
        History {
            inner: Arc::new(Recorder {
                clock,
                start_ms,
                ops: Mutex::new(Vec::new()),
            }),
        }
    }

    fn now_ms(&self) -> u64 {
        self.ms_since_start(self.inner.clock.now_ms())
    }

    /// A clock reading (ms) as the history's times are: ms since its start.
    pub fn ms_since_start(&self, clock_ms: u64) -> u64 {
        clock_ms.saturating_sub(self.inner.start_ms)
    }

    /// Records the invocation of `kind` by `process`; complete it through the
    /// handle. An operation never completed stays unknown.
    pub fn invoke(&self, process: u64, kind: OpKind) -> OpHandle {
        let invoked_ms = self.now_ms();
        let mut ops = self.inner.ops.lock();
        let id = ops.len() as u64;
        ops.push(Op {
            id,
            process,
            kind,
            invoked_ms,
            completed_ms: None,
            outcome: Outcome::Unknown,
        });
        OpHandle {
            history: self.clone(),
            id,
        }
    }

    fn complete(&self, id: u64, outcome: Outcome) {
        let completed_ms = self.now_ms();
        let mut ops = self.inner.ops.lock();
        if let Some(op) = usize::try_from(id).ok().and_then(|i| ops.get_mut(i)) {
            op.completed_ms = Some(completed_ms);
            op.outcome = outcome;
        }
    }

    /// The operations so far, in invocation order.
    pub fn ops(&self) -> Vec<Op> {
        self.inner.ops.lock().clone()
    }
}

/// An invoked operation, waiting for its outcome.
#[derive(Debug)]
#[must_use = "complete the operation, or it stays unknown"]
pub struct OpHandle {
    history: History,
    id: u64,
}

impl OpHandle {
    /// Its id in the history.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// It answered, having done `value`.
    pub fn ok(self, value: OpValue) {
        self.history.complete(self.id, Outcome::Ok { value });
    }

    /// It certainly did not happen.
    pub fn fail(self, reason: impl Into<String>) {
        self.history.complete(
            self.id,
            Outcome::Fail {
                reason: reason.into(),
            },
        );
    }

    /// It may or may not have happened.
    pub fn unknown(self) {
        self.history.complete(self.id, Outcome::Unknown);
    }
}

mod checkers;

pub use checkers::{
    EmailSent, FinalState, LevelFinal, PaidBooking, check_all, counter_bounds, no_paid_released,
    total_queue, unique_ids,
};
