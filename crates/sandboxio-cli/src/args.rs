//! The command line: clap's derive types and the pure parsers behind them. Nothing here does
//! I/O, so every rule is tested on strings alone.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use sandboxio::NetworkPolicy;

const EXAMPLES: &str = "\
Examples:
  sandboxio run -- python3 -c 'print(6 * 7)'
  sandboxio run --network allow=pypi.org --timeout 60 -- pip download requests
  sandboxio run --upload ./data.csv:/workspace/data.csv --download /workspace/out.txt -- python3 job.py
  echo 'import math; math.pi' | sandboxio code -
  id=$(sandboxio create --detach) && sandboxio exec \"$id\" -- ls / && sandboxio kill \"$id\"
  sandboxio ls --label team=search
  sandboxio reap --owner-dead --dry-run
  sandboxio extend --dsn e2b:// \"$id\" 2h
  sandboxio mcp --network deny
  sandboxio image build -t my/python:1 .
  sandboxio completions bash > /etc/bash_completion.d/sandboxio";

const MCP_HELP: &str = "\
Clients:
  Over stdio the client is the process at the other end; its sandboxes are killed when it
  closes stdin. Over HTTP the bearer token names the one client: its sandboxes belong to the
  token, not to an MCP session, so every session of the token sees and may use all of them
  (at most --max-sandboxes in all). A session ends on DELETE or after --session-idle seconds
  without a request, and kills no sandbox; sandboxes end by kill_sandbox, their TTL, or when
  the server stops (SIGINT, SIGTERM).

Examples:
  An MCP client's server entry:
    {\"command\": \"sandboxio\", \"args\": [\"mcp\", \"--dsn\", \"local://\"]}
  Streamable HTTP on loopback, for a browser app at https://app.example.com too:
    SANDBOXIO_MCP_TOKEN=$(openssl rand -hex 32) sandboxio mcp --transport http --allow-origin https://app.example.com";

/// Run untrusted code in a sandbox (`local://`, `docker://`), or serve sandboxes to agents over MCP.
#[derive(Debug, Parser)]
#[command(name = "sandboxio", version, after_help = EXAMPLES)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Cmd,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Create a sandbox, run one command in it with live output, download files, and exit
    /// with the command's exit code; Ctrl-C kills and removes the sandbox.
    #[command(
        after_help = "Examples:\n  sandboxio run -- sh -c 'echo hi; exit 3'\n  sandboxio run --json --network deny -- python3 -c 'print(1)'"
    )]
    Run(RunArgs),
    /// Run a Python cell (from FILE, or `-` for stdin); rich results (PNG, SVG, HTML) are
    /// saved as files and named on stdout.
    #[command(
        after_help = "Examples:\n  sandboxio code plot.py --out-dir results\n  echo '1 + 1' | sandboxio code -"
    )]
    Code(CodeArgs),
    /// Create a sandbox that outlives this command and print its id.
    Create(CreateArgs),
    /// Run a command in a sandbox created with `create --detach`.
    #[command(after_help = "Example:\n  sandboxio exec 3f2a9c -- cat /etc/os-release")]
    Exec(ExecArgs),
    /// Copy a file into or out of a sandbox: one side is `ID:PATH`.
    #[command(
        after_help = "Examples:\n  sandboxio cp ./in.txt 3f2a9c:/workspace/in.txt\n  sandboxio cp 3f2a9c:/workspace/out.txt ./out.txt"
    )]
    Cp(CpArgs),
    /// Kill sandboxes by id.
    Kill(KillArgs),
    /// List the sandboxes of every backend compiled in (or of `--dsn`): id, backend, age,
    /// TTL left, whether the owner process is alive, labels.
    #[command(
        after_help = "Examples:\n  sandboxio ls\n  sandboxio ls --dsn docker:// --label team=search --json"
    )]
    Ls(LsArgs),
    /// Remove expired sandboxes (and, with `--owner-dead`, those whose owner process on
    /// this host is gone) on every backend compiled in (or on `--dsn`).
    #[command(
        after_help = "Examples:\n  sandboxio reap --owner-dead --dry-run\n  sandboxio reap --dsn docker:// --owner-dead"
    )]
    Reap(ReapArgs),
    /// Move the end of a live sandbox's life to DURATION from now, where the backend can
    /// (`e2b://`; `local://` and `docker://` fix the TTL at creation and refuse).
    #[command(
        after_help = "Examples:\n  sandboxio extend --dsn e2b:// i1a2b3c 2h\n  sandboxio extend --dsn e2b:// i1a2b3c 90s"
    )]
    Extend(ExtendArgs),
    /// Serve sandboxes to an MCP client over stdio or Streamable HTTP, within the bounds set here.
    #[command(after_help = MCP_HELP)]
    Mcp(McpArgs),
    /// Images for `docker://`: `image build -t TAG CONTEXT`.
    Image(crate::image::ImageArgs),
    /// Print a shell completion script.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// What every subcommand that talks to a backend takes.
