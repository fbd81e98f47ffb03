//! `Sandbox::stream`: not awaitable, ordered, distinguishable, idempotent wait, cleanup.
#![expect(non_snake_case, reason = "test names read as contract clauses: `area__requirement`")]

use crate::support;

use std::time::Duration;

use futures_lite::StreamExt;
use sandboxio::testing::FakeBackend;
use sandboxio::{
    Command, ErrorCode, NetworkPolicy, Sandbox,
    audit::OperationKind,
    exec::{ExecStream, StreamKind},
    policy::Capabilities,
};
use support::{block_on, fake_sandbox, poll_k_times};

static_assertions_not_future!();

/// `ExecStream` must not be a future (then `.await` on it cannot compile).
macro_rules! static_assertions_not_future {
    () => {
        #[test]
        fn streaming__stream_is_not_awaitable() {
            trait AmbiguousIfFuture<A> {
                fn some_item() {}
            }
            impl<T: ?Sized> AmbiguousIfFuture<()> for T {}
            struct Invalid;
            impl<T: ?Sized + std::future::IntoFuture> AmbiguousIfFuture<Invalid> for T {}
            // Compiles only if exactly one impl applies, i.e. ExecStream is not IntoFuture.
            <ExecStream as AmbiguousIfFuture<_>>::some_item();
        }
    };
}
use static_assertions_not_future;

fn collect(stream: &mut ExecStream) -> Vec<(StreamKind, Vec<u8>)> {
    block_on(async {
        let mut chunks = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.unwrap();
            chunks.push((chunk.stream, chunk.data));
        }
        chunks
    })
}

#[test]
fn streaming__per_stream_order_is_kept_and_streams_are_distinguishable() {
    let (_, sbx) = fake_sandbox();
    let mut stream =
        sbx.stream(Command::shell("echo 1; echo a >&2; sleep 1; echo 2; echo b >&2; echo 3")).unwrap();
    let chunks = collect(&mut stream);
    let out: Vec<u8> =
        chunks.iter().filter(|c| c.0 == StreamKind::Stdout).flat_map(|c| c.1.clone()).collect();
    let err: Vec<u8> =
        chunks.iter().filter(|c| c.0 == StreamKind::Stderr).flat_map(|c| c.1.clone()).collect();
    assert_eq!(out, b"1\n2\n3\n");
    assert_eq!(err, b"a\nb\n");
}

#[test]
fn streaming__wait_returns_streamed_with_empty_output_and_is_idempotent() {
    let (_, sbx) = fake_sandbox();
    let mut stream = sbx.stream(Command::shell("echo hi; exit 4")).unwrap();
    let _ = collect(&mut stream);
    let first = block_on(stream.wait()).unwrap();
    assert!(first.streamed);
    assert!(first.stdout.is_empty() && first.stderr.is_empty());
    assert_eq!(first.exit_code(), Some(4));
    let second = block_on(stream.wait()).unwrap();
    assert_eq!(first, second);
}

#[test]
fn streaming__capability_not_supported_is_raised_from_stream_before_any_work() {
    let fake = FakeBackend::new().with_capabilities(Capabilities::all() - Capabilities::STREAM);
    let sbx =
        block_on(Sandbox::builder_with(fake.clone()).network(NetworkPolicy::deny_all()).create()).unwrap();
    let err = sbx.stream(Command::new("echo")).unwrap_err();
    assert_eq!(err.code(), ErrorCode::CapabilityNotSupported);
    assert!(err.to_string().contains("STREAM"));
    assert!(fake.calls().iter().all(|c| c.kind != OperationKind::Stream), "nothing reached the backend");
    assert_eq!(fake.live_processes(), 0);
}

#[test]
fn streaming__stdin_can_be_written_and_closed() {
    let (fake, sbx) = fake_sandbox();
    let mut stream = sbx.stream(Command::new("cat")).unwrap();
    block_on(async {
        stream.write_stdin("hello ").await.unwrap();
        stream.write_stdin(b"world\x00").await.unwrap();
        stream.close_stdin().await.unwrap();
    });
    let chunks = collect(&mut stream);
    assert_eq!(chunks.concat_stdout(), b"hello world\x00");
    assert_eq!(block_on(stream.wait()).unwrap().exit_code(), Some(0));
    assert_eq!(fake.live_processes(), 0);
}

