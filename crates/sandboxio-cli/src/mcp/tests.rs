//! The server on the fake: its tools, bounds and answers through rmcp's own client over an
//! in-memory pipe (the binary over stdio and HTTP is in `tests/mcp_stdio.rs` and
//! `tests/mcp_http.rs`).

use std::sync::Arc;

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ContentBlock};
use sandboxio::backend::Backend;
use sandboxio::testing::FakeBackend;
use sandboxio::{NetworkPolicy, policy::Capabilities};

use super::SandboxServer;
use crate::args::SandboxOpts;

fn deny() -> SandboxOpts {
    SandboxOpts { network: NetworkPolicy::deny_all(), memory: None, label: Vec::new() }
}

#[expect(clippy::unnecessary_wraps, reason = "the signature of a scheme factory")]
fn run_only(_: &sandboxio::dsn::Dsn) -> sandboxio::Result<Arc<dyn Backend>> {
    Ok(Arc::new(FakeBackend::new().with_capabilities(Capabilities::RUN | Capabilities::NETWORK_DENY)))
}

fn server(dsn: &str) -> sandboxio::Result<SandboxServer> {
    SandboxServer::new(dsn, deny(), std::time::Duration::from_mins(10), 2)
}

#[test]
fn tools_follow_the_capabilities() {
    let all = server("fake://").unwrap();
    let mut every: Vec<&str> = super::TOOL_NEEDS.iter().map(|(name, _)| *name).collect();
    every.sort_unstable();
    assert_eq!(all.tool_names(), every, "the fake serves every tool");
    assert_eq!(every.len(), 11);
    sandboxio::dsn::register_scheme("clitestrun", run_only).unwrap();
    let narrow = server("clitestrun://").unwrap();
    assert_eq!(narrow.tool_names(), ["create_sandbox", "kill_sandbox", "list_sandboxes", "run_command"]);
    let err = server("nosuch://").err().unwrap();
    assert_eq!(err.code(), sandboxio::ErrorCode::Configuration);
}

/// `read_file` returns at most the operator's `--max-read` bytes; a larger file is
/// `TooLarge`, the file of exactly that size the control.
#[tokio::test]
async fn read_file_is_bounded_by_the_operators_max_read() {
    let (server_io, client_io) = tokio::io::duplex(1 << 16);
    let server = server("fake://").unwrap().with_max_read(16);
    let serving = tokio::spawn(async move { server.serve(server_io).await.unwrap().waiting().await });
    let client = ().serve(client_io).await.unwrap();
    let call = async |tool: &'static str, args: serde_json::Value| {
        let params = CallToolRequestParams::new(tool).with_arguments(args.as_object().unwrap().clone());
        client.call_tool(params).await.unwrap()
    };
    let out = call("create_sandbox", serde_json::json!({})).await;
    let id = out.structured_content.as_ref().unwrap()["sandbox_id"].as_str().unwrap().to_owned();
    for (path, size) in [("/at.txt", 16), ("/over.txt", 17)] {
        let content = "x".repeat(size);
        let out =
            call("write_file", serde_json::json!({ "sandbox_id": id, "path": path, "content": content }))
                .await;
        assert_eq!(out.is_error, Some(false), "{out:?}");
    }
    let out = call("read_file", serde_json::json!({ "sandbox_id": id, "path": "/at.txt" })).await;
    let ContentBlock::Text(text) = &out.content[0] else { panic!("{out:?}") };
    assert_eq!((out.is_error, text.text.as_str()), (Some(false), "x".repeat(16).as_str()));
    let out = call("read_file", serde_json::json!({ "sandbox_id": id, "path": "/over.txt" })).await;
    let code = out.structured_content.as_ref().unwrap()["code"].clone();
    assert_eq!((out.is_error, code), (Some(true), "SBX-016".into()), "{out:?}");
    client.cancel().await.unwrap();
    serving.await.unwrap().unwrap();
}

