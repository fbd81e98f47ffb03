//! [`ContractVersion`]: the contract as a versioned promise. Each clause (each suite test)
//! carries the version it arrived in; an adapter runs "the contract as of version X" and
//! sees the clauses added after X as a separate list, neither passed nor skipped.

use std::fmt;
use std::str::FromStr;

/// The environment variable that selects the contract version a run holds the backend to
/// (`1`, `v1`, `2`, `v2` or `latest`) unless [`ContractSuite::contract_version`] says
/// otherwise. Unset: [`ContractVersion::LATEST`]. Any other value fails the run before a
/// test starts.
///
/// [`ContractSuite::contract_version`]: super::ContractSuite::contract_version
pub const CONTRACT_VERSION_ENV: &str = "SANDBOXIO_CONTRACT_VERSION";

/// A version of the contract: the clauses a backend promises to keep. A version only grows
/// the contract; it never drops a clause. `docs/contract.md` shows the version of each
/// clause, and `CHANGELOG.md` lists the clauses each version added with what an adapter
/// must do for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ContractVersion {
    /// The first contract: the 87 clauses of the suite as it stood when the first
    /// third-party adapter was written against it.
    V1,
    /// Everything since: 39 clauses (signal deaths as `Signal(n)`, streamed cells, `mkdir`
    /// through a file, writes as the sandbox user, paths named as written, bounded reads and
    /// downloads, listing and TTLs, command secrets, the allowlist's ports, addresses and
    /// test network, and the refusals of the capabilities added with them).
    V2,
}

impl ContractVersion {
    /// The newest version: what a run holds a backend to unless told otherwise.
    pub const LATEST: ContractVersion = ContractVersion::V2;

    /// Every version, oldest first.
    pub const ALL: &'static [ContractVersion] = &[ContractVersion::V1, ContractVersion::V2];

    /// The version's number (`1`, `2`).
    #[must_use]
    pub fn number(self) -> u32 {
        match self {
            ContractVersion::V1 => 1,
            ContractVersion::V2 => 2,
        }
    }

    /// The version numbered `n`, if there is one.
    #[must_use]
    pub fn from_number(n: u32) -> Option<ContractVersion> {
        ContractVersion::ALL.iter().copied().find(|v| v.number() == n)
    }
}

impl fmt::Display for ContractVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.number())
    }
}

impl FromStr for ContractVersion {
    type Err = String;

    /// Parses `1`, `v1`, `V1`, … or `latest`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("latest") {
            return Ok(ContractVersion::LATEST);
        }
        let digits = s.strip_prefix(['v', 'V']).unwrap_or(s);
        digits.parse().ok().and_then(ContractVersion::from_number).ok_or_else(|| {
            let known: Vec<String> = ContractVersion::ALL.iter().map(ToString::to_string).collect();
            format!("{s:?} is not a contract version (known: {}, or latest)", known.join(", "))
        })
    }
}

/// The version the environment selects ([`CONTRACT_VERSION_ENV`]), the latest when unset.
pub(crate) fn from_env() -> Result<ContractVersion, String> {
    match std::env::var(CONTRACT_VERSION_ENV) {
        Err(std::env::VarError::NotPresent) => Ok(ContractVersion::LATEST),
        Err(std::env::VarError::NotUnicode(v)) => {
            Err(format!("{CONTRACT_VERSION_ENV}={} is not text", v.display()))
        }
        Ok(v) => v.parse().map_err(|e| format!("{CONTRACT_VERSION_ENV}: {e}")),
    }
}

/// The version clause (test) `name` arrived in: [`ContractVersion::V1`] for the clauses
/// of [`V1_CLAUSES`], [`ContractVersion::LATEST`] for every other (a clause added now
/// arrives in the version under way). When a version is released, its clauses are frozen
/// in a list of their own here, as v1's are.
pub(crate) fn since(name: &str) -> ContractVersion {
    if V1_CLAUSES.contains(&name) { ContractVersion::V1 } else { ContractVersion::LATEST }
}

