//! Redis backend.
