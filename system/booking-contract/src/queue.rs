//! The queue contract suite (being written).
