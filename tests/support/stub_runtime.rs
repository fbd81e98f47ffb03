//! The runtime a protocol stub (`e2b_stub`, `modal_stub`) serves on: its own, so a test's
//! executor (or none) does not matter, shut down without waiting when the stub goes (a
//! stream a test left open must not hold the test up).

/// A stub's runtime: two worker threads named after the stub.
pub struct StubRuntime(Option<tokio::runtime::Runtime>);

impl StubRuntime {
    /// Starts the runtime.
    ///
    /// # Panics
    ///
    /// When the host cannot start its threads.
    pub fn start(thread_name: &str) -> StubRuntime {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name(thread_name)
            .enable_all()
            .build()
            .expect("the stub's runtime");
        StubRuntime(Some(runtime))
    }
}

impl std::ops::Deref for StubRuntime {
    type Target = tokio::runtime::Runtime;

    fn deref(&self) -> &tokio::runtime::Runtime {
        self.0.as_ref().expect("the stub's runtime lives as long as the stub")
    }
}

impl Drop for StubRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}
