//! What each first-party backend can offer, in one place that every build has: these
//! constants need no backend feature, so a test can mirror `docker://` on the fake
//! (`testing::sbx_fake_like("docker")`) in a build without Docker.
//!
//! Each set is an upper bound: a sandbox's own [`Capabilities`], after
//! `create()`, can be narrower (an image without `python3` has no `RUN_CODE`).

use crate::policy::Capabilities;

/// `fake://`, the in-memory [`FakeBackend`](crate::testing::FakeBackend): every capability.
pub const FAKE: Capabilities = Capabilities::all();

/// `local://` (feature `local`): one bubblewrap sandbox with sandboxd as its init; code
/// contexts and rich outputs from sandboxd's runner on the host's Python. No resource limits
/// (bubblewrap makes namespaces, not a cgroup), no command-scoped secrets
/// (the user namespace maps one uid, so every command of a sandbox is the same user and may
/// read another's environment), and no `EXTEND_TTL` (sandboxd, the sandbox's init, is
/// started with its TTL and ends the sandbox then; it has no message that moves it).
pub const LOCAL: Capabilities = Capabilities::RUN
    .union(Capabilities::RUN_CODE)
    .union(Capabilities::STATEFUL_CODE)
    .union(Capabilities::RICH_OUTPUTS)
    .union(Capabilities::STREAM)
    .union(Capabilities::STDIN)
    .union(Capabilities::FILESYSTEM)
    .union(Capabilities::NETWORK_DENY)
    .union(Capabilities::NETWORK_ALLOWLIST)
    .union(Capabilities::CONNECT)
    .union(Capabilities::DETACH);

/// `docker://` (feature `docker`): containers through the Docker engine. Stateful code,
/// rich outputs and allowlists come from sandboxd (its runner, its relay to the egress
/// gate): a backend on the exec-API path narrows all three off, one under gVisor the
/// allowlist, and a sandbox whose image has no `python3` the first two (with `RUN_CODE`).
/// No `EXTEND_TTL`: the container's init (sandboxd, or the exec path's shell) is started
/// with the TTL, and the `expires` label the sweep reads cannot change on a live container.
pub const DOCKER: Capabilities = Capabilities::RUN
    .union(Capabilities::RUN_CODE)
    .union(Capabilities::STATEFUL_CODE)
    .union(Capabilities::RICH_OUTPUTS)
    .union(Capabilities::STREAM)
    .union(Capabilities::STDIN)
    .union(Capabilities::FILESYSTEM)
    .union(Capabilities::NETWORK_DENY)
    .union(Capabilities::NETWORK_ALLOWLIST)
    .union(Capabilities::LIMIT_MEMORY)
    .union(Capabilities::LIMIT_CPU)
    .union(Capabilities::LIMIT_PIDS)
    .union(Capabilities::CONNECT)
    .union(Capabilities::DETACH)
    .union(Capabilities::COMMAND_SECRETS);

/// `e2b://` (feature `e2b`): E2B micro-VMs, the same set as `local://` but allowlists, plus
/// `EXTEND_TTL` (E2B's set-timeout call moves a live sandbox's end).
/// Commands, streams and stdin through envd; files through envd; code contexts and rich
/// results from E2B's code interpreter; deny-all as E2B's `allow_internet_access: false`.
/// No `NETWORK_ALLOWLIST` (E2B's domain filter decides on SNI and the Host header, which
/// the allowlist contract's bypass tests defeat): that filter is offered under its own
/// name, `PROVIDER_ALLOWLIST`. `EXTEND_TTL` through E2B's own timeout call. No resource limits (they come from the template), no
/// command-scoped secrets (every command of a sandbox is the same user).
pub const E2B: Capabilities = LOCAL
    .difference(Capabilities::NETWORK_ALLOWLIST)
    .union(Capabilities::PROVIDER_ALLOWLIST)
    .union(Capabilities::EXTEND_TTL);

/// `modal://` (feature `modal`): Modal Sandboxes (gVisor). Commands, streams and stdin
/// through the task's command router, files as scripts run there, deny-all as Modal's
/// `BLOCKED` network, Modal's domain allowlist (TLS on port 443, judged by the server name)
/// as `PROVIDER_ALLOWLIST`, attaching by id. No code contexts (no interpreter service), no
/// `NETWORK_ALLOWLIST` (that name filter cannot pass its bypass tests), no
/// detach (an owned sandbox's idle timeout, its owner-death bound, cannot be lifted once it
/// runs), no resource limits (the router's exit status cannot say that a command was killed
/// for its memory, and nothing here verifies a CPU limit), no command-scoped secrets (every
/// command of a sandbox is the same user).
pub const MODAL: Capabilities = Capabilities::RUN
    .union(Capabilities::STREAM)
    .union(Capabilities::STDIN)
    .union(Capabilities::FILESYSTEM)
    .union(Capabilities::NETWORK_DENY)
    .union(Capabilities::PROVIDER_ALLOWLIST)
    .union(Capabilities::CONNECT);

/// The schemes [`of_scheme`] knows, in the order error messages list them.
pub const SCHEMES: &[&str] = &["fake", "local", "docker", "e2b", "modal"];

/// The capabilities of the first-party backend with this scheme (`"fake"`, `"local"`,
/// `"docker"`, `"e2b"`, `"modal"`), whether or not its feature is on in this build; `None`
/// for any other name (a third-party scheme).
#[must_use]
pub fn of_scheme(scheme: &str) -> Option<Capabilities> {
    match scheme {
        "fake" => Some(FAKE),
        "local" => Some(LOCAL),
        "docker" => Some(DOCKER),
        "e2b" => Some(E2B),
        "modal" => Some(MODAL),
        _ => None,
    }
}

/// Why a first-party backend refuses resource limits, for the refusal's message.
pub(crate) fn limits_refusal(scheme: &str) -> Option<&'static str> {
    match scheme {
        "local" => {
            Some("bubblewrap puts each command in namespaces but in no cgroup, so nothing would enforce them")
        }
        "e2b" => Some("an E2B sandbox's CPU and memory come from its template, not from the create request"),
        "modal" => Some(
            "Modal's command router reports an exit code or a signal, never that a command was killed for its memory, so a limit could not be reported honestly",
        ),
        _ => None,
    }
}
