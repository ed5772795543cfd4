//! The booking system's queue on Redis (being written).
