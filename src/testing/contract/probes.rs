//! [`Probes`]: how the contract suite drives a particular backend.
//!
//! Three kinds, all with defaults:
//!
//! - **Command probes** build the commands the suite runs. They default to a POSIX shell
//!   with `echo`, `printf`, `sleep`, `cat` and `nc`; override them for images without one.
//! - **Code probes** build the code cells. They default to Python 3.
//! - **Behaviour probes** provoke or observe what only the adapter can: leftover processes
//!   and sandboxes, a hanging kill, expiry, a canary host for egress, the limits in effect,
//!   provider-native labels. They default to `None`: *not implemented*, and every test that
//!   needs one is reported as skipped, with the probe's name, never as passed (and failed
//!   in a strict run), unless [`Probes::not_applicable`] gives one of the reasons the
//!   contract accepts ([`Inapplicable`]) for that probe: then the test is `n/a` with it.
//!
//! A behaviour probe must not act until its future is polled: the suite calls each one
//! once with the placeholder [`PROBE_CHECK_ID`] (`"sandboxio-contract-probe-check"`) in
//! place of a sandbox id, label key or value, to learn whether it is implemented (`Some`)
//! or not (`None`), and drops the future unpolled. A probe that calls its provider, or
//! logs, before its future is polled shows that id in its provider's logs or as an error
//! for an unknown sandbox; the fix is to move the work into the `async` block.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use crate::SandboxBuilder;
use crate::backend::{Backend, BoxFuture};
use crate::exec::{Code, Command};
use crate::policy::ResourceLimits;
use crate::testing::TestNetwork;

use super::inapplicable::Inapplicable;
use super::net_scripts;

/// The result of a behaviour probe: a description of what went wrong on failure.
pub type ProbeResult<T> = std::result::Result<T, String>;

/// The placeholder the suite passes to each behaviour probe, once, to learn whether it is
/// implemented: a probe returns `Some` or `None` for it as for a real id, and must not act
/// before the future is polled (the suite drops it unpolled). A probe that calls its
/// provider before then shows this id in the provider's logs, or fails for an unknown
/// sandbox: move the call into the `async` block.
pub const PROBE_CHECK_ID: &str = "sandboxio-contract-probe-check";

/// A behaviour probe's future, `'static` so the suite can run it on any executor.
pub type ProbeFuture<T> = BoxFuture<'static, ProbeResult<T>>;

/// A TCP endpoint the test itself serves (on loopback or the project's own network, never
/// an outside address), used to observe egress from inside a sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canary {
    /// The host name or IP the sandbox connects to.
    pub host: String,
    /// The port.
    pub port: u16,
}

/// The name of a behaviour probe, as skip reasons report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ProbeKind {
    /// [`Probes::running_processes`]: the `assert_no_orphans` probe for processes.
    RunningProcesses,
    /// [`Probes::live_sandboxes`]: the `assert_no_orphans` probe for sandboxes.
    LiveSandboxes,
    /// [`Probes::simulate_kill_hang`].
    SimulateKillHang,
    /// [`Probes::expire_sandbox`].
    ExpireSandbox,
    /// [`Probes::canary`].
    Canary,
    /// [`Probes::limits_in_effect`].
    LimitsInEffect,
    /// [`Probes::provider_labels`].
    ProviderLabels,
    /// [`Probes::provider_config_text`].
    ProviderConfigText,
    /// [`Probes::missing_credentials`].
    MissingCredentials,
    /// [`Probes::code_gated`].
    CodeGated,
    /// [`Probes::test_network`].
    TestNetwork,
}

