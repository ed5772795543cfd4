//! The booking system as one server, and the ops steps that drive it.
//!
//! - [`config`]: [`ServerConfig`] (TOML) and the `serve` flags over it.
//! - [`build`]: the config becomes a [`booking_api::Stack`] of ports (all
//!   embedded; all on Redis; or Redis ledger and coordination with AWS
//!   records, queue and status document), the output log the audit reads
//!   and the TTL service ([`Server`]); and [`provision`], which makes the
//!   AWS resources or checks the Redis server's persistence, and migrates
//!   the back office.
//! - [`armed`]: with `[faults]` (rehearsals), the injector and every port of
//!   the stack behind its fault wrapper; [`kill`]: what `booking serve` does
//!   at an armed kill point (SIGKILL to itself).
//! - [`run`]: [`serve`]: the API, the `/ops/` routes and the background loops
//!   (worker, reconciler, expiry handler, TTL sweep, status refresh) on one
//!   listener, until shutdown.
//! - [`http_serve`]: serving a router with limits ([`http_serve::HttpLimits`]:
//!   header, body and whole-request timeouts, a connection cap).
//! - [`ops`]: reset, load-candidates, open, close, status, audit.
//! - [`audit_snapshot`]: the audit's I/O half, the sale read from the ports
//!   as a `booking_audit::SaleSnapshot` (the invariants are in
//!   `booking-audit`).
//! - [`admin`]: the `/ops/` HTTP routes over [`ops`]; [`faults_routes`]:
//!   `/ops/faults` and `/ops/faults/start`, and the fired faults' counter on
//!   `/metrics` (with `[faults]` only).
//! - [`mail`], [`alerts`]: `[mail]` (SMTP or SES) and `[alerts]` (SNS) in
//!   front of the stack's own logs, which the audit reads.
//! - [`spawned`]: [`Spawned`], an instance served in this process on
//!   loopback listeners of its own (tools and other crates' tests).
//! - [`cli`]: the `booking` binary's subcommands.

pub mod admin;
pub mod admin_settings;
pub mod alerts;
pub mod armed;
pub mod audit_snapshot;
pub mod build;
pub mod candidate_auth_config;
pub mod cli;
pub mod config;
pub mod faults_routes;
pub mod http_serve;
pub mod kill;
pub mod mail;
pub mod ops;
pub mod run;
pub mod spawned;

pub use build::{
    BuildError, Embedded, Provisioned, Server, build, build_sharing, build_with_killer, provision,
};
pub use config::{FaultsConfig, ServeArgs, ServerConfig, StackKind};
pub use ops::{AuditReport, Verdict};
pub use run::{Listeners, serve};
pub use spawned::{SpawnError, Spawned};