#[derive(Debug, Args)]
pub struct Common {
    /// The backend, as a DSN (`local://`, `docker://?image=sandboxio/python:2`, `fake://`).
    #[arg(long, default_value = "local://")]
    pub dsn: String,
    /// Print one JSON object on stdout instead of text (for scripts).
    #[arg(long)]
    pub json: bool,
}

/// What every subcommand that makes a sandbox takes.
#[derive(Debug, Args)]
pub struct NewSandbox {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub common: Common,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub sandbox: SandboxOpts,
}

/// The command that `run` and `exec` run.
#[derive(Debug, Args)]
pub struct CommandLine {
    /// Kill the command after this many seconds.
    #[arg(long, value_name = "S")]
    pub timeout: Option<u64>,
    /// Forward this process's stdin to the command (closed at its end). Without it, the
    /// command's stdin is closed at once: it reads end-of-file, as under `docker exec`
    /// without `-i`.
    #[arg(short, long)]
    pub interactive: bool,
    /// The command and its arguments (argv, no shell).
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// How a new sandbox is made.
#[derive(Debug, Clone, Args)]
pub struct SandboxOpts {
    /// Network policy: `deny`, `allow`, or `allow=HOST,..` (an allowlist).
    #[arg(long, default_value = "deny", value_parser = parse_network)]
    pub network: NetworkPolicy,
    /// Memory limit in MiB (refused by backends that cannot enforce it).
    #[arg(long, value_name = "MIB")]
    pub memory: Option<u64>,
    /// A label for the sandbox (repeatable), as `ls --label` and other tools find it.
    #[arg(long, value_name = "K=V", value_parser = parse_label)]
    pub label: Vec<(String, String)>,
}

/// `sandboxio run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub new: NewSandbox,
    /// Copy a host file into the sandbox before the command runs.
    #[arg(long, value_name = "SRC:DST", value_parser = parse_upload)]
    pub upload: Vec<Upload>,
    /// Copy a file out of the sandbox after the command (into the current directory).
    #[arg(long, value_name = "PATH")]
    pub download: Vec<String>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub line: CommandLine,
}

/// `sandboxio code`.
#[derive(Debug, Args)]
pub struct CodeArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub new: NewSandbox,
    /// The cell's source file, or `-` for stdin.
    #[arg(default_value = "-")]
    pub file: String,
    /// Where rich results are saved.
    #[arg(long, default_value = ".")]
    pub out_dir: PathBuf,
}

/// `sandboxio create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub new: NewSandbox,
    /// Let the sandbox outlive this command, until its TTL or `sandboxio kill` (required:
    /// a sandbox that did not would end with the command that made it).
    #[arg(long, required = true)]
    pub detach: bool,
    /// How long the sandbox may live, in seconds (the library's default when absent).
    #[arg(long, value_name = "S")]
    pub ttl: Option<u64>,
}

/// `sandboxio exec`.
#[derive(Debug, Args)]
pub struct ExecArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub common: Common,
    /// The sandbox id that `create --detach` printed.
    pub id: String,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub line: CommandLine,
}

/// `sandboxio cp`.
#[derive(Debug, Args)]
pub struct CpArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub common: Common,
    /// The source: a host path, or `ID:PATH` in a sandbox.
    pub src: String,
    /// The destination: a host path, or `ID:PATH` in a sandbox.
    pub dst: String,
}

/// `sandboxio kill`.
#[derive(Debug, Args)]
pub struct KillArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub common: Common,
    /// The sandbox ids.
    #[arg(required = true)]
    pub ids: Vec<String>,
}

