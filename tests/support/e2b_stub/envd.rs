//! envd (`spec/envd/process/process.proto`, `spec/envd/filesystem/filesystem.proto`,
//! `spec/envd/envd.yaml`): Connect unary calls as bare JSON, server streams as envelopes
//! with an end frame; `/files` and `/health`. A process ends only by itself or by
//! `SendSignal`: a client that goes away leaves it running, as envd does.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::{Method, Request, Response, StatusCode};
use sandboxio::{Command, ErrorCode, ExitStatus, exec::StreamKind};
use tokio::sync::mpsc;

use super::{Body, State, StubSandbox, body_bytes, empty, json, multipart};

/// A running process's stdin.
pub struct Proc {
    stdin: mpsc::Sender<StdinOp>,
    tag: Option<String>,
}

enum StdinOp {
    Data(Vec<u8>),
    Close,
}

fn envelope(flags: u8, payload: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(5 + payload.len());
    out.push(flags);
    out.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_be_bytes());
    out.extend_from_slice(payload);
    Bytes::from(out)
}

fn connect_error(status: StatusCode, code: &str, message: &str) -> Response<Body> {
    json(status, &serde_json::json!({"code": code, "message": message}))
}

fn http_error(status: StatusCode, message: &str) -> Response<Body> {
    json(status, &serde_json::json!({"code": status.as_u16(), "message": message}))
}

pub async fn handle(
    state: Arc<State>,
    sandbox: Arc<StubSandbox>,
    req: Request<hyper::body::Incoming>,
) -> Response<Body> {
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or_default().to_owned();
    let authorized =
        req.headers().get("x-access-token").and_then(|t| t.to_str().ok()) == Some(sandbox.token.as_str());
    // `/files` takes the token too (or a signed URL, which the stub does not issue).
    if !authorized && path != "/health" {
        return http_error(
            StatusCode::UNAUTHORIZED,
            "unauthorized access, please provide a valid access token or method signing if supported",
        );
    }
    let method = req.method().clone();
    // envd sends a keepalive event on a quiet process stream every this many seconds
    // (90 when the header is absent).
    let keepalive = req
        .headers()
        .get("keepalive-ping-interval")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(Duration::from_secs(90), Duration::from_secs);
    let range = req.headers().get("range").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let content_type =
        req.headers().get("content-type").and_then(|t| t.to_str().ok()).unwrap_or_default().to_owned();
    let body = body_bytes(req).await;
    let file_path = || {
        form_urlencoded::parse(query.as_bytes())
            .find(|(k, _)| k == "path")
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default()
    };
    match (method, path.as_str()) {
        (Method::GET, "/health") => empty(StatusCode::NO_CONTENT),
        (Method::GET, "/files") => read_file(&sandbox, &file_path(), range.as_deref()).await,
        (Method::POST, "/files") => write_files(&sandbox, &file_path(), &content_type, &body).await,
        (Method::POST, "/process.Process/Start") => start(&state, &sandbox, &body, keepalive),
        (Method::POST, rpc) => {
            let Ok(msg) = serde_json::from_slice::<serde_json::Value>(&body) else {
                return connect_error(StatusCode::BAD_REQUEST, "invalid_argument", "malformed JSON");
            };
            unary(&sandbox, rpc, &msg).await
        }
        _ => http_error(StatusCode::NOT_FOUND, "no such path"),
    }
}

