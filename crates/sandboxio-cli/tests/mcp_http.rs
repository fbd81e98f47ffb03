//! `sandboxio mcp --transport http` on `local://`, driven by rmcp's own Streamable HTTP
//! client: a request without the bearer token is refused with 401 before any MCP, a client
//! with it (on 2025-11-25, the newest revision rmcp's client initializes with, and on
//! 2025-06-18) lists the tools, creates a sandbox, runs a command and kills it, and the
//! server's SIGTERM removes what the client left. Each request is audited on stderr. A
//! client that asks for 2026-07-28 (stateless, `server/discover`) gets it. The transport's
//! bounds (header timeout, connection cap, accept back-off, `Origin`, sessions) each have a
//! test with a positive control.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ContentBlock, Implementation, ProtocolVersion,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use support::workspaces;

const TOKEN: &str = "test-token-0123456789abcdef";

/// The server, and the address it printed once listening.
fn start(tmp: &std::path::Path) -> (Child, String, BufReader<std::process::ChildStderr>) {
    start_with(tmp, &[])
}

/// The server with `extra` options.
fn start_with(
    tmp: &std::path::Path,
    extra: &[&str],
) -> (Child, String, BufReader<std::process::ChildStderr>) {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_sandboxio"));
    cmd.args(["mcp", "--transport", "http", "--listen", "127.0.0.1:0", "--dsn", "local://"]).args(extra);
    spawn_server(cmd, tmp)
}

/// Starts `cmd` (a server) and reads the address it prints once listening.
fn spawn_server(
    mut cmd: std::process::Command,
    tmp: &std::path::Path,
) -> (Child, String, BufReader<std::process::ChildStderr>) {
    let mut child = cmd
        .env("SANDBOXIO_MCP_TOKEN", TOKEN)
        .env("TMPDIR", tmp)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let url = line
        .trim()
        .strip_prefix("sandboxio mcp: listening on ")
        .unwrap_or_else(|| panic!("{line}"))
        .to_owned();
    (child, url, stderr)
}

/// Kills the server if the test fails before it stops it (it shares the test's stdout).
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `127.0.0.1:PORT` of the server's URL.
fn authority(url: &str) -> &str {
    url.trim_start_matches("http://").trim_end_matches("/mcp")
}

/// The status line of a plain HTTP POST of `body` to the server with `headers`.
fn raw_post(url: &str, headers: &[(&str, &str)], body: &str) -> String {
    raw_exchange(url, headers, body).lines().next().unwrap_or_default().to_owned()
}

/// The whole response to a plain HTTP POST of `body` to the server with `headers`.
fn raw_exchange(url: &str, headers: &[(&str, &str)], body: &str) -> String {
    let authority = authority(url);
    let mut stream = TcpStream::connect(authority).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    for (name, value) in headers {
        write!(stream, "{name}: {value}\r\n").unwrap();
    }
    write!(stream, "\r\n{body}").unwrap();
    let mut response = String::new();
    // A server that closes with the request unread resets the connection (a 503 past the
    // cap): what was read by then, possibly nothing, is the answer.
    let _ = stream.read_to_string(&mut response);
    response
}

/// The status line of a bare POST without a token (plain HTTP: the refusal comes before MCP).
fn post_without_token(url: &str) -> String {
    raw_post(url, &[], r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
}

/// The server's stderr lines as they come, read on a thread so that the server never blocks
/// on a full pipe (and never writes to a closed one).
fn log_lines(stderr: BufReader<std::process::ChildStderr>) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    rx
}