/// Which backends `ls` and `reap` look at, and how they print.
#[derive(Debug, Args)]
pub struct Backends {
    /// A backend to look at, as a DSN (repeatable). Default: every backend compiled in
    /// (`local://` and `docker://` in the standard build).
    #[arg(long, value_name = "DSN")]
    pub dsn: Vec<String>,
    /// Print JSON on stdout instead of text (for scripts).
    #[arg(long)]
    pub json: bool,
}

/// `sandboxio ls`.
#[derive(Debug, Args)]
pub struct LsArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub backends: Backends,
    /// Only sandboxes with this label (repeatable: all must match).
    #[arg(long, value_name = "K=V", value_parser = parse_label)]
    pub label: Vec<(String, String)>,
}

/// `sandboxio reap`.
#[derive(Debug, Args)]
pub struct ReapArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub backends: Backends,
    /// Also remove owned (not detached) sandboxes whose owner process on this host is gone.
    #[arg(long)]
    pub owner_dead: bool,
    /// Remove nothing; print what would be removed.
    #[arg(long)]
    pub dry_run: bool,
    /// Look only at sandboxes with this label (repeatable: all must match).
    #[arg(long, value_name = "K=V", value_parser = parse_label)]
    pub label: Vec<(String, String)>,
}

/// `sandboxio extend`.
#[derive(Debug, Args)]
pub struct ExtendArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub common: Common,
    /// The sandbox id.
    pub id: String,
    /// The new TTL, from now: seconds, or a number with `s`, `m`, `h` or `d` (`90s`, `2h`).
    #[arg(value_parser = parse_duration)]
    pub duration: std::time::Duration,
}

/// `sandboxio mcp`.
#[derive(Debug, Args)]
pub struct McpArgs {
    /// The backend of the session's sandbox.
    #[arg(long, default_value = "local://")]
    pub dsn: String,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub sandbox: SandboxOpts,
    /// The transport.
    #[arg(long, value_enum, default_value_t = Transport::Stdio)]
    pub transport: Transport,
    /// The longest TTL a client may give a sandbox, in seconds.
    #[arg(long, value_name = "S", default_value_t = 3600)]
    pub max_ttl: u64,
    /// How many live sandboxes a client may hold at once.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub max_sandboxes: usize,
    /// The largest file `read_file` returns, in MiB (a larger one is refused with SBX-016),
    /// and the most a `run_code` cell's output and rich results keep together (the rest is
    /// dropped, and the answer says so): each is held whole in the server's memory, once
    /// per concurrent call.
    #[arg(long, value_name = "MIB", default_value_t = 4)]
    pub max_read: u64,
    /// The longest a `run_command` may run, in seconds: its timeout when the call gives
    /// none, and the most a call may ask for (an agent's command never runs unbounded).
    #[arg(long, value_name = "S", default_value_t = crate::bounds::DEFAULT_TIMEOUT_SECS)]
    pub exec_timeout: u64,
    /// The longest a `run_code` cell may run, in seconds, as `--exec-timeout` for commands.
    /// A cell past it is interrupted (`KeyboardInterrupt`) and its Python session kept where
    /// the interpreter stops.
    #[arg(long, value_name = "S", default_value_t = crate::bounds::DEFAULT_TIMEOUT_SECS)]
    pub cell_timeout: u64,
    /// How much of each stream (stdout, stderr) of a command or a cell a tool returns, in
    /// KiB: its head and its tail, with a line saying what was cut between them and the file
    /// in the sandbox that holds all of it.
    #[arg(long, value_name = "KIB", default_value_t = crate::mcp::output::DEFAULT_OUTPUT_LIMIT_KIB,
          value_parser = clap::value_parser!(u64).range(1..=1024 * 1024))]
    pub output_limit: u64,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub http: HttpOpts,
}

