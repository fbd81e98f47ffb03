//! Attacks on `docker://`, one module per class.

mod class_04_stream_memory;
