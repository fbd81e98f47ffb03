//! `Sandbox::run_code` and contexts on the fake.
#![expect(non_snake_case, reason = "test names read as contract clauses: `area__requirement`")]

use crate::support;

use std::time::Duration;

use sandboxio::testing::FakeBackend;
use sandboxio::{Code, ErrorCode, ExitStatus, NetworkPolicy, Sandbox, policy::Capabilities};
use support::{block_on, fake_sandbox};

#[test]
fn run_code__basic_execution() {
    let (_, sbx) = fake_sandbox();
    let out = block_on(sbx.run_code("x = 6 * 7\nprint(f'answer={x}', 'ok', sep=':')")).unwrap();
    assert!(out.success());
    assert_eq!(out.stdout_lossy(), "answer=42:ok\n");
    let out = block_on(sbx.run_code("import sys\nprint('warn', file=sys.stderr)\nsys.stdout.write('raw')"))
        .unwrap();
    assert_eq!((out.stdout_lossy().as_ref(), out.stderr_lossy().as_ref()), ("raw", "warn\n"));
}

#[test]
fn run_code__syntax_error_surfaces_with_non_zero_exit() {
    let (_, sbx) = fake_sandbox();
    let out = block_on(sbx.run_code("print('never')\nprint('a'")).unwrap();
    assert!(!out.success());
    assert_ne!(out.status, ExitStatus::Code(0));
    assert!(out.stdout.is_empty(), "a syntax error runs nothing");
    let error = out.error.unwrap();
    assert_eq!(error.name, "SyntaxError");
    assert!(error.value.contains("never closed"), "{}", error.value);
}

#[test]
fn run_code__runtime_error_surfaces_with_name_value_and_traceback() {
    let (_, sbx) = fake_sandbox();
    let out = block_on(sbx.run_code("print('before')\n1 / 0")).unwrap();
    assert_eq!(out.status, ExitStatus::Code(1));
    assert_eq!(out.stdout_lossy(), "before\n");
    let error = out.error.unwrap();
    assert_eq!((error.name.as_str(), error.value.as_str()), ("ZeroDivisionError", "division by zero"));
    assert!(error.traceback.iter().any(|l| l.contains("line 2")), "{:?}", error.traceback);
    let out = block_on(sbx.run_code("raise ValueError('bad value')")).unwrap();
    assert_eq!(out.error.unwrap().value, "bad value");
    let out = block_on(sbx.run_code("import pandas")).unwrap();
    assert_eq!(out.error.unwrap().name, "ModuleNotFoundError");
}

#[test]
fn run_code__unmodelled_python_fails_loudly_never_with_a_guess() {
    let (_, sbx) = fake_sandbox();
    let out = block_on(sbx.run_code("for i in range(3):\n    print(i)")).unwrap();
    assert_eq!(out.error.unwrap().name, "NotImplementedError");
    assert!(out.stdout.is_empty());
}

#[test]
fn run_code__context_keeps_state_iff_stateful_code() {
    let (_, sbx) = fake_sandbox();
    let ctx = block_on(sbx.create_context("python")).unwrap();
    block_on(sbx.run_code(Code::new("counter = 41").in_context(&ctx))).unwrap();
    let out = block_on(sbx.run_code(Code::new("counter += 1\nprint(counter)").in_context(&ctx))).unwrap();
    assert_eq!(out.stdout_lossy(), "42\n");
    let out = block_on(sbx.run_code("print(counter)")).unwrap();
    assert_eq!(out.error.unwrap().name, "NameError", "no context, no state");

    let fake = FakeBackend::new().with_capabilities(Capabilities::all() - Capabilities::STATEFUL_CODE);
    let plain = block_on(Sandbox::builder_with(fake).network(NetworkPolicy::deny_all()).create()).unwrap();
    let err = block_on(plain.create_context("python")).unwrap_err();
    assert_eq!(err.code(), ErrorCode::CapabilityNotSupported);
    let err = block_on(plain.run_code(Code::new("1").in_context(&ctx))).unwrap_err();
    assert_eq!(err.code(), ErrorCode::CapabilityNotSupported);
}

#[test]
fn run_code__rich_outputs_are_present_iff_declared() {
    let (_, sbx) = fake_sandbox();
    let out = block_on(sbx.run_code("x = [1, 'two']\nx")).unwrap();
    assert_eq!(out.results.len(), 1);
    assert_eq!(out.results[0]["text/plain"], b"[1, 'two']");

    let fake = FakeBackend::new().with_capabilities(Capabilities::all() - Capabilities::RICH_OUTPUTS);
    let plain = block_on(Sandbox::builder_with(fake).network(NetworkPolicy::deny_all()).create()).unwrap();
    let out = block_on(plain.run_code("x = [1, 'two']\nx")).unwrap();
    assert!(out.results.is_empty());
}

