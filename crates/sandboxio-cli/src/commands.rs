//! The subcommands that talk to a backend. Each returns the process's exit code.

use std::future::Future;
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sandboxio::{
    Code, CodeResult, Command, Error, ErrorCode, ExecResult, ResourceLimits, Sandbox,
    exec::{OutputChunk, StreamKind},
};
use serde_json::{Value, json};

use crate::args::{
    CodeArgs, CommandLine, CpArgs, CreateArgs, Endpoint, ExecArgs, KillArgs, NewSandbox, RunArgs,
    SandboxOpts, download_name, exit_code, extension, parse_endpoint,
};
use crate::progress::{Direction, TransferBar};

/// A sandboxio error (the backend, the DSN, a refused policy): `docker run`'s code for its own failures.
pub const EXIT_ERROR: i32 = 125;
/// The command ran past `--timeout`: `timeout(1)`'s code.
pub const EXIT_TIMEOUT: i32 = 124;
/// Ctrl-C: 128 + SIGINT.
pub const EXIT_INTERRUPTED: i32 = 130;

/// Builds a sandbox on `dsn` with the options every creating subcommand shares.
pub(crate) async fn create_sandbox(
    dsn: &str,
    opts: &SandboxOpts,
    detached: bool,
    ttl: Option<Duration>,
) -> sandboxio::Result<Sandbox> {
    if opts.memory.is_some()
        && !Sandbox::capabilities_of(dsn)?.contains(sandboxio::policy::Capabilities::LIMIT_MEMORY)
    {
        // Said in the CLI's words: the library's refusal speaks of `.limits(..)`.
        let scheme = dsn.split("://").next().unwrap_or(dsn);
        return Err(Error::configuration(format!(
            "the {scheme} backend cannot limit a sandbox's memory: drop --memory, or use a backend that can (docker://)"
        )));
    }
    let limits = opts.memory.map(|mib| ResourceLimits::new().memory_mib(mib));
    let mut builder = Sandbox::builder(dsn)?.network(opts.network.clone()).limits(limits).detached(detached);
    for (key, value) in &opts.label {
        builder = builder.metadata(key, value);
    }
    if let Some(ttl) = ttl {
        builder = builder.ttl(ttl);
    }
    with_spinner("creating the sandbox", builder.create()).await
}

/// Awaits `work`, showing a spinner on stderr once it has taken a second, and only when
/// stdout is a terminal.
async fn with_spinner<T>(message: &'static str, work: impl Future<Output = T>) -> T {
    if !std::io::stdout().is_terminal() {
        return work.await;
    }
    let mut work = std::pin::pin!(work);
    tokio::select! {
        out = &mut work => return out,
        () = tokio::time::sleep(Duration::from_secs(1)) => {}
    }
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.set_message(message);
    bar.enable_steady_tick(Duration::from_millis(100));
    let out = work.await;
    bar.finish_and_clear();
    out
}

/// Prints a sandboxio error (as JSON on stdout with `--json`, else on stderr) and gives
/// its exit code.
pub(crate) fn fail(json: bool, e: &Error) -> i32 {
    if json {
        println!("{}", json!({ "error": error_json(e) }));
    } else {
        eprintln!("sandboxio: {e}");
    }
    if e.code() == ErrorCode::ExecutionTimeout { EXIT_TIMEOUT } else { EXIT_ERROR }
}

/// `{"code": "SBX-..", "message": ".."}`.
pub(crate) fn error_json(e: &Error) -> Value {
    json!({ "code": e.code().as_str(), "message": e.to_string() })
}

/// Resolves on Ctrl-C (SIGINT) or SIGTERM; never, if neither can be watched.
pub(crate) async fn interrupt() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        },
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

pub(crate) fn interrupted(json: bool, what: &str) -> i32 {
    if json {
        println!("{}", json!({ "error": { "code": "interrupted", "message": what } }));
    } else {
        eprintln!("sandboxio: interrupted; {what}");
    }
    EXIT_INTERRUPTED
}

/// Writes streamed chunks as they come: to this process's stdout and stderr, or with
/// `--json` as one JSON line per chunk on stdout (`{"stream": "stdout", "data": ".."}`,
/// `data_base64` instead of `data` for bytes that are not UTF-8 on their own).
struct Sink {
    json: bool,
}

impl Sink {
    fn new(json: bool) -> Self {
        Sink { json }
    }

    fn take(&mut self, chunk: &OutputChunk) {
        // A closed terminal or pipe is no reason to stop the command.
        if self.json {
            let _ = writeln!(std::io::stdout(), "{}", chunk_json(chunk));
            return;
        }
        let live: &mut dyn Write = match chunk.stream {
            StreamKind::Stderr => &mut std::io::stderr(),
            StreamKind::Stdout => &mut std::io::stdout(),
        };
        let _ = live.write_all(&chunk.data).and_then(|()| live.flush());
    }
}

