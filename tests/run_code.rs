//! `Sandbox::run_code` and contexts on the fake.
#![expect(non_snake_case, reason = "test names read as contract clauses: `area__requirement`")]

mod support;

use std::time::Duration;

use sandboxio::testing::FakeBackend;
use sandboxio::{Capabilities, Code, ErrorCode, ExitStatus, NetworkPolicy, Sandbox};
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