#[test]
fn streaming__stdin_needs_the_capability() {
    let fake = FakeBackend::new().with_capabilities(Capabilities::all() - Capabilities::STDIN);
    let sbx = block_on(Sandbox::builder_with(fake).network(NetworkPolicy::deny_all()).create()).unwrap();
    let mut stream = sbx.stream(Command::new("cat")).unwrap();
    let err = block_on(stream.write_stdin("x")).unwrap_err();
    assert_eq!(err.code(), ErrorCode::CapabilityNotSupported);
}

#[test]
fn streaming__timeout_arrives_as_an_item_and_kills_the_process() {
    let (fake, sbx) = fake_sandbox();
    let mut stream = sbx.stream(Command::shell("echo a; sleep 60").timeout(Duration::from_secs(2))).unwrap();
    let items: Vec<_> = block_on(async {
        let mut items = Vec::new();
        while let Some(item) = stream.next().await {
            items.push(item);
        }
        items
    });
    assert_eq!(items.len(), 2);
    assert_eq!(items[1].as_ref().unwrap_err().code(), ErrorCode::ExecutionTimeout);
    assert_eq!(fake.live_processes(), 0);
}

trait ConcatStdout {
    fn concat_stdout(&self) -> Vec<u8>;
}

impl ConcatStdout for Vec<(StreamKind, Vec<u8>)> {
    fn concat_stdout(&self) -> Vec<u8> {
        self.iter().filter(|c| c.0 == StreamKind::Stdout).flat_map(|c| c.1.clone()).collect()
    }
}

// ---- Streaming cleanup: four separate cases, each asserting no orphan remains.

const LONG: &str = "echo 1; sleep 1; echo 2; sleep 1; echo 3; sleep 1; echo 4";

#[test]
fn streaming_cleanup__full_iteration_leaves_no_process() {
    let (fake, sbx) = fake_sandbox();
    let mut stream = sbx.stream(Command::shell(LONG)).unwrap();
    assert_eq!(fake.live_processes(), 1);
    assert_eq!(collect(&mut stream).concat_stdout(), b"1\n2\n3\n4\n");
    drop(stream);
    assert_eq!(fake.live_processes(), 0);
    assert_eq!(fake.audit_sink().records_of(OperationKind::Stream).len(), 1);
}

#[test]
fn streaming_cleanup__early_break_terminates_the_process() {
    let (fake, sbx) = fake_sandbox();
    let mut stream = sbx.stream(Command::shell(LONG)).unwrap();
    block_on(async {
        while let Some(chunk) = stream.next().await {
            if chunk.unwrap().data == b"2\n" {
                break;
            }
        }
    });
    drop(stream);
    assert_eq!(fake.live_processes(), 0);
    let records = fake.audit_sink().records_of(OperationKind::Stream);
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].outcome, sandboxio::audit::Outcome::Cancelled);
}

#[test]
fn streaming_cleanup__an_error_inside_the_loop_terminates_the_process() {
    let (fake, sbx) = fake_sandbox();
    let result: Result<(), &str> = block_on(async {
        let mut stream = sbx.stream(Command::shell(LONG)).unwrap();
        while let Some(chunk) = stream.next().await {
            if chunk.unwrap().data == b"1\n" {
                return Err("the caller's own error");
            }
        }
        Ok(())
    });
    assert!(result.is_err());
    assert_eq!(fake.live_processes(), 0);
}

#[test]
fn streaming_cleanup__cancellation_inside_the_loop_terminates_the_process() {
    let (fake, sbx) = fake_sandbox();
    for k in 0..12 {
        let completed = poll_k_times(
            async {
                let mut stream = sbx.stream(Command::shell(LONG)).unwrap();
                while let Some(chunk) = stream.next().await {
                    chunk.unwrap();
                }
            },
            k,
        );
        assert_eq!(fake.live_processes(), 0, "orphan after {k} polls (completed: {completed})");
    }
}

#[test]
fn streaming_cleanup__close_terminates_a_running_process() {
    let (fake, sbx) = fake_sandbox();
    let mut stream = sbx.stream(Command::shell(LONG)).unwrap();
    let _ = block_on(stream.next_chunk());
    block_on(stream.close()).unwrap();
    assert_eq!(fake.live_processes(), 0);
}

/// A backend whose stream reports its sandbox's death as an error item, then answers
/// `wait()` with an exit status, as a careless adapter might.
mod careless {
    use std::task::{Context, Poll};

    use sandboxio::backend::{
        Backend, BackendExecStream, BackendSandbox, BoxFuture, CreateSpec, KillOutcome,
    };
    use sandboxio::{
        Command, Error, ExecResult, ExitStatus, Result, exec::OutputChunk, policy::Capabilities,
    };