/// One `--json` output line for a chunk.
fn chunk_json(chunk: &OutputChunk) -> Value {
    let stream = match chunk.stream {
        StreamKind::Stderr => "stderr",
        StreamKind::Stdout => "stdout",
    };
    match std::str::from_utf8(&chunk.data) {
        Ok(text) => json!({ "stream": stream, "data": text }),
        Err(_) => {
            json!({ "stream": stream, "data_base64": base64::engine::general_purpose::STANDARD.encode(&chunk.data) })
        }
    }
}

/// Runs `command` in `sandbox` with its output streamed into `sink`. With `interactive`
/// (`-i`), this process's stdin is forwarded to the command and closed at its end;
/// without, the command's stdin is closed at once, so a command that reads it sees
/// end-of-file instead of waiting until its timeout or the sandbox's TTL (as `docker exec`
/// without `-i`).
async fn stream_command(
    sandbox: &Sandbox,
    command: Command,
    sink: &mut Sink,
    interactive: bool,
) -> sandboxio::Result<ExecResult> {
    let mut stream = sandbox.stream(command)?;
    let mut input = if interactive {
        if !sandbox.capabilities().contains(sandboxio::policy::Capabilities::STDIN) {
            return Err(Error::missing_capability(sandbox.backend(), sandboxio::policy::Capabilities::STDIN));
        }
        Some(forward_stdin())
    } else {
        // A backend without stdin gives its commands none: nothing to close there.
        let _ = stream.close_stdin().await;
        None
    };
    loop {
        // `next_chunk` is cancel safe, so reading stdin beside it loses no output; the
        // branch not taken is dropped before the one taken runs, which may then write.
        tokio::select! {
            chunk = stream.next_chunk() => match chunk {
                Some(chunk) => sink.take(&chunk?),
                None => break,
            },
            read = async { input.as_mut()?.recv().await }, if input.is_some() => {
                if let Some(data) = read {
                    // The command may have closed its stdin (`head -1`): its output goes on.
                    if stream.write_stdin(&data).await.is_err() {
                        input = None;
                    }
                } else {
                    input = None;
                    let _ = stream.close_stdin().await;
                }
            }
        }
    }
    stream.wait().await
}

/// This process's stdin, read on a task of its own, in chunks; the channel closes at its
/// end (or on a read error).
fn forward_stdin() -> tokio::sync::mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        use tokio::io::AsyncReadExt as _;
        let mut stdin = tokio::io::stdin();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match stdin.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if tx.send(buf[..n].to_vec()).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    rx
}

/// A command or a cell with an optional timeout in whole seconds.
pub(crate) trait Within: Sized {
    /// The library's own `timeout(..)`.
    fn timeout_after(self, timeout: Duration) -> Self;

    /// `timeout_after(secs)` when `secs` is given.
    fn within(self, secs: Option<u64>) -> Self {
        match secs {
            Some(s) => self.timeout_after(Duration::from_secs(s)),
            None => self,
        }
    }
}

impl Within for Command {
    fn timeout_after(self, timeout: Duration) -> Self {
        self.timeout(timeout)
    }
}

impl Within for Code {
    fn timeout_after(self, timeout: Duration) -> Self {
        self.timeout(timeout)
    }
}

fn command_of(line: &CommandLine) -> Command {
    let argv = &line.command;
    Command::new(&argv[0]).args(&argv[1..]).within(line.timeout)
}

/// Says on stderr that the command was killed for memory: without it an OOM kill printed
/// nothing and exited 137, as any `kill -9` would.
fn say_oom(result: &ExecResult) {
    if result.oom_killed {
        eprintln!("sandboxio: the command was killed: out of memory (the sandbox's memory limit, --memory)");
    }
}

/// The last `--json` line of `run` and `exec`, after one line per output chunk.
fn exec_report(sandbox_id: &str, result: &ExecResult, downloaded: &[PathBuf]) -> Value {
    json!({
        "sandbox_id": sandbox_id,
        "exit_code": result.status.code(),
        "signal": result.status.signal(),
        "duration_ms": u64::try_from(result.duration.as_millis()).unwrap_or(u64::MAX),
        "oom_killed": result.oom_killed,
        "downloaded": downloaded.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
    })
}

