//! One soak cycle on one sandbox: create → commands → code cells → files → close, every
//! result checked exactly. A check that fails names its step and what differed; the cycle
//! still closes its sandbox, so a failure never turns into a leak of the soak's own making.

use std::fmt::{Debug, Write as _};
use std::time::Duration;

use sandboxio::{
    Code, Command, Error, ExitStatus, NetworkPolicy, Sandbox, exec::StreamKind, fs::FileKind,
    policy::Capabilities,
};

/// What one cycle did, for the per-backend totals.
#[derive(Debug, Default, Clone, Copy)]
pub struct Done {
    pub commands: u64,
    pub cells: u64,
    pub file_ops: u64,
}

/// A step that did not give exactly what it should have.
#[derive(Debug)]
pub struct Failure {
    pub step: &'static str,
    pub what: String,
}

type Checked<T> = Result<T, Failure>;

/// The settings every cycle of one run shares.
#[derive(Debug, Clone)]
pub struct Cycle {
    /// The backend's DSN.
    pub dsn: String,
    /// The metadata label that marks this run's sandboxes (its containers' labels on
    /// `docker://`), so the sampler counts only them.
    pub label: (String, String),
    /// The size of the file written and read back, in bytes.
    pub file_bytes: usize,
    /// The lines of `seq 1 N` for the large-output command (about 6.9 bytes a line at 1e6).
    pub seq_lines: u32,
}

/// Runs one cycle; `n` makes each cycle's data its own (a result from another cycle or an
/// earlier step would not match). Always closes the sandbox it created, unless `leak`
/// asks it to detach it instead (the soak's positive control: it must then fail).
pub async fn run(cycle: &Cycle, n: u64, leak: bool, done: &mut Done) -> Checked<()> {
    let sandbox = Sandbox::builder(&cycle.dsn)
        .map_err(fail("create"))?
        .network(NetworkPolicy::deny_all())
        .metadata(&cycle.label.0, &cycle.label.1)
        // Long enough for any cycle; short enough that a leaked sandbox of a long soak
        // still ends on its own.
        .ttl(Duration::from_mins(15))
        .create()
        .await
        .map_err(fail("create"))?;
    let worked = work(&sandbox, cycle, n, done).await;
    let closed = if leak {
        sandbox.detach().await.map(drop).map_err(fail("detach"))
    } else {
        sandbox.close().await.map_err(fail("close"))
    };
    worked.and(closed)
}

async fn work(sandbox: &Sandbox, cycle: &Cycle, n: u64, done: &mut Done) -> Checked<()> {
    commands(sandbox, cycle, n, done).await?;
    if sandbox.capabilities().contains(Capabilities::RUN_CODE) {
        cells(sandbox, n, done).await?;
    }
    files(sandbox, cycle, n, done).await
}

/// Short runs (two at once), a streamed command fed through stdin, a timeout that fires,
/// and a command with megabytes of output.
async fn commands(sandbox: &Sandbox, cycle: &Cycle, n: u64, done: &mut Done) -> Checked<()> {
    let (a, b) = futures_lite::future::zip(
        sandbox.run(Command::new("echo").arg(format!("soak {n}"))),
        sandbox.run(Command::shell(format!("echo {n} >&2; exit 7"))),
    )
    .await;
    let a = a.map_err(fail("run echo"))?;
    same(
        "run echo",
        (&a.status, a.stdout.as_slice(), a.stderr.as_slice()),
        (&ExitStatus::Code(0), format!("soak {n}\n").as_bytes(), b"".as_slice()),
    )?;
    let b = b.map_err(fail("run exit 7"))?;
    same(
        "run exit 7",
        (&b.status, b.stdout.as_slice(), b.stderr.as_slice()),
        (&ExitStatus::Code(7), b"".as_slice(), format!("{n}\n").as_bytes()),
    )?;
    done.commands += 2;

    streamed_cat(sandbox, n).await?;
    done.commands += 1;

    // A timeout that fires: the partial output is kept, the process tree is killed, and the
    // sandbox goes on (the next steps use it).
    let timeout = Duration::from_secs(1);
    match sandbox.run(Command::shell("echo started; exec sleep 60").timeout(timeout)).await {
        Err(Error::ExecutionTimeout { timeout: t, partial, .. }) => {
            same("timeout", (t, partial.stdout.as_slice()), (timeout, b"started\n".as_slice()))?;
        }
        other => return Err(unexpected("timeout", "ExecutionTimeout", &other)),
    }
    done.commands += 1;

    let lines = cycle.seq_lines + u32::try_from(n % 1000).unwrap_or(0);
    let big = sandbox
        .run(Command::new("seq").arg("1").arg(lines.to_string()))
        .await
        .map_err(fail("large output"))?;
    let want = (1..=lines).fold(String::new(), |mut out, i| {
        let _ = writeln!(out, "{i}");
        out
    });
    same("large output status", (&big.status, big.truncated), (&ExitStatus::Code(0), false))?;
    same_bytes("large output", &big.stdout, want.as_bytes())?;
    done.commands += 1;
    Ok(())
}

