//! Chaos (SPEC §5): faults at every boundary of the booking system, and the
//! histories and checkers that show the system absorbed them.
//!
//! - [`schedule`]: the fault schedule (TOML): what, where, when, for how long,
//!   how often; [`Decider`], the seeded coins.
//! - [`injector`]: [`Injector`], shared by a run's wrappers: finds the faults
//!   active for a call, tosses their coins, sleeps the delays, logs what fired
//!   ([`FiredFault`]) and counts it per fault ([`FaultCount`]).
//! - [`wrappers`]: one wrapper per port ([`FaultyLedger`], [`FaultyRecords`],
//!   [`FaultyQueue`], [`FaultyCoordination`], [`FaultyGateway`],
//!   [`FaultyMailer`], [`FaultyAlerts`], [`FaultySink`], [`SkewedClock`]),
//!   each surfacing injected failures in the port's own error type.
//! - [`sim`]: a whole sale in virtual time ([`SimConfig`], [`sim::run`],
//!   [`SimReport`]): the real components on a paused tokio runtime.
//! - [`history`]: a Jepsen-style history ([`History`], [`Op`]) and its
//!   checkers ([`counter_bounds`], [`unique_ids`], [`total_queue`],
//!   [`no_paid_released`]).
//!
//! - [`netem`]: a TCP proxy that delays every chunk (a network hop to a
//!   real server), for the Redis pool's load test.
//! - [`matrix`]: every built-in schedule × seeds (`chaos matrix`).
//! - [`zoo`]: the bug zoo's cases and table (`chaos zoo`); [`rehearsal`]
//!   runs its rows that need the HTTP fleet (the scenarios crate).
//!
//! A run builds an [`Injector`] from a
//! [`Schedule`] and a seed, wraps its backends, records a [`History`], and
//! checks it against the backends' [`FinalState`] afterwards.

pub mod history;
pub mod matrix;
pub mod netem;
pub mod rehearsal;
pub mod rehearsal_matrix;
pub mod sim;
pub mod zoo;

// The schedule, the injector and the wrappers live in the `faults` crate,
// which the booking server and the rehearsal share.
pub use faults::{injector, schedule, wrappers};

pub use history::{
    EmailSent, FinalState, History, LevelFinal, Op, OpHandle, OpKind, OpValue, Outcome,
    PaidBooking, check_all, counter_bounds, no_paid_released, total_queue, unique_ids,
};
pub use injector::{Effect, Failure, FaultCount, FiredFault, Injector, TokioClock, Verdict};
pub use schedule::{
    Decider, Decision, Delay, FaultKind, FaultSpec, Schedule, ScheduleError, Target,
};
pub use sim::{SimConfig, SimError, SimReport};
pub use wrappers::{
    FaultError, FaultyAlerts, FaultyCoordination, FaultyGateway, FaultyLedger, FaultyMailer,
    FaultyQueue, FaultyRecords, FaultySink, SkewedClock,
};
