//! convene-store
