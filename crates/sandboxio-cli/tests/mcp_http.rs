//! `sandboxio mcp --transport http` on `local://`, driven by rmcp's own Streamable HTTP
//! client: a request without the bearer token is refused with 401 before any MCP, a client
//! with it (on 2025-11-25, the newest revision rmcp's client initializes with, and on
//! 2025-06-18) lists the tools, creates a sandbox, runs a command and kills it, and the
//! server's SIGTERM removes what the client left. Each request is audited on stderr.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ContentBlock, Implementation, ProtocolVersion,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use support::workspaces;

const TOKEN: &str = "test-token-0123456789abcdef";

/// The server, and the address it printed once listening.
fn start(tmp: &std::path::Path) -> (Child, String, BufReader<std::process::ChildStderr>) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sandboxio"))
        .args(["mcp", "--transport", "http", "--listen", "127.0.0.1:0", "--dsn", "local://"])
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

/// The status line of a bare POST without a token (plain HTTP: the refusal comes before MCP).
fn post_without_token(url: &str) -> String {
    let authority = url.trim_start_matches("http://").trim_end_matches("/mcp");
    let mut stream = std::net::TcpStream::connect(authority).unwrap();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    write!(
        stream,
        "POST /mcp HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response.lines().next().unwrap_or_default().to_owned()
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
    let call = async |tool: &'static str, args: serde_json::Value| {
        let params = CallToolRequestParams::new(tool).with_arguments(args.as_object().unwrap().clone());
        client.call_tool(params).await.unwrap()
    };
    let out = call("create_sandbox", serde_json::json!({})).await;
    assert_eq!(out.is_error, Some(false), "{out:?}");
    let id = out.structured_content.as_ref().unwrap()["sandbox_id"].as_str().unwrap().to_owned();
    let out = call("run_command", serde_json::json!({ "sandbox_id": id, "command": "echo over http" })).await;
    let ContentBlock::Text(text) = &out.content[0] else { panic!("{out:?}") };
    assert_eq!(text.text, "exit code 0\n--- stdout ---\nover http\n");
    let out = call("kill_sandbox", serde_json::json!({ "sandbox_id": id })).await;
    assert_eq!(out.is_error, Some(false), "{out:?}");
    let out = call("create_sandbox", serde_json::json!({ "ttl_seconds": 120 })).await;
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
            .filter(|l| l.starts_with("sandboxio mcp: audit 127.0.0.1:") && l.ends_with(" 200"))
            .count()
            >= 4,
        "{log:?}"
    );
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
