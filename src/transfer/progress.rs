//! Byte progress of an upload or a download: the backend counts file bytes into a
//! [`TransferMeter`] as they move (on whatever thread moves them), and the core reads the
//! count at a bounded rate on the task that awaits the call, handing it to the caller's
//! callback as a [`TransferProgress`]. The callback therefore never runs on a backend's
//! thread, and a transfer without a callback carries an empty meter: no counting, no timer,
//! no walk of the host tree.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::error::Result;

/// The least time between two calls of a progress callback during a transfer.
pub(crate) const REPORT_EVERY: Duration = Duration::from_millis(50);

/// How far an upload or a download has got, handed to the callback set with
/// [`Fs::on_progress`](crate::fs::Fs::on_progress).
///
/// What is counted is the same on every backend: the bytes of regular-file contents moved
/// so far (an upload: read from host files and sent; a download: written to host files,
/// a hard-link copy included). Directory entries, archive headers and padding, and skipped
/// links and special files count for nothing, so a finished transfer reports the sum of
/// the sizes of the files it copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct TransferProgress {
    /// File bytes moved so far; never decreases from one call to the next.
    pub bytes: u64,
    /// The file bytes the transfer expects to move, when known before it starts: an upload
    /// sums the sizes of the regular files in the host tree (walked first, links not
    /// followed); a download does not know it (`None`). A completed upload of a tree
    /// nothing changed meanwhile ends with `bytes == total`; a file that changes size
    /// after the walk makes them differ.
    pub total: Option<u64>,
    /// `true` on the one last call, made once the transfer has completed successfully,
    /// with the final count. A transfer that fails, times out or is dropped gets no last
    /// call.
    pub done: bool,
}

/// Where a backend counts the file bytes an upload or a download has moved, for the
/// caller's progress callback ([`TransferProgress`] says what counts).
///
/// Passed to [`BackendSandbox::upload`](crate::backend::BackendSandbox::upload) and
/// [`BackendSandbox::download`](crate::backend::BackendSandbox::download). A backend calls
/// [`TransferMeter::add`] as file contents move, from any thread; it is a relaxed atomic
/// add, or nothing at all when the caller set no callback ([`TransferMeter::is_active`]
/// is `false`). A backend that never calls it still works: the caller then sees no
/// bytes until the end.
#[derive(Debug, Clone, Default)]
pub struct TransferMeter(Option<Arc<AtomicU64>>);

impl TransferMeter {
    /// A meter that counts nothing: for a transfer nobody watches (and for tests of an
    /// adapter).
    #[must_use]
    pub fn none() -> Self {
        TransferMeter(None)
    }

    /// A meter that counts.
    pub(crate) fn counting() -> Self {
        TransferMeter(Some(Arc::new(AtomicU64::new(0))))
    }

    /// Whether anyone reads this meter: a backend may skip work done only to count.
    #[must_use]
    pub fn is_active(&self) -> bool {
        self.0.is_some()
    }

    /// Counts `bytes` more file bytes moved.
    pub fn add(&self, bytes: u64) {
        if let Some(count) = &self.0 {
            count.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// The bytes counted so far.
    pub(crate) fn bytes(&self) -> u64 {
        self.0.as_ref().map_or(0, |count| count.load(Ordering::Relaxed))
    }
}

/// A progress callback as [`Fs`](crate::fs::Fs) keeps it: borrowed, so the handle stays `Copy`
/// and the callback needs no `'static`; `Sync`, so the call's future stays `Send`.
#[derive(Clone, Copy)]
pub(crate) struct OnProgress<'a>(pub(crate) &'a (dyn Fn(TransferProgress) + Sync));

impl std::fmt::Debug for OnProgress<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnProgress(..)")
    }
}

/// The sum of the sizes of the regular files in the host tree at `root`, links not
/// followed (what an upload of it sends, as [`TransferProgress`] counts). An entry that
/// cannot be read counts for nothing here: the upload itself reports it.
pub(crate) fn host_tree_bytes(root: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(root) else { return 0 };
    if meta.is_file() {
        return meta.len();
    }
    if !meta.is_dir() {
        return 0;
    }
    let Ok(entries) = std::fs::read_dir(root) else { return 0 };
    entries.filter_map(std::result::Result::ok).map(|entry| host_tree_bytes(&entry.path())).sum()
}

/// Runs the transfer `op`, which counts into `meter`, calling `report` on this task:
/// once at the start (`bytes` 0), then at most once per [`REPORT_EVERY`] when the count
/// has moved, and once more with `done` when `op` has succeeded.
pub(crate) async fn reported<T>(
    op: impl Future<Output = Result<T>>,
    meter: &TransferMeter,
    total: Option<u64>,
    report: OnProgress<'_>,
) -> Result<T> {
    let at = |bytes, done| TransferProgress { bytes, total, done };
    (report.0)(at(0, false));
    let ticks = async {
        let mut last = 0;
        loop {
            futures_timer::Delay::new(REPORT_EVERY).await;
            let bytes = meter.bytes();
            if bytes != last {
                last = bytes;
                (report.0)(at(bytes, false));
            }
        }
    };
    let out = futures_lite::future::or(op, ticks).await?;
    (report.0)(at(meter.bytes(), true));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_meter_counts_nothing_and_a_counting_one_sums() {
        let none = TransferMeter::none();
        none.add(5);
        assert!(!none.is_active());
        assert_eq!(none.bytes(), 0);
        let counting = TransferMeter::counting();
        let clone = counting.clone();
        clone.add(5);
        counting.add(7);
        assert!(counting.is_active());
        assert_eq!(counting.bytes(), 12);
    }

    #[test]
    fn reports_start_and_end_and_nothing_after_a_failure() {
        let calls = std::sync::Mutex::new(Vec::new());
        let record = |p: TransferProgress| calls.lock().unwrap().push(p);
        let meter = TransferMeter::counting();
        let ok = futures_lite::future::block_on(reported(
            async {
                meter.add(10);
                Ok(())
            },
            &meter,
            Some(10),
            OnProgress(&record),
        ));
        assert!(ok.is_ok());
        let seen = std::mem::take(&mut *calls.lock().unwrap());
        assert_eq!(
            seen,
            [
                TransferProgress { bytes: 0, total: Some(10), done: false },
                TransferProgress { bytes: 10, total: Some(10), done: true }
            ]
        );
        let failed = futures_lite::future::block_on(reported(
            async { Err::<(), _>(crate::Error::invalid_input("no")) },
            &meter,
            None,
            OnProgress(&record),
        ));
        assert!(failed.is_err());
        let seen = calls.lock().unwrap();
        assert_eq!(seen.len(), 1, "a start call and no last call: {seen:?}");
        assert!(!seen[0].done);
    }
}
