//! The skeleton the remote backends (`e2b://`, `modal://`) share, one job a module: the
//! kill a dropped command leaves to run ([`kill_guard`]), a sandbox handle's lifetime (owned,
//! killed, kept alive: [`lifetime`]), a streamed command's face over its pump
//! ([`stream`]), and the process-group wrapper that lets a second process kill a whole
//! command ([`pgroup`]). What differs for a protocol reason (how a command is started, found and
//! killed, how a sandbox is created, renewed and ended) stays in each adapter.

pub(crate) mod kill_guard;
pub(crate) mod lifetime;
pub(crate) mod pgroup;
pub(crate) mod stream;
