//! Attacks on `local://`, one module per class.
