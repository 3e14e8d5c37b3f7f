//! convene-ipc