/// A scratch TMPDIR for one test's server.
fn scratch(name: &str) -> std::path::PathBuf {
    let tmp = std::env::temp_dir().join(format!("sandboxio-cli-mcp-http-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    tmp
}

/// Polls `f` until it returns true or 10 seconds pass.
fn eventually(mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

type Client = rmcp::service::RunningService<rmcp::RoleClient, ()>;

/// `tool` called with `args` (a JSON object).
async fn call(client: &Client, tool: &'static str, args: serde_json::Value) -> rmcp::model::CallToolResult {
    let params = CallToolRequestParams::new(tool).with_arguments(args.as_object().unwrap().clone());
    client.call_tool(params).await.unwrap()
}

/// Creates a sandbox, runs `echo WORD` in it, and kills it.
async fn create_run_kill(client: &Client, word: &str) {
    let out = call(client, "create_sandbox", serde_json::json!({})).await;
    assert_eq!(out.is_error, Some(false), "{out:?}");
    let id = out.structured_content.as_ref().unwrap()["sandbox_id"].as_str().unwrap().to_owned();
    let out = call(
        client,
        "run_command",
        serde_json::json!({ "sandbox_id": id, "command": format!("echo {word}") }),
    )
    .await;
    let ContentBlock::Text(text) = &out.content[0] else { panic!("{out:?}") };
    assert_eq!(text.text, format!("exit code 0\n--- stdout ---\n{word}\n"));
    let out = call(client, "kill_sandbox", serde_json::json!({ "sandbox_id": id })).await;
    assert_eq!(out.is_error, Some(false), "{out:?}");
}

/// A client of the server with the token.
async fn connect(
    url: &str,
) -> Result<rmcp::service::RunningService<rmcp::RoleClient, ()>, impl std::fmt::Debug> {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()).auth_header(TOKEN),
    );
    ().serve(transport).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_over_streamable_http_on_local() {
    let tmp = std::env::temp_dir().join(format!("sandboxio-cli-mcp-http-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let (child, url, stderr) = start(&tmp);
    let mut child = KillOnDrop(child);
    assert_eq!(post_without_token(&url), "HTTP/1.1 401 Unauthorized");

    let wrong = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.clone()).auth_header("not-the-token-at-all"),
    );
    assert!(().serve(wrong).await.is_err(), "a wrong token never gets a session");

    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.clone()).auth_header(TOKEN),
    );
    let client = ().serve(transport).await.unwrap();
    // rmcp's client speaks the newest revision that has `initialize`, 2025-11-25.
    assert_eq!(client.peer_info().map(|i| i.protocol_version.clone()), Some(ProtocolVersion::V_2025_11_25));
    let mut tools: Vec<String> =
        client.list_all_tools().await.unwrap().into_iter().map(|t| t.name.into_owned()).collect();
    tools.sort();
    assert!(
        tools.contains(&"create_sandbox".to_owned()) && tools.contains(&"run_command".to_owned()),
        "{tools:?}"
    );
    create_run_kill(&client, "http").await;
    let out = call(&client, "create_sandbox", serde_json::json!({ "ttl_seconds": 120 })).await;
    assert_eq!(out.is_error, Some(false), "{out:?}");
    assert_eq!(workspaces(&tmp), 1, "the second one lives until the server stops");
    let _ = client.cancel().await;

    // A client of the previous revision (with its session) gets the same tools.
    let legacy = ClientConfig::new(ClientCapabilities::default(), Implementation::new("legacy-test", "1"))
        .with_protocol_version(ProtocolVersion::V_2025_06_18);
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.clone()).auth_header(TOKEN),
    );
    let old = legacy.serve(transport).await.unwrap();
    assert_eq!(old.peer_info().map(|i| i.protocol_version.clone()), Some(ProtocolVersion::V_2025_06_18));
    let listed = old.call_tool(CallToolRequestParams::new("list_sandboxes")).await.unwrap();
    assert_eq!(
        listed.structured_content.as_ref().unwrap()["sandbox_ids"].as_array().unwrap().len(),
        1,
        "the token's sandbox: {listed:?}"
    );
    let _ = old.cancel().await;

    let killed =
        std::process::Command::new("kill").args(["-TERM", &child.0.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let status = child.0.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{status:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while workspaces(&tmp) > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(workspaces(&tmp), 0, "the client's sandboxes are removed when the server stops");
    let log: Vec<String> = stderr.lines().map_while(Result::ok).collect();
    assert!(log.iter().any(|l| l.contains(" POST /mcp 401")), "{log:?}");
    assert!(
        log.iter()
            .filter(|l| l.starts_with("sandboxio mcp: audit 127.0.0.1:") && l.contains(" POST /mcp 200"))
            .count()
            >= 4,
        "{log:?}"
    );
    // Issue #30 item 7: an audit line names the tool a call ran; a session's end is 204
    // (rmcp's 202 made MCP's own client log "Session termination failed: 202").
    assert!(log.iter().any(|l| l.ends_with(" POST /mcp 200 tools/call run_command")), "{log:?}");
    assert!(log.iter().any(|l| l.contains(" DELETE /mcp 204")), "{log:?}");
    assert!(!log.iter().any(|l| l.contains(" DELETE /mcp 202")), "{log:?}");
    let _ = std::fs::remove_dir_all(&tmp);
}

/// Issue #30 item 7: a wrong token is told apart from a missing one (both 401; the wrong one
/// with RFC 6750's `invalid_token`), and a body that is not JSON is 400 with JSON-RPC's
/// parse error; control: the same request with JSON and the token is served (200).
#[test]
fn refusals_say_what_was_wrong() {
    let tmp = scratch("refusals");
    let (child, url, _stderr) = start(&tmp);
    let _child = KillOnDrop(child);
    let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let missing = raw_exchange(&url, &[], list);
    assert!(missing.starts_with("HTTP/1.1 401"), "{missing}");
    assert!(missing.contains("a bearer token is required"), "{missing}");
    let wrong = raw_exchange(&url, &[("Authorization", "Bearer not-the-token-0123456789")], list);
    assert!(wrong.starts_with("HTTP/1.1 401"), "{wrong}");
    assert!(
        wrong.to_ascii_lowercase().contains("www-authenticate: bearer error=\"invalid_token\""),
        "{wrong}"
    );
    assert!(wrong.contains("the bearer token is not this server's"), "{wrong}");
    let auth = format!("Bearer {TOKEN}");
    let headers = [("Authorization", auth.as_str()), ("MCP-Protocol-Version", "2026-07-28")];
    let malformed = raw_exchange(&url, &headers, "{not json");
    assert!(malformed.starts_with("HTTP/1.1 400"), "{malformed}");
    assert!(malformed.contains("-32700"), "{malformed}");
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let served = raw_exchange(&url, &[("Authorization", auth.as_str())], init);
    assert!(served.starts_with("HTTP/1.1 200"), "control: {served}");
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn http_without_a_token_does_not_start() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sandboxio"))
        .args(["mcp", "--transport", "http", "--listen", "127.0.0.1:0"])
        .env_remove("SANDBOXIO_MCP_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bearer token"), "{out:?}");
}

/// A client that sends its headers slowly (here: part of a request line, then nothing) is
/// cut off after `--header-timeout`, so it cannot hold a connection and a task forever.
#[test]
fn slow_headers_are_cut_off() {
    let tmp = scratch("slow");
    let (child, url, stderr) = start_with(&tmp, &["--header-timeout", "1"]);
    let _child = KillOnDrop(child);
    let _log = log_lines(stderr);
    // Positive control: a whole request on a fresh connection is answered.
    assert_eq!(post_without_token(&url), "HTTP/1.1 401 Unauthorized");
    for partial in [&b"POST /mcp HTTP/1.1\r\nHost: 127.0"[..], b""] {
        let mut slow = TcpStream::connect(authority(&url)).unwrap();
        slow.write_all(partial).unwrap();
        slow.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let started = Instant::now();
        let mut rest = Vec::new();
        let read = slow.read_to_end(&mut rest);
        assert!(read.is_ok(), "the server should close a connection whose headers stall: {read:?}");
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    }
}

/// Past `--max-connections`, a connection is answered 503 and closed at once; a closed
/// connection frees its place.
#[test]
fn connections_over_the_cap_are_refused() {
    let tmp = scratch("cap");
    let (child, url, stderr) = start_with(&tmp, &["--max-connections", "2", "--header-timeout", "60"]);
    let _child = KillOnDrop(child);
    let log = log_lines(stderr);
    let held: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(authority(&url)).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut third = TcpStream::connect(authority(&url)).unwrap();
    third.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut response = String::new();
    let read = third.read_to_string(&mut response);
    assert!(read.is_ok(), "the third connection should be closed at once: {read:?}");
    assert!(response.starts_with("HTTP/1.1 503 "), "{response:?}");
    assert!(
        log.recv_timeout(Duration::from_secs(5)).is_ok_and(|l| l.contains("2 connections are open")),
        "the refusal is logged"
    );
    // Positive control: once the held connections close, requests are served again.
    drop(held);
    assert!(eventually(|| post_without_token(&url) == "HTTP/1.1 401 Unauthorized"));
}

/// CPU time (user + system) of process `pid` so far, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // After the command name in parentheses: fields 3.. ; utime and stime are 14 and 15.
    let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// A server out of file descriptors (`EMFILE` on every accept while a connection waits)
/// backs off instead of spinning a core, logs why, and serves again once descriptors free.
#[test]
fn accept_errors_back_off() {
    const FD_LIMIT: usize = 64;
    let tmp = scratch("emfile");
    let mut cmd = std::process::Command::new("sh");
    cmd.args([
        "-c",
        &format!("ulimit -n {FD_LIMIT} && exec \"$0\" \"$@\""),
        env!("CARGO_BIN_EXE_sandboxio"),
        "mcp",
        "--transport",
        "http",
        "--listen",
        "127.0.0.1:0",
        "--max-connections",
        "1000",
        "--header-timeout",
        "60",
    ]);
    let (child, url, stderr) = spawn_server(cmd, &tmp);
    let pid = child.id();
    let _child = KillOnDrop(child);
    let log = log_lines(stderr);
    let held: Vec<TcpStream> =
        (0..FD_LIMIT + 16).map(|_| TcpStream::connect(authority(&url)).unwrap()).collect();
    // Control: the server did run out of descriptors (a connection still waits to be accepted).
    let open_fds = || std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count);
    assert!(eventually(|| open_fds() >= FD_LIMIT - 1), "the server holds {} descriptors", open_fds());
    let ticks_per_second: u32 =
        String::from_utf8(std::process::Command::new("getconf").arg("CLK_TCK").output().unwrap().stdout)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let (before, started) = (cpu_ticks(pid), Instant::now());
    std::thread::sleep(Duration::from_secs(2));
    let ticks = u32::try_from(cpu_ticks(pid) - before).unwrap();
    let used = f64::from(ticks) / f64::from(ticks_per_second);
    let share = used / started.elapsed().as_secs_f64();
    assert!(share < 0.25, "the server used {:.0}% of a core while out of descriptors", share * 100.0);
    let lines: Vec<String> = log.try_iter().collect();
    assert!(lines.iter().any(|l| l.contains("accept failed") && l.contains("retrying in")), "{lines:?}");
    drop(held);
    assert!(eventually(|| post_without_token(&url) == "HTTP/1.1 401 Unauthorized"), "served again");
}

