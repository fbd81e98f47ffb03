//! envd's `process.Process` messages in the Connect JSON mapping (`spec/envd/process/process.proto`
//! in E2B's repository; proto3 JSON: lowerCamelCase names, `bytes` as padded base64, zero
//! values omitted, so every field defaults and a missing `exitCode` means 0).
//!
//! Pure functions: a request built from a command, and a response frame turned into a
//! [`ProcessEvent`], so each rule has an exact-output test.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;

use super::wire::WireError;
use crate::exec::ExitStatus;

/// One event of a started process, keepalives already dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ProcessEvent {
    /// The process started with this pid (always the first event).
    Start(u32),
    /// Bytes it wrote to stdout.
    Stdout(Vec<u8>),
    /// Bytes it wrote to stderr.
    Stderr(Vec<u8>),
    /// It ended.
    End(ExitStatus),
}

#[derive(Deserialize, Default)]
struct Response {
    #[serde(default)]
    event: Option<Event>,
}

#[derive(Deserialize, Default)]
struct Event {
    #[serde(default)]
    start: Option<Start>,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default)]
    end: Option<End>,
    #[serde(default)]
    keepalive: Option<serde_json::Value>,
}

#[derive(Deserialize, Default)]
struct Start {
    #[serde(default)]
    pid: u32,
}

#[derive(Deserialize, Default)]
struct Data {
    #[serde(default)]
    stdout: Option<String>,
    #[serde(default)]
    stderr: Option<String>,
    #[serde(default)]
    pty: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct End {
    #[serde(default)]
    exit_code: i32,
    #[serde(default)]
    exited: bool,
    #[serde(default)]
    status: String,
}

/// Decodes one message frame of `Process.Start` or `Process.Connect`: `Ok(None)` for a
/// keepalive (or an event of a kind sandboxio does not use, such as `pty`).
///
/// # Errors
///
/// [`WireError::Json`] for a frame that is not a `StartResponse`, [`WireError::Field`] for
/// output that is not base64 or an event with none of its cases set.
pub(crate) fn parse_event(payload: &[u8]) -> Result<Option<ProcessEvent>, WireError> {
    let response: Response = serde_json::from_slice(payload)?;
    let Some(event) = response.event else {
        return Err(WireError::Field { field: "event", why: "missing".into() });
    };
    if let Some(start) = event.start {
        return Ok(Some(ProcessEvent::Start(start.pid)));
    }
    if let Some(data) = event.data {
        let decode = |field: &'static str, text: &str| {
            STANDARD.decode(text).map_err(|e| WireError::Field { field, why: format!("not base64: {e}") })
        };
        return Ok(match (data.stdout, data.stderr, data.pty) {
            (Some(text), _, _) => Some(ProcessEvent::Stdout(decode("stdout", &text)?)),
            (None, Some(text), _) => Some(ProcessEvent::Stderr(decode("stderr", &text)?)),
            // An empty `data` is a zero-length write (its one field omitted as a zero value).
            _ => None,
        });
    }
    if let Some(end) = event.end {
        return Ok(Some(ProcessEvent::End(exit_status(end.exited, end.exit_code, &end.status))));
    }
    if event.keepalive.is_some() {
        return Ok(None);
    }
    Err(WireError::Field { field: "event", why: "no start, data, end or keepalive".into() })
}

/// How a process ended, from envd's `EndEvent`: `exited` (true when it called exit) and
/// `exitCode` (Go's `ProcessState.ExitCode()`, -1 after a signal) and `status` (Go's
/// `ProcessState.String()`, `"signal: killed"` after `SIGKILL`). envd omits `exited: false`
/// and `exitCode: 0` as zero values, so an end with neither and a status of `exit status 0`
/// is a clean exit, and a signal is read from the status text.
pub(crate) fn exit_status(exited: bool, exit_code: i32, status: &str) -> ExitStatus {
    if exited || exit_code >= 0 && !status.starts_with("signal: ") {
        return ExitStatus::Code(exit_code);
    }
    let name = status.strip_prefix("signal: ").unwrap_or(status);
    let name = name.strip_suffix(" (core dumped)").unwrap_or(name);
    ExitStatus::Signal(signal_number(name).unwrap_or(9))
}

/// The number of a Linux signal from Go's name for it (`syscall.Signal.String()`), or from
/// `signal N` for one without a name.
fn signal_number(name: &str) -> Option<i32> {
    const NAMES: &[(&str, i32)] = &[
        ("hangup", 1),
        ("interrupt", 2),
        ("quit", 3),
        ("illegal instruction", 4),
        ("trace/breakpoint trap", 5),
        ("aborted", 6),
        ("bus error", 7),
        ("floating point exception", 8),
        ("killed", 9),
        ("user defined signal 1", 10),
        ("segmentation fault", 11),
        ("user defined signal 2", 12),
        ("broken pipe", 13),
        ("alarm clock", 14),
        ("terminated", 15),
    ];
    NAMES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, number)| *number)
        .or_else(|| name.strip_prefix("signal ").and_then(|n| n.parse().ok()))
}

/// The JSON of a `StartRequest` for argv `cmd` + `args` with `envs` and `cwd`; `stdin`
/// says whether the process keeps a stdin to write to (envd defaults it to true, so it is
/// always sent).
pub(crate) fn start_request(
    cmd: &str,
    args: &[String],
    envs: &BTreeMap<String, String>,
    cwd: Option<&str>,
    stdin: bool,
) -> serde_json::Value {
    let mut process = serde_json::json!({ "cmd": cmd, "args": args, "envs": envs });
    if let Some(cwd) = cwd {
        process["cwd"] = cwd.into();
    }
    serde_json::json!({ "process": process, "stdin": stdin })
}

