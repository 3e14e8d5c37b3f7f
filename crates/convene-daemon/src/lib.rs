//! convene-daemon
