//! A remote backend's streamed command as a [`BackendExecStream`]: output, stdin and the
//! exit go through its pump task ([`Pumped`]); `terminate` stops the pump and kills the
//! command the adapter's way (a sandbox already gone has nothing left to kill).

use std::task::{Context, Poll};

use super::kill_guard::KillFuture;
use crate::backend::{BackendExecStream, BoxFuture};
use crate::backends::common::portal::Portal;
use crate::backends::common::pumped::Pumped;
use crate::error::{Error, Result};
use crate::exec::{ExecResult, OutputChunk};

/// How `terminate` kills the command (its id, or what the pump learnt since, captured).
pub(crate) type Terminate = Box<dyn Fn() -> KillFuture + Send>;

pub(crate) struct RemoteExecStream {
    /// The stream's name and its command's id, for `Debug`.
    name: &'static str,
    id: String,
    portal: &'static Portal,
    pumped: Pumped,
    terminate: Terminate,
}

impl RemoteExecStream {
    /// The stream of a pump already running in `pumped`.
    pub(crate) fn new(
        name: &'static str,
        id: String,
        portal: &'static Portal,
        pumped: Pumped,
        terminate: Terminate,
    ) -> Self {
        RemoteExecStream { name, id, portal, pumped, terminate }
    }
}

impl std::fmt::Debug for RemoteExecStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(self.name)
            .field("id", &self.id)
            .field("ended", &self.pumped.ended())
            .finish_non_exhaustive()
    }
}

impl BackendExecStream for RemoteExecStream {
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<OutputChunk>>> {
        self.pumped.poll_chunk(cx)
    }

    fn write_stdin<'a>(&'a mut self, data: &'a [u8]) -> BoxFuture<'a, Result<()>> {
        self.pumped.write_stdin(data)
    }

    fn close_stdin(&mut self) -> BoxFuture<'_, Result<()>> {
        self.pumped.close_stdin()
    }

    fn wait(&mut self) -> BoxFuture<'_, Result<ExecResult>> {
        Box::pin(self.pumped.wait())
    }

    fn terminate(&mut self) -> BoxFuture<'_, Result<()>> {
        self.pumped.stop();
        let kill = (self.terminate)();
        Box::pin(self.portal.spawn(async move {
            match kill.await {
                Ok(()) | Err(Error::SandboxGone { .. }) => Ok(()),
                Err(e) => Err(e),
            }
        }))
    }
}
