//! Attacks on `docker://`, one module per class.