/// The server behind rmcp's own client over an in-memory pipe, on the fake: the
/// protocol path without a process (the binary's stdio path is `tests/mcp_stdio.rs`).
#[tokio::test]
async fn over_a_pipe_on_the_fake() {
    let (server_io, client_io) = tokio::io::duplex(1 << 16);
    let server = server("fake://").unwrap();
    let session = server.clone();
    let serving = tokio::spawn(async move { server.serve(server_io).await.unwrap().waiting().await });
    let client = ().serve(client_io).await.unwrap();
    let tools: Vec<String> =
        client.list_all_tools().await.unwrap().into_iter().map(|t| t.name.into_owned()).collect();
    assert_eq!(tools.len(), 11, "{tools:?}");
    let call = async |tool: &'static str, args: serde_json::Value| {
        let params = CallToolRequestParams::new(tool).with_arguments(args.as_object().unwrap().clone());
        client.call_tool(params).await.unwrap()
    };
    let code = |out: &rmcp::model::CallToolResult| out.structured_content.as_ref().unwrap()["code"].clone();

    let out = call("run_command", serde_json::json!({ "sandbox_id": "fake-1", "command": "true" })).await;
    assert_eq!((out.is_error, code(&out)), (Some(true), "SBX-007".into()), "no such sandbox: {out:?}");
    let out = call("create_sandbox", serde_json::json!({ "network": "allow" })).await;
    assert_eq!((out.is_error, code(&out)), (Some(true), "SBX-013".into()), "wider than deny: {out:?}");
    let out = call("create_sandbox", serde_json::json!({ "ttl_seconds": 601 })).await;
    assert_eq!((out.is_error, code(&out)), (Some(true), "SBX-013".into()), "above the TTL bound: {out:?}");

    let out = call("create_sandbox", serde_json::json!({ "ttl_seconds": 60 })).await;
    assert_eq!(out.is_error, Some(false), "{out:?}");
    let id = out.structured_content.as_ref().unwrap()["sandbox_id"].as_str().unwrap().to_owned();
    let ContentBlock::Text(text) = &out.content[0] else { panic!("{out:?}") };
    assert_eq!(text.text, id);
    let out =
        call("run_command", serde_json::json!({ "sandbox_id": id, "command": "echo hello; exit 3" })).await;
    assert_eq!(out.is_error, Some(false));
    let ContentBlock::Text(text) = &out.content[0] else { panic!("{out:?}") };
    assert_eq!(text.text, "exit code 3\n--- stdout ---\nhello\n");
    let out = call("read_file", serde_json::json!({ "sandbox_id": id, "path": "/missing.txt" })).await;
    assert_eq!((out.is_error, code(&out)), (Some(true), "SBX-010".into()));
    let out = call("extend_sandbox", serde_json::json!({ "sandbox_id": id, "ttl_seconds": 600 })).await;
    assert_eq!(out.is_error, Some(false), "{out:?}");

    let second = call("create_sandbox", serde_json::json!({})).await;
    assert_eq!(second.is_error, Some(false));
    let out = call("create_sandbox", serde_json::json!({})).await;
    assert_eq!((out.is_error, code(&out)), (Some(true), "SBX-013".into()), "a third is over the bound");
    let out = call("list_sandboxes", serde_json::json!({})).await;
    assert_eq!(out.structured_content.as_ref().unwrap()["sandbox_ids"].as_array().unwrap().len(), 2);
    let out = call("kill_sandbox", serde_json::json!({ "sandbox_id": id })).await;
    assert_eq!(out.is_error, Some(false), "{out:?}");
    let out = call("run_command", serde_json::json!({ "sandbox_id": id, "command": "true" })).await;
    assert_eq!(code(&out), "SBX-007", "killed: {out:?}");

    client.cancel().await.unwrap();
    serving.await.unwrap().unwrap();
    assert_eq!(session.sandboxes.lock().await.len(), 1, "the second is still there");
    session.end_session().await;
    assert!(session.sandboxes.lock().await.is_empty());
}