/// `POST /files`: the raw body (`application/octet-stream`) to `?path=`, or each
/// `multipart/form-data` part named `file` to `?path=` (one part) or to its `filename`.
/// Answers the entries written.
async fn write_files(
    sandbox: &StubSandbox,
    query_path: &str,
    content_type: &str,
    body: &[u8],
) -> Response<Body> {
    let files = match multipart::boundary(content_type) {
        Some(boundary) => {
            let Some(parts) = multipart::files(body, &boundary) else {
                return http_error(StatusCode::BAD_REQUEST, "malformed multipart body");
            };
            let single = parts.len() == 1 && !query_path.is_empty();
            let mut files = Vec::new();
            for part in parts {
                let path = if single { Some(query_path.to_owned()) } else { part.filename };
                let Some(path) = path.filter(|p| !p.is_empty()) else {
                    return http_error(StatusCode::BAD_REQUEST, "a part names no path");
                };
                files.push((path, part.data));
            }
            files
        }
        None => vec![(query_path.to_owned(), body.to_vec())],
    };
    let mut written = Vec::new();
    for (p, data) in files {
        match sandbox.local.fs().write(&p, data).await {
            Ok(()) => {
                written.push(serde_json::json!({"path": p, "name": p.rsplit('/').next(), "type": "file"}));
            }
            Err(e) if e.code() == ErrorCode::IsADirectory => {
                return http_error(StatusCode::BAD_REQUEST, &format!("path '{p}' is a directory"));
            }
            Err(e) if e.code() == ErrorCode::PermissionDenied => {
                return http_error(StatusCode::FORBIDDEN, &format!("permission denied: {p}"));
            }
            Err(e) => return http_error(StatusCode::BAD_REQUEST, &e.to_string()),
        }
    }
    json(StatusCode::OK, &serde_json::Value::Array(written))
}

