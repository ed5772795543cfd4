//! The booking system's outputs on Redis (being written).