/// Issue #30 item 6: a sandbox past its TTL no longer counts against `--max-sandboxes`
/// nor is listed; `kill_sandbox` twice succeeds, as the library's `kill` does (the
/// second was SBX-007).
#[tokio::test]
async fn ended_sandboxes_free_their_place_and_killing_twice_succeeds() {
    let (server_io, client_io) = tokio::io::duplex(1 << 16);
    let server = server("fake://").unwrap();
    let serving = tokio::spawn(async move { server.serve(server_io).await.unwrap().waiting().await });
    let client = ().serve(client_io).await.unwrap();
    let call = async |tool: &'static str, args: serde_json::Value| {
        let params = CallToolRequestParams::new(tool).with_arguments(args.as_object().unwrap().clone());
        client.call_tool(params).await.unwrap()
    };
    let id_of = |out: &rmcp::model::CallToolResult| {
        out.structured_content.as_ref().unwrap()["sandbox_id"].as_str().unwrap().to_owned()
    };
    let short = id_of(&call("create_sandbox", serde_json::json!({ "ttl_seconds": 1 })).await);
    let long = id_of(&call("create_sandbox", serde_json::json!({})).await);
    let out = call("create_sandbox", serde_json::json!({})).await;
    assert_eq!(out.is_error, Some(true), "control: a third is over the bound of 2: {out:?}");
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let out = call("list_sandboxes", serde_json::json!({})).await;
    assert_eq!(out.structured_content.as_ref().unwrap()["sandbox_ids"], serde_json::json!([long]));
    let out = call("create_sandbox", serde_json::json!({})).await;
    assert_eq!(out.is_error, Some(false), "the expired one's place is free: {out:?}");
    for _ in 0..2 {
        let out = call("kill_sandbox", serde_json::json!({ "sandbox_id": long })).await;
        assert_eq!(out.is_error, Some(false), "{out:?}");
    }
    let out = call("kill_sandbox", serde_json::json!({ "sandbox_id": short })).await;
    assert_eq!(out.is_error, Some(false), "an expired one: {out:?}");
    let out = call("run_command", serde_json::json!({ "sandbox_id": long, "command": "true" })).await;
    let ContentBlock::Text(text) = &out.content[0] else { panic!("{out:?}") };
    assert!(text.text.contains("was killed or its TTL ran out"), "{out:?}");
    let out = call("kill_sandbox", serde_json::json!({ "sandbox_id": "never-made" })).await;
    assert_eq!(out.is_error, Some(true), "an id this session never had: {out:?}");
    client.cancel().await.unwrap();
    serving.await.unwrap().unwrap();
}

