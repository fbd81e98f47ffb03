//! The fake under hostile or odd input: never a panic, never a hang, never an invented
//! answer; side effects follow the virtual clock.
#![expect(non_snake_case, reason = "test names read as contract clauses: `area__requirement`")]

use crate::support;

use std::time::Duration;

use sandboxio::testing::{Failure, FakeBackend};
use sandboxio::{Command, ErrorCode, ExecResult, ExitStatus, NetworkPolicy, Sandbox};
use support::{block_on, fake_sandbox, poll_k_times};

#[test]
fn fake__deep_nesting_is_refused_not_a_stack_overflow() {
    let (_, sbx) = fake_sandbox();
    let deep = format!("{}1{}", "(".repeat(130), ")".repeat(130));
    let out = block_on(sbx.run_code(deep)).unwrap();
    assert_eq!(out.error.unwrap().name, "NotImplementedError");
    let unary = format!("print({}1)", "-".repeat(5000));
    assert_eq!(block_on(sbx.run_code(unary)).unwrap().error.unwrap().name, "NotImplementedError");
    let nested = format!("echo {}x{}", "$(echo ".repeat(400), ")".repeat(400));
    assert_eq!(block_on(sbx.run(Command::shell(nested))).unwrap().status, ExitStatus::Code(2));
    let out = block_on(sbx.run(Command::shell("echo 'sh < x.sh' > x.sh; sh < x.sh"))).unwrap();
    assert_eq!(out.status, ExitStatus::Code(2), "{}", out.stderr_lossy());
}

#[test]
#[cfg(feature = "contract")] // `plant_symlink` is a test-only hook
fn fake__symlink_loops_end_with_an_error() {
    let (fake, sbx) = fake_sandbox();
    fake.plant_symlink(sbx.id(), "a", "b").unwrap();
    fake.plant_symlink(sbx.id(), "b", "a").unwrap();
    let err = block_on(sbx.fs().read("a")).unwrap_err();
    assert!(err.to_string().contains("symbolic links"), "{err}");
}

#[test]
fn fake__huge_numbers_are_bounded_or_refused() {
    let (_, sbx) = fake_sandbox();
    let out = block_on(sbx.run(Command::shell("sleep 1e300").timeout(Duration::from_secs(2)))).unwrap_err();
    assert_eq!(out.code(), ErrorCode::ExecutionTimeout);
    let out = block_on(sbx.run(Command::shell("printf '%999999999s' x").output_limit(100))).unwrap();
    assert!(out.truncated && out.stdout.len() == 100);
    let out =
        block_on(sbx.run(Command::shell("head -c 18446744073709551615 /dev/zero").output_limit(64))).unwrap();
    assert!(out.truncated && out.stdout.len() == 64);
    let out = block_on(sbx.run(Command::new("printf").arg("%d").arg("99999999999999999999"))).unwrap();
    assert_eq!(out.status, ExitStatus::Code(1), "a bad number is an error, not a silent 0");
    for cell in [
        "abs(-9223372036854775807-1)",
        "(-9223372036854775807-1) // -1",
        "9223372036854775807 + 1",
        "print(99999999999999999999)",
        "range(-9000000000000000000, 9000000000000000000)",
        "int(1e300)",
    ] {
        let out = block_on(sbx.run_code(cell)).unwrap();
        assert_eq!(out.error.map(|e| e.name).as_deref(), Some("NotImplementedError"), "{cell}");
    }
    let out =
        block_on(sbx.run_code("print(9223372036854775806 % 9223372036854775807, -7 // 2, -7 % 2)")).unwrap();
    assert_eq!(out.stdout_lossy(), "9223372036854775806 -4 1\n");
    let out = block_on(sbx.run_code("print('%s %d' % ('%d', 5))")).unwrap();
    assert_eq!(out.stdout_lossy(), "%d 5\n");
    let out = block_on(sbx.run_code("x = 1\nprint(f'{x 2}')")).unwrap();
    assert_eq!(out.error.unwrap().name, "SyntaxError");
}

#[test]
fn fake__an_endless_device_runs_until_its_deadline() {
    let (_, sbx) = fake_sandbox();
    let err = block_on(
        sbx.run(Command::new("cat").arg("/dev/zero").output_limit(10).timeout(Duration::from_secs(3))),
    )
    .unwrap_err();
    let sandboxio::Error::ExecutionTimeout { partial, .. } = err else { panic!("{err}") };
    assert!(partial.truncated && partial.stdout.len() == 10);
}

