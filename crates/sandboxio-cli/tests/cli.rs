//! The `sandboxio` binary end to end on `local://` (bubblewrap). Each test gives the
//! binary its own `TMPDIR`, so the local backend keeps its workspaces in a directory the test
//! can inspect for leftovers.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;

/// A 1×1 PNG.
const PNG_B64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

mod support;

use support::{Scratch, last_json, text};

#[test]
fn run_streams_both_streams_and_exits_with_the_command_code() {
    let s = Scratch::new("run");
    let out = s.run(&["run", "--", "sh", "-c", "echo out; echo err >&2; exit 3"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(text(&out.stdout), "out\n");
    assert_eq!(text(&out.stderr), "err\n");
    let out = s.run(&["run", "--", "true"]);
    assert_eq!(out.status.code(), Some(0));
    let out = s.run(&["run", "--", "sh", "-c", "kill -9 $$"]);
    assert_eq!(out.status.code(), Some(137), "a signal is 128 + its number");
    assert_eq!(s.leftovers(), Vec::<String>::new());
}

/// The binary with `args`, its stdin, stdout and stderr piped.
fn piped(s: &Scratch, args: &[&str]) -> std::process::Child {
    s.cmd(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

/// Issue #30 item 4: a command that reads stdin never waits for input the CLI does not
/// give (`cat` ran until the sandbox's TTL); with `-i` the CLI's stdin reaches it, whole,
/// and its end is end-of-file.
#[test]
fn stdin_is_forwarded_with_dash_i_and_closed_without() {
    use std::io::Write as _;
    let s = Scratch::new("stdin");
    // Without -i, and with the CLI's stdin a pipe that never ends: end-of-file at once.
    let mut child = piped(&s, &["run", "--timeout", "60", "--", "cat"]);
    let held_open = child.stdin.take();
    let started = Instant::now();
    let out = child.wait_with_output().unwrap();
    drop(held_open);
    assert_eq!((out.status.code(), text(&out.stdout)), (Some(0), ""), "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(30), "cat waited {:?} for stdin", started.elapsed());
    // With -i: a Python program on stdin, 200 KiB of it, runs.
    let mut child = piped(&s, &["run", "-i", "--", "python3", "-"]);
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        stdin.write_all(format!("x = '{}'\nprint(len(x) + 1)\n", "a".repeat(200 * 1024)).as_bytes()).unwrap();
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert_eq!((out.status.code(), text(&out.stdout)), (Some(0), "204801\n"), "{out:?}");
    // A command that stops reading early (head) ends; the rest of stdin is dropped.
    let mut child = piped(&s, &["run", "-i", "--", "head", "-c", "3"]);
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let chunk = vec![b'z'; 64 * 1024];
        for _ in 0..64 {
            if stdin.write_all(&chunk).is_err() {
                return;
            }
        }
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert_eq!((out.status.code(), text(&out.stdout)), (Some(0), "zzz"), "{out:?}");
    assert_eq!(s.leftovers(), Vec::<String>::new());
}

/// Issue #30 item 8: `--memory` on a backend that cannot limit memory is refused in the
/// CLI's words (it told a CLI user to remove `.limits(..)`).
#[test]
fn memory_on_a_backend_without_limits_names_the_flag() {
    let s = Scratch::new("memory");
    let out = s.run(&["run", "--memory", "64", "--", "true"]);
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    let said = text(&out.stderr);
    assert!(said.contains("drop --memory") && !said.contains(".limits("), "{said}");
}

#[test]
fn run_json_shape_uploads_and_downloads() {
    let s = Scratch::new("json");
    std::fs::write(s.0.join("in.txt"), "data\n").unwrap();
    let out = s.run(&[
        "run",
        "--json",
        "--upload",
        "in.txt:in.txt",
        "--download",
        "/workspace/out.txt",
        "--",
        "sh",
        "-c",
        "tr a-z A-Z < in.txt > out.txt; echo done; echo warn >&2; exit 4",
    ]);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    let lines: Vec<serde_json::Value> =
        text(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let (exit, chunks) = lines.split_last().unwrap();
    // One object per chunk, as the output came; how the bytes were cut into chunks is the
    // backend's business, so the streams are compared whole.
    let stream = |name: &str| -> String {
        chunks.iter().filter(|c| c["stream"] == name).map(|c| c["data"].as_str().unwrap()).collect()
    };
    assert!(chunks.iter().all(|c| c.as_object().unwrap().len() == 2), "{chunks:?}");
    assert_eq!(stream("stdout"), "done\n");
    assert_eq!(stream("stderr"), "warn\n");
    let mut keys: Vec<&str> = exit.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["downloaded", "duration_ms", "exit_code", "oom_killed", "sandbox_id", "signal"]);
    assert_eq!(exit["oom_killed"], false);
    assert_eq!(exit["exit_code"], 4);
    assert_eq!(exit["signal"], serde_json::Value::Null);
    assert!(exit["sandbox_id"].as_str().unwrap().starts_with("local-"));
    assert_eq!(exit["downloaded"], serde_json::json!(["out.txt"]));
    assert_eq!(std::fs::read_to_string(s.0.join("out.txt")).unwrap(), "DATA\n");
    assert!(out.stderr.is_empty(), "with --json everything is on stdout: {}", text(&out.stderr));

    // Bytes that are not UTF-8 come as base64.
    let out = s.run(&["run", "--json", "--", "printf", "\\377"]);
    let first: serde_json::Value = serde_json::from_str(text(&out.stdout).lines().next().unwrap()).unwrap();
    assert_eq!(first, serde_json::json!({ "stream": "stdout", "data_base64": "/w==" }));
    assert_eq!(s.leftovers(), Vec::<String>::new());
}

#[test]
fn errors_exit_125_with_the_code_and_timeouts_124() {
    let s = Scratch::new("errors");
    let out = s.run(&["run", "--dsn", "nosuch://", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(text(&out.stderr).starts_with("sandboxio: [SBX-003] "), "{}", text(&out.stderr));
    let out = s.run(&["run", "--json", "--memory", "64", "--", "true"]);
    assert_eq!(out.status.code(), Some(125), "local:// refuses memory limits");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["code"], "SBX-003", "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("drop --memory"), "{v}");
    let out = s.run(&["run", "--timeout", "1", "--", "sleep", "30"]);
    assert_eq!(out.status.code(), Some(124), "{out:?}");
    assert!(text(&out.stderr).contains("[SBX-006]"), "{}", text(&out.stderr));
    assert_eq!(s.leftovers(), Vec::<String>::new());
}

#[test]
fn network_deny_refuses_a_connection_the_host_accepts() {
    let s = Scratch::new("net");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // The positive control: the host itself reaches the listener.
    std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let probe = format!(
        "import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5); print('connected')"
    );
    let out = s.run(&["run", "--network", "deny", "--", "python3", "-c", &probe]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(text(&out.stdout), "");
    assert!(text(&out.stderr).contains("ConnectionRefusedError"), "{}", text(&out.stderr));
}

#[test]
fn an_allowlist_refuses_a_host_it_does_not_list() {
    let s = Scratch::new("allow");
    // The egress gate answers 403 before it resolves or dials anything.
    let probe = "import urllib.request\ntry:\n    urllib.request.urlopen('https://not-listed.invalid/', timeout=10)\nexcept OSError as e:\n    print(e)";
    let out = s.run(&["run", "--network", "allow=example.org", "--", "python3", "-c", probe]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(text(&out.stdout).contains("403"), "{}", text(&out.stdout));
}

#[test]
fn code_saves_a_png_and_names_it() {
    let s = Scratch::new("code");
    let cell = format!(
        "import base64\nclass Pic:\n    def _repr_png_(self): return base64.b64decode('{PNG_B64}')\nprint('drawing')\nPic()"
    );
    std::fs::write(s.0.join("cell.py"), cell).unwrap();
    let out = s.run(&["code", "cell.py", "--out-dir", "res"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(text(&out.stdout), "drawing\nsaved res/result-1.png\n");
    let png = std::fs::read(s.0.join("res/result-1.png")).unwrap();
    assert_eq!(png, base64::engine::general_purpose::STANDARD.decode(PNG_B64).unwrap());

    let out = s.run(&["code", "--json", "cell.py"]);
    let v = last_json(&out);
    assert_eq!(v["files"], serde_json::json!(["./result-1.png"]), "{v}");
    assert_eq!(v["error"], serde_json::Value::Null);

    std::fs::write(s.0.join("bad.py"), "1/0").unwrap();
    let out = s.run(&["code", "--json", "bad.py"]);
    assert_eq!(out.status.code(), Some(1));
    let v = last_json(&out);
    assert_eq!(v["error"]["name"], "ZeroDivisionError", "{v}");
    assert_eq!(s.leftovers(), Vec::<String>::new());
}

#[test]
fn create_detach_exec_cp_kill() {
    let s = Scratch::new("detach");
    let out = s.run(&["create", "--detach"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let id = text(&out.stdout).trim().to_owned();
    assert!(id.starts_with("local-"), "{id}");
    std::fs::write(s.0.join("in.txt"), "hello\n").unwrap();
    let dst = format!("{id}:/workspace/in.txt");
    assert_eq!(s.run(&["cp", "in.txt", &dst]).status.code(), Some(0));
    let out = s.run(&["exec", &id, "--", "sh", "-c", "cat in.txt; cp in.txt copy.txt; exit 5"]);
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    assert_eq!(text(&out.stdout), "hello\n");
    let src = format!("{id}:/workspace/copy.txt");
    assert_eq!(s.run(&["cp", &src, "back.txt"]).status.code(), Some(0));
    assert_eq!(std::fs::read_to_string(s.0.join("back.txt")).unwrap(), "hello\n");
    // Issue #30 item 8: a relative sandbox path, and a directory on either side (cp took
    // `ID:rel` for a host path, and refused to copy into a directory).
    let rel = format!("{id}:rel.txt");
    let out = s.run(&["cp", "in.txt", &rel]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let out = s.run(&["exec", &id, "--", "sh", "-c", "mkdir -p sub; cat rel.txt"]);
    assert_eq!(text(&out.stdout), "hello\n", "{out:?}");
    for into in [format!("{id}:sub"), format!("{id}:/workspace/sub/")] {
        let out = s.run(&["cp", "in.txt", &into]);
        assert_eq!(out.status.code(), Some(0), "into {into}: {out:?}");
    }
    let out = s.run(&["exec", &id, "--", "cat", "sub/in.txt"]);
    assert_eq!(text(&out.stdout), "hello\n", "{out:?}");
    std::fs::create_dir_all(s.0.join("here")).unwrap();
    let out = s.run(&["cp", &rel, "here"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(std::fs::read_to_string(s.0.join("here/rel.txt")).unwrap(), "hello\n");
    let out = s.run(&["kill", "--json", &id, "local-0000000000000000"]);
    assert_eq!(out.status.code(), Some(125), "one id is unknown");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["killed"], serde_json::json!([id]));
    assert_eq!(v["errors"][0]["error"]["code"], "SBX-001", "{v}");
    let out = s.run(&["exec", &id, "--", "true"]);
    assert_eq!(out.status.code(), Some(125), "the sandbox is gone");
}

#[test]
fn ctrl_c_kills_the_sandbox_and_leaves_nothing() {
    let s = Scratch::new("sigint");
    let mut child =
        s.cmd(&["run", "--", "sh", "-c", "echo ready; sleep 30"]).stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n", "output arrives while the command still runs");
    assert_eq!(s.leftovers().len(), 1, "the sandbox exists while it runs");
    let started = Instant::now();
    let killed = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    assert_eq!(s.leftovers(), Vec::<String>::new());
}

#[test]
fn completions_and_help() {
    let s = Scratch::new("help");
    let out = s.run(&["completions", "bash"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains("_sandboxio()"), "{}", text(&out.stdout));
    let out = s.run(&["run", "--help"]);
    assert!(
        text(&out.stdout).contains("Examples:\n  sandboxio run -- sh -c 'echo hi; exit 3'"),
        "{}",
        text(&out.stdout)
    );
    assert!(Path::new(env!("CARGO_BIN_EXE_sandboxio")).exists());
}

#[test]
fn transfers_draw_a_byte_bar_on_a_terminal_and_nothing_off_one() {
    let s = Scratch::new("bars");
    std::fs::write(s.0.join("big.bin"), vec![7u8; 4 << 20]).unwrap();
    let args = [
        "run",
        "--upload",
        "big.bin:big.bin",
        "--download",
        "/workspace/copy.bin",
        "--",
        "cp",
        "big.bin",
        "copy.bin",
    ];
    // Piped stdout and stderr: the command's own output only (it has none).
    let out = s.run(&args);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!((text(&out.stdout), text(&out.stderr)), ("", ""));
    assert_eq!(std::fs::read(s.0.join("copy.bin")).unwrap().len(), 4 << 20);
    std::fs::remove_file(s.0.join("copy.bin")).unwrap();
    // With --json: JSON lines only, on stdout.
    let mut json = vec!["run", "--json"];
    json.extend_from_slice(&args[1..]);
    let out = s.run(&json);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    assert_eq!(last_json(&out)["downloaded"], serde_json::json!(["copy.bin"]));
    std::fs::remove_file(s.0.join("copy.bin")).unwrap();

    // The positive control: on a terminal (script(1) gives the binary a pty for stdout and
    // stderr) the same transfers draw their bars, with the upload's total.
    let script = Command::new("script").arg("--version").output();
    if !script.is_ok_and(|o| o.status.success()) {
        println!("[skip] transfers_draw_a_byte_bar_on_a_terminal: no script(1) (util-linux) for a pty");
        return;
    }
    let line = std::iter::once(env!("CARGO_BIN_EXE_sandboxio")).chain(args).collect::<Vec<_>>().join(" ");
    let out = Command::new("script")
        .args(["-q", "-e", "-f", "-c", &line, "/dev/null"])
        .env("TMPDIR", &s.0)
        .current_dir(&s.0)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let typescript = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{typescript}");
    assert!(typescript.contains("uploading big.bin"), "no upload bar: {typescript:?}");
    assert!(typescript.contains("/4.00 MiB"), "the upload bar shows its total: {typescript:?}");
    assert!(typescript.contains("downloading /workspace/copy.bin"), "no download bar: {typescript:?}");
    assert_eq!(std::fs::read(s.0.join("copy.bin")).unwrap().len(), 4 << 20);
    assert_eq!(s.leftovers(), Vec::<String>::new());
}