#[test]
fn run_code__a_long_cell_is_interrupted_at_its_timeout() {
    let (fake, sbx) = fake_sandbox();
    let err = block_on(
        sbx.run_code(Code::new("import time\nprint('go')\ntime.sleep(100)").timeout(Duration::from_secs(3))),
    )
    .unwrap_err();
    let sandboxio::Error::ExecutionTimeout { partial, .. } = err else { panic!("{err}") };
    assert_eq!(partial.stdout, b"go\n");
    assert_eq!(fake.live_processes(), 0);
}

#[test]
fn run_code__without_run_code_raises() {
    let fake = FakeBackend::new().with_capabilities(Capabilities::RUN | Capabilities::NETWORK_DENY);
    let sbx = block_on(Sandbox::builder_with(fake).network(NetworkPolicy::deny_all()).create()).unwrap();
    let err = block_on(sbx.run_code("1")).unwrap_err();
    assert_eq!(err.code(), ErrorCode::CapabilityNotSupported);
    assert!(err.to_string().contains("RUN_CODE"));
}

#[test]
fn run_code__display_hooks_give_html_and_png_where_rich_outputs_are_declared() {
    let (_, sbx) = fake_sandbox();
    let png = [0x89u8, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
    let cell = "import base64\nclass Rich:\n    def _repr_html_(self):\n        return '<b>rich</b>'\n    def _repr_png_(self): return base64.b64decode('iVBORw0KGgo=')\nRich()";
    let out = block_on(sbx.run_code(cell)).unwrap();
    assert!(out.success(), "{:?}", out.error);
    let bundle = &out.results[0];
    assert_eq!(bundle["text/html"], b"<b>rich</b>");
    assert_eq!(bundle["image/png"], png);
    assert_eq!(bundle["text/plain"], b"<__main__.Rich object>");
    let out = block_on(sbx.run_code("class Odd:\n    x = 1\nOdd()")).unwrap();
    assert_eq!(out.error.unwrap().name, "NotImplementedError");
}

#[test]
fn run_code__valid_python_the_fake_cannot_parse_is_not_called_a_syntax_error() {
    let (_, sbx) = fake_sandbox();
    for cell in [
        "print([i*i for i in range(4)])",
        "x = [1, 2, 3][1:]",
        "f = lambda: 1",
        "print(1 | 2)",
        "print(*[1])",
    ] {
        let out = block_on(sbx.run_code(cell)).unwrap();
        let error = out.error.unwrap();
        assert_eq!(error.name, "NotImplementedError", "{cell}: {}", error.value);
        assert!(out.stdout.is_empty());
    }
    let out = block_on(sbx.run_code("print(1 +)")).unwrap();
    assert_eq!(out.error.unwrap().name, "SyntaxError", "a genuine syntax error stays one");
}

/// Every chunk of a streamed cell, as `(stdout, stderr)`.
fn drain(stream: &mut sandboxio::exec::CodeStream) -> (String, String) {
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    while let Some(chunk) = block_on(stream.next_chunk()) {
        let chunk = chunk.unwrap();
        match chunk.stream {
            sandboxio::exec::StreamKind::Stdout => stdout.extend_from_slice(&chunk.data),
            sandboxio::exec::StreamKind::Stderr => stderr.extend_from_slice(&chunk.data),
        }
    }
    (String::from_utf8(stdout).unwrap(), String::from_utf8(stderr).unwrap())
}

#[test]
fn run_code_stream__chunks_come_one_print_at_a_time_and_wait_gives_the_rest() {
    let (_, sbx) = fake_sandbox();
    let mut stream = sbx.run_code_stream("print('one')\nprint('two')\nclass R:\n    def _repr_html_(self):\n        return '<b>r</b>'\nR()").unwrap();
    let first = block_on(stream.next_chunk()).unwrap().unwrap();
    assert_eq!(first.data, b"one\n", "the first print is a chunk of its own");
    let (rest, _) = drain(&mut stream);
    assert_eq!(rest, "two\n");
    let result = block_on(stream.wait()).unwrap();
    assert!(result.success() && result.streamed && result.stdout.is_empty());
    assert_eq!(
        result.results[0].get("text/html"),
        Some(&b"<b>r</b>".to_vec()),
        "rich results come with wait"
    );
    assert_eq!(block_on(stream.wait()).unwrap(), result, "wait is idempotent");
}

#[test]
fn run_code_stream__a_scripted_answer_streams_its_stdout_then_its_stderr() {
    let (fake, sbx) = fake_sandbox();
    fake.on_run_code("import pandas", sandboxio::ExecResult::new(0, "2.2.1\n", "warning\n"));
    let mut stream = sbx.run_code_stream("import pandas; print(pandas.__version__)").unwrap();
    assert_eq!(drain(&mut stream), ("2.2.1\n".to_owned(), "warning\n".to_owned()));
    assert!(block_on(stream.wait()).unwrap().success());
    // run_code of the same cell gets the same output in the result.
    let out = block_on(sbx.run_code("import pandas; print(pandas.__version__)")).unwrap();
    assert_eq!((out.stdout_lossy().as_ref(), out.streamed), ("2.2.1\n", false));
}

#[test]
fn run_code_stream__one_audit_record_when_it_ends_is_dropped_or_is_refused() {
    use sandboxio::audit::{OperationKind, Outcome};
    let fake = FakeBackend::new();
    let sink = fake.audit_sink();
    let sbx =
        block_on(Sandbox::builder_with(fake.clone()).network(NetworkPolicy::deny_all()).create()).unwrap();
    let mut ended = sbx.run_code_stream("print(1)").unwrap();
    let _ = drain(&mut ended);
    let dropped = sbx.run_code_stream("print(2)").unwrap();
    drop(dropped);
    let outcomes = |sink: &sandboxio::audit::RecordingSink| {
        sink.records_of(OperationKind::RunCodeStream).into_iter().map(|r| r.outcome).collect::<Vec<_>>()
    };
    assert_eq!(outcomes(&sink), [Outcome::Ok, Outcome::Cancelled]);
    drop(ended);
    assert_eq!(outcomes(&sink).len(), 2, "a stream that ended is not recorded again when dropped");
    assert!(sink.records_of(OperationKind::RunCode).is_empty(), "a stream is not recorded as run_code");

    let no_code = FakeBackend::new().with_capabilities(Capabilities::RUN | Capabilities::NETWORK_DENY);
    let sink = no_code.audit_sink();
    let sbx = block_on(Sandbox::builder_with(no_code).network(NetworkPolicy::deny_all()).create()).unwrap();
    let refused = sbx.run_code_stream("print(1)").map(drop);
    assert_eq!(refused.unwrap_err().code(), ErrorCode::CapabilityNotSupported);
    assert_eq!(outcomes(&sink), [Outcome::Error(ErrorCode::CapabilityNotSupported)]);
}

#[test]
fn run_code_stream__a_dropped_context_cell_loses_the_context_and_interrupt_says_so() {
    let (_, sbx) = fake_sandbox();
    let ctx = block_on(sbx.create_context("python")).unwrap();
    block_on(sbx.run_code(Code::new("x = 1").in_context(&ctx))).unwrap();
    let mut stream = sbx.run_code_stream(Code::new("print('a')\nprint('b')").in_context(&ctx)).unwrap();
    block_on(stream.next_chunk()).unwrap().unwrap();
    drop(stream);
    let after = block_on(sbx.run_code(Code::new("print(x)").in_context(&ctx)));
    assert_eq!(after.unwrap_err().code(), ErrorCode::ContextLost);
    assert_eq!(block_on(sbx.interrupt(&ctx)).unwrap_err().code(), ErrorCode::ContextLost);
    // A context whose cell ran to its end keeps its state.
    let kept = block_on(sbx.create_context("python")).unwrap();
    let mut whole = sbx.run_code_stream(Code::new("y = 2").in_context(&kept)).unwrap();
    block_on(whole.wait()).unwrap();
    drop(whole);
    let out = block_on(sbx.run_code(Code::new("print(y)").in_context(&kept))).unwrap();
    assert_eq!(out.stdout_lossy(), "2\n");
}

#[test]
fn run_code_stream__the_blocking_twin_is_an_iterator_with_wait() {
    let sbx = sandboxio::sync::Sandbox::builder("fake://")
        .unwrap()
        .network(NetworkPolicy::deny_all())
        .create()
        .unwrap();
    let mut stream = sbx.run_code_stream("print('a')\n1 / 0").unwrap();
    let printed: Vec<u8> = stream.by_ref().flat_map(|chunk| chunk.unwrap().data).collect();
    assert_eq!(printed, b"a\n");
    let result = stream.wait().unwrap();
    assert_eq!(result.error.unwrap().name, "ZeroDivisionError");
    let timed_out =
        sbx.run_code_stream(Code::new("import time\ntime.sleep(60)").timeout(Duration::from_secs(1)));
    let mut timed_out = timed_out.unwrap();
    let item = timed_out.next().unwrap();
    assert_eq!(item.unwrap_err().code(), ErrorCode::ExecutionTimeout);
    assert!(timed_out.next().is_none(), "the stream ends after its error item");
    assert_eq!(timed_out.wait().unwrap_err().code(), ErrorCode::ExecutionTimeout, "and wait says the same");
}