/// Issue #30 item 7: every tool says what it does to the world (MCP annotations);
/// malformed arguments, unknown ones included, are tool errors with an SBX code (they
/// were bare text, and unknown ones were ignored); `write_file` takes base64, which
/// `read_file` gives back; a `DataFrame`'s plain table comes beside its HTML.
#[tokio::test]
async fn tools_are_annotated_arguments_are_checked_and_bytes_round_trip() {
    let (server_io, client_io) = tokio::io::duplex(1 << 16);
    let server = server("fake://").unwrap();
    let serving = tokio::spawn(async move { server.serve(server_io).await.unwrap().waiting().await });
    let client = ().serve(client_io).await.unwrap();
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().all(|t| t.annotations.is_some()), "every tool is annotated");
    let hint = |name: &str| {
        let tool = tools.iter().find(|t| t.name == name).unwrap();
        let a = tool.annotations.as_ref().unwrap();
        (a.read_only_hint, a.destructive_hint, a.idempotent_hint)
    };
    assert_eq!(hint("read_file"), (Some(true), None, None));
    assert_eq!(hint("kill_sandbox"), (Some(false), Some(true), Some(true)));
    assert_eq!(hint("run_command"), (Some(false), Some(true), Some(false)));
    let call = async |tool: &'static str, args: serde_json::Value| {
        let params = CallToolRequestParams::new(tool).with_arguments(args.as_object().unwrap().clone());
        client.call_tool(params).await.unwrap()
    };
    let code = |out: &rmcp::model::CallToolResult| out.structured_content.as_ref().map(|c| c["code"].clone());
    let made = call("create_sandbox", serde_json::json!({})).await;
    let id = made.structured_content.as_ref().unwrap()["sandbox_id"].as_str().unwrap().to_owned();
    let out =
        call("run_command", serde_json::json!({ "sandbox_id": id, "command": "true", "timeout": 5 })).await;
    assert_eq!(
        (out.is_error, code(&out)),
        (Some(true), Some("SBX-013".into())),
        "an unknown argument: {out:?}"
    );
    let ContentBlock::Text(text) = &out.content[0] else { panic!("{out:?}") };
    assert!(text.text.contains("unknown field `timeout`"), "{out:?}");
    let out = call("run_command", serde_json::json!({ "command": "true" })).await;
    assert_eq!((out.is_error, code(&out)), (Some(true), Some("SBX-013".into())), "a missing one: {out:?}");
    let bytes: Vec<u8> = vec![0, 159, 146, 150, 255];
    let encoded = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &bytes);
    let out = call(
        "write_file",
        serde_json::json!({ "sandbox_id": id, "path": "/b.bin", "content": encoded, "encoding": "base64" }),
    )
    .await;
    assert_eq!(out.is_error, Some(false), "{out:?}");
    let out = call("read_file", serde_json::json!({ "sandbox_id": id, "path": "/b.bin" })).await;
    let ContentBlock::Text(text) = &out.content[0] else { panic!("{out:?}") };
    assert_eq!(text.text, format!("(not UTF-8: 5 bytes, base64)\n{encoded}"));
    let out = call(
        "write_file",
        serde_json::json!({ "sandbox_id": id, "path": "/c.bin", "content": "!!", "encoding": "base64" }),
    )
    .await;
    assert_eq!(code(&out), Some("SBX-013".into()), "not base64: {out:?}");
    client.cancel().await.unwrap();
    serving.await.unwrap().unwrap();

    let mut frame = sandboxio::exec::MimeBundle::new();
    frame.insert("text/html".into(), b"<table></table>".to_vec());
    frame.insert("text/plain".into(), b"   a\n0  1".to_vec());
    let shown: Vec<String> = super::content::bundle_content(&frame)
        .into_iter()
        .map(|c| match c {
            ContentBlock::Text(t) => t.text.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(shown, ["<table></table>", "   a\n0  1"], "the plain table beside the HTML");
}

#[expect(clippy::unnecessary_wraps, reason = "the signature of a scheme factory")]
fn run_only_with_files(_: &sandboxio::dsn::Dsn) -> sandboxio::Result<Arc<dyn Backend>> {
    let caps = Capabilities::RUN | Capabilities::FILESYSTEM | Capabilities::NETWORK_DENY;
    Ok(Arc::new(FakeBackend::new().with_capabilities(caps)))
}

/// A backend that runs commands but does not stream them still serves `run_command`, within
/// the same budget (the tool streamed, and such a backend answered with a refusal).
#[tokio::test]
async fn run_command_serves_a_backend_without_streams() {
    sandboxio::dsn::register_scheme("clitestnostream", run_only_with_files).unwrap();
    let (server_io, client_io) = tokio::io::duplex(1 << 16);
    let server = server("clitestnostream://").unwrap().with_output_limit(8);
    let serving = tokio::spawn(async move { server.serve(server_io).await.unwrap().waiting().await });
    let client = ().serve(client_io).await.unwrap();
    let call = async |tool: &'static str, args: serde_json::Value| {
        let params = CallToolRequestParams::new(tool).with_arguments(args.as_object().unwrap().clone());
        client.call_tool(params).await.unwrap()
    };
    let made = call("create_sandbox", serde_json::json!({})).await;
    let id = made.structured_content.as_ref().unwrap()["sandbox_id"].as_str().unwrap().to_owned();
    let out = call("run_command", serde_json::json!({ "sandbox_id": id, "command": "echo hi" })).await;
    let ContentBlock::Text(text) = &out.content[0] else { panic!("{out:?}") };
    assert_eq!((out.is_error, text.text.as_str()), (Some(false), "exit code 0\n--- stdout ---\nhi\n"));
    let out =
        call("run_command", serde_json::json!({ "sandbox_id": id, "command": "echo 0123456789abcdef" }))
            .await;
    let ContentBlock::Text(text) = &out.content[0] else { panic!("{out:?}") };
    assert!(text.text.contains("bytes cut here: stdout was 17 bytes"), "{out:?}");
    client.cancel().await.unwrap();
    serving.await.unwrap().unwrap();
}