/// A request whose `Origin` is present and not allowed is refused with 403 (DNS rebinding
/// from a browser page), token or not; loopback origins, `--allow-origin`'s and requests
/// without an `Origin` (not from a browser) are served.
#[test]
fn foreign_origins_are_refused() {
    let tmp = scratch("origin");
    let (child, url, stderr) = start_with(&tmp, &["--allow-origin", "https://app.example.com"]);
    let _child = KillOnDrop(child);
    let _log = log_lines(stderr);
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"origin-test","version":"1"}}}"#;
    let bearer = format!("Bearer {TOKEN}");
    let status = |origin: Option<&str>| {
        let mut headers = vec![("Authorization", bearer.as_str())];
        headers.extend(origin.map(|o| ("Origin", o)));
        raw_post(&url, &headers, initialize)
    };
    for refused in
        ["http://evil.example", "http://localhost.evil.example:8765", "https://app.example.com.evil", "null"]
    {
        assert_eq!(status(Some(refused)), "HTTP/1.1 403 Forbidden", "{refused}");
    }
    for served in
        [None, Some("http://localhost:5173"), Some("http://127.0.0.1:8765"), Some("https://app.example.com")]
    {
        assert_eq!(status(served), "HTTP/1.1 200 OK", "{served:?}");
    }
}

