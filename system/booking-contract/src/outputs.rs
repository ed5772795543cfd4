//! The outputs contract suite (being written).