    #[derive(Debug)]
    pub struct Careless;

    impl Backend for Careless {
        fn scheme(&self) -> &'static str {
            "careless"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::STREAM
        }
        fn create(&self, _: CreateSpec) -> BoxFuture<'_, Result<Box<dyn BackendSandbox>>> {
            Box::pin(async { Ok(Box::new(Sbx) as Box<dyn BackendSandbox>) })
        }
    }

    #[derive(Debug)]
    struct Sbx;

    impl BackendSandbox for Sbx {
        fn id(&self) -> &'static str {
            "careless-1"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::STREAM
        }
        fn stream(&self, _: Command) -> Result<Box<dyn BackendExecStream>> {
            Ok(Box::new(Stream { sent: false }))
        }
        fn kill(&self) -> BoxFuture<'_, Result<KillOutcome>> {
            Box::pin(async { Ok(KillOutcome::Killed) })
        }
    }

    #[derive(Debug)]
    struct Stream {
        sent: bool,
    }

    impl BackendExecStream for Stream {
        fn poll_chunk(&mut self, _: &mut Context<'_>) -> Poll<Option<Result<OutputChunk>>> {
            if std::mem::replace(&mut self.sent, true) {
                Poll::Ready(None)
            } else {
                Poll::Ready(Some(Err(Error::sandbox_gone("careless-1", "killed"))))
            }
        }
        fn wait(&mut self) -> BoxFuture<'_, Result<ExecResult>> {
            Box::pin(async { Ok(ExecResult::new(0, "", "").with_status(ExitStatus::Code(137))) })
        }
        fn terminate(&mut self) -> BoxFuture<'_, Result<()>> {
            Box::pin(async { Ok(()) })
        }
    }
}

#[test]
fn streaming__after_an_err_sandbox_gone_item_wait_gives_sandbox_gone_whatever_the_adapter_says() {
    let sbx =
        block_on(Sandbox::builder_with(careless::Careless).network(NetworkPolicy::allow_all()).create())
            .unwrap();
    let mut stream = sbx.stream(Command::new("x")).unwrap();
    let first = block_on(stream.next()).unwrap();
    assert_eq!(first.unwrap_err().code(), ErrorCode::SandboxGone);
    assert!(block_on(stream.next()).is_none(), "the stream ends after its error item");
    for _ in 0..2 {
        assert_eq!(block_on(stream.wait()).unwrap_err().code(), ErrorCode::SandboxGone);
    }
}

#[test]
fn streaming__a_sandbox_killed_through_another_handle_ends_the_stream_with_sandbox_gone() {
    let (fake, sbx) = fake_sandbox();
    let mut stream = sbx.stream(Command::shell("echo 1; sleep 1; echo 2; sleep 3600")).unwrap();
    assert!(block_on(stream.next()).unwrap().is_ok());
    let other = block_on(Sandbox::connect_with(fake, sbx.id())).unwrap();
    block_on(other.kill()).unwrap();
    let item = block_on(stream.next()).expect("an item after the death");
    assert_eq!(item.unwrap_err().code(), ErrorCode::SandboxGone);
    assert!(block_on(stream.next()).is_none());
    assert_eq!(block_on(stream.wait()).unwrap_err().code(), ErrorCode::SandboxGone);
}

/// A script that writes `é` (bytes C3 A9) split across two writes, with stderr in between,
/// and ends stdout without a newline.
const SPLIT_UTF8: &str =
    r"printf 'caf\303'; printf 'oops' >&2; sleep 1; printf '\251 ok\nlast'; printf '!\n' >&2";

#[test]
fn streaming__lines_keep_utf8_whole_across_chunks_and_never_mix_streams() {
    let (_, sbx) = fake_sandbox();
    // The premise: the character really is split between two chunks.
    let chunks = collect(&mut sbx.stream(Command::shell(SPLIT_UTF8)).unwrap());
    assert!(chunks.iter().any(|c| c.1.ends_with(b"\xC3")), "{chunks:?}");
    let mut stream = sbx.stream(Command::shell(SPLIT_UTF8)).unwrap();
    let lines: Vec<(StreamKind, String, bool)> = block_on(async {
        let mut lines = stream.lines();
        let mut seen = Vec::new();
        while let Some(line) = lines.next_line().await {
            let line = line.unwrap();
            seen.push((line.stream, line.text, line.continues));
        }
        seen
    });
    assert_eq!(
        lines,
        [
            (StreamKind::Stdout, "café ok".to_owned(), false),
            (StreamKind::Stderr, "oops!".to_owned(), false),
            (StreamKind::Stdout, "last".to_owned(), false),
        ]
    );
    assert!(block_on(stream.wait()).unwrap().success());
}

