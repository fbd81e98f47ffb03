//! Attacks on `local://`, one module per class.

mod class_01_env;
mod class_02_host_root;
mod class_03_orphans;
mod class_04_stream_memory;
mod class_11_forged_results;
mod class_12_sweep;
mod class_15_host_view;
