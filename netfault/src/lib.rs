//! A TCP fault proxy in the shape of Shopify's toxiproxy: proxies that sit
//! between a client and its upstream, toxics that make the link slow,
//! choppy, silent or broken, and toxiproxy's HTTP API so its clients drive
//! it unchanged. The rehearsal runs it in process ([`Netfault`]); a manual
//! rehearsal runs the `netfault` binary.
//!
//! Map of the crate:
//! - [`Netfault`] (`registry`): the proxies by name and every operation.
//! - `proxy`: one proxy: settings, toxics, listener and accept loop.
//! - `connection`: one client connection: dial, two directions, teardown.
//! - `link`: one direction on its sockets (read, pipeline, write).
//! - `pipeline`, `stage`: one direction without sockets: each toxic's
//!   behaviour as a queue with due instants (pure, tested without I/O).
//! - `chain`: a proxy's toxics as its connections watch them.
//! - [`toxic`]: toxics as data and their JSON.
//! - [`api`]: the HTTP routes and [`serve`].
//! - `addr`: listen addresses (no DNS; loopback unless allowed).
//!
//! Invariants: the proxy connects only to the upstreams its callers
//! configure, and listens only on loopback unless remote listening is
//! allowed ([`Netfault::with_remote_listen`]); a toxic never reorders,
//! duplicates or alters bytes (it delays, splits, drops or cuts); every
//! buffer is bounded (a direction stops reading past 4 MiB held).

mod addr;
pub mod api;
mod chain;
mod connection;
mod error;
mod link;
mod pipeline;
mod proxy;
mod registry;
mod stage;
mod stats;
pub mod toxic;

pub use addr::DEFAULT_LISTEN;
pub use api::serve;
pub use error::NetfaultError;
pub use proxy::{ProxyPatch, ProxySpec};
pub use registry::{Netfault, ProxyInfo};
pub use stats::ProxyStats;
pub use toxic::{Stream, Toxic, ToxicKind};