/// The options of `sandboxio mcp --transport http`.
#[derive(Debug, Args)]
#[command(next_help_heading = "Streamable HTTP (--transport http)")]
pub struct HttpOpts {
    /// Where to listen (loopback unless you widen it; port 0 picks one, printed on stderr).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8765")]
    pub listen: std::net::SocketAddr,
    /// The environment variable holding the bearer token every request must carry.
    #[arg(long, value_name = "VAR", default_value = "SANDBOXIO_MCP_TOKEN")]
    pub token_env: String,
    /// A browser origin (`https://app.example.com:443`, `http://host:*`) whose requests are
    /// served; a request with any other `Origin` is refused with 403. Loopback origins are
    /// allowed when the listener is on loopback. Repeatable.
    #[arg(long, value_name = "ORIGIN")]
    pub allow_origin: Vec<String>,
    /// How many connections are served at once; one more is answered 503 and closed.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub max_connections: usize,
    /// Seconds a connection may take to send a request's headers (or stay idle between
    /// requests) before it is closed.
    #[arg(long, value_name = "S", default_value_t = 10)]
    pub header_timeout: u64,
    /// Seconds a request may take to send its body (at most 4 MiB) once its headers are in;
    /// a slower one is answered 408 and closed.
    #[arg(long, value_name = "S", default_value_t = 30)]
    pub body_timeout: u64,
    /// How many MCP sessions (clients of revisions before 2026-07-28) may be live at once.
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub max_sessions: usize,
    /// Seconds without a request after which a session is closed (its sandboxes stay).
    #[arg(long, value_name = "S", default_value_t = 300)]
    pub session_idle: u64,
}

/// How `sandboxio mcp` talks to its client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Transport {
    /// JSON-RPC over stdin and stdout.
    Stdio,
    /// MCP's Streamable HTTP at `http://ADDR/mcp`, with a bearer token.
    Http,
}

/// A `--upload SRC:DST` pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upload {
    /// The host file.
    pub src: PathBuf,
    /// Its path in the sandbox.
    pub dst: String,
}

/// One side of `sandboxio cp`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A host path.
    Host(PathBuf),
    /// A path in the sandbox with this id.
    Sandbox {
        /// The sandbox id.
        id: String,
        /// The path in it.
        path: String,
    },
}

/// `--network`: `deny`, `allow`, or `allow=HOST,..`.
///
/// # Errors
///
/// A message naming the accepted forms, or the library's reason an allowlist entry is bad.
pub fn parse_network(s: &str) -> Result<NetworkPolicy, String> {
    match s {
        "deny" => Ok(NetworkPolicy::deny_all()),
        "allow" => Ok(NetworkPolicy::allow_all()),
        _ => match s.strip_prefix("allow=") {
            Some(hosts) => {
                let entries: Vec<&str> = hosts.split(',').map(str::trim).filter(|h| !h.is_empty()).collect();
                if entries.is_empty() {
                    return Err("`allow=` needs at least one host, as in allow=pypi.org,github.com".into());
                }
                NetworkPolicy::allowlist(entries).map_err(|e| e.to_string())
            }
            None => Err(format!("{s:?} is not a network policy: use deny, allow, or allow=HOST,..")),
        },
    }
}

/// `--label K=V`, split at the first `=`; the key must not be empty.
///
/// # Errors
///
/// When there is no `=` or the key is empty.
pub fn parse_label(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("{s:?} is not a label: use KEY=VALUE")),
    }
}

/// A duration: whole seconds (`90`), or a number with a unit, `s`, `m`, `h` or `d`
/// (`90s`, `10m`, `2h`, `1d`).
///
/// # Errors
///
/// A message naming the accepted forms.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let bad =
        || format!("{s:?} is not a duration: use seconds or a number with s, m, h or d, as in 90s or 2h");
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let scale = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    n.checked_mul(scale).map(std::time::Duration::from_secs).ok_or_else(bad)
}

/// A duration as people read it, to the largest whole unit: `42s`, `5m`, `3h`, `2d`.
#[must_use]
pub fn human(d: std::time::Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// `--upload SRC:DST`, split at the last `:` (a host path may hold one). DST is a sandbox
/// path, relative ones to the sandbox's working directory.
///
/// # Errors
///
/// When there is no `:`, or either side is empty.
pub fn parse_upload(s: &str) -> Result<Upload, String> {
    let Some((src, dst)) = s.rsplit_once(':') else {
        return Err(format!("{s:?} is not SRC:DST"));
    };
    if src.is_empty() || dst.is_empty() {
        return Err(format!("{s:?} is not SRC:DST: both sides are needed"));
    }
    Ok(Upload { src: PathBuf::from(src), dst: dst.to_owned() })
}

/// One side of `cp`: `ID:/PATH` names a sandbox file (the path after the first `:` is
/// absolute); anything else is a host path.
#[must_use]
pub fn parse_endpoint(s: &str) -> Endpoint {
    match s.split_once(':') {
        Some((id, path)) if !id.is_empty() && !id.contains('/') && path.starts_with('/') => {
            Endpoint::Sandbox { id: id.to_owned(), path: path.to_owned() }
        }
        _ => Endpoint::Host(PathBuf::from(s)),
    }
}

/// The host file name a `--download PATH` is saved as: the last component of PATH.
///
/// # Errors
///
/// When PATH has no file name (`/`, `..`, empty).
pub fn download_name(path: &str) -> Result<String, String> {
    match path.rsplit('/').next() {
        Some(name) if !name.is_empty() && name != "." && name != ".." => Ok(name.to_owned()),
        _ => Err(format!("{path:?} names no file to download")),
    }
}

/// The exit code a shell would show for a process that ended so: its code, or 128 plus
/// the signal.
#[must_use]
pub fn exit_code(status: sandboxio::ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => 1,
    }
}