async fn read_file(sandbox: &StubSandbox, path: &str, range: Option<&str>) -> Response<Body> {
    match sandbox.local.fs().read(path).await {
        Ok(data) => ranged(data, range),
        Err(e) if e.code() == ErrorCode::NotFound => {
            http_error(StatusCode::NOT_FOUND, &format!("path '{path}' does not exist"))
        }
        Err(e) if e.code() == ErrorCode::IsADirectory => {
            http_error(StatusCode::BAD_REQUEST, &format!("path '{path}' is a directory"))
        }
        Err(e) => http_error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// The reply of Go's `http.ServeContent`, which envd's download uses, for one file: the
/// whole file (200) without `Range`; one byte range of it (206 with `Content-Range`) for
/// `Range: bytes=a-b`, `bytes=a-` or `bytes=-n`; 416 with `Content-Range: bytes */size` for
/// a malformed range or one that starts past the end. A request for several ranges gets
/// the whole file (Go answers it as `multipart/byteranges`, which no client of the stub
/// asks for).
fn ranged(data: Vec<u8>, range: Option<&str>) -> Response<Body> {
    let size = data.len() as u64;
    let head = |status: StatusCode| {
        Response::builder()
            .status(status)
            .header("content-type", "application/octet-stream")
            .header("accept-ranges", "bytes")
    };
    let whole = |data: Vec<u8>| {
        head(StatusCode::OK).body(http_body_util::Full::new(Bytes::from(data)).boxed()).unwrap()
    };
    let Some(range) = range else { return whole(data) };
    let spec = range.trim().strip_prefix("bytes=");
    if spec.is_some_and(|r| r.contains(',')) {
        return whole(data);
    }
    let bounds = spec.and_then(|r| r.split_once('-')).map(|(a, b)| (a.trim(), b.trim()));
    let span = match bounds {
        Some((a, "")) => a.parse::<u64>().ok().map(|a| (a, size.saturating_sub(1))),
        // The last n bytes.
        Some(("", n)) => {
            n.parse::<u64>().ok().filter(|n| *n > 0).map(|n| (size.saturating_sub(n), size.saturating_sub(1)))
        }
        Some((a, b)) => match (a.parse::<u64>(), b.parse::<u64>()) {
            (Ok(a), Ok(b)) if a <= b => Some((a, b.min(size.saturating_sub(1)))),
            _ => None,
        },
        None => None,
    };
    match span {
        Some((a, b)) if a < size => {
            let body = data[usize::try_from(a).unwrap()..=usize::try_from(b).unwrap()].to_vec();
            head(StatusCode::PARTIAL_CONTENT)
                .header("content-range", format!("bytes {a}-{b}/{size}"))
                .body(http_body_util::Full::new(Bytes::from(body)).boxed())
                .unwrap()
        }
        _ => head(StatusCode::RANGE_NOT_SATISFIABLE)
            .header("content-range", format!("bytes */{size}"))
            .body(http_body_util::Full::new(Bytes::new()).boxed())
            .unwrap(),
    }
}

fn selected_pid(sandbox: &StubSandbox, msg: &serde_json::Value) -> Option<u32> {
    let selector = &msg["process"];
    if let Some(pid) = selector["pid"].as_u64() {
        return u32::try_from(pid).ok();
    }
    let tag = selector["tag"].as_str()?;
    sandbox.processes.lock().unwrap().iter().find(|(_, p)| p.tag.as_deref() == Some(tag)).map(|(pid, _)| *pid)
}

#[expect(clippy::too_many_lines, reason = "one arm per RPC")]
async fn unary(sandbox: &StubSandbox, rpc: &str, msg: &serde_json::Value) -> Response<Body> {
    let ok = |v: serde_json::Value| json(StatusCode::OK, &v);
    let path = msg["path"].as_str().unwrap_or_default().to_owned();
    match rpc {
        "/process.Process/List" => {
            let processes: Vec<serde_json::Value> = sandbox
                .processes
                .lock()
                .unwrap()
                .iter()
                .map(|(pid, p)| serde_json::json!({"pid": pid, "tag": p.tag, "config": {"cmd": ""}}))
                .collect();
            ok(serde_json::json!({"processes": processes}))
        }
        "/process.Process/SendSignal" => {
            let Some(pid) = selected_pid(sandbox, msg) else {
                return connect_error(StatusCode::NOT_FOUND, "not_found", "process not found");
            };
            if !sandbox.processes.lock().unwrap().contains_key(&pid) {
                return connect_error(
                    StatusCode::NOT_FOUND,
                    "not_found",
                    &format!("process with pid {pid} not found"),
                );
            }
            let signal = if msg["signal"] == "SIGNAL_SIGTERM" { "-TERM" } else { "-KILL" };
            // Only the direct child, as envd does.
            let _ = sandbox.local.run(Command::new("kill").arg(signal).arg(pid.to_string())).await;
            ok(serde_json::json!({}))
        }
        "/process.Process/SendInput" | "/process.Process/CloseStdin" => {
            let Some(pid) = selected_pid(sandbox, msg) else {
                return connect_error(StatusCode::NOT_FOUND, "not_found", "process not found");
            };
            let Some(stdin) = sandbox.processes.lock().unwrap().get(&pid).map(|p| p.stdin.clone()) else {
                return connect_error(
                    StatusCode::NOT_FOUND,
                    "not_found",
                    &format!("process with pid {pid} not found"),
                );
            };
            let op = if rpc.ends_with("CloseStdin") {
                StdinOp::Close
            } else {
                let Ok(data) = STANDARD.decode(msg["input"]["stdin"].as_str().unwrap_or_default()) else {
                    return connect_error(StatusCode::BAD_REQUEST, "invalid_argument", "stdin is not base64");
                };
                StdinOp::Data(data)
            };
            let _ = stdin.send(op).await;
            ok(serde_json::json!({}))
        }
        "/filesystem.Filesystem/ListDir" => match sandbox.local.fs().list(&path).await {
            Ok(entries) => {
                let entries: Vec<serde_json::Value> = entries
                    .iter()
                    .map(|e| {
                        let kind = match e.kind {
                            sandboxio::fs::FileKind::Dir => "FILE_TYPE_DIRECTORY",
                            sandboxio::fs::FileKind::Symlink => "FILE_TYPE_SYMLINK",
                            _ => "FILE_TYPE_FILE",
                        };
                        // int64 as a string; zero values omitted.
                        let mut v = serde_json::json!({"name": e.name, "type": kind, "path": format!("{path}/{}", e.name), "mode": e.mode});
                        if e.size > 0 {
                            v["size"] = e.size.to_string().into();
                        }
                        v
                    })
                    .collect();
                ok(serde_json::json!({"entries": entries}))
            }
            Err(e) if e.code() == ErrorCode::NotFound => {
                connect_error(StatusCode::NOT_FOUND, "not_found", "path not found")
            }
            Err(e) => connect_error(StatusCode::BAD_REQUEST, "invalid_argument", &e.to_string()),
        },
        "/filesystem.Filesystem/Stat" => {
            let probe = Command::shell(
                r#"if [ -d "$0" ]; then echo d; elif [ -e "$0" ]; then echo f; else echo n; fi"#,
            )
            .arg(&path);
            match sandbox.local.run(probe).await.map(|r| r.stdout) {
                Ok(out) if out == b"d\n" => {
                    ok(serde_json::json!({"entry": {"name": path, "type": "FILE_TYPE_DIRECTORY"}}))
                }
                Ok(out) if out == b"f\n" => {
                    ok(serde_json::json!({"entry": {"name": path, "type": "FILE_TYPE_FILE"}}))
                }
                _ => connect_error(
                    StatusCode::NOT_FOUND,
                    "not_found",
                    &format!("no such file or directory: {path}"),
                ),
            }
        }
        "/filesystem.Filesystem/MakeDir" => {
            let exists =
                sandbox.local.run(Command::new("test").arg("-d").arg(&path)).await.is_ok_and(|r| r.success());
            if exists {
                return connect_error(
                    StatusCode::CONFLICT,
                    "already_exists",
                    &format!("directory {path} already exists"),
                );
            }
            match sandbox.local.fs().mkdir(&path).await {
                Ok(()) => ok(serde_json::json!({"entry": {"name": path, "type": "FILE_TYPE_DIRECTORY"}})),
                Err(e) => connect_error(StatusCode::BAD_REQUEST, "invalid_argument", &e.to_string()),
            }
        }
        "/filesystem.Filesystem/Remove" => match sandbox.local.fs().remove(&path, true).await {
            // `os.RemoveAll`: a missing path is not an error.
            Ok(()) => ok(serde_json::json!({})),
            Err(e) if e.code() == ErrorCode::NotFound => ok(serde_json::json!({})),
            Err(e) => connect_error(StatusCode::BAD_REQUEST, "invalid_argument", &e.to_string()),
        },
        _ => {
            connect_error(StatusCode::NOT_IMPLEMENTED, "unimplemented", &format!("{rpc} is not implemented"))
        }
    }
}

/// `process.Process/Start`: the request's one envelope in, envelopes out.
fn start(state: &Arc<State>, sandbox: &Arc<StubSandbox>, body: &[u8], keepalive: Duration) -> Response<Body> {
    if body.len() < 5 || body[0] != 0 {
        return connect_error(StatusCode::BAD_REQUEST, "invalid_argument", "not one envelope");
    }
    let Ok(msg) = serde_json::from_slice::<serde_json::Value>(&body[5..]) else {
        return connect_error(StatusCode::BAD_REQUEST, "invalid_argument", "malformed JSON");
    };
    let process = &msg["process"];
    let mut command = Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(SPAWN)
        .arg(process["cmd"].as_str().unwrap_or_default());
    for arg in process["args"].as_array().into_iter().flatten() {
        command = command.arg(arg.as_str().unwrap_or_default());
    }
    for (k, v) in process["envs"].as_object().into_iter().flatten() {
        command = command.env(k.clone(), v.as_str().unwrap_or_default().to_owned());
    }
    let cwd = process["cwd"].as_str().map(str::to_owned);
    if let Some(cwd) = &cwd {
        command = command.cwd(cwd.clone());
    }
    let wants_stdin = msg["stdin"].as_bool().unwrap_or(true);
    let tag = msg["tag"].as_str().map(str::to_owned);
    let (frames, rx) = mpsc::channel::<Bytes>(64);
    let cut = state.faults.cut_next_stream.swap(false, Ordering::SeqCst);
    let keepalive = (!state.faults.silent_streams.load(Ordering::SeqCst)).then_some(keepalive);
    let sandbox2 = Arc::clone(sandbox);
    let delay = Duration::from_millis(state.faults.delay_next_start_ms.swap(0, Ordering::SeqCst));
    state.starts.fetch_add(1, Ordering::SeqCst);
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        let process = Process { command, cwd, wants_stdin, tag, keepalive };
        run_process(sandbox2, process, frames, cut).await;
    });
    let stream = futures_lite::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/connect+json")
        .body(BodyExt::boxed(StreamBody::new(stream)))
        .unwrap()
}