impl ProbeKind {
    /// The probe's name as the contract documents it.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            ProbeKind::RunningProcesses => "assert_no_orphans (running_processes)",
            ProbeKind::LiveSandboxes => "assert_no_orphans (live_sandboxes)",
            ProbeKind::SimulateKillHang => "simulate_kill_hang",
            ProbeKind::ExpireSandbox => "expire_sandbox",
            ProbeKind::Canary => "canary",
            ProbeKind::LimitsInEffect => "limits_in_effect",
            ProbeKind::ProviderLabels => "provider_labels",
            ProbeKind::ProviderConfigText => "provider_config_text",
            ProbeKind::MissingCredentials => "missing_credentials",
            ProbeKind::CodeGated => "code_gated",
            ProbeKind::TestNetwork => "test_network",
        }
    }
}

/// How many cancellation points the cancellation tests try.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CancellationPoints {
    /// Every k = 0, 1, … until the operation completes (right for backends on a virtual
    /// clock, such as the fake).
    Every,
    /// These values of k only; at least one must catch the operation before it completes
    /// (keeps real backends' CI time bounded; document the sample in your adapter's tests).
    Sample(Vec<usize>),
}

/// How the contract suite drives one backend. Implement the methods your backend needs
/// and keep the defaults for the rest; see the module documentation.
#[allow(unused_variables, reason = "the default bodies ignore the arguments an implementation uses")]
pub trait Probes: Send + Sync + 'static {
    // ---- builder hook

    /// Adjusts every builder the suite uses (typed options such as an image, a longer create
    /// timeout). Must not choose a network policy or limits: the suite does.
    fn configure(&self, builder: SandboxBuilder) -> SandboxBuilder {
        builder
    }

    // ---- command probes (default: POSIX shell)

    /// Prints `text` and a newline to stdout.
    fn echo(&self, text: &str) -> Command {
        Command::new("echo").arg(text)
    }

    /// Prints `text` and a newline to stderr.
    fn to_stderr(&self, text: &str) -> Command {
        Command::shell("printf '%s\\n' \"$1\" >&2").arg("sh").arg(text)
    }

    /// Exits with `code` without output.
    fn exit_with(&self, code: i32) -> Command {
        Command::shell(format!("exit {code}"))
    }

    /// Prints the value of environment variable `name` and a newline.
    fn print_env(&self, name: &str) -> Command {
        Command::shell(format!("printf '%s\\n' \"${name}\""))
    }

    /// Runs far longer than any test waits (an hour).
    fn hang(&self) -> Command {
        Command::new("sleep").arg("3600")
    }

    /// Writes every byte value 0–255 once, in order, to stdout; returns the command and
    /// the bytes expected.
    fn binary(&self) -> (Command, Vec<u8>) {
        let bytes: Vec<u8> = (0..=255).collect();
        let escaped = bytes.iter().fold(String::new(), |mut s, b| {
            let _ = write!(s, "\\{b:03o}");
            s
        });
        (Command::new("printf").arg(escaped), bytes)
    }

    /// Starts a background child that would outlive its parent (it sleeps an hour), then
    /// prints `parent done` and exits 0.
    fn orphan_child(&self) -> Command {
        Command::shell("sleep 3600 & echo parent done")
    }

    /// Prints the contents of the file at `path` (relative to the working directory).
    fn read_file(&self, path: &str) -> Command {
        Command::new("cat").arg(path)
    }

    /// Makes a symbolic link at `link` pointing to `target`.
    fn symlink(&self, target: &str, link: &str) -> Command {
        Command::new("ln").arg("-s").arg(target).arg(link)
    }

    /// Copies stdin to stdout until end-of-file.
    fn cat_stdin(&self) -> Command {
        Command::new("cat")
    }

    /// Prints `1`, `2` and `3` on their own lines, one second apart, to stdout, and `e` to
    /// stderr between them.
    fn paced_output(&self) -> Command {
        Command::shell("echo 1; sleep 1; echo e >&2; echo 2; sleep 1; echo 3")
    }

    /// A process tree: a background child and its parent, both running for an hour.
    fn process_tree(&self) -> Command {
        Command::shell("sleep 3600 & sleep 3600")
    }

    /// Prints `1` and `2` on their own lines, one second apart, then runs for an hour: a
    /// process that is certainly still running when a test drops it.
    fn lingering_output(&self) -> Command {
        Command::shell("echo 1; sleep 1; echo 2; sleep 3600")
    }

    /// Exits 0 if `host:port` is reached within a few seconds by the way out the sandbox is
    /// given, non-zero otherwise. `host` is passed on as written (an IP address in any
    /// spelling, or a name). Default: `nc -z -w 3 host port`, a direct TCP connection (needs
    /// `nc` in the image; where it is missing, the deny and allowlist tests' positive control
    /// cannot run and they skip, or fail a strict run). Override it where the way out is
    /// something else: a backend whose allowlist is enforced by a proxy (`local://` sets
    /// `HTTPS_PROXY`) must probe through it, for example a `CONNECT host:port` answered `200`
    /// ([`python_egress_probe`] does either, with Python's standard library).
    fn egress(&self, host: &str, port: u16) -> Command {
        Command::new("nc").arg("-z").arg("-w").arg("3").arg(host).arg(port.to_string())
    }

    /// Ends its own main process with signal `signal` (`kill -N $$` in a POSIX shell): the
    /// command dies by that signal, not by an exit.
    fn die_by_signal(&self, signal: i32) -> Command {
        Command::shell(format!("kill -{signal} $$; sleep 5; exit 3"))
    }

    /// Allocates `bytes` bytes in one buffer and touches all of it, then prints
    /// `survived`. Default: `python3 -c "b = bytearray(N); print('survived')"` (`CPython`
    /// zero-fills a `bytearray`, so every page is really used).
    fn exhaust_memory(&self, bytes: u64) -> Command {
        Command::new("python3").arg("-c").arg(format!("b = bytearray({bytes}); print('survived')"))
    }

    /// Prints the value of environment variable `name` and a newline, then runs for an
    /// hour: a command that holds its environment while others run.
    fn print_env_then_hang(&self, name: &str) -> Command {
        Command::shell(format!("printf '%s\\n' \"${name}\"; sleep 3600"))
    }

    /// Prints every process environment and argv it can read in the sandbox, its own
    /// included, and exits 0: `cat /proc/self/environ /proc/[0-9]*/environ
    /// /proc/[0-9]*/cmdline` (NUL-separated). The command secrets test runs it beside a
    /// command holding a secret.
    fn scan_environments(&self) -> Command {
        Command::shell("cat /proc/self/environ /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null; exit 0")
    }

    // ---- network probes (default: Python 3's standard library; see `test_network`)

    /// `GET url` through the sandbox's way out (for a proxy-enforced allowlist, the proxy
    /// its environment names, as `urllib` finds it): exits 0 on a `200` answer, non-zero on
    /// any other or none, and prints what it got.
    fn http_get(&self, url: &str) -> Command {
        net_scripts::http_get(url)
    }

    /// A real TLS client: a connection to `host:port` (a `CONNECT` tunnel through the
    /// sandbox's proxy where it has one), a handshake that names `server_name` and verifies
    /// the server against the PEM certificate `ca_pem`, then `GET path`. Exits 0 once the
    /// server answered over the verified session, non-zero otherwise.
    fn tls_get(&self, host: &str, port: u16, server_name: &str, ca_pem: &str, path: &str) -> Command {
        net_scripts::tls_get(host, port, server_name, ca_pem, path)
    }

    /// Sends `payload` in one UDP datagram to `ip:port` (an echo service) and exits 0 only
    /// if it comes back within 3 seconds.
    fn udp_echo(&self, ip: std::net::IpAddr, port: u16, payload: &str) -> Command {
        net_scripts::udp_echo(ip, port, payload)
    }

    /// Asks a DNS server for `name` (type `A`), over UDP and over TCP: the server at
    /// `server`, or, for `None`, every `nameserver` of the sandbox's `/etc/resolv.conf` and
    /// its C library's `getaddrinfo`. Exits 0 if any of them answered, non-zero if none did.
    fn dns_query(&self, server: Option<std::net::SocketAddr>, name: &str) -> Command {
        net_scripts::dns_query(server, name)
    }

    /// Sends `first` (a raw request) to the sandbox's proxy, reads the answer's head, then
    /// sends `then` down the same connection (a chained request) and prints what comes
    /// back. Exits 0 if the first answer was `200`, non-zero otherwise or where the sandbox
    /// has no proxy.
    fn proxy_exchange(&self, first: &str, then: &str) -> Command {
        net_scripts::proxy_exchange(first, then)
    }

    // ---- code probes (default: Python 3)

    /// Prints `text` and a newline.
    fn code_print(&self, text: &str) -> Code {
        Code::new(format!("print({text:?})"))
    }

    /// A cell that fails to compile.
    fn code_syntax_error(&self) -> Code {
        Code::new("print('unclosed'")
    }

    /// A cell that raises at run time; returns the cell and the error name expected.
    fn code_runtime_error(&self) -> (Code, String) {
        (Code::new("x = 1\nx / 0"), "ZeroDivisionError".to_owned())
    }

    /// Sets state in a context (`counter = 41`).
    fn code_set_state(&self) -> Code {
        Code::new("counter = 41")
    }

    /// Reads that state back, printing `42`.
    fn code_read_state(&self) -> Code {
        Code::new("counter += 1\nprint(counter)")
    }

    /// Displays an object whose display hooks produce `text/html` and `image/png` (standard
    /// library only); returns the cell and the PNG bytes expected.
    fn code_rich_display(&self) -> (Code, Vec<u8>) {
        let cell = "import base64\nclass Rich:\n    def _repr_html_(self):\n        return '<b>rich</b>'\n    def _repr_png_(self):\n        return base64.b64decode('iVBORw0KGgo=')\nRich()";
        (Code::new(cell), vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a])
    }

    /// A cell that runs far longer than any test waits.
    fn code_long_cell(&self) -> Code {
        Code::new("import time\nprint('started')\ntime.sleep(3600)")
    }

    /// Prints a line to stdout, one to stderr, and another to stdout; returns the cell, all
    /// it writes to stdout and all it writes to stderr.
    fn code_print_both(&self) -> (Code, String, String) {
        let cell = "import sys\nprint('one')\nsys.stderr.write('two\\n')\nprint('three')";
        (Code::new(cell), "one\nthree\n".to_owned(), "two\n".to_owned())
    }

    /// Prints `before` and a newline, then raises; returns the cell and the error name
    /// expected.
    fn code_print_then_raise(&self) -> (Code, String) {
        (Code::new("print('before')\nx = 1\nx / 0"), "ZeroDivisionError".to_owned())
    }

    /// A cell that prints `a` and a newline (flushed), then waits, for at most 30 s, until a
    /// file exists at `gate` (relative to the working directory, written by the test once it
    /// has seen `a`), then prints `b` and a newline; if the file never came, it prints
    /// `the gate never opened` before `b`. `None` where a cell cannot wait for the host (the
    /// fake simulates a cell whole before it delivers its output): the test of chunks
    /// arriving before the cell ends then skips, naming this probe.
    fn code_gated(&self, gate: &str) -> Option<Code> {
        Some(Code::new(format!(
            "import os, time\nprint('a', flush=True)\nfor _ in range(3000):\n    if os.path.exists({gate:?}):\n        break\n    time.sleep(0.01)\nelse:\n    print('the gate never opened', flush=True)\nprint('b')"
        )))
    }

    // ---- behaviour probes (default: not implemented, tests skip visibly)

    /// Descriptions of the processes still running in sandbox `sandbox_id` that a command
    /// started (not the sandbox's own init or agent). Empty means no orphan.
    ///
    /// Leave zombies out (a process that exited and that nobody has reaped yet, state `Z`
    /// in `/proc/<pid>/stat`): it runs nothing and holds no memory, and counting it would
    /// fail the orphan checks for a process that is already dead. A sandbox whose init
    /// never reaps piles them up, which is the init's bug, not a leak this probe is for.
    /// `local://` reads `/proc` by PID namespace, where a zombie's namespace link cannot be
    /// read, so it is never listed (and sandboxd, each sandbox's init, reaps it).
    /// The suite asks it after a command was killed or dropped, every 50 ms until it is
    /// empty or 10 s have passed (processes killed in the background take a moment), and,
    /// as the check's positive control, while a command runs: a probe that never lists
    /// anything fails that control.
    fn running_processes(&self, sandbox_id: &str) -> Option<ProbeFuture<Vec<String>>> {
        None
    }

    /// Ids of live sandboxes whose metadata has `key` = `value` (the suite labels each
    /// test's sandboxes uniquely). Empty means no orphan.
    fn live_sandboxes(&self, key: &str, value: &str) -> Option<ProbeFuture<Vec<String>>> {
        None
    }

    /// Makes the next kill of sandbox `sandbox_id` hang forever.
    fn simulate_kill_hang(&self, sandbox_id: &str) -> Option<ProbeFuture<()>> {
        None
    }

    /// Makes sandbox `sandbox_id` expire now, as if its TTL had passed.
    fn expire_sandbox(&self, sandbox_id: &str) -> Option<ProbeFuture<()>> {
        None
    }

    /// A server the test runs, reachable from sandboxes whose policy allows it.
    fn canary(&self) -> Option<Canary> {
        None
    }

    /// The project's own test network (`scripts/testnet up`), which the allowlist tests of
    /// names, addresses, TLS, DNS and UDP reach. `None` (the default): this backend cannot
    /// use one, and those tests skip naming this probe. `Some(Err(why))`: it can, but none is
    /// up here; those tests skip with `why`, and fail a strict run. Implement it as
    /// `Some(TestNetwork::load())`, and build the backend under test with
    /// [`TestNetwork::resolver`] as its egress resolver (for `local://`,
    /// `LocalBackend::with_egress_resolver`): the names it serves resolve only there.
    fn test_network(&self) -> Option<ProbeResult<TestNetwork>> {
        None
    }

    /// The resource limits in effect in sandbox `sandbox_id`, read from inside it (cgroups,
    /// rlimits) or from the provider.
    fn limits_in_effect(&self, sandbox_id: &str) -> Option<ProbeFuture<ResourceLimits>> {
        None
    }

    /// The provider-native labels of sandbox `sandbox_id` (Docker labels, E2B metadata).
    fn provider_labels(&self, sandbox_id: &str) -> Option<ProbeFuture<BTreeMap<String, String>>> {
        None
    }

    /// Everything the provider stores about sandbox `sandbox_id` as text (`docker inspect`),
    /// scanned for secrets.
    fn provider_config_text(&self, sandbox_id: &str) -> Option<ProbeFuture<String>> {
        None
    }

    /// A backend like the one under test but built without its credentials, and the
    /// environment variable that should hold them.
    fn missing_credentials(&self) -> Option<(Arc<dyn Backend>, String)> {
        None
    }

    /// `Some(reason)` for a backend that takes no credentials at all (a local one): the
    /// credentials test (`errors__auth_error_names_the_missing_env_var`) is then reported
    /// `n/a` with this reason, instead of skipped for want of
    /// [`Probes::missing_credentials`]. A backend that takes credentials implements
    /// `missing_credentials` instead. Default `None`.
    fn no_credentials(&self) -> Option<String> {
        None
    }

    /// `Some(reason)` when the behaviour probe `probe`, which this `Probes` does not
    /// implement, cannot apply to the backend: the tests that need it are then reported
    /// `n/a` with the reason. The reason is one the contract states ([`Inapplicable`]), and
    /// the suite accepts it only for its own probe and where the backend does not declare
    /// what the probe would prove; the probes that prove a MUST of every backend
    /// (`running_processes`, `live_sandboxes`, `limits_in_effect`, `provider_labels`,
    /// `provider_config_text`, `missing_credentials`) have no reason at all. A refused
    /// declaration fails every test it would have excused, strict run or not, saying what
    /// to do instead. Without a declaration, a test whose probe is not implemented is
    /// `skip`, and a strict run ([`ContractSuite::strict`](super::ContractSuite::strict),
    /// `SANDBOXIO_STRICT=1`, any `SANDBOXIO_REQUIRE_*=1`) fails it: a strict run passes
    /// only when every test ran or was declared inapplicable for an accepted reason. Asked
    /// only for a probe that is not implemented (an implemented probe always runs). For
    /// [`ProbeKind::MissingCredentials`], [`Probes::no_credentials`] says the backend takes
    /// none. Default `None`.
    fn not_applicable(&self, probe: ProbeKind) -> Option<Inapplicable> {
        None
    }

    /// How many cancellation points to try. Real backends must return a
    /// [`CancellationPoints::Sample`]: the operations cancelled are long-running, so trying
    /// every point until completion would take an hour.
    fn cancellation_points(&self) -> CancellationPoints {
        CancellationPoints::Every
    }
}

