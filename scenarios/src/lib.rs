//! The rehearsal (SPEC §4): one command rehearses a whole flash sale on this
//! machine and says, with evidence, whether it would have gone right.
//!
//! - [`profile`]: what a run does ([`profile::Profile`], TOML with the
//!   article's figures as defaults, `--set key=value` overrides).
//! - [`fleet`]: the system under rehearsal: the mock gateway and N booking
//!   instances in process (embedded or Redis), or a running deployment.
//! - [`processes`]: a fleet of `booking serve --stack redis` OS processes on
//!   a private `redis-server`, driven as a remote deployment.
//! - [`kills`]: `--kill SPEC`: SIGKILL an instance mid-rush and start it
//!   again; the verdicts that keep that proof honest.
//! - [`conductor`]: `--faults NAME|FILE`: a fault schedule carried out
//!   during the load (processes killed, paused and restarted, toxics on the
//!   links to Redis and the gateway, gateway rules, port faults inside the
//!   instances), each window with what it fired and what the system did.
//! - [`mail`]: `--mail smtp|ses`: the confirmation emails through a real
//!   mail server (`scripts/smtp-sink`, or SES on moto), counted from what it
//!   delivered.
//! - [`load`]: the open-model load engine over goose.
//! - [`rehearse`]: the phases (setup, rush, late, settle, audit, report).
//! - [`shard`]: `--shard INDEX/COUNT`: one shard of the load against a
//!   shared target (several generator processes); `reports merge` joins
//!   their reports.
//! - [`thresholds`]: figures held to the profile's bounds, as named verdicts.
//! - [`progress`]: the progress line and the end-of-run summary.
//! - [`capacity`]: `scenarios capacity`: the arrival rate stepped up with
//!   short rehearsals until a verdict breaks, with CPU per component
//!   ([`cpu`]: CPU seconds per process, read from `/proc`).

pub mod candidate_tokens;
pub mod capacity;
pub mod conductor;
pub mod cpu;
pub mod fleet;
pub mod kills;
pub mod load;
pub mod mail;
pub mod processes;
pub mod profile;
pub mod progress;
pub mod rehearse;
pub mod shard;
pub mod thresholds;

pub use fleet::Fleet;
pub use profile::Profile;
pub use rehearse::{Outcome, Progress, rehearse};