/// `cat` driven line by line: each line written must come back before the next is sent (both
/// directions stream), then a 32 KiB block, then end of input and a clean exit.
async fn streamed_cat(sandbox: &Sandbox, n: u64) -> Checked<()> {
    let step = "stream stdin";
    let mut stream = sandbox.stream(Command::new("cat")).map_err(fail(step))?;
    let block: Vec<u8> = (0..32 * 1024).map(|i| b'a' + u8::try_from((i + n) % 26).unwrap_or(0)).collect();
    let mut inputs: Vec<Vec<u8>> = (0..3).map(|i| format!("cycle {n} line {i}\n").into_bytes()).collect();
    inputs.push(block);
    for input in &inputs {
        stream.write_stdin(input).await.map_err(fail(step))?;
        let mut echoed = Vec::new();
        while echoed.len() < input.len() {
            match stream.next_chunk().await {
                Some(Ok(chunk)) if chunk.stream == StreamKind::Stdout => {
                    echoed.extend_from_slice(&chunk.data);
                }
                Some(Ok(chunk)) => return Err(Failure { step, what: format!("stderr {:?}", chunk.data) }),
                Some(Err(e)) => return Err(fail(step)(e)),
                None => {
                    return Err(Failure {
                        step,
                        what: format!("ended after {} of {} bytes", echoed.len(), input.len()),
                    });
                }
            }
        }
        same_bytes(step, &echoed, input)?;
    }
    stream.close_stdin().await.map_err(fail(step))?;
    if let Some(extra) = stream.next_chunk().await {
        return Err(Failure { step, what: format!("output after end of input: {extra:?}") });
    }
    let end = stream.wait().await.map_err(fail(step))?;
    same(step, end.status, ExitStatus::Code(0))
}

/// A context with state across cells, a rich result, an error that leaves the state, and a
/// cell outside any context. Without `STATEFUL_CODE` (the exec-API path) only the last.
async fn cells(sandbox: &Sandbox, n: u64, done: &mut Done) -> Checked<()> {
    let alone = sandbox.run_code(format!("print({n} * 2)")).await.map_err(fail("cell"))?;
    same("cell", (alone.success(), alone.stdout), (true, format!("{}\n", n * 2).into_bytes()))?;
    done.cells += 1;
    if !sandbox.capabilities().contains(Capabilities::STATEFUL_CODE) {
        return Ok(());
    }
    let ctx = sandbox.create_context("python").await.map_err(fail("create context"))?;
    let set =
        sandbox.run_code(Code::new(format!("x = {n}")).in_context(&ctx)).await.map_err(fail("cell set"))?;
    same("cell set", (set.success(), set.stdout), (true, Vec::new()))?;

    let error =
        sandbox.run_code(Code::new("x += 1\n1 / 0").in_context(&ctx)).await.map_err(fail("cell error"))?;
    let name = error.error.as_ref().map(|e| (e.name.as_str(), e.value.as_str()));
    same(
        "cell error",
        (error.status.success(), name),
        (false, Some(("ZeroDivisionError", "division by zero"))),
    )?;

    let read = sandbox.run_code(Code::new("print(x)").in_context(&ctx)).await.map_err(fail("cell state"))?;
    same("cell state", (read.success(), read.stdout), (true, format!("{}\n", n + 1).into_bytes()))?;

    if sandbox.capabilities().contains(Capabilities::RICH_OUTPUTS) {
        let cell = "import base64\nclass Rich:\n    def _repr_html_(self):\n        return '<b>rich %d</b>' % x\n    def _repr_png_(self):\n        return base64.b64decode('iVBORw0KGgo=')\nRich()";
        let rich = sandbox.run_code(Code::new(cell).in_context(&ctx)).await.map_err(fail("cell rich"))?;
        let bundle = rich.results.first();
        let html = bundle.and_then(|b| b.get("text/html")).map(Vec::as_slice);
        let png = bundle.and_then(|b| b.get("image/png")).map(Vec::as_slice);
        same(
            "cell rich",
            (rich.success(), rich.results.len(), html, png),
            (
                true,
                1,
                Some(format!("<b>rich {}</b>", n + 1).as_bytes()),
                Some([0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a].as_slice()),
            ),
        )?;
        done.cells += 1;
    }
    done.cells += 3;
    Ok(())
}

