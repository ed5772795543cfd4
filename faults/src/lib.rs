//! Faults for every harness (SPEC §5, issue 14): one schedule format, one
//! injector, one set of wrappers, shared by the sale in virtual time
//! (`chaos`), the booking server when a rehearsal arms it
//! (`booking serve` with `[faults]`), and the rehearsal's fault conductor
//! (`scenarios`).
//!
//! - [`schedule`]: the fault schedule (TOML): port faults (per call, inside
//!   an instance), process faults (kill, pause, restart of an instance or of
//!   `redis-server`), link faults (toxics on the TCP links to Redis and to
//!   the gateway) and gateway rules, each with its window; [`Decider`], the
//!   seeded coins; the thresholds a schedule relaxes.
//! - [`injector`]: [`Injector`], shared by an instance's wrappers: finds the
//!   faults active for a call, tosses their coins, sleeps the delays, logs
//!   what fired and counts it per fault; kills the process at an armed kill
//!   point.
//! - [`wrappers`]: one wrapper per port, each surfacing injected failures in
//!   the port's own error type.

pub mod builtin;
pub mod injector;
pub mod schedule;
pub mod wrappers;

pub use injector::{
    Effect, Failure, FaultCount, FiredFault, Injector, Killer, TokioClock, Verdict,
};
pub use schedule::{
    Decider, Decision, Delay, FaultKind, FaultSpec, KillPoint, LinkStream, Schedule, ScheduleError,
    Scope, Target,
};
pub use wrappers::{
    FaultError, FaultyAlerts, FaultyCoordination, FaultyGateway, FaultyLedger, FaultyMailer,
    FaultyQueue, FaultyRecords, FaultySink, SkewedClock,
};