/// Creates a sandbox, runs `work` in it, and closes it, whether `work` finished, failed or
/// was interrupted by Ctrl-C (which first drops `work`, killing what it ran).
async fn in_fresh_sandbox(new: &NewSandbox, work: impl AsyncFnOnce(&Sandbox) -> i32) -> i32 {
    let NewSandbox { common, sandbox: opts } = new;
    let sandbox = tokio::select! {
        created = create_sandbox(&common.dsn, opts, false, None) => match created {
            Ok(sandbox) => sandbox,
            Err(e) => return fail(common.json, &e),
        },
        () = interrupt() => return interrupted(common.json, "the sandbox being created is removed"),
    };
    let code = tokio::select! {
        code = work(&sandbox) => Some(code),
        () = interrupt() => None,
    };
    let closed = sandbox.close().await;
    match (code, closed) {
        (None, _) => interrupted(common.json, "the sandbox was killed"),
        (Some(code), Ok(())) => code,
        (Some(code), Err(e)) => {
            eprintln!("sandboxio: closing the sandbox: {e}");
            if code == 0 { EXIT_ERROR } else { code }
        }
    }
}

/// `sandboxio run`.
pub async fn run(args: RunArgs) -> i32 {
    let json = args.new.common.json;
    in_fresh_sandbox(&args.new, async |sandbox: &Sandbox| {
        for up in &args.upload {
            let bar = TransferBar::new(Direction::Upload, &format!("uploading {}", up.src.display()));
            let report = |p| bar.report(p);
            if let Err(e) = sandbox.fs().on_progress(&report).upload(&up.src, &up.dst).await {
                drop(bar);
                return fail(json, &e);
            }
        }
        let mut sink = Sink::new(json);
        let result =
            match stream_command(sandbox, command_of(&args.line), &mut sink, args.line.interactive).await {
                Ok(result) => result,
                Err(e) => return fail(json, &e),
            };
        let mut downloaded = Vec::new();
        for path in &args.download {
            let host = match download_name(path) {
                Ok(name) => PathBuf::from(name),
                Err(message) => return fail(json, &Error::invalid_input(message)),
            };
            let bar = TransferBar::new(Direction::Download, &format!("downloading {path}"));
            let report = |p| bar.report(p);
            if let Err(e) = sandbox.fs().on_progress(&report).download(path, &host).await {
                drop(bar);
                return fail(json, &e);
            }
            downloaded.push(host);
        }
        if json {
            println!("{}", exec_report(sandbox.id(), &result, &downloaded));
        } else {
            say_oom(&result);
        }
        exit_code(result.status)
    })
    .await
}

/// `sandboxio exec`: the sandbox is not this command's, so Ctrl-C stops the command only.
pub async fn exec(args: ExecArgs) -> i32 {
    let json = args.common.json;
    let work = async {
        let sandbox = Sandbox::connect(&args.common.dsn, &args.id).await?;
        let mut sink = Sink::new(json);
        let result =
            stream_command(&sandbox, command_of(&args.line), &mut sink, args.line.interactive).await?;
        if json {
            println!("{}", exec_report(sandbox.id(), &result, &[]));
        } else {
            say_oom(&result);
        }
        Ok::<_, Error>(exit_code(result.status))
    };
    tokio::select! {
        out = work => out.unwrap_or_else(|e| fail(json, &e)),
        () = interrupt() => interrupted(json, "the command was killed"),
    }
}

fn read_source(file: &str) -> std::io::Result<String> {
    if file == "-" {
        let mut source = String::new();
        std::io::stdin().read_to_string(&mut source)?;
        Ok(source)
    } else {
        std::fs::read_to_string(file)
    }
}

/// Saves the rich results of a cell under `dir` (`result-1.png`, `result-2.html`, ...) and
/// returns what it wrote, and the `text/plain` forms of results that had nothing richer.
fn save_results(result: &CodeResult, dir: &Path) -> std::io::Result<(Vec<PathBuf>, Vec<String>)> {
    let mut files = Vec::new();
    let mut texts = Vec::new();
    for (i, bundle) in result.results.iter().enumerate() {
        let mut saved = false;
        for (mime, data) in bundle {
            if let Some(ext) = extension(mime) {
                std::fs::create_dir_all(dir)?;
                let path = dir.join(format!("result-{}.{ext}", i + 1));
                std::fs::write(&path, data)?;
                files.push(path);
                saved = true;
            }
        }
        if !saved && let Some(text) = bundle.get("text/plain") {
            texts.push(String::from_utf8_lossy(text).into_owned());
        }
    }
    Ok((files, texts))
}

