//! The code interpreter (E2B's `code-interpreter` server): `POST /execute` answering one
//! JSON object per line, ending with `end_of_execution`; `POST /contexts`. Cells run in the
//! `local://` sandbox's real Python contexts; a client that goes away interrupts its cell
//! (the local code stream is dropped), as the real server interrupts the kernel.

use std::convert::Infallible;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::{Method, Request, Response, StatusCode};
use sandboxio::{
    Code,
    exec::{CodeContext, StreamKind},
};
use tokio::sync::mpsc;

use super::{Body, StubSandbox, body_bytes, json, text};

pub async fn handle(sandbox: Arc<StubSandbox>, req: Request<hyper::body::Incoming>) -> Response<Body> {
    let (method, path) = (req.method().clone(), req.uri().path().to_owned());
    let body = body_bytes(req).await;
    let msg: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    match (method, path.as_str()) {
        (Method::POST, "/contexts") => {
            let language = msg["language"].as_str().unwrap_or("python");
            match sandbox.local.create_context(language).await {
                Ok(c) => json(
                    StatusCode::OK,
                    &serde_json::json!({"id": c.id, "language": c.language, "cwd": "/home/user"}),
                ),
                Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
            }
        }
        (Method::POST, "/execute") => execute(sandbox, &msg),
        (Method::GET, "/health") => text(StatusCode::OK, "OK"),
        _ => text(StatusCode::NOT_FOUND, "Not Found"),
    }
}

fn line(value: &serde_json::Value) -> Bytes {
    Bytes::from(format!("{value}\n"))
}

/// A sandboxio MIME bundle as the server's `result` line.
fn result_line(bundle: &sandboxio::exec::MimeBundle) -> serde_json::Value {
    let mut out = serde_json::json!({"type": "result", "is_main_result": false});
    let mut extra = serde_json::Map::new();
    for (mime, data) in bundle {
        let text = String::from_utf8_lossy(data).into_owned();
        match mime.as_str() {
            "text/plain" => out["text"] = text.into(),
            "text/html" => out["html"] = text.into(),
            "text/markdown" => out["markdown"] = text.into(),
            "image/svg+xml" => out["svg"] = text.into(),
            "image/png" => out["png"] = STANDARD.encode(data).into(),
            "image/jpeg" => out["jpeg"] = STANDARD.encode(data).into(),
            "application/json" => out["json"] = serde_json::from_slice(data).unwrap_or_default(),
            other => {
                extra.insert(other.to_owned(), text.into());
            }
        }
    }
    if !extra.is_empty() {
        out["extra"] = serde_json::Value::Object(extra);
    }
    out
}

fn execute(sandbox: Arc<StubSandbox>, msg: &serde_json::Value) -> Response<Body> {
    let code_text = msg["code"].as_str().unwrap_or_default().to_owned();
    let context = msg["context_id"].as_str().map(str::to_owned);
    // The official SDK sends every field, `null` when unset: only a value counts.
    if context.is_some() && !msg["language"].is_null() {
        return text(StatusCode::BAD_REQUEST, "Only one of context_id or language can be provided");
    }
    let language = msg["language"].as_str().unwrap_or("python").to_owned();
    let mut code = Code::new(code_text).language(language.clone());
    if let Some(id) = &context {
        code = code.in_context(&CodeContext { id: id.clone(), language });
    }
    let (lines, rx) = mpsc::channel::<Bytes>(64);
    tokio::spawn(async move {
        let mut stream = match sandbox.local.run_code_stream(code) {
            Ok(stream) => stream,
            Err(e) => {
                let _ = lines.send(line(&serde_json::json!({"type": "error", "name": "ExecutionError", "value": e.to_string(), "traceback": ""}))).await;
                let _ = lines.send(line(&serde_json::json!({"type": "end_of_execution"}))).await;
                return;
            }
        };
        let _ = lines
            .send(line(&serde_json::json!({"type": "number_of_executions", "execution_count": 1})))
            .await;
        loop {
            // A client gone: dropping the stream interrupts the cell, as the server
            // interrupts the kernel when its client disconnects.
            let chunk = tokio::select! {
                c = stream.next_chunk() => c,
                () = lines.closed() => return,
            };
            let Some(Ok(chunk)) = chunk else { break };
            let kind = if chunk.stream == StreamKind::Stdout { "stdout" } else { "stderr" };
            let text = String::from_utf8_lossy(&chunk.data).into_owned();
            let keepalive = line(&serde_json::json!({"type": "keepalive"}));
            // A client gone: dropping the stream interrupts the cell.
            if lines.send(keepalive).await.is_err()
                || lines
                    .send(line(
                        &serde_json::json!({"type": kind, "text": text, "timestamp": "2026-01-01T00:00:00Z"}),
                    ))
                    .await
                    .is_err()
            {
                return;
            }
        }
        if sandbox.killed.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        match stream.wait().await {
            Ok(result) => {
                for bundle in &result.results {
                    let _ = lines.send(line(&result_line(bundle))).await;
                }
                if let Some(error) = &result.error {
                    let e = serde_json::json!({"type": "error", "name": error.name, "value": error.value, "traceback": error.traceback.join("\n")});
                    let _ = lines.send(line(&e)).await;
                }
            }
            Err(e) => {
                let _ = lines.send(line(&serde_json::json!({"type": "error", "name": "UnexpectedEndOfExecution", "value": e.to_string(), "traceback": ""}))).await;
            }
        }
        let _ = lines.send(line(&serde_json::json!({"type": "end_of_execution"}))).await;
    });
    let stream = futures_lite::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/x-ndjson")
        .body(BodyExt::boxed(StreamBody::new(stream)))
        .unwrap()
}