/// The token is the client; sessions are its conversations. At most `--max-sessions` are
/// live; one that ends (DELETE) or idles past `--session-idle` frees its place; a session's
/// end kills no sandbox, and every session sees the token's sandboxes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_bounded_expire_and_share_the_tokens_sandboxes() {
    let tmp = scratch("sessions");
    let (child, url, stderr) = start_with(&tmp, &["--max-sessions", "2", "--session-idle", "2"]);
    let mut child = KillOnDrop(child);
    let _log = log_lines(stderr);
    let alpha = connect(&url).await.unwrap();
    let out = call(&alpha, "create_sandbox", serde_json::json!({})).await;
    let id = out.structured_content.as_ref().unwrap()["sandbox_id"].as_str().unwrap().to_owned();
    let beta = connect(&url).await.unwrap();
    assert!(connect(&url).await.is_err(), "a third live session is over the bound");
    let listed = call(&beta, "list_sandboxes", serde_json::json!({})).await;
    assert_eq!(listed.structured_content.unwrap()["sandbox_ids"], serde_json::json!([id]));
    alpha.cancel().await.unwrap();
    let gamma = connect(&url).await.expect("the ended session's place is free");
    let out =
        call(&beta, "run_command", serde_json::json!({ "sandbox_id": id, "command": "echo shared" })).await;
    let ContentBlock::Text(text) = &out.content[0] else { panic!("{out:?}") };
    assert_eq!(text.text, "exit code 0\n--- stdout ---\nshared\n", "the ended session's sandbox lives on");
    // beta and gamma say nothing for longer than --session-idle: both expire and free their places.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let delta = connect(&url).await.expect("expired sessions free their places");
    let epsilon = connect(&url).await.expect("both places");
    assert!(beta.call_tool(CallToolRequestParams::new("list_sandboxes")).await.is_err(), "beta expired");
    let out = call(&delta, "kill_sandbox", serde_json::json!({ "sandbox_id": id })).await;
    assert_eq!(out.is_error, Some(false), "the sandbox outlived every session that saw it: {out:?}");
    assert_eq!(workspaces(&tmp), 0);
    for client in [gamma, delta, epsilon] {
        let _ = client.cancel().await;
    }
    drop(beta);
    let _ = child.0.kill();
    let _ = std::fs::remove_dir_all(&tmp);
}

