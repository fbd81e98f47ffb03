//! `sandboxio mcp` over stdio on `local://`, driven by rmcp's own client as a child process:
//! initialize, tools/list, `create_sandbox`, tools/call of a command and a cell (a PNG as image
//! content) on that id, errors as tool errors, `kill_sandbox`, and the session's sandboxes
//! gone once the client hangs up.

mod support;

use std::time::{Duration, Instant};

use base64::Engine as _;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use support::workspaces;

const PNG_B64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

async fn call(
    client: &RunningService<RoleClient, ()>,
    tool: &'static str,
    args: serde_json::Value,
) -> CallToolResult {
    let params = CallToolRequestParams::new(tool).with_arguments(args.as_object().unwrap().clone());
    client.call_tool(params).await.unwrap()
}

fn texts(result: &CallToolResult) -> Vec<&str> {
    result
        .content
        .iter()
        .filter_map(|c| match c {
            ContentBlock::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_over_stdio_on_local() {
    let tmp = std::env::temp_dir().join(format!("sandboxio-cli-mcp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_sandboxio"));
    cmd.args(["mcp", "--dsn", "local://", "--network", "deny"]).env("TMPDIR", &tmp);
    let client = ().serve(TokioChildProcess::new(cmd).unwrap()).await.unwrap();

    let info = client.peer_info().expect("initialize answered");
    assert_eq!(info.server_info.as_ref().map(|i| i.name.as_str()), Some("sandboxio"));
    let mut tools: Vec<String> =
        client.list_all_tools().await.unwrap().into_iter().map(|t| t.name.into_owned()).collect();
    tools.sort();
    assert_eq!(
        tools,
        [
            "create_sandbox",
            "kill_sandbox",
            "list_files",
            "list_sandboxes",
            "read_file",
            "run_code",
            "run_command",
            "write_file"
        ],
        "no extend_sandbox: local:// cannot extend a TTL"
    );
    assert_eq!(workspaces(&tmp), 0, "a sandbox is made by create_sandbox only");

    let out = call(&client, "create_sandbox", serde_json::json!({ "network": "allow" })).await;
    assert_eq!(out.is_error, Some(true), "wider than the operator's deny: {out:?}");
    let out = call(&client, "create_sandbox", serde_json::json!({})).await;
    assert_eq!(out.is_error, Some(false), "{out:?}");
    let id = out.structured_content.as_ref().unwrap()["sandbox_id"].as_str().unwrap().to_owned();
    let out = call(&client, "create_sandbox", serde_json::json!({ "ttl_seconds": 60 })).await;
    let other = out.structured_content.as_ref().unwrap()["sandbox_id"].as_str().unwrap().to_owned();
    assert_eq!(workspaces(&tmp), 2);
    let out = call(&client, "kill_sandbox", serde_json::json!({ "sandbox_id": other })).await;
    assert_eq!(out.is_error, Some(false), "{out:?}");

    let out = call(
        &client,
        "run_command",
        serde_json::json!({ "sandbox_id": id, "command": "echo hi; echo oops >&2; exit 2" }),
    )
    .await;
    assert_eq!(out.is_error, Some(false), "{out:?}");
    assert_eq!(texts(&out), ["exit code 2\n--- stdout ---\nhi\n\n--- stderr ---\noops\n"]);
    assert_eq!(workspaces(&tmp), 1, "the killed one is gone");

    let cell = format!(
        "import base64\nclass Pic:\n    def _repr_png_(self): return base64.b64decode('{PNG_B64}')\nprint('drawn')\nPic()"
    );
    let out = call(&client, "run_code", serde_json::json!({ "sandbox_id": id, "code": cell })).await;
    assert_eq!(out.is_error, Some(false), "{out:?}");
    assert_eq!(texts(&out), ["--- stdout ---\ndrawn\n"]);
    let images: Vec<_> = out
        .content
        .iter()
        .filter_map(|c| match c {
            ContentBlock::Image(i) => Some(i),
            _ => None,
        })
        .collect();
    assert_eq!(images.len(), 1, "{out:?}");
    assert_eq!(images[0].mime_type, "image/png");
    assert_eq!(images[0].data, PNG_B64);
    let decoded = base64::engine::general_purpose::STANDARD.decode(&images[0].data).unwrap();
    assert!(decoded.starts_with(b"\x89PNG"));

    let out = call(&client, "run_code", serde_json::json!({ "sandbox_id": id, "code": "1/0" })).await;
    assert_eq!(out.is_error, Some(true), "a cell that raised is a tool error");
    assert!(texts(&out).last().unwrap().ends_with("ZeroDivisionError: division by zero"), "{out:?}");

    let out = call(
        &client,
        "write_file",
        serde_json::json!({ "sandbox_id": id, "path": "notes.txt", "content": "one\n" }),
    )
    .await;
    assert_eq!(texts(&out), ["wrote 4 bytes to notes.txt"]);
    let out = call(&client, "read_file", serde_json::json!({ "sandbox_id": id, "path": "notes.txt" })).await;
    assert_eq!(texts(&out), ["one\n"]);
    let out = call(&client, "list_files", serde_json::json!({ "sandbox_id": id, "path": "." })).await;
    assert!(texts(&out)[0].lines().any(|l| l == "notes.txt\t4 bytes"), "{out:?}");

    let out =
        call(&client, "read_file", serde_json::json!({ "sandbox_id": id, "path": "missing.txt" })).await;
    assert_eq!(out.is_error, Some(true));
    assert!(texts(&out)[0].starts_with("[SBX-010] "), "{out:?}");
    assert_eq!(out.structured_content.as_ref().unwrap()["code"], "SBX-010");

    // A missing required argument is a tool error too, and the server keeps serving.
    let bad = client.call_tool(CallToolRequestParams::new("run_command")).await.unwrap();
    assert_eq!(bad.is_error, Some(true));
    assert!(texts(&bad)[0].contains("missing field `sandbox_id`"), "{bad:?}");
    let out = call(&client, "run_command", serde_json::json!({ "sandbox_id": id, "command": "true" })).await;
    assert_eq!(texts(&out), ["exit code 0"]);

    client.cancel().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while workspaces(&tmp) > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(workspaces(&tmp), 0, "the session's sandboxes are removed when the client hangs up");
    let _ = std::fs::remove_dir_all(&tmp);
}

/// Class 21 through MCP: a `run_code` and a `run_command` with `timeout_seconds` of
/// `u64::MAX` answer (the cell's timeout panicked a worker, and the tool call never
/// answered); control: the same calls with a timeout of 0 s answer with a timeout error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extreme_timeouts_answer() {
    let tmp = std::env::temp_dir().join(format!("sandboxio-cli-mcp-extreme-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_sandboxio"));
    cmd.args(["mcp", "--dsn", "local://", "--network", "deny"]).env("TMPDIR", &tmp);
    let client = ().serve(TokioChildProcess::new(cmd).unwrap()).await.unwrap();
    let made = call(&client, "create_sandbox", serde_json::json!({})).await;
    let id = made.structured_content.as_ref().unwrap()["sandbox_id"].as_str().unwrap().to_owned();
    let within = Duration::from_mins(1);
    for (tool, key, source, zero_source) in [
        ("run_code", "code", "6 * 7", "import time\ntime.sleep(5)"),
        ("run_command", "command", "echo 42", "sleep 5"),
    ] {
        let big = serde_json::json!({ "sandbox_id": id, key: source, "timeout_seconds": u64::MAX });
        let out = tokio::time::timeout(within, call(&client, tool, big))
            .await
            .unwrap_or_else(|_| panic!("{tool} with timeout_seconds u64::MAX never answered"));
        assert_eq!(out.is_error, Some(false), "{tool}: {out:?}");
        assert!(texts(&out).concat().contains("42"), "{tool}: {out:?}");
        let zero = serde_json::json!({ "sandbox_id": id, key: zero_source, "timeout_seconds": 0 });
        let out =
            tokio::time::timeout(within, call(&client, tool, zero)).await.expect("a zero timeout answers");
        assert_eq!(out.is_error, Some(true), "control: {tool} with a zero timeout times out: {out:?}");
        assert!(texts(&out).concat().contains("SBX-006"), "control: {tool}: {out:?}");
    }
    client.cancel().await.unwrap();
    let _ = std::fs::remove_dir_all(&tmp);
}

/// The peak resident set (`VmHWM`) of process `pid`, in MiB.
fn peak_rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).unwrap();
    kib.trim().trim_end_matches("kB").trim().parse::<u64>().unwrap() / 1024
}

