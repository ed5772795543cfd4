//! The booking system's records on Redis (being written).