/// A client that asks for the 2026-07-28 revision (`server/discover`, no `initialize`, no
/// session: every request stands alone) gets it, and its sandboxes live across requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_2026_07_28_revision_is_negotiated_when_asked() {
    let tmp = scratch("2026");
    let (child, url, stderr) = start(&tmp);
    let mut child = KillOnDrop(child);
    let _log = log_lines(stderr);
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.clone()).auth_header(TOKEN),
    );
    let lifecycle = ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] };
    let client = ().serve_with_lifecycle(transport, lifecycle).await.unwrap();
    assert_eq!(client.peer_info().map(|i| i.protocol_version.clone()), Some(ProtocolVersion::V_2026_07_28));
    create_run_kill(&client, "stateless").await;
    assert_eq!(workspaces(&tmp), 0);
    let _ = client.cancel().await;
    let _ = child.0.kill();
    let _ = std::fs::remove_dir_all(&tmp);
}

/// How a request's body goes slowly: `(framing headers, the body's first bytes, what follows
/// a byte every 300 ms for ever)`.
const SLOW_BODIES: &[(&str, &str, &str)] = &[
    // Half a body, then nothing.
    ("Content-Length: 200\r\n", r#"{"jsonrpc":"2.0","#, ""),
    // A byte every 300 ms: each arrives well within any idle gap, the whole never does.
    ("Content-Length: 200\r\n", r#"{"jsonrpc":"2.0","#, " "),
    // Chunked: one chunk, then a chunk that never ends.
    ("Transfer-Encoding: chunked\r\n", "10\r\n{\"jsonrpc\":\"2.0\"\r\n400\r\n", " "),
];

/// A client with the token that sends its body slowly, by any framing, is answered 408 and
/// cut off after `--body-timeout`: hyper's header timeout stops at the headers, and before
/// this a body sent one byte at a time held its connection (and its place under
/// `--max-connections`) for as long as the client liked. Positive control: the same request
/// sent whole is answered. A body over 4 MiB without a length (chunked) is 413.
#[test]
fn slow_bodies_are_cut_off() {
    let tmp = scratch("slow-body");
    let (child, url, stderr) = start_with(&tmp, &["--body-timeout", "1", "--header-timeout", "1"]);
    let _child = KillOnDrop(child);
    let _log = log_lines(stderr);
    let bearer = format!("Bearer {TOKEN}");
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"slow-body-test","version":"1"}}}"#;
    assert_eq!(raw_post(&url, &[("Authorization", &bearer)], initialize), "HTTP/1.1 200 OK", "control");
    let head = |framing: &str| {
        format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nAuthorization: {bearer}\r\n{framing}\r\n",
            authority(&url)
        )
    };
    for (framing, first, trickle) in SLOW_BODIES {
        let mut slow = TcpStream::connect(authority(&url)).unwrap();
        slow.write_all(head(framing).as_bytes()).unwrap();
        slow.write_all(first.as_bytes()).unwrap();
        let trickle = trickle.as_bytes().to_vec();
        let mut writer = slow.try_clone().unwrap();
        // Stops when the server closes the connection (a write then fails) or after 15 s.
        let trickler = std::thread::spawn(move || {
            let until = Instant::now() + Duration::from_secs(15);
            while !trickle.is_empty() && Instant::now() < until && writer.write_all(&trickle).is_ok() {
                std::thread::sleep(Duration::from_millis(300));
            }
        });
        slow.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let started = Instant::now();
        let mut response = Vec::new();
        let read = slow.read_to_end(&mut response);
        let response = String::from_utf8_lossy(&response);
        assert!(
            read.is_ok(),
            "{framing:?}: the server should close a connection whose body stalls: {read:?}"
        );
        assert!(response.starts_with("HTTP/1.1 408 "), "{framing:?}: {response:?}");
        assert!(started.elapsed() < Duration::from_secs(5), "{framing:?}: {:?}", started.elapsed());
        drop(slow);
        trickler.join().unwrap();
    }
    // Over 4 MiB with no length to check first: refused once the bound is passed.
    let mut big = TcpStream::connect(authority(&url)).unwrap();
    big.write_all(head("Transfer-Encoding: chunked\r\n").as_bytes()).unwrap();
    let chunk = format!("100000\r\n{}\r\n", " ".repeat(1 << 20));
    for _ in 0..5 {
        if big.write_all(chunk.as_bytes()).is_err() {
            break;
        }
    }
    big.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut response = Vec::new();
    let _ = big.read_to_end(&mut response);
    let response = String::from_utf8_lossy(&response);
    assert!(response.starts_with("HTTP/1.1 413 "), "{response:?}");
    // A client without the token is refused before its body is read, slow or not.
    let mut anonymous = TcpStream::connect(authority(&url)).unwrap();
    let anonymous_head = head("Content-Length: 200\r\n").replace(&format!("Authorization: {bearer}\r\n"), "");
    anonymous.write_all(anonymous_head.as_bytes()).unwrap();
    anonymous.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut response = Vec::new();
    let read = anonymous.read_to_end(&mut response);
    assert!(read.is_ok(), "{read:?}");
    assert!(String::from_utf8_lossy(&response).starts_with("HTTP/1.1 401 "));
}

