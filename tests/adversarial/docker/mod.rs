//! Attacks on `docker://`, one module per class.

mod class_04_stream_memory;
mod class_04_unbounded_host_memory_and_disk;
mod class_05_races_in_the_file_api;
mod class_06_file_semantics_of_the_sandbox_user;
mod class_07_host_tampering_on_download;
