//! In-process backends for the booking system, with the real services'
//! semantics, so a rehearsal needs nothing installed.
//!
//! - [`ledger`]: the seat ledger (Redis in production): the reference model
//!   behind a lock.
//! - [`records`]: a DynamoDB-like record store.
//! - [`queue`]: an SQS-FIFO-like queue.

pub mod coordination;
pub mod ledger;
pub mod outputs;
pub mod queue;
pub mod records;