/// The clauses of contract v1, frozen: the suite's tests at commit `59c04a6` (every one
/// listed in `docs/contract.md` at that commit). A name here that is no longer a suite test
/// fails `tests/api/contract_docs.rs`: a clause is never dropped or renamed silently.
pub(crate) const V1_CLAUSES: &[&str] = &[
    "cancellation__dropped_sandbox_teardown_is_shielded_and_bounded",
    "cancellation__mid_create_leaves_no_orphan",
    "cancellation__mid_fs_operation_leaves_no_orphan",
    "cancellation__mid_run_code_leaves_no_orphan",
    "cancellation__mid_run_leaves_no_orphan",
    "cancellation__mid_stream_leaves_no_orphan",
    "cancellation_identity__dropping_never_produces_an_error",
    "cancellation_identity__grace_expiry_emits_the_orphan_warning",
    "cancellation_identity__kill_works_from_a_synchronous_drop",
    "cancellation_identity__kill_works_while_the_runtime_shuts_down",
    "capability_honesty__every_declared_capability_has_a_runnable_test",
    "capability_honesty__undeclared_connect_raises",
    "capability_honesty__undeclared_detach_raises",
    "capability_honesty__undeclared_filesystem_raises",
    "capability_honesty__undeclared_limit_cpu_is_refused",
    "capability_honesty__undeclared_limit_memory_is_refused",
    "capability_honesty__undeclared_limit_pids_is_refused",
    "capability_honesty__undeclared_network_allowlist_raises",
    "capability_honesty__undeclared_network_deny_raises",
    "capability_honesty__undeclared_rich_outputs_are_never_returned",
    "capability_honesty__undeclared_run_code_raises",
    "capability_honesty__undeclared_run_raises",
    "capability_honesty__undeclared_stateful_code_raises",
    "capability_honesty__undeclared_stdin_raises",
    "capability_honesty__undeclared_stream_raises",
    "errors__auth_error_names_the_missing_env_var",
    "errors__operations_on_a_killed_sandbox_raise_sandbox_gone",
    "errors__unsupported_typed_option_raises_capability_not_supported",
    "filesystem__binary_safety",
    "filesystem__list_mkdir_remove_round_trip",
    "filesystem__missing_path_raises_not_found",
    "filesystem__no_host_path_escape",
    "filesystem__relative_paths_share_the_working_directory_of_run",
    "filesystem__upload_download_round_trip",
    "filesystem__write_read_round_trip",
    "isolation_honesty__an_undeclared_tier_is_unknown_and_satisfies_nothing",
    "isolation_honesty__require_isolation_above_the_tier_fails_before_provisioning",
    "isolation_honesty__require_isolation_at_the_tier_succeeds",
    "lifecycle__close_tears_down_on_normal_exit",
    "lifecycle__connect_attaches_without_owning",
    "lifecycle__connect_to_unknown_id_raises_connect_error",
    "lifecycle__create_run_kill",
    "lifecycle__detached_sandbox_outlives_its_handle",
    "lifecycle__double_kill_is_idempotent",
    "lifecycle__drop_tears_down_when_an_error_unwinds",
    "observability__metadata_is_propagated_to_provider_labels",
    "observability__one_operation_record_per_operation",
    "observability__secrets_are_absent_from_every_sink",
    "policy__allow_all_reaches_the_canary",
    "policy__allowlist_permits_only_listed_hosts",
    "policy__caps_the_backend_cannot_apply_are_refused_before_provisioning",
    "policy__deny_actually_denies_egress_to_the_canary",
    "policy__resource_caps_are_applied",
    "run__a_child_outliving_its_parent_neither_blocks_nor_survives",
    "run__argv_does_not_go_through_a_shell",
    "run__bad_input_is_refused_before_anything_runs",
    "run__env_is_injected",
    "run__exit_codes_are_data_not_errors",
    "run__output_is_byte_exact",
    "run__stdin_is_delivered_with_end_of_file",
    "run__stdout_and_stderr_are_separated",
    "run__timeout_keeps_the_partial_output",
    "run__timeout_kills_the_whole_process_tree",
    "run__timeout_raises_execution_timeout_and_does_not_hang",
    "run_code__a_long_cell_is_interrupted_at_its_timeout",
    "run_code__basic_execution",
    "run_code__context_keeps_state_with_stateful_code",
    "run_code__context_raises_without_stateful_code",
    "run_code__rich_outputs_are_present_iff_declared",
    "run_code__runtime_error_surfaces_with_non_zero_exit",
    "run_code__syntax_error_surfaces_with_non_zero_exit",
    "streaming__capability_not_supported_is_raised_from_stream_itself",
    "streaming__per_stream_order_is_preserved",
    "streaming__stdin_can_be_written_and_closed",
    "streaming__stdout_and_stderr_are_distinguishable",
    "streaming__stream_is_not_awaitable",
    "streaming__wait_returns_streamed_with_empty_output_and_is_idempotent",
    "streaming_cleanup__an_error_inside_the_loop_terminates_the_process",
    "streaming_cleanup__cancellation_inside_the_loop_terminates_the_process",
    "streaming_cleanup__early_break_terminates_the_process",
    "streaming_cleanup__full_iteration_leaves_no_process",
    "sync_parity__dropped_blocking_handles_leave_no_orphan",
    "sync_parity__errors_through_the_facade_keep_code_and_source",
    "sync_parity__the_blocking_facade_drives_this_backend",
    "timeouts__create_timeout_raises_create_timeout",
    "timeouts__expired_sandbox_raises_sandbox_gone",
    "timeouts__no_bare_timeout_error_escapes",
];
