//! convene-evidence
