//! `Sandbox::run` on the fake: exit codes, streams, env, argv, timeouts, bytes, caps.
#![expect(non_snake_case, reason = "test names read as contract clauses: `area__requirement`")]

use crate::support;

use std::time::Duration;

use sandboxio::{Command, Error, ErrorCode, ExitStatus};
use support::{block_on, fake_sandbox};

#[test]
fn run__exit_codes_are_data_not_errors() {
    let (_, sbx) = fake_sandbox();
    for code in [0, 1, 3, 42, 255] {
        let out = block_on(sbx.run(Command::shell(format!("exit {code}")))).unwrap();
        assert_eq!(out.status, ExitStatus::Code(code));
        assert_eq!(out.success(), code == 0);
    }
}

#[test]
fn run__stdout_and_stderr_are_separated() {
    let (_, sbx) = fake_sandbox();
    let out = block_on(sbx.run(Command::shell("echo out; echo err >&2; echo more 1>&2; printf x"))).unwrap();
    assert_eq!(out.stdout, b"out\nx");
    assert_eq!(out.stderr, b"err\nmore\n");
}

#[test]
fn run__env_is_injected_from_builder_and_command() {
    let fake = sandboxio::testing::FakeBackend::new();
    let sbx = block_on(
        sandboxio::Sandbox::builder_with(fake)
            .network(sandboxio::NetworkPolicy::deny_all())
            .env("FROM_BUILDER", "b")
            .secret_env("TOKEN", "s3cr3t")
            .create(),
    )
    .unwrap();
    let out = block_on(sbx.run(Command::shell("echo $FROM_BUILDER ${FROM_CMD} $TOKEN").env("FROM_CMD", "c")))
        .unwrap();
    assert_eq!(out.stdout_lossy(), "b c s3cr3t\n");
    let out = block_on(sbx.run(Command::new("printenv").arg("FROM_CMD").env("FROM_CMD", "direct"))).unwrap();
    assert_eq!(out.stdout_lossy(), "direct\n");
}

#[test]
fn run__argv_does_not_go_through_a_shell() {
    let (_, sbx) = fake_sandbox();
    let out = block_on(sbx.run(Command::new("echo").arg("$HOME; exit 3").arg("a  b"))).unwrap();
    assert_eq!(out.stdout_lossy(), "$HOME; exit 3 a  b\n");
    assert!(out.success());
    let out = block_on(sbx.run(Command::new("python3").arg("-c").arg("print('it''s', 1 + 2)"))).unwrap();
    assert_eq!(out.stdout_lossy(), "its 3\n");
}

#[test]
fn run__timeout_raises_execution_timeout_and_does_not_hang() {
    let (fake, sbx) = fake_sandbox();
    let before = fake.now();
    let err = block_on(
        sbx.run(Command::shell("echo started; sleep 30; echo never").timeout(Duration::from_secs(1))),
    )
    .unwrap_err();
    let Error::ExecutionTimeout { timeout, partial, .. } = &err else { panic!("{err}") };
    assert_eq!(*timeout, Duration::from_secs(1));
    assert_eq!(partial.stdout, b"started\n", "partial output is kept");
    assert_eq!(err.code(), ErrorCode::ExecutionTimeout);
    assert_eq!(
        fake.now().checked_sub(before).unwrap(),
        Duration::from_secs(1),
        "virtual clock advanced by the timeout only"
    );
    assert_eq!(fake.live_processes(), 0);
}

#[test]
fn run__output_is_byte_exact() {
    let (_, sbx) = fake_sandbox();
    let out = block_on(sbx.run(Command::shell(r"printf '\x00\xff\x80abc\n'"))).unwrap();
    assert_eq!(out.stdout, b"\x00\xff\x80abc\n");
    let all: Vec<u8> = (0..=255).collect();
    let escaped = all.iter().fold(String::new(), |s, b| s + &format!("\\x{b:02x}"));
    let out = block_on(sbx.run(Command::new("printf").arg(escaped))).unwrap();
    assert_eq!(out.stdout, all);
}

