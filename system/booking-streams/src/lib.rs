//! The table's change stream the way Lambda consumes it, for the handlers
//! that read it (the expiry safety net and the back-office sync):
//!
//! - [`item`]: the table's item format, a [`booking::BookingRecord`] as
//!   DynamoDB attributes (shared by the SDK adapters and the Lambda event);
//! - [`event`]: the stream event Lambda invokes a function with, and the
//!   partial-batch answer;
//! - [`policy`]: the event-source mapping's decisions after each invocation
//!   (partial batch failures, bisect on error, retries, max record age), pure;
//! - [`mapping`]: [`EventSourceMapping`], that policy run locally over any
//!   [`booking::ChangeStream`] with a [`BatchHandler`] and a
//!   [`FailureDestination`] (the on-failure queue);
//! - [`lease`]: [`LeasedMapping`], one mapping per handler for a whole fleet
//!   with a durable checkpoint (the embedded and Redis stacks, where no
//!   Lambda runs the handlers), and [`AlertDestination`], the on-failure
//!   destination that raises an alert.
//!
//! In AWS, Lambda is the mapping and `booking-lambda` the functions; in a
//! local run, [`EventSourceMapping`] invokes the same handlers in process.

pub mod event;
mod expiry;
pub mod item;
pub mod lease;
pub mod mapping;
pub mod policy;

pub use lease::{AlertDestination, LeaseConfig, LeaseCounts, LeasedMapping};
pub use mapping::{
    BatchFailure, BatchHandler, EventSourceMapping, FailureDestination, MappingCounts,
    MemoryDestination, Stepped,
};
pub use policy::{DiscardReason, MappingConfig, Next};
