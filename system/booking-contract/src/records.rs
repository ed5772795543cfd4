//! The records contract suite (being written).
