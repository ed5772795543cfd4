//! The ports' contract suites: what every adapter of a port must do, written
//! once. Each suite is a set of async cases over a fixture trait (the port
//! under test, and how to move its time); each adapter crate's tests run
//! every case of the suites it implements, unchanged: the embedded adapters,
//! the AWS adapters on their local emulators, the Redis adapters on a
//! private `redis-server`.
//!
//! - [`records`]: the record store (`booking::RecordStore`).
//! - [`stream`]: the table's change stream (`booking::ChangeStream`).
//! - [`queue`]: the admission queue (`booking::Queue`).
//! - [`outputs`]: the status sink and the output log
//!   (`booking::StatusSink`, `booking::OutputLog`).

pub mod outputs;
pub mod queue;
pub mod records;
pub mod stream;