/// The status line of a POST of `body` with exactly `head` (request line and headers, no
/// framing): a probe that controls every header, `Host` included.
fn raw_request(url: &str, head: &str, body: &str) -> String {
    raw_response(url, head, body).lines().next().unwrap_or_default().to_owned()
}

/// The whole response (status line, headers, body) to a POST of `body` with exactly `head`.
fn raw_response(url: &str, head: &str, body: &str) -> String {
    let mut stream = TcpStream::connect(authority(url)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(stream, "{head}Content-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).unwrap();
    let mut response = Vec::new();
    // A streamed (SSE) answer may stay open: what came within the read timeout is enough.
    let _ = stream.read_to_end(&mut response);
    String::from_utf8_lossy(&response).into_owned()
}

/// The head of an authenticated `initialize` POST to the server at `url`.
fn initialize_head(url: &str) -> String {
    format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nAuthorization: Bearer {TOKEN}\r\n",
        authority(url)
    )
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"cap-test","version":"1"}}}"#;

/// An `initialize` over `--max-sessions` is "try later", not a server fault: 503 with
/// `Retry-After` (the session idle time), where it was a 500. Positive control: the first
/// session, under the bound, is made (200).
#[test]
fn a_session_over_the_cap_is_503_with_retry_after() {
    let tmp = scratch("session-cap");
    let (child, url, stderr) = start_with(&tmp, &["--max-sessions", "1", "--session-idle", "30"]);
    let _child = KillOnDrop(child);
    let _log = log_lines(stderr);
    let first = raw_response(&url, &initialize_head(&url), INITIALIZE);
    assert!(first.starts_with("HTTP/1.1 200 OK"), "control: the first session is made: {first}");
    let over = raw_response(&url, &initialize_head(&url), INITIALIZE);
    assert!(over.starts_with("HTTP/1.1 503 Service Unavailable"), "over the cap: {over}");
    assert!(over.to_ascii_lowercase().contains("\r\nretry-after: 30\r\n"), "Retry-After: {over}");
    let _ = std::fs::remove_dir_all(&tmp);
}

