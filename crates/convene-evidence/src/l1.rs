//! L1 export.