#[test]
fn run__output_beyond_the_cap_is_dropped_and_flagged() {
    let (_, sbx) = fake_sandbox();
    let out = block_on(sbx.run(Command::shell("head -c 5000 /dev/zero; echo tail >&2").output_limit(1000)))
        .unwrap();
    assert_eq!(out.stdout.len(), 1000);
    assert!(out.truncated);
    assert_eq!(out.stderr, b"tail\n");
}

#[test]
fn run__a_background_child_never_keeps_run_waiting() {
    let (fake, sbx) = fake_sandbox();
    let start = fake.now();
    let out = block_on(sbx.run(Command::shell("sleep 1000 & echo parent done"))).unwrap();
    assert_eq!(out.stdout_lossy(), "parent done\n");
    assert!(fake.now().checked_sub(start).unwrap() < Duration::from_secs(1));
    #[cfg(feature = "contract")] // `reaped_children` is a test-only hook
    assert_eq!(fake.reaped_children(), 1, "the child is killed with the process group");
    assert_eq!(fake.live_processes(), 0);
}

#[test]
fn run__stdin_bytes_are_delivered_with_end_of_file() {
    let (_, sbx) = fake_sandbox();
    let out = block_on(sbx.run(Command::new("cat").stdin(b"line1\nline2\x00".to_vec()))).unwrap();
    assert_eq!(out.stdout, b"line1\nline2\x00");
    let out = block_on(sbx.run(Command::shell("cat | cat").stdin("piped"))).unwrap();
    assert_eq!(out.stdout, b"piped");
}

#[test]
fn run__cwd_and_relative_paths_share_one_working_directory() {
    let (_, sbx) = fake_sandbox();
    block_on(sbx.fs().write("notes/a.txt", "hi")).unwrap();
    let out = block_on(sbx.run(Command::shell("pwd; cat notes/a.txt"))).unwrap();
    assert_eq!(out.stdout_lossy(), format!("{}\nhi", sandboxio::testing::WORKDIR));
    let out = block_on(sbx.run(Command::new("cat").arg("a.txt").cwd("notes"))).unwrap();
    assert_eq!(out.stdout, b"hi");
    let out = block_on(sbx.run(Command::new("pwd").cwd("/tmp"))).unwrap();
    assert_eq!(out.stdout, b"/tmp\n");
    let err = block_on(sbx.run(Command::new("pwd").cwd("nowhere"))).unwrap_err();
    assert_eq!(err.code(), ErrorCode::NotFound);
}

#[test]
fn run__bad_input_is_a_typed_error_and_nothing_runs() {
    let (fake, sbx) = fake_sandbox();
    let cases = [
        (Command::new(""), "empty program"),
        (Command::new("echo").arg("a\0b"), "argv[1]"),
        (Command::new("echo").env("A=B", "x"), "\"A=B\""),
        (Command::new("echo").env("", "x"), "empty env var name"),
        (Command::new("echo").env("A", "x\0"), "\"A\""),
        (Command::new("echo").secret_env("K", "hunter2\0"), "redacted"),
        (Command::new("echo").cwd("../etc"), "'..'"),
    ];
    for (cmd, needle) in cases {
        let err = block_on(sbx.run(cmd)).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidInput, "{err}");
        assert!(err.to_string().contains(needle), "{err} lacks {needle}");
        assert!(!err.to_string().contains("hunter2"));
    }
    assert!(
        fake.calls().iter().all(|c| c.kind != sandboxio::audit::OperationKind::Run),
        "nothing reached the backend"
    );
}