#[test]
fn fake__huge_ttls_are_refused_and_shutdown_accepts_any_deadline() {
    let err = block_on(
        Sandbox::builder_with(FakeBackend::new())
            .network(NetworkPolicy::deny_all())
            .ttl(Duration::MAX)
            .create(),
    )
    .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidInput);
    assert_eq!(block_on(sandboxio::runtime::shutdown(Duration::MAX)), 0);
}

#[test]
fn fake__redirection_errors_and_script_files_behave_like_sh() {
    let (_, sbx) = fake_sandbox();
    let out = block_on(sbx.run(Command::shell("echo a > /; echo after"))).unwrap();
    assert!(out.stderr_lossy().contains("Is a directory"), "{}", out.stderr_lossy());
    assert_eq!(out.stdout_lossy(), "after\n");
    block_on(sbx.fs().write("x.sh", "echo from file; exit 5")).unwrap();
    let out = block_on(sbx.run(Command::new("sh").arg("x.sh"))).unwrap();
    assert_eq!((out.stdout_lossy().as_ref(), out.status), ("from file\n", ExitStatus::Code(5)));
    let out = block_on(sbx.run(Command::shell("x=$(if true; then echo 1; fi); echo \"[$x]\""))).unwrap();
    assert_eq!(out.status, ExitStatus::Code(2), "unmodelled syntax in $(…) fails the command");
}

#[test]
fn fake__side_effects_land_when_the_process_reaches_them() {
    let (_, sbx) = fake_sandbox();
    let mut stream = sbx
        .stream(Command::shell("echo start; echo x > early.txt; sleep 5; echo y > late.txt; echo end"))
        .unwrap();
    assert_eq!(block_on(stream.next_chunk()).unwrap().unwrap().data, b"start\n");
    assert_eq!(block_on(sbx.fs().read("early.txt")).unwrap(), b"x\n");
    assert_eq!(block_on(sbx.fs().read("late.txt")).unwrap_err().code(), ErrorCode::NotFound, "not yet");
    drop(stream);
    assert_eq!(
        block_on(sbx.fs().read("late.txt")).unwrap_err().code(),
        ErrorCode::NotFound,
        "killed before it wrote"
    );

    // A run dropped early has written nothing that comes after the drop point.
    assert!(!poll_k_times(sbx.run(Command::shell("sleep 10; echo z > dropped.txt")), 1));
    assert_eq!(block_on(sbx.fs().read("dropped.txt")).unwrap_err().code(), ErrorCode::NotFound);
}

#[test]
fn fake__kill_stops_runs_and_streams_in_flight() {
    let (fake, sbx) = fake_sandbox();
    let mut stream = sbx.stream(Command::shell("echo a; sleep 1; echo b; exit 3")).unwrap();
    assert_eq!(block_on(stream.next_chunk()).unwrap().unwrap().data, b"a\n");
    block_on(sbx.kill()).unwrap();
    let item = block_on(stream.next_chunk()).unwrap();
    assert_eq!(item.unwrap_err().code(), ErrorCode::SandboxGone);
    assert_eq!(block_on(stream.wait()).unwrap_err().code(), ErrorCode::SandboxGone);
    assert_eq!(fake.live_processes(), 0);
}

#[test]
fn fake__streams_report_failures_as_items_and_keep_scripted_statuses() {
    let (fake, sbx) = fake_sandbox();
    fake.fail_next(Failure::Timeout);
    let mut stream =
        sbx.stream(Command::new("true").timeout(Duration::from_secs(5))).expect("failures arrive later");
    assert_eq!(block_on(stream.next_chunk()).unwrap().unwrap_err().code(), ErrorCode::ExecutionTimeout);

    fake.on_run("killed-tool", ExecResult::new(0, "", "").with_status(ExitStatus::Signal(9)));
    let mut stream = sbx.stream(Command::new("killed-tool")).unwrap();
    assert_eq!(block_on(stream.wait()).unwrap().status, ExitStatus::Signal(9));

    // A reader blocked on stdin that nobody can write reaches its deadline, not a hang.
    let mut stream = sbx.stream(Command::new("cat").timeout(Duration::from_secs(1))).unwrap();
    assert_eq!(block_on(stream.next_chunk()).unwrap().unwrap_err().code(), ErrorCode::ExecutionTimeout);
    assert_eq!(fake.live_processes(), 0);
}
