//! Class 20: sandbox-chosen bytes reaching a terminal or a log. What a sandbox chose (a
//! runner's start-up output, a record on its result channel) reaches `Error`'s `Display`
//! with its control characters escaped: `\x1b]0;pwned\x07\x1b[2J` retitled and cleared the
//! terminal of whoever printed the error (the CLI does, on stderr). Positive control in the
//! same run: the raw bytes did reach the host, in the error's own field, which keeps them
//! as they came. (The CLI's own lines: `crates/sandboxio-cli/tests/inventory.rs`.)

use sandboxio::{Code, Error, Sandbox};

use crate::support::block_on;

/// What the sandbox prints: an OSC window title, a BEL and a screen clear.
pub const PAYLOAD: &str = "\x1b]0;pwned\x07\x1b[2J";

/// The payload as an escaped error text shows it.
const SHOWN: &str = r"\x1b]0;pwned\x07\x1b[2J";

/// A cell that writes a record header of the payload to its runner's result channel (the
/// runner's `CTRL`, reachable from a cell through `display`'s globals; descriptor 3 on
/// runners before class 19's fix), which the host's framing refuses: the cell's context is
/// lost, and the error says what the channel held.
const RECORD_WRITER: &str =
    "import os\nos.write(display.__globals__.get('CTRL', 3), b'\\x1b]0;pwned\\x07\\x1b[2J 0\\n')\n";

/// The raw text an error carries in its own fields (the positive control reads it there).
fn fields(e: &Error) -> String {
    match e {
        Error::ContextLost { message, .. } | Error::Provider { message, .. } => message.clone(),
        other => format!("{other:?}"),
    }
}

/// `e` carries the payload raw in its fields, and its `Display` shows it escaped, with no
/// control character at all.
pub fn escaped_in_display(what: &str, e: &Error) {
    assert!(fields(e).contains(PAYLOAD), "{what}: control: the raw bytes reached the error: {e:?}");
    let shown = e.to_string();
    assert!(!shown.chars().any(char::is_control), "{what}: control characters in the error text: {shown:?}");
    assert!(shown.contains(SHOWN), "{what}: the payload, escaped, in {shown:?}");
}

/// A record of the payload written on the result channel: `ContextLost` naming it, escaped.
pub fn a_forged_record_is_escaped(sbx: &Sandbox, what: &str) {
    let e = block_on(sbx.run_code(Code::new(RECORD_WRITER))).expect_err("a malformed record loses the cell");
    escaped_in_display(what, &e);
}

#[cfg(feature = "local")]
#[test]
fn class_20__bytes_a_cell_writes_on_its_result_channel_reach_error_text_escaped() {
    let sbx = crate::support::local(sandboxio::NetworkPolicy::deny_all());
    a_forged_record_is_escaped(&sbx, "local");
    block_on(sbx.close()).unwrap();
}

/// The `docker://` half, in a module of its own so the test names hold `docker::` (the
/// unprivileged run skips them by that, the exec-API run selects them by it).
#[cfg(feature = "docker")]
mod docker {
    use sandboxio::NetworkPolicy;

    use super::{Code, Sandbox, a_forged_record_is_escaped, block_on, escaped_in_display};

    /// A root `docker://` sandbox on the sandboxd path, where cells have a runner and a result
    /// channel (this class's point is the same on the exec API, whose cells have neither).
    fn docker_root(test: &str) -> Option<Sandbox> {
        if !crate::support::docker_ready(test) {
            return None;
        }
        let dsn = format!("docker://?image={}&user=0", crate::support::DOCKER_IMAGE);
        Some(block_on(Sandbox::builder(&dsn).unwrap().network(NetworkPolicy::deny_all()).create()).unwrap())
    }

    #[test]
    fn class_20__bytes_a_cell_writes_on_its_result_channel_reach_error_text_escaped_on_docker() {
        let Some(sbx) = docker_root(
            "class_20__bytes_a_cell_writes_on_its_result_channel_reach_error_text_escaped_on_docker",
        ) else {
            return;
        };
        a_forged_record_is_escaped(&sbx, "docker, a record");
        block_on(sbx.close()).unwrap();
    }

    /// On `docker://` with a root sandbox user, the code can change what the runner's
    /// interpreter runs before the runner: a `sitecustomize.py` in the standard library
    /// (imported at every start, `-I` included; `site` itself is frozen in 3.11) that prints
    /// the payload and exits makes the next cell's runner fail at start-up, and the error
    /// quotes what it printed. (Until sandboxd started runners
    /// undumpable, the code replaced `python3` with a script; a script is now refused before
    /// it runs, class 19.)
    #[test]
    fn class_20__what_a_failing_runner_prints_reaches_error_text_escaped_on_docker() {
        let Some(sbx) =
            docker_root("class_20__what_a_failing_runner_prints_reaches_error_text_escaped_on_docker")
        else {
            return;
        };
        let swap = r#"p=$(python3 -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')/sitecustomize.py && rm -f "$p" && printf 'import os\nos.write(1, b"\\x1b]0;pwned\\x07\\x1b[2J")\nos._exit(3)\n' > "$p" && echo swapped"#;
        let swapped = block_on(sbx.run(sandboxio::Command::new("sh").arg("-c").arg(swap))).unwrap();
        assert_eq!(
            swapped.stdout, b"swapped\n",
            "control: the interpreter's sitecustomize.py was written: {swapped:?}"
        );
        let e = block_on(sbx.run_code(Code::new("1"))).expect_err("the runner cannot start");
        escaped_in_display("docker, a runner's start-up output", &e);
        block_on(sbx.close()).unwrap();
    }
}
