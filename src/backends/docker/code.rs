//! `run_code` for `docker://`: the shared Python runner, its error record read back as the
//! sandbox's user (a link planted in its place leads only where that user may read).

use std::sync::Arc;
use std::time::Instant;

use crate::backends::code_runner;
use crate::error::Result;
use crate::exec::{Code, CodeResult};

use super::{Shared, exec, fs};

pub(super) async fn run_code(shared: Arc<Shared>, code: Code) -> Result<CodeResult> {
    let started = Instant::now();
    let record = format!("/tmp/.sandboxio/{}.error", shared.next_key());
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
