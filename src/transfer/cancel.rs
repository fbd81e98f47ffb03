//! Stopping a transfer's library thread when the operation that started it is dropped.

use crate::error::{Error, Result};

/// Set when the operation that started a thread-side transfer is dropped: the thread
/// then stops at its next step and drops the exec stream, which kills the process.
#[derive(Clone, Default)]
pub(super) struct Cancel(std::sync::Arc<(std::sync::atomic::AtomicBool, event_listener::Event)>);

impl Cancel {
    pub(super) fn cancelled(&self) -> bool {
        self.0.0.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Runs `fut` to completion on this thread unless the operation is cancelled first.
    pub(super) fn run<T>(&self, fut: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        let gone = || Error::provider_message("host", "the operation was cancelled");
        futures_lite::future::block_on(futures_lite::future::or(fut, async {
            loop {
                if self.cancelled() {
                    return Err(gone());
                }
                let listener = self.0.1.listen();
                if self.cancelled() {
                    return Err(gone());
                }
                listener.await;
            }
        }))
    }
}

/// Cancels its [`Cancel`] when dropped (the operation's future went away, or ended).
pub(super) struct CancelOnDrop(pub(super) Cancel);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.0.0.store(true, std::sync::atomic::Ordering::Release);
        self.0.0.1.notify(usize::MAX);
    }
}
