//! `run_code` and `run_code_stream` for `docker://`'s exec-API path: the shared Python
//! runner through a streamed exec, its error record read back as the sandbox's user (a
//! link planted in its place leads only where that user may read).

use std::sync::Arc;
use std::time::Instant;

use crate::backend::{BackendExecStream as _, CellStream};
use crate::error::Result;
use crate::exec::Code;

use super::{code_runner, exec, fs, stream};
use crate::backends::docker::rt;
use crate::backends::docker::sandbox::Shared;

/// 128 random bits from the kernel, as hex; the clock and a counter where `/dev/urandom`
/// cannot be read.
fn unguessable() -> String {
    use std::io::Read as _;
    let mut bytes = [0u8; 16];
    if std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes)).is_err() {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        bytes[..8].copy_from_slice(&now.as_nanos().to_le_bytes()[..8]);
        bytes[8..].copy_from_slice(&COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed).to_le_bytes());
    }
    bytes.iter().fold(String::with_capacity(32), |mut hex, b| {
        use std::fmt::Write as _;
        let _ = write!(hex, "{b:02x}");
        hex
    })
}

/// Starts a cell on a one-shot interpreter through a streamed exec: what it prints goes out
/// as the exec's frames arrive; when it ends, its error record (if it raised) is read back.
/// Dropping the stream drops the exec's stream, which kills the interpreter's whole
/// process tree.
///
/// # Errors
///
/// [`Error::CapabilityNotSupported`](crate::Error::CapabilityNotSupported) for a language
/// other than Python, [`Error::SandboxGone`](crate::Error::SandboxGone), at once; the
/// exec's errors (a timeout among them) as the stream's end.
pub(super) fn run_code_stream(shared: &Arc<Shared>, code: &Code) -> Result<CellStream> {
    // Unguessable, so an earlier command cannot plant the record a later cell reports (the
    // handle's keys are visible in /tmp/.sandboxio). A command running at the same time, as
    // the same uid, could still overwrite it once the cell writes it: that waits for
    // sandboxd, which reports the error over its own channel (ADR 0005).
    let record = format!("/tmp/.sandboxio/cell-{}.error", unguessable());
    let command = code_runner::command(super::SCHEME, "python3", code, &record)?;
    shared.check_alive()?;
    let shared = Arc::clone(shared);
    // No rich results on this path: the budget bounds the output `run_code` collects.
    Ok(CellStream::with_output_limit(code.output_limit_bytes(), move |sink| async move {
        let started = Instant::now();
        let source = command.stdin_bytes().unwrap_or_default().to_vec();
        let mut exec = stream::DockerExecStream::start(&shared, command);
        // The runner reads the whole cell before it runs it, so stdin is written first. A
        // runner that ended before reading it (no `python3`) says so through its exit.
        let _ = exec.write_stdin(&source).await;
        let _ = exec.close_stdin().await;
        while let Some(chunk) = std::future::poll_fn(|cx| exec.poll_chunk(cx)).await {
            sink.send(chunk?).await;
        }
        let ran = exec.wait().await?;
        let error = if ran.exit_code() == Some(0) { None } else { read_record(&shared, record).await? };
        code_runner::result(ran, error.as_deref(), started.elapsed())
    }))
}

/// The cell's error record, removed once read; `None` when the cell exited non-zero
/// without raising (`sys.exit(3)`).
async fn read_record(shared: &Arc<Shared>, record: String) -> Result<Option<Vec<u8>>> {
    let reader = Arc::clone(shared);
    let path = record.clone();
    // Bounded like any read from the sandbox; on the Docker runtime, which bollard needs.
    let read =
        rt::spawn(async move { fs::read(&reader, &path, crate::exec::DEFAULT_OUTPUT_LIMIT as u64).await });
    match read.await {
        Ok(bytes) => {
            let cleanup = Arc::clone(shared);
            rt::detach(async move {
                let _ = exec::run_raw(&cleanup, &["rm", "-f", &record]).await;
            });
            Ok(Some(bytes))
        }
        Err(e) if e.code() == crate::ErrorCode::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}
