//! The router client against a `TaskCommandRouter` server on loopback over TLS, built from
//! its own copy of the generated messages: exec ids, bearer auth, output resumed by byte
//! offset after a cut, stdin by offset with EOF, exit codes and signals.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use tonic::{Request, Response, Status};

use super::*;
use crate::ErrorCode;

#[allow(clippy::pedantic, missing_docs, reason = "generated code")]
mod stub {
    include!(concat!(env!("OUT_DIR"), "/modal-stub/modal.task_command_router.rs"));
}

use stub::task_command_router_server::{TaskCommandRouter, TaskCommandRouterServer};

#[derive(Default)]
struct State {
    /// Every request's `authorization` and any `x-modal-*` header seen.
    auth: Vec<String>,
    modal_headers: usize,
    started: BTreeMap<String, stub::TaskExecStartRequest>,
    /// The bytes of stdout of every exec.
    stdout: Vec<u8>,
    /// Reads that end in UNAVAILABLE after this many 1000-byte pieces, in order.
    cuts: Vec<usize>,
    read_offsets: Vec<u64>,
    stdin: Vec<u8>,
    stdin_closed: bool,
    exit: Option<stub::task_exec_wait_response::ExitStatus>,
}

#[derive(Clone, Default)]
struct Server(Arc<Mutex<State>>);

impl Server {
    fn see<T>(&self, r: &Request<T>) {
        let mut s = self.0.lock().unwrap();
        s.auth.push(
            r.metadata().get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned(),
        );
        s.modal_headers += r.metadata().keys().filter(|k| format!("{k:?}").contains("x-modal")).count();
    }
}

type Pieces =
    Pin<Box<dyn futures_core::Stream<Item = Result<stub::TaskExecStdioReadResponse, Status>> + Send>>;

#[tonic::async_trait]
impl TaskCommandRouter for Server {
    async fn task_exec_poll(
        &self,
        _: Request<stub::TaskExecPollRequest>,
    ) -> Result<Response<stub::TaskExecPollResponse>, Status> {
        Err(Status::unimplemented("not in this test"))
    }
    async fn task_exec_start(
        &self,
        r: Request<stub::TaskExecStartRequest>,
    ) -> Result<Response<stub::TaskExecStartResponse>, Status> {
        self.see(&r);
        let m = r.into_inner();
        if m.task_id != "ta-1" {
            return Err(Status::not_found("task not found"));
        }
        self.0.lock().unwrap().started.insert(m.exec_id.clone(), m);
        Ok(Response::new(stub::TaskExecStartResponse {}))
    }
    async fn task_exec_stdin_write(
        &self,
        r: Request<stub::TaskExecStdinWriteRequest>,
    ) -> Result<Response<stub::TaskExecStdinWriteResponse>, Status> {
        self.see(&r);
        let m = r.into_inner();
        let mut s = self.0.lock().unwrap();
        if m.offset != s.stdin.len() as u64 || s.stdin_closed {
            return Err(Status::invalid_argument(format!(
                "offset {} but {} written",
                m.offset,
                s.stdin.len()
            )));
        }
        s.stdin.extend_from_slice(&m.data);
        s.stdin_closed = m.eof;
        Ok(Response::new(stub::TaskExecStdinWriteResponse {}))
    }
    type TaskExecStdioReadStream = Pieces;
    async fn task_exec_stdio_read(
        &self,
        r: Request<stub::TaskExecStdioReadRequest>,
    ) -> Result<Response<Pieces>, Status> {
        self.see(&r);
        let m = r.into_inner();
        let mut s = self.0.lock().unwrap();
        s.read_offsets.push(m.offset);
        let rest = s.stdout.get(usize::try_from(m.offset).unwrap()..).unwrap_or_default().to_vec();
        let cut = if s.cuts.is_empty() { None } else { Some(s.cuts.remove(0)) };
        let mut items: Vec<Result<stub::TaskExecStdioReadResponse, Status>> =
            rest.chunks(1000).map(|c| Ok(stub::TaskExecStdioReadResponse { data: c.to_vec() })).collect();
        if let Some(n) = cut {
            items.truncate(n);
            items.push(Err(Status::unavailable("connection reset")));
        }
        Ok(Response::new(Box::pin(tokio_stream::iter(items))))
    }
    async fn task_exec_wait(
        &self,
        r: Request<stub::TaskExecWaitRequest>,
    ) -> Result<Response<stub::TaskExecWaitResponse>, Status> {
        self.see(&r);
        let s = self.0.lock().unwrap();
        match s.exit {
            Some(e) => Ok(Response::new(stub::TaskExecWaitResponse { exit_status: Some(e) })),
            None => Err(Status::not_found("Sandbox sb-1 is gone")),
        }
    }
}

