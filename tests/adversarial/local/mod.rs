//! Attacks on `local://`, one module per class.

mod class_01_env;
mod class_02_host_root;
mod class_03_orphans;