/// What envd's Go `exec.Cmd` does, in Python: the process envd starts is a child in the
/// caller's process group (not a group leader), its pid is known (printed first, then the
/// program is executed in place), and its exact status is reported (a signal death is
/// passed on as the same signal).
const SPAWN: &str = r#"import os, signal, sys
pid = os.fork()
if pid == 0:
    os.write(1, b"%d\n" % os.getpid())
    try:
        os.execvp(sys.argv[1], sys.argv[1:])
    except OSError as e:
        os.write(2, b"%s\n" % str(e).encode())
        os._exit(127)
os.close(0)
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
    signal.signal(s, signal.SIG_IGN)
_, st = os.waitpid(pid, 0)
if os.WIFSIGNALED(st):
    sig = os.WTERMSIG(st)
    if sig not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
sys.exit(os.WEXITSTATUS(st))"#;

fn event(value: &serde_json::Value) -> Bytes {
    envelope(0, serde_json::json!({"event": value}).to_string().as_bytes())
}

/// What a process's pump met next: output, or a stdin request.
enum Next {
    Chunk(Option<sandboxio::Result<sandboxio::exec::OutputChunk>>),
    Stdin(Option<StdinOp>),
    /// The stream was quiet for a keepalive period.
    Quiet,
}

/// What `Process.Start` asked for.
struct Process {
    command: Command,
    cwd: Option<String>,
    wants_stdin: bool,
    tag: Option<String>,
    /// The keepalive period on a quiet stream (none: the silent-streams fault).
    keepalive: Option<Duration>,
}

