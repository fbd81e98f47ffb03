//! Attacks on `local://`, one module per class.

mod class_01_env;
mod class_02_host_root;
mod class_03_orphans;
mod class_04_sparse_claims;
mod class_04_stream_memory;
mod class_04_unbounded_host_memory_and_disk;
mod class_05_races_in_the_file_api;
mod class_06_file_semantics_of_the_sandbox_user;
mod class_07_host_tampering_on_download;
mod class_08_detach_misuse;
mod class_11_forged_results;
mod class_12_sweep;
mod class_15_host_view;
mod class_16_leaked_descriptors;
mod class_17_attacks_on_sandboxd;
mod class_17_inside_sessions;
mod class_17_resource_limits;
mod class_18_egress;
mod class_19_cells;