async fn router(server: &Server) -> Router {
    let (mut builder, ca, incoming, addr) = super::super::test_tls::tls_server("router.test").await;
    tokio::spawn(
        builder.add_service(TaskCommandRouterServer::new(server.clone())).serve_with_incoming(incoming),
    );
    let token = SecretString::new("jwt-abc");
    Router::new(
        unused_control(),
        (&format!("https://{addr}"), &token),
        "sb-1",
        "ta-1",
        Some((&ca, "router.test")),
    )
    .unwrap()
}

/// A control plane no test here reaches (building it does no I/O).
fn unused_control() -> Control {
    use super::super::config::{Credentials, Settings};
    let settings = Settings {
        server_url: "https://127.0.0.1:1".into(),
        credentials: Credentials { token_id: "ak-test".into(), token_secret: SecretString::new("as-test") },
        environment: "main".into(),
        image_builder_version: None,
    };
    Control::new(&settings, None).unwrap()
}

#[tokio::test]
async fn start_sends_a_fresh_exec_id_the_command_and_only_the_bearer_token() {
    let server = Server::default();
    let r = router(&server).await;
    let command = Command {
        argv: vec!["sh".into(), "-c".into(), "echo hi".into()],
        env: vec![("A".into(), "1".into())],
        workdir: Some("/tmp".into()),
    };
    let first = r.start(&command).await.unwrap();
    let second = r.start(&command).await.unwrap();
    assert!(first.len() == 32 && first != second, "{first} {second}");
    let s = server.0.lock().unwrap();
    let m = &s.started[&first];
    assert_eq!(m.command_args, ["sh", "-c", "echo hi"]);
    assert_eq!(m.env.get("A").map(String::as_str), Some("1"));
    assert_eq!(m.workdir.as_deref(), Some("/tmp"));
    assert_eq!((m.stdout_config, m.stderr_config), (1, 1), "both piped");
    assert_eq!(m.timeout_secs, None, "the adapter keeps its own timeout");
    assert_eq!(s.auth, ["Bearer jwt-abc", "Bearer jwt-abc"]);
    assert_eq!(s.modal_headers, 0, "the Modal token never goes to the router");
}

#[tokio::test]
async fn output_is_resumed_at_the_byte_offset_after_cuts() {
    let server = Server::default();
    let stdout: Vec<u8> = (0..25_000u32).map(|i| u8::try_from(i % 251).unwrap()).collect();
    {
        let mut s = server.0.lock().unwrap();
        s.stdout.clone_from(&stdout);
        s.cuts = vec![3, 0, 7];
    }
    let r = router(&server).await;
    let mut got = Vec::new();
    let end = r.read("ex", Fd::Stdout, 0, |b| got.extend_from_slice(b)).await.unwrap();
    assert_eq!(end, 25_000);
    assert!(got == stdout, "the bytes, in order, once each");
    assert_eq!(server.0.lock().unwrap().read_offsets, [0, 3000, 3000, 10_000]);
    // Reading from an offset gives the rest.
    let mut tail = Vec::new();
    assert_eq!(r.read("ex", Fd::Stderr, 24_990, |b| tail.extend_from_slice(b)).await.unwrap(), 25_000);
    assert_eq!(tail, stdout[24_990..]);
}

#[tokio::test]
async fn a_stream_cut_more_than_reopens_times_is_an_error() {
    let server = Server::default();
    {
        let mut s = server.0.lock().unwrap();
        s.stdout = vec![b'x'; 5000];
        s.cuts = vec![0; 11];
    }
    let r = router(&server).await;
    let err = r.read("ex", Fd::Stdout, 0, |_| {}).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::Connect, "{err}");
    assert_eq!(server.0.lock().unwrap().read_offsets.len(), 11);
}