/// Class 19 through MCP: a cell that writes its runner an error record of 524,000 two-byte
/// lines (1 MiB, the most an error keeps) costs the server no more than the issue's 64 MiB,
/// cell after cell. Each line was a `String` of its own: the server went from 26 to 87 MiB.
/// The cell fills its output budget first (16 MiB of records), as a flood would. Positive
/// control: the error arrives whole, every line of it, in the tool's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_error_of_many_lines_keeps_the_server_under_64_mib() {
    const CELL: &str = r#"import os
fd = display.__globals__["CTRL"]
def w(b):
    v = memoryview(b)
    while v:
        v = v[os.write(fd, v):]
item = b"x" * (1 << 20)
for _ in range(16):
    w(b"bundle display 1 0\nitem text/plain %d\n" % len(item) + item)
p = b"E\nv\n" + b"a\n" * 524000
w(b"error %d\n" % len(p) + p)
"#;
    let tmp = std::env::temp_dir().join(format!("sandboxio-cli-mcp-error-lines-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_sandboxio"));
    cmd.args(["mcp", "--dsn", "local://", "--network", "deny"]).env("TMPDIR", &tmp);
    let child = TokioChildProcess::new(cmd).unwrap();
    let pid = child.id().unwrap();
    let client = ().serve(child).await.unwrap();
    let made = call(&client, "create_sandbox", serde_json::json!({})).await;
    let id = made.structured_content.as_ref().unwrap()["sandbox_id"].as_str().unwrap().to_owned();
    let start = peak_rss_mib(pid);
    for _ in 0..3 {
        let out = call(&client, "run_code", serde_json::json!({ "sandbox_id": id, "code": CELL })).await;
        assert_eq!(out.is_error, Some(true), "{:?}", out.content.len());
        let text = texts(&out).concat();
        assert_eq!(
            text.matches("a\n").count() + usize::from(text.ends_with('a')),
            524_000,
            "control: the error's lines"
        );
    }
    let peak = peak_rss_mib(pid);
    println!(
        "mcp: a full budget and a 524,000-line error, 3 cells: server peak RSS {peak} MiB (from {start})"
    );
    assert!(peak < 64, "a cell's error took the MCP server to {peak} MiB");
    client.cancel().await.unwrap();
    let _ = std::fs::remove_dir_all(&tmp);
}
