//! Byte bars for `cp` and `run --upload/--download`, fed by the library's
//! `Fs::on_progress`: bytes, rate and ETA when the total is known (an upload), a spinner
//! with bytes and rate when not (a download). Drawn on stderr, and only when stdout is a
//! terminal (the rule of every other indicator here, so `--json` and piped output get
//! none) and stderr is one (indicatif's own check).

use std::io::IsTerminal as _;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sandboxio::TransferProgress;

/// Which way the bytes go.
#[derive(Clone, Copy)]
pub(crate) enum Direction {
    Upload,
    Download,
}

/// The bar of one transfer, cleared when dropped (the transfer ended, failed or was
/// interrupted). Hidden unless stdout is a terminal.
pub(crate) struct TransferBar(ProgressBar);

impl TransferBar {
    /// A bar labelled `label`.
    pub(crate) fn new(direction: Direction, label: &str) -> Self {
        let target = if std::io::stdout().is_terminal() {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let (bar, template) = match direction {
            // The length comes with the first report (the library walks the host tree
            // before sending).
            Direction::Upload => (
                ProgressBar::with_draw_target(Some(0), target),
                "{msg} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta}",
            ),
            Direction::Download => (
                ProgressBar::with_draw_target(None, target),
                "{spinner} {msg} {bytes} {binary_bytes_per_sec} {elapsed}",
            ),
        };
        bar.set_style(
            ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_message(label.to_owned());
        bar.enable_steady_tick(Duration::from_millis(100));
        TransferBar(bar)
    }

    /// Moves the bar to `progress`: the hook to give `Fs::on_progress` (cheap, never
    /// blocks: indicatif draws at its own rate).
    pub(crate) fn report(&self, progress: TransferProgress) {
        if let Some(total) = progress.total {
            self.0.set_length(total);
        }
        self.0.set_position(progress.bytes);
    }
}

impl Drop for TransferBar {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}
