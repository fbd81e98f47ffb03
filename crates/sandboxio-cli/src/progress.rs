//! Byte bars for `cp` and `run --upload/--download`, fed by the library's
//! `Fs::on_progress`: bytes, rate and ETA when the total is known (an upload), a spinner
//! with bytes and rate when not (a download). Drawn on stderr, and only when stdout is a
//! terminal (the rule of every other indicator here, so `--json` and piped output get
//! none) and stderr is one (indicatif's own check).

use std::io::IsTerminal as _;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sandboxio::fs::TransferProgress;

/// Which way the bytes go.
#[derive(Clone, Copy)]
pub(crate) enum Direction {
    Upload,
    Download,
}

/// The bar of one transfer, cleared when dropped (the transfer ended, failed or was
/// interrupted). Hidden unless stdout is a terminal.
pub(crate) struct TransferBar {
    bar: ProgressBar,
    /// Whether the bar may draw: stdout is a terminal.
    shown: bool,
    /// Set by the first report: the bar draws from then on, with its length known (a bar
    /// drawn before would flash `0 B/0 B`).
    started: std::sync::Once,
}

impl TransferBar {
    /// A bar labelled `label`.
    pub(crate) fn new(direction: Direction, label: &str) -> Self {
        let template = match direction {
            // The length comes with the first report (the library walks the host tree
            // before sending).
            Direction::Upload => "{msg} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta}",
            Direction::Download => "{spinner} {msg} {bytes} {binary_bytes_per_sec} {elapsed}",
        };
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
        bar.set_style(
            ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_message(label.to_owned());
        TransferBar { bar, shown: std::io::stdout().is_terminal(), started: std::sync::Once::new() }
    }

    /// Moves the bar to `progress`: the hook to give `Fs::on_progress` (cheap, never
    /// blocks: indicatif draws at its own rate).
    pub(crate) fn report(&self, progress: TransferProgress) {
        if let Some(total) = progress.total {
            self.bar.set_length(total);
        }
        self.bar.set_position(progress.bytes);
        if self.shown {
            self.started.call_once(|| {
                self.bar.set_draw_target(ProgressDrawTarget::stderr());
                self.bar.enable_steady_tick(Duration::from_millis(100));
            });
        }
    }
}

impl Drop for TransferBar {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}