#[tokio::test]
async fn stdin_by_offset_with_eof() {
    let server = Server::default();
    let r = router(&server).await;
    r.write_stdin("ex", 0, b"ab", false).await.unwrap();
    r.write_stdin("ex", 2, b"cd", true).await.unwrap();
    {
        let s = server.0.lock().unwrap();
        assert_eq!((s.stdin.as_slice(), s.stdin_closed), (&b"abcd"[..], true));
    }
    let err = r.write_stdin("ex", 4, b"e", false).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::Provider);
}

#[tokio::test]
async fn wait_gives_a_code_or_a_signal_and_a_gone_sandbox() {
    let server = Server::default();
    let r = router(&server).await;
    for (exit, want) in [
        (stub::task_exec_wait_response::ExitStatus::Code(3), ExitStatus::Code(3)),
        (stub::task_exec_wait_response::ExitStatus::Signal(9), ExitStatus::Signal(9)),
    ] {
        server.0.lock().unwrap().exit = Some(exit);
        assert_eq!(r.wait("ex").await.unwrap(), want);
    }
    server.0.lock().unwrap().exit = None;
    let err = r.wait("ex").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "[SBX-007] sandbox sb-1 is gone: Modal no longer knows it: Sandbox sb-1 is gone"
    );
    let Err(err) =
        Router::new(unused_control(), ("http://127.0.0.1:1", &SecretString::new("t")), "sb-1", "ta-1", None)
    else {
        panic!("a plaintext router URL was accepted");
    };
    assert_eq!(err.code(), ErrorCode::Configuration);
}

#[test]
fn the_router_token_is_sensitive_and_never_printed() {
    let token = Token::new(&SecretString::new("jwt-hunter2")).unwrap();
    assert!(!format!("{token:?}").contains("hunter2"), "{token:?}");
    assert!(format!("{:?}", Bearer(Arc::new(token))).contains("Sensitive"));
    assert_eq!(Token::new(&SecretString::new("a\nb")).unwrap_err().code(), ErrorCode::Provider);
}

fn jwt(claims: &str) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
    format!("{}.{}.c2ln", b64(r#"{"alg":"HS256","typ":"JWT"}"#), b64(claims))
}

#[test]
fn a_jwts_expiry_is_read_and_anything_else_is_unknown() {
    assert_eq!(jwt_expiry(&jwt(r#"{"exp":1796671394,"sub":"ta-1"}"#)), Some(1_796_671_394));
    assert_eq!(jwt_expiry(&jwt(r#"{"exp":1796671394.7}"#)), Some(1_796_671_394));
    // Padding kept by an encoder that adds it.
    let padded =
        format!("e30.{}==.c2ln", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(r#"{"exp":7}"#));
    assert_eq!(jwt_expiry(&padded), Some(7));
    assert_eq!(jwt_expiry(&jwt(r#"{"sub":"ta-1"}"#)), None);
    assert_eq!(jwt_expiry(&jwt(r#"{"exp":"soon"}"#)), None);
    assert_eq!(jwt_expiry(&jwt(r#"{"exp":-5}"#)), None);
    assert_eq!(jwt_expiry("jwt-abc"), None);
    assert_eq!(jwt_expiry("a.b.c.d"), None);
    assert_eq!(jwt_expiry("a.%%%.c"), None);
}

#[test]
fn a_token_is_fresh_only_while_its_expiry_is_more_than_the_buffer_away() {
    let at = |exp: u64| Token::new(&SecretString::new(jwt(&format!(r#"{{"exp":{exp}}}"#)))).unwrap();
    let buffer = REFRESH_BUFFER.as_secs();
    assert!(at(1_000 + buffer + 1).fresh_at(1_000));
    assert!(!at(1_000 + buffer).fresh_at(1_000));
    assert!(!at(900).fresh_at(1_000));
    assert!(
        !Token::new(&SecretString::new("opaque")).unwrap().fresh_at(1_000),
        "an unknown expiry is never fresh"
    );
}