#[expect(clippy::too_many_lines, reason = "one process's life, in the order envd reports it")]
async fn run_process(sandbox: Arc<StubSandbox>, process: Process, frames: mpsc::Sender<Bytes>, cut: bool) {
    let Process { command, cwd, wants_stdin, tag, keepalive } = process;
    if let Some(cwd) = cwd {
        let exists =
            sandbox.local.run(Command::new("test").arg("-d").arg(&cwd)).await.is_ok_and(|r| r.success());
        if !exists {
            let end = serde_json::json!({"error": {"code": "invalid_argument", "message": format!("cwd '{cwd}' does not exist")}});
            let _ = frames.send(envelope(2, end.to_string().as_bytes())).await;
            return;
        }
    }
    let mut stream = match sandbox.local.stream(command) {
        Ok(stream) => stream,
        Err(e) => {
            let end = serde_json::json!({"error": {"code": "internal", "message": e.to_string()}});
            let _ = frames.send(envelope(2, end.to_string().as_bytes())).await;
            return;
        }
    };
    if !wants_stdin {
        let _ = stream.close_stdin().await;
    }
    // The first stdout line is the pid.
    let mut first = Vec::new();
    let mut early: Vec<(StreamKind, Vec<u8>)> = Vec::new();
    let pid = loop {
        match stream.next_chunk().await {
            Some(Ok(chunk)) if chunk.stream == StreamKind::Stdout && !first.contains(&b'\n') => {
                first.extend_from_slice(&chunk.data);
                if let Some(i) = first.iter().position(|b| *b == b'\n') {
                    let rest = first.split_off(i + 1);
                    if !rest.is_empty() {
                        early.push((StreamKind::Stdout, rest));
                    }
                    break String::from_utf8_lossy(&first).trim().parse::<u32>().unwrap_or(0);
                }
            }
            Some(Ok(chunk)) => early.push((chunk.stream, chunk.data)),
            _ => break 0,
        }
    };
    let (stdin_tx, mut stdin_rx) = mpsc::channel(16);
    sandbox.processes.lock().unwrap().insert(pid, Proc { stdin: stdin_tx, tag });
    // Sends never stop the process: a client gone only means nobody reads.
    let send = |b: Bytes| {
        let frames = frames.clone();
        async move {
            let _ = frames.send(b).await;
        }
    };
    send(event(&serde_json::json!({"start": {"pid": pid}}))).await;
    if cut {
        drop(frames);
        sandbox.processes.lock().unwrap().remove(&pid);
        let _ = stream.close().await;
        return;
    }
    let data = |kind: StreamKind, d: &[u8]| {
        let key = if kind == StreamKind::Stdout { "stdout" } else { "stderr" };
        event(&serde_json::json!({"data": {key: STANDARD.encode(d)}}))
    };
    for (kind, d) in early {
        send(event(&serde_json::json!({"keepalive": {}}))).await;
        send(data(kind, &d)).await;
    }
    let mut stdin_open = true;
    // A quiet stream gets a keepalive event every period, as envd's ticker sends them.
    let period = keepalive.unwrap_or(Duration::MAX);
    let mut quiet_until = tokio::time::Instant::now().checked_add(period);
    loop {
        let next = tokio::select! {
            c = stream.next_chunk() => Next::Chunk(c),
            op = stdin_rx.recv(), if stdin_open => Next::Stdin(op),
            () = tokio::time::sleep_until(quiet_until.unwrap_or_else(tokio::time::Instant::now)), if quiet_until.is_some() => Next::Quiet,
        };
        match next {
            Next::Quiet => {
                send(event(&serde_json::json!({"keepalive": {}}))).await;
                quiet_until = tokio::time::Instant::now().checked_add(period);
            }
            Next::Chunk(Some(Ok(chunk))) => {
                send(event(&serde_json::json!({"keepalive": {}}))).await;
                send(data(chunk.stream, &chunk.data)).await;
                quiet_until = tokio::time::Instant::now().checked_add(period);
            }
            Next::Chunk(_) => break,
            Next::Stdin(Some(StdinOp::Data(d))) => {
                let _ = stream.write_stdin(d).await;
            }
            Next::Stdin(Some(StdinOp::Close) | None) => {
                let _ = stream.close_stdin().await;
                stdin_open = false;
            }
        }
    }
    let status = stream.wait().await.map(|r| r.status);
    sandbox.processes.lock().unwrap().remove(&pid);
    if sandbox.killed.load(Ordering::SeqCst) {
        // The VM is gone: the connection drops with no end event and no end frame.
        return;
    }
    let end = match status {
        // Zero values omitted: no `exitCode` on exit 0.
        Ok(ExitStatus::Code(0)) => serde_json::json!({"exited": true, "status": "exit status 0"}),
        Ok(ExitStatus::Code(c)) => {
            serde_json::json!({"exitCode": c, "exited": true, "status": format!("exit status {c}")})
        }
        Ok(ExitStatus::Signal(9)) => {
            serde_json::json!({"exitCode": -1, "status": "signal: killed", "error": "signal: killed"})
        }
        Ok(ExitStatus::Signal(15)) => serde_json::json!({"exitCode": -1, "status": "signal: terminated"}),
        Ok(ExitStatus::Signal(s)) => {
            serde_json::json!({"exitCode": -1, "status": format!("signal: signal {s}")})
        }
        Ok(_) | Err(_) => serde_json::json!({"exitCode": -1, "status": "unknown"}),
    };
    send(event(&serde_json::json!({"end": end}))).await;
    send(envelope(2, b"{}")).await;
}
