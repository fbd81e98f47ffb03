//! `run_code` for `docker://`: the shared Python runner, its error record read back as the
//! sandbox's user (a link planted in its place leads only where that user may read).

use std::sync::Arc;
use std::time::Instant;

use crate::backends::code_runner;
use crate::error::Result;
use crate::exec::{Code, CodeResult};

use super::{Shared, exec, fs};

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

pub(super) async fn run_code(shared: Arc<Shared>, code: Code) -> Result<CodeResult> {
    let started = Instant::now();
    // Unguessable, so an earlier command cannot plant the record a later cell reports (the
    // handle's keys are visible in /tmp/.sandboxio). A command running at the same time, as
    // the same uid, could still overwrite it once the cell writes it: that waits for
    // sandboxd, which reports the error over its own channel (ADR 0005).
    let record = format!("/tmp/.sandboxio/cell-{}.error", unguessable());
    let command = code_runner::command(super::SCHEME, "python3", &code, &record)?;
    let ran = exec::run(Arc::clone(&shared), command).await?;
    let mut error = None;
    if ran.exit_code() != Some(0) {
        // Bounded like any read from the sandbox (the fs SPI now takes a limit).
        match fs::read(&shared, &record, crate::DEFAULT_OUTPUT_LIMIT as u64).await {
            Ok(bytes) => {
                error = Some(bytes);
                let cleanup = Arc::clone(&shared);
                super::rt::detach(async move {
                    let _ = exec::run_raw(&cleanup, &["rm", "-f", &record]).await;
                });
            }
            // Exited non-zero without raising (`sys.exit(3)`): no structured error.
            Err(e) if e.code() == crate::ErrorCode::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    code_runner::result(ran, error.as_deref(), started.elapsed())
}