/// A few megabytes written and read back, small files beside them, the listing checked
/// name by name, the size seen by a command, then everything removed.
async fn files(sandbox: &Sandbox, cycle: &Cycle, n: u64, done: &mut Done) -> Checked<()> {
    let fs = sandbox.fs();
    let dir = format!("soak-{n}");
    let blob = pseudo_random(cycle.file_bytes, n);
    fs.mkdir(&dir).await.map_err(fail("mkdir"))?;
    fs.write(&format!("{dir}/blob.bin"), blob.clone()).await.map_err(fail("write"))?;
    for i in 0..3 {
        fs.write(&format!("{dir}/small-{i}.txt"), format!("{n}:{i}")).await.map_err(fail("write small"))?;
    }
    let back = fs.read(&format!("{dir}/blob.bin")).await.map_err(fail("read"))?;
    same_bytes("read", &back, &blob)?;
    let text = fs.read_text(&format!("{dir}/small-1.txt")).await.map_err(fail("read small"))?;
    same("read small", text, format!("{n}:1"))?;

    let mut listed: Vec<(String, FileKind, u64)> =
        fs.list(&dir).await.map_err(fail("list"))?.into_iter().map(|e| (e.name, e.kind, e.size)).collect();
    listed.sort_by(|a, b| a.0.cmp(&b.0));
    let small = format!("{n}:0").len() as u64;
    let mut want = vec![("blob.bin".to_owned(), FileKind::File, blob.len() as u64)];
    want.extend((0..3).map(|i| (format!("small-{i}.txt"), FileKind::File, small)));
    same("list", listed, want)?;

    // What the host wrote is what a command inside sees.
    let wc =
        sandbox.run(Command::new("wc").arg("-c").arg(format!("{dir}/blob.bin"))).await.map_err(fail("wc"))?;
    same("wc", wc.stdout_lossy().into_owned(), format!("{} {dir}/blob.bin\n", blob.len()))?;
    done.commands += 1;

    fs.remove(&dir, true).await.map_err(fail("remove"))?;
    match fs.list(&dir).await {
        Err(Error::NotFound { .. }) => {}
        other => return Err(unexpected("removed", "NotFound", &other)),
    }
    done.file_ops += 10;
    Ok(())
}

/// `len` bytes of xorshift output seeded by `seed`: incompressible, and each cycle's its own.
fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.extend_from_slice(&state.to_le_bytes());
    }
    out.truncate(len);
    out
}

fn fail(step: &'static str) -> impl Fn(Error) -> Failure {
    move |e| Failure { step, what: format!("error {e}") }
}

fn unexpected<T: Debug>(step: &'static str, wanted: &str, got: &Result<T, Error>) -> Failure {
    let got = match got {
        Ok(v) => format!("Ok({v:?})"),
        Err(e) => format!("error {e}"),
    };
    Failure { step, what: format!("wanted {wanted}, got {}", clip(&got)) }
}

#[expect(clippy::needless_pass_by_value, reason = "callers build the tuples they compare in place")]
fn same<T: PartialEq + Debug>(step: &'static str, got: T, want: T) -> Checked<()> {
    if got == want {
        Ok(())
    } else {
        Err(Failure {
            step,
            what: format!("got {}, wanted {}", clip(&format!("{got:?}")), clip(&format!("{want:?}"))),
        })
    }
}

/// Byte strings too long to print: their lengths and where they first differ.
fn same_bytes(step: &'static str, got: &[u8], want: &[u8]) -> Checked<()> {
    if got == want {
        return Ok(());
    }
    let at = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(got.len().min(want.len()));
    Err(Failure {
        step,
        what: format!("{} bytes, wanted {}; first difference at byte {at}", got.len(), want.len()),
    })
}

fn clip(s: &str) -> String {
    const MAX: usize = 300;
    if s.len() <= MAX {
        return s.to_owned();
    }
    let cut = (0..=MAX).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
    format!("{}… ({} bytes)", &s[..cut], s.len())
}