#[test]
fn run__unknown_commands_and_unmodelled_syntax_fail_loudly() {
    let (_, sbx) = fake_sandbox();
    let out = block_on(sbx.run(Command::new("no-such-tool"))).unwrap();
    assert_eq!(out.status, ExitStatus::Code(127));
    let out = block_on(sbx.run(Command::shell("if true; then echo yes; fi"))).unwrap();
    assert_eq!(out.status, ExitStatus::Code(2));
    assert!(out.stderr_lossy().contains("not modelled"), "{}", out.stderr_lossy());
}

#[test]
fn run__shell_features_behave_like_sh() {
    let (_, sbx) = fake_sandbox();
    let script = r#"X=1; export Y=two; echo "$X ${Y}" '$X'; false || echo or; true && echo and; echo $(echo sub) | cat; echo $?"#;
    let out = block_on(sbx.run(Command::shell(script))).unwrap();
    assert_eq!(out.stdout_lossy(), "1 two $X\nor\nand\nsub\n0\n");
    let out =
        block_on(sbx.run(Command::shell(
            "echo a > f.txt; echo b >> f.txt; cat f.txt; cat missing 2>/dev/null; echo $?",
        )))
        .unwrap();
    assert_eq!(out.stdout_lossy(), "a\nb\n1\n");
}

#[test]
fn run__unmodelled_shell_syntax_ends_the_whole_command_with_status_2() {
    let (_, sbx) = fake_sandbox();
    let out = block_on(sbx.run(Command::shell("echo $((1+2)); echo after"))).unwrap();
    assert_eq!(out.status, ExitStatus::Code(2));
    assert!(out.stderr_lossy().contains("arithmetic expansion"), "{}", out.stderr_lossy());
    assert!(!out.stdout_lossy().contains("after"));
}

#[test]
fn run__argument_lists_past_the_kernel_limits_are_invalid_input() {
    use sandboxio::exec::{MAX_ARG_STRLEN, MAX_ARG_TOTAL};
    // The boundary, exactly: a string of MAX_ARG_STRLEN bytes with its NUL passes, one more
    // byte does not; for env strings, `NAME=value` and the NUL count.
    let longest = "a".repeat(MAX_ARG_STRLEN - 1);
    assert!(Command::new("echo").arg(longest.clone()).validate().is_ok());
    let err = Command::new("echo").arg(longest.clone() + "a").validate().unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidInput);
    assert!(err.to_string().contains("argv[1]") && err.to_string().contains("131073"), "{err}");
    let value = "v".repeat(MAX_ARG_STRLEN - "K=".len() - 1);
    assert!(Command::new("true").env("K", value.clone()).validate().is_ok());
    let err = Command::new("true").env("K", value.clone() + "v").validate().unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidInput);
    // A secret's size error names the variable, never the value.
    let secret = "s3cr3t-".repeat(MAX_ARG_STRLEN / 7 + 1);
    let err = Command::new("true").secret_env("TOKEN", secret.clone()).validate().unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidInput);
    assert!(err.to_string().contains("TOKEN") && !err.to_string().contains("s3cr3t"), "{err}");
    // The total: strings, NULs and one 8-byte pointer each.
    let piece = "b".repeat(100_000);
    let n = MAX_ARG_TOTAL / (piece.len() + 1 + 8);
    assert!(Command::new("x").args(std::iter::repeat_n(piece.clone(), n - 1)).validate().is_ok());
    let err = Command::new("x").args(std::iter::repeat_n(piece, n + 1)).validate().unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidInput);
    assert!(err.to_string().contains("MAX_ARG_TOTAL"), "{err}");
    // Refused before anything runs, through run() and stream().
    let (fake, sbx) = fake_sandbox();
    fake.clear_calls();
    let big = Command::new("echo").arg("a".repeat(200 * 1024));
    assert_eq!(block_on(sbx.run(big.clone())).unwrap_err().code(), ErrorCode::InvalidInput);
    assert_eq!(sbx.stream(big).map(drop).unwrap_err().code(), ErrorCode::InvalidInput);
    assert!(fake.calls().is_empty(), "the backend was called: {:?}", fake.calls().len());
}