/// A request with two `Authorization` headers is refused with 400 whatever their order:
/// the token check read the first only, so a right token first and anything second (which a
/// proxy in front may be the one to read) was served. Positive control: the right token
/// alone is served.
#[test]
fn two_authorization_headers_are_refused() {
    let tmp = scratch("two-authorizations");
    let (child, url, stderr) = start(&tmp);
    let _child = KillOnDrop(child);
    let _log = log_lines(stderr);
    let head = initialize_head(&url);
    assert_eq!(raw_request(&url, &head, INITIALIZE), "HTTP/1.1 200 OK", "control");
    for (what, second) in [
        ("the token twice", format!("Bearer {TOKEN}")),
        ("the token, then another", "Bearer someone-else".to_owned()),
        ("the token, then an empty one", String::new()),
    ] {
        let head = format!("{head}Authorization: {second}\r\n");
        assert_eq!(raw_request(&url, &head, INITIALIZE), "HTTP/1.1 400 Bad Request", "{what}");
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

/// The token counts only as `Authorization: Bearer`: not in the query string, not as a
/// second `Authorization` header behind a wrong first one (400: two are refused); and a loopback listener refuses
/// a `Host` that is not loopback even with the token (DNS rebinding of a non-browser
/// client's name). Positive control: the same request, token in its header and a loopback
/// `Host`, is served.
#[test]
fn the_token_counts_only_in_its_header_and_foreign_hosts_are_refused() {
    let tmp = scratch("token-host");
    let (child, url, stderr) = start(&tmp);
    let _child = KillOnDrop(child);
    let _log = log_lines(stderr);
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"token-test","version":"1"}}}"#;
    let head = |path: &str, host: &str, auth: &[&str]| {
        let auth: String = auth.iter().flat_map(|value| ["Authorization: ", value, "\r\n"]).collect();
        format!(
            "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{auth}"
        )
    };
    let bearer = format!("Bearer {TOKEN}");
    let loopback = authority(&url).to_owned();
    let control = raw_request(&url, &head("/mcp", &loopback, &[&bearer]), initialize);
    assert_eq!(control, "HTTP/1.1 200 OK", "control");
    for (what, head) in [
        ("token in the query", head(&format!("/mcp?token={TOKEN}"), &loopback, &[])),
        ("access_token in the query", head(&format!("/mcp?access_token={TOKEN}"), &loopback, &[])),
        ("Basic scheme", head("/mcp", &loopback, &[&format!("Basic {TOKEN}")])),
        ("token without a scheme", head("/mcp", &loopback, &[TOKEN])),
    ] {
        assert_eq!(raw_request(&url, &head, initialize), "HTTP/1.1 401 Unauthorized", "{what}");
    }
    let wrong_first = head("/mcp", &loopback, &["Bearer wrong-token-0123456789", &bearer]);
    assert_eq!(
        raw_request(&url, &wrong_first, initialize),
        "HTTP/1.1 400 Bad Request",
        "a wrong header first"
    );
    let port = loopback.rsplit_once(':').unwrap().1;
    for host in [format!("evil.example:{port}"), format!("127.0.0.1.nip.io:{port}"), "evil.example".into()] {
        let status = raw_request(&url, &head("/mcp", &host, &[&bearer]), initialize);
        assert_eq!(status, "HTTP/1.1 403 Forbidden", "Host {host}");
    }
}

/// The server's durations at their extreme (`u64::MAX` seconds) saturate at
/// `sandboxio::exec::MAX_TIMEOUT`: with `--header-timeout 18446744073709551615` every connection's
/// task panicked adding it to an `Instant`, and no request was answered (class 21). The
/// other durations ride along. Positive control: the same request on a default server is
/// answered 200.
#[test]
fn extreme_durations_saturate_and_requests_are_answered() {
    let tmp = scratch("extreme-durations");
    let (child, url, stderr) = start(&tmp);
    let control = KillOnDrop(child);
    let _log = log_lines(stderr);
    assert_eq!(raw_request(&url, &initialize_head(&url), INITIALIZE), "HTTP/1.1 200 OK", "control");
    drop(control);
    let max = u64::MAX.to_string();
    let (child, url, stderr) = start_with(
        &tmp,
        &["--header-timeout", &max, "--body-timeout", &max, "--session-idle", &max, "--max-ttl", &max],
    );
    let _child = KillOnDrop(child);
    let log = log_lines(stderr);
    let answer = raw_request(&url, &initialize_head(&url), INITIALIZE);
    // The first lines say enough (a panic's backtrace follows them).
    let said: Vec<String> = log.try_iter().take(4).collect();
    assert_eq!(answer, "HTTP/1.1 200 OK", "with u64::MAX s durations; the server said {said:?}");
    assert!(!said.iter().any(|l| l.contains("panicked")), "{said:?}");
    let _ = std::fs::remove_dir_all(&tmp);
}
