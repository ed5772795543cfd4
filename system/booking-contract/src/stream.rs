//! The stream contract suite (being written).
