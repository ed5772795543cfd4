//! The rehearsal (SPEC §4).

pub mod load;
