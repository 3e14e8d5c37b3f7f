//! convene-core