/// The JSON of a `SendSignalRequest` (`SIGNAL_SIGKILL` or `SIGNAL_SIGTERM`, the only two
/// envd defines) for `pid`.
pub(crate) fn signal_request(pid: u32, kill: bool) -> serde_json::Value {
    let signal = if kill { "SIGNAL_SIGKILL" } else { "SIGNAL_SIGTERM" };
    serde_json::json!({ "process": { "pid": pid }, "signal": signal })
}

/// The JSON of a `SendInputRequest` writing `data` to `pid`'s stdin.
pub(crate) fn input_request(pid: u32, data: &[u8]) -> serde_json::Value {
    serde_json::json!({ "process": { "pid": pid }, "input": { "stdin": STANDARD.encode(data) } })
}

/// The JSON of a `CloseStdinRequest` for `pid`.
pub(crate) fn close_stdin_request(pid: u32) -> serde_json::Value {
    serde_json::json!({ "process": { "pid": pid } })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_frames() {
        for (frame, event) in [
            (r#"{"event":{"start":{"pid":412}}}"#, Some(ProcessEvent::Start(412))),
            (r#"{"event":{"data":{"stdout":"aGkK"}}}"#, Some(ProcessEvent::Stdout(b"hi\n".to_vec()))),
            (r#"{"event":{"data":{"stderr":"AP8="}}}"#, Some(ProcessEvent::Stderr(vec![0, 255]))),
            (r#"{"event":{"data":{}}}"#, None),
            (r#"{"event":{"keepalive":{}}}"#, None),
            (
                r#"{"event":{"end":{"exited":true,"status":"exit status 0"}}}"#,
                Some(ProcessEvent::End(ExitStatus::Code(0))),
            ),
            (
                r#"{"event":{"end":{"exitCode":3,"exited":true,"status":"exit status 3"}}}"#,
                Some(ProcessEvent::End(ExitStatus::Code(3))),
            ),
            (
                r#"{"event":{"end":{"exitCode":-1,"status":"signal: killed","error":"signal: killed"}}}"#,
                Some(ProcessEvent::End(ExitStatus::Signal(9))),
            ),
            (
                r#"{"event":{"end":{"exitCode":-1,"status":"signal: terminated"}}}"#,
                Some(ProcessEvent::End(ExitStatus::Signal(15))),
            ),
            (
                r#"{"event":{"end":{"exitCode":-1,"status":"signal: segmentation fault (core dumped)"}}}"#,
                Some(ProcessEvent::End(ExitStatus::Signal(11))),
            ),
            (
                r#"{"event":{"end":{"exitCode":-1,"status":"signal 34"}}}"#,
                Some(ProcessEvent::End(ExitStatus::Signal(34))),
            ),
            (r#"{"event":{"end":{}}}"#, Some(ProcessEvent::End(ExitStatus::Code(0)))),
            (r#"{"event":{"start":{}},"unknown":1}"#, Some(ProcessEvent::Start(0))),
        ] {
            assert_eq!(parse_event(frame.as_bytes()).unwrap(), event, "{frame}");
        }
    }

    #[test]
    fn malformed_frames_are_typed_errors() {
        for (frame, message) in [
            ("{}", "field `event`: missing"),
            (r#"{"event":{}}"#, "field `event`: no start, data, end or keepalive"),
            (
                r#"{"event":{"data":{"stdout":"!!"}}}"#,
                "field `stdout`: not base64: Invalid symbol 33, offset 0.",
            ),
            (
                r#"{"event":{"start":{"pid":-1}}}"#,
                "malformed JSON: invalid value: integer `-1`, expected u32 at line 1 column 27",
            ),
            ("[", "malformed JSON: EOF while parsing a list at line 1 column 1"),
        ] {
            assert_eq!(parse_event(frame.as_bytes()).unwrap_err().to_string(), message, "{frame}");
        }
    }

    #[test]
    fn requests_are_the_documented_json() {
        let envs = BTreeMap::from([("A".to_owned(), "1".to_owned())]);
        assert_eq!(
            start_request("ls", &["-l".to_owned()], &envs, Some("/home/user"), false).to_string(),
            r#"{"process":{"args":["-l"],"cmd":"ls","cwd":"/home/user","envs":{"A":"1"}},"stdin":false}"#
        );
        assert_eq!(
            start_request("true", &[], &BTreeMap::new(), None, true).to_string(),
            r#"{"process":{"args":[],"cmd":"true","envs":{}},"stdin":true}"#
        );
        assert_eq!(signal_request(7, true).to_string(), r#"{"process":{"pid":7},"signal":"SIGNAL_SIGKILL"}"#);
        assert_eq!(
            signal_request(7, false).to_string(),
            r#"{"process":{"pid":7},"signal":"SIGNAL_SIGTERM"}"#
        );
        assert_eq!(
            input_request(7, b"hi\n").to_string(),
            r#"{"input":{"stdin":"aGkK"},"process":{"pid":7}}"#
        );
        assert_eq!(close_stdin_request(7).to_string(), r#"{"process":{"pid":7}}"#);
    }
}
