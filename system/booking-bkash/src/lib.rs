//! The booking system's payment gateway adapter: bKash Tokenized Checkout over
//! HTTP ([`BkashGateway`], implementing [`booking::PaymentGateway`]), and the
//! gateway token shared by the whole fleet ([`TokenManager`], on
//! [`booking::Coordination`]).
//!
//! - [`client`]: the endpoint, credentials, and how transport failures map
//!   onto [`booking::GatewayError`].
//! - [`capped`]: reading an answer's body with a size cap (the gateway
//!   client's answers, and the server's fetch of the gateway's ledger).
//! - [`wire`]: bKash answers read into the port's types (pure).
//! - [`tokens`]: one refresher at a time, refreshed early, grants on their own
//!   deadline, back-off after a failure.
//! - [`gateway`]: create, execute (with the one query after a timeout), query.

pub mod capped;
pub mod client;
pub mod gateway;
pub mod tokens;
pub mod wire;

pub use client::{BkashClient, BkashConfig, BuildError, Credentials};
pub use gateway::BkashGateway;
pub use tokens::{CachedToken, TokenConfig, TokenIssuer, TokenManager, TokenStats};
pub use wire::IssuedToken;