/// `sandboxio code`.
pub async fn code(args: CodeArgs) -> i32 {
    let json = args.new.common.json;
    let source = match read_source(&args.file) {
        Ok(source) => source,
        Err(e) => return fail(json, &Error::invalid_input(format!("cannot read {}: {e}", args.file))),
    };
    in_fresh_sandbox(&args.new, async |sandbox: &Sandbox| {
        let mut sink = Sink::new(json);
        let cell = async {
            let mut stream = sandbox.run_code_stream(Code::new(source))?;
            while let Some(chunk) = stream.next_chunk().await {
                sink.take(&chunk?);
            }
            stream.wait().await
        };
        let result = match cell.await {
            Ok(result) => result,
            Err(e) => return fail(json, &e),
        };
        let (files, texts) = match save_results(&result, &args.out_dir) {
            Ok(saved) => saved,
            Err(e) => return fail(json, &Error::invalid_input(format!("cannot save a result: {e}"))),
        };
        if json {
            let error = result
                .error
                .as_ref()
                .map(|e| json!({ "name": e.name, "value": e.value, "traceback": e.traceback }));
            println!(
                "{}",
                json!({
                    "sandbox_id": sandbox.id(),
                    "exit_code": result.status.code(),
                    "error": error,
                    "results": texts,
                    "files": files.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
                })
            );
        } else {
            for text in &texts {
                println!("{text}");
            }
            for file in &files {
                println!("saved {}", file.display());
            }
            if let Some(e) = &result.error {
                // The traceback ends with the `Name: value` line; print that alone without one.
                if e.traceback.is_empty() {
                    eprintln!("{}: {}", e.name, e.value);
                }
                for line in &e.traceback {
                    eprintln!("{line}");
                }
            }
        }
        i32::from(!result.success())
    })
    .await
}

/// `sandboxio create --detach`.
pub async fn create(args: CreateArgs) -> i32 {
    let json = args.new.common.json;
    let made = async {
        let sandbox = create_sandbox(
            &args.new.common.dsn,
            &args.new.sandbox,
            args.detach,
            args.ttl.map(Duration::from_secs),
        )
        .await?;
        let backend = sandbox.backend().to_owned();
        let id = sandbox.detach().await?;
        Ok::<_, Error>((id, backend))
    };
    match made.await {
        Ok((id, backend)) => {
            if json {
                println!("{}", json!({ "sandbox_id": id, "backend": backend }));
            } else {
                println!("{}", sandboxio::text::escape(&id));
            }
            0
        }
        Err(e) => fail(json, &e),
    }
}

/// `sandboxio kill`: every id is tried; the exit code is an error's if any failed.
pub async fn kill(args: KillArgs) -> i32 {
    let mut killed = Vec::new();
    let mut errors = Vec::new();
    for id in &args.ids {
        let outcome = async {
            let sandbox = Sandbox::connect(&args.common.dsn, id).await?;
            sandbox.kill().await
        };
        match outcome.await {
            Ok(()) => killed.push(id.clone()),
            Err(e) => {
                if !args.common.json {
                    eprintln!("sandboxio: {}: {e}", sandboxio::text::escape(id));
                }
                errors.push(json!({ "id": id, "error": error_json(&e) }));
            }
        }
    }
    if args.common.json {
        println!("{}", json!({ "killed": killed, "errors": errors }));
    } else {
        for id in &killed {
            println!("{}", sandboxio::text::escape(id));
        }
    }
    if errors.is_empty() { 0 } else { EXIT_ERROR }
}

/// `sandboxio cp`.
pub async fn cp(args: CpArgs) -> i32 {
    let json = args.common.json;
    let copy = async {
        match (parse_endpoint(&args.src), parse_endpoint(&args.dst)) {
            (Endpoint::Host(src), Endpoint::Sandbox { id, path }) => {
                let sandbox = Sandbox::connect(&args.common.dsn, &id).await?;
                // Into a directory (an existing one, or a path ending in `/`), under the
                // source's own name, as `cp` and `docker cp` do.
                let is_dir = path.ends_with('/') || sandbox.fs().list(&path).await.is_ok();
                let path = match (is_dir, src.file_name()) {
                    (true, Some(name)) => {
                        format!("{}/{}", path.trim_end_matches('/'), name.to_string_lossy())
                    }
                    _ => path,
                };
                let bar = TransferBar::new(Direction::Upload, "uploading");
                let report = |p| bar.report(p);
                sandbox.fs().on_progress(&report).upload(&src, &path).await
            }
            (Endpoint::Sandbox { id, path }, Endpoint::Host(dst)) => {
                let sandbox = Sandbox::connect(&args.common.dsn, &id).await?;
                let dst = match download_name(&path) {
                    Ok(name) if dst.is_dir() => dst.join(name),
                    _ => dst,
                };
                let bar = TransferBar::new(Direction::Download, "downloading");
                let report = |p| bar.report(p);
                sandbox.fs().on_progress(&report).download(&path, &dst).await
            }
            _ => Err(Error::invalid_input(
                "exactly one side of cp must be a sandbox path, ID:PATH (a relative PATH is under the sandbox's working directory; a host path with a colon is written ./a:b)",
            )),
        }
    };
    match copy.await {
        Ok(()) => {
            if json {
                println!("{}", json!({ "copied": { "from": args.src, "to": args.dst } }));
            }
            0
        }
        Err(e) => fail(json, &e),
    }
}