/// Whether a behaviour probe is implemented: it answers `Some` for a placeholder argument
/// (the future is dropped unpolled, so nothing happens).
pub(crate) fn implemented(probes: &dyn Probes, kind: ProbeKind) -> bool {
    use ProbeKind as K;
    let placeholder = PROBE_CHECK_ID;
    match kind {
        K::RunningProcesses => probes.running_processes(placeholder).is_some(),
        K::LiveSandboxes => probes.live_sandboxes(placeholder, placeholder).is_some(),
        K::SimulateKillHang => probes.simulate_kill_hang(placeholder).is_some(),
        K::ExpireSandbox => probes.expire_sandbox(placeholder).is_some(),
        K::Canary => probes.canary().is_some(),
        K::LimitsInEffect => probes.limits_in_effect(placeholder).is_some(),
        K::ProviderLabels => probes.provider_labels(placeholder).is_some(),
        K::ProviderConfigText => probes.provider_config_text(placeholder).is_some(),
        K::MissingCredentials => probes.missing_credentials().is_some(),
        K::CodeGated => probes.code_gated(placeholder).is_some(),
        K::TestNetwork => probes.test_network().is_some(),
    }
}

/// The default probes: POSIX shell and Python command and code probes, no behaviour
/// probes (their tests skip visibly).
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultProbes;

impl Probes for DefaultProbes {}

/// An egress probe in Python's standard library, for [`Probes::egress`] overrides: with no
/// `HTTPS_PROXY` in the sandbox's environment a direct TCP connection to `host:port`;
/// with one, a `CONNECT host:port` through that proxy, which counts as reached only when
/// the proxy answers `200` (sandboxio's egress gate answers only after it has connected).
/// `python` is the interpreter's path or name in the image. Exits 0 when reached, 1 or an
/// exception's status otherwise, within about 3 seconds.
#[must_use]
pub fn python_egress_probe(python: &str, host: &str, port: u16) -> Command {
    Command::new(python).arg("-c").arg(format!(
        r#"import os, socket, sys
proxy = os.environ.get("HTTPS_PROXY", "")
if not proxy:
    socket.create_connection(({host:?}, {port}), 3)
    sys.exit(0)
addr = proxy.split("://", 1)[-1].rstrip("/").rsplit(":", 1)
c = socket.create_connection((addr[0], int(addr[1])), 3)
c.sendall(b"CONNECT {host}:{port} HTTP/1.1\r\n\r\n")
sys.exit(0 if c.recv(64).startswith(b"HTTP/1.1 200") else 1)"#
    ))
}