#[test]
fn streaming__an_over_long_line_comes_in_bounded_pieces() {
    let (_, sbx) = fake_sandbox();
    let mut stream = sbx.stream(Command::shell("printf 'ab\\342\\202\\254\\342\\202\\254x\\n'")).unwrap();
    let lines: Vec<(String, bool)> = block_on(async {
        let mut lines = stream.lines().max_line(4);
        let mut seen = Vec::new();
        while let Some(line) = lines.next_line().await {
            let line = line.unwrap();
            seen.push((line.text, line.continues));
        }
        seen
    });
    assert_eq!(lines, [("ab".to_owned(), true), ("€".to_owned(), true), ("€x".to_owned(), false)]);
}

#[test]
fn streaming__lines_end_with_the_error_after_the_lines_before_it() {
    let (_, sbx) = fake_sandbox();
    let mut stream =
        sbx.stream(Command::shell("printf 'done\\nhalf'; sleep 60").timeout(Duration::from_secs(1))).unwrap();
    let items: Vec<Result<String, ErrorCode>> = block_on(async {
        let mut lines = stream.lines();
        let mut seen = Vec::new();
        while let Some(item) = lines.next_line().await {
            seen.push(item.map(|l| l.text).map_err(|e| e.code()));
        }
        seen
    });
    assert_eq!(items, [Ok("done".to_owned()), Ok("half".to_owned()), Err(ErrorCode::ExecutionTimeout)]);
}

#[test]
fn streaming__blocking_lines_are_an_iterator() {
    let sandbox = sandboxio::sync::Sandbox::builder("fake://")
        .unwrap()
        .network(NetworkPolicy::deny_all())
        .create()
        .unwrap();
    let mut stream = sandbox.stream(Command::shell(SPLIT_UTF8)).unwrap();
    let texts: Vec<String> = stream.lines().map(|l| l.unwrap().text).collect();
    assert_eq!(texts, ["café ok", "oops!", "last"]);
    assert!(stream.wait().unwrap().success());
}

/// An adapter that declares `RUN` and `RUN_CODE` and implements neither (the trait's
/// default refusals), as a half-written one would.
mod lazy {
    use sandboxio::backend::{Backend, BackendSandbox, BoxFuture, CreateSpec, KillOutcome};
    use sandboxio::{Result, policy::Capabilities};

    #[derive(Debug)]
    pub struct Lazy;

    impl Backend for Lazy {
        fn scheme(&self) -> &'static str {
            "lazy"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::RUN | Capabilities::RUN_CODE
        }
        fn create(&self, _: CreateSpec) -> BoxFuture<'_, Result<Box<dyn BackendSandbox>>> {
            Box::pin(async { Ok(Box::new(Sbx) as Box<dyn BackendSandbox>) })
        }
    }

    #[derive(Debug)]
    struct Sbx;

    impl BackendSandbox for Sbx {
        fn id(&self) -> &'static str {
            "lazy-1"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::RUN | Capabilities::RUN_CODE
        }
        fn kill(&self) -> BoxFuture<'_, Result<KillOutcome>> {
            Box::pin(async { Ok(KillOutcome::Killed) })
        }
    }
}

/// Issue #30 item 9: a default refusal names the adapter's scheme (it read "the this backend
/// backend does not support `RUN_CODE`"), from a call and from a stream alike.
#[test]
fn errors__an_adapters_default_refusal_names_its_scheme() {
    let sbx =
        block_on(Sandbox::builder_with(lazy::Lazy).network(NetworkPolicy::allow_all()).create()).unwrap();
    let run = block_on(sbx.run_code("1")).unwrap_err();
    let said = run.to_string();
    assert_eq!(run.code(), ErrorCode::CapabilityNotSupported);
    assert!(said.contains("lazy") && !said.contains("this backend"), "{said}");
    let streamed = sbx.run_code_stream("1").expect_err("a refusal").to_string();
    assert!(streamed.contains("lazy") && !streamed.contains("this backend"), "{streamed}");
    let ran = block_on(sbx.run(Command::new("true"))).unwrap_err().to_string();
    assert!(ran.contains("lazy") && !ran.contains("this backend"), "{ran}");
}