/// The file extension a rich result of this MIME type is saved with; `None` for types
/// that are printed instead (`text/plain`) or not saved.
#[must_use]
pub fn extension(mime: &str) -> Option<&'static str> {
    Some(match mime {
        "image/png" => "png",
        "image/jpeg" => "jpg",
        "image/svg+xml" => "svg",
        "image/gif" => "gif",
        "text/html" => "html",
        "text/markdown" => "md",
        "text/latex" => "tex",
        "application/json" => "json",
        "application/pdf" => "pdf",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(argv: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("sandboxio").chain(argv.iter().copied()))
    }

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn network_forms() {
        assert_eq!(parse_network("deny"), Ok(NetworkPolicy::deny_all()));
        assert_eq!(parse_network("allow"), Ok(NetworkPolicy::allow_all()));
        assert_eq!(
            parse_network("allow=pypi.org, github.com"),
            Ok(NetworkPolicy::allowlist(["pypi.org", "github.com"]).unwrap())
        );
        assert_eq!(
            parse_network("open").unwrap_err(),
            "\"open\" is not a network policy: use deny, allow, or allow=HOST,.."
        );
        assert_eq!(
            parse_network("allow=,").unwrap_err(),
            "`allow=` needs at least one host, as in allow=pypi.org,github.com"
        );
        assert!(parse_network("allow=exa mple.com").unwrap_err().starts_with("[SBX-"));
    }

    #[test]
    fn upload_forms() {
        assert_eq!(
            parse_upload("./a:b.txt:/workspace/x"),
            Ok(Upload { src: PathBuf::from("./a:b.txt"), dst: "/workspace/x".into() })
        );
        assert_eq!(parse_upload("nocolon").unwrap_err(), "\"nocolon\" is not SRC:DST");
        assert_eq!(parse_upload(":/x").unwrap_err(), "\":/x\" is not SRC:DST: both sides are needed");
        assert_eq!(parse_upload("a:rel"), Ok(Upload { src: PathBuf::from("a"), dst: "rel".into() }));
    }

    #[test]
    fn endpoint_forms() {
        assert_eq!(parse_endpoint("abc:/w/x"), Endpoint::Sandbox { id: "abc".into(), path: "/w/x".into() });
        assert_eq!(parse_endpoint("./abc:/w"), Endpoint::Host(PathBuf::from("./abc:/w")));
        assert_eq!(parse_endpoint("out.txt"), Endpoint::Host(PathBuf::from("out.txt")));
        assert_eq!(parse_endpoint("c:rel"), Endpoint::Host(PathBuf::from("c:rel")));
    }

    #[test]
    fn download_names() {
        assert_eq!(download_name("/workspace/out.txt"), Ok("out.txt".into()));
        assert_eq!(download_name("/").unwrap_err(), "\"/\" names no file to download");
        assert!(download_name("/a/..").is_err());
    }

    #[test]
    fn exit_codes_and_extensions() {
        assert_eq!(exit_code(sandboxio::ExitStatus::Code(3)), 3);
        assert_eq!(exit_code(sandboxio::ExitStatus::Signal(9)), 137);
        assert_eq!(extension("image/png"), Some("png"));
        assert_eq!(extension("text/plain"), None);
    }

    #[test]
    fn run_argv() {
        let cli = parse(&[
            "run",
            "--dsn",
            "fake://",
            "--json",
            "--network",
            "allow",
            "--memory",
            "256",
            "--timeout",
            "5",
            "--upload",
            "a.txt:/w/a.txt",
            "--download",
            "/w/b",
            "--",
            "sh",
            "-c",
            "exit 3",
        ])
        .unwrap();
        let Cmd::Run(run) = cli.command else { panic!("not run: {cli:?}") };
        assert_eq!(run.new.common.dsn, "fake://");
        assert!(run.new.common.json);
        assert_eq!(run.new.sandbox.network, NetworkPolicy::allow_all());
        assert_eq!(run.new.sandbox.memory, Some(256));
        assert_eq!(run.line.timeout, Some(5));
        assert_eq!(run.upload, vec![Upload { src: "a.txt".into(), dst: "/w/a.txt".into() }]);
        assert_eq!(run.download, vec!["/w/b".to_owned()]);
        assert_eq!(run.line.command, ["sh", "-c", "exit 3"]);
    }

    #[test]
    fn defaults() {
        let Cmd::Run(run) = parse(&["run", "--", "true"]).unwrap().command else { panic!() };
        assert_eq!(run.new.common.dsn, "local://");
        assert!(!run.new.common.json);
        assert_eq!(run.new.sandbox.network, NetworkPolicy::deny_all());
        let Cmd::Code(code) = parse(&["code"]).unwrap().command else { panic!() };
        assert_eq!(code.file, "-");
        assert_eq!(code.out_dir, PathBuf::from("."));
    }

    #[test]
    fn refusals() {
        let err = parse(&["run"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::MissingRequiredArgument);
        let err = parse(&["create"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::MissingRequiredArgument);
        assert!(err.to_string().contains("--detach"), "{err}");
        let err = parse(&["run", "--network", "open", "--", "true"]).unwrap_err();
        assert_eq!(
            err.to_string().lines().next().unwrap(),
            "error: invalid value 'open' for '--network <NETWORK>': \"open\" is not a network policy: use deny, allow, or allow=HOST,.."
        );
        assert_eq!(parse(&["kill"]).unwrap_err().kind(), clap::error::ErrorKind::MissingRequiredArgument);
    }

    #[test]
    fn labels_and_durations() {
        assert_eq!(parse_label("team=a=b"), Ok(("team".into(), "a=b".into())));
        assert_eq!(parse_label("team="), Ok(("team".into(), String::new())));
        assert_eq!(parse_label("=x").unwrap_err(), "\"=x\" is not a label: use KEY=VALUE");
        assert!(parse_label("team").is_err());
        let secs = |n| Ok(std::time::Duration::from_secs(n));
        assert_eq!(parse_duration("90"), secs(90));
        assert_eq!(parse_duration("90s"), secs(90));
        assert_eq!(parse_duration("10m"), secs(600));
        assert_eq!(parse_duration("2h"), secs(7200));
        assert_eq!(parse_duration("1d"), secs(86_400));
        for bad in ["", "h", "2 h", "2w", "-1", "1.5h", "99999999999999999999d"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
        assert_eq!(human(std::time::Duration::from_secs(59)), "59s");
        assert_eq!(human(std::time::Duration::from_secs(7199)), "1h");
        assert_eq!(human(std::time::Duration::from_secs(200_000)), "2d");
    }

    #[test]
    fn inventory_argv() {
        let Cmd::Ls(ls) =
            parse(&["ls", "--label", "a=1", "--label", "b=2", "--dsn", "fake://"]).unwrap().command
        else {
            panic!()
        };
        assert_eq!(ls.label, [("a".into(), "1".into()), ("b".into(), "2".into())]);
        assert_eq!(ls.backends.dsn, ["fake://"]);
        let Cmd::Reap(reap) = parse(&["reap", "--owner-dead", "--dry-run"]).unwrap().command else {
            panic!()
        };
        assert!(reap.owner_dead && reap.dry_run && reap.backends.dsn.is_empty());
        let Cmd::Extend(ext) = parse(&["extend", "id1", "2h"]).unwrap().command else { panic!() };
        assert_eq!((ext.id.as_str(), ext.duration.as_secs()), ("id1", 7200));
        assert!(parse(&["extend", "id1", "soon"]).is_err());
    }

    #[test]
    fn help_has_examples() {
        let help = Cli::command().render_long_help().to_string();
        assert!(help.contains("Examples:\n  sandboxio run -- python3 -c 'print(6 * 7)'"), "{help}");
    }
}
