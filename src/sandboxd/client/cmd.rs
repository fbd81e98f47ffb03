//! One request of a session as its caller holds it: [`Cmd`] takes its events (returning
//! output credit as the caller takes them), sends its stdin and file data within
//! sandboxd's window, and kills the command when dropped before it ended; [`CmdInput`] is
//! its stdin half for another task.

use std::sync::Arc;
use std::task::{Context, Poll};

use event_listener::{Event as Notify, EventListener};

use super::super::proto::{Kind, MAX_CHUNK, MAX_FILE_CHUNK, Message};
use super::{CREDIT_BATCH, Client, Event, YIELD_EVERY, lock};

/// One command of a session. Dropping it before it ended kills it.
pub(crate) struct Cmd {
    pub(super) client: Client,
    pub(super) id: u32,
    /// This request's [`CmdState::notify`](super::CmdState).
    pub(super) notify: Arc<Notify>,
    pub(super) listener: Option<EventListener>,
}

impl std::fmt::Debug for Cmd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("sandboxd::Cmd").field("id", &self.id).finish_non_exhaustive()
    }
}

impl Cmd {
    /// Takes the next event, returning output credit to sandboxd as the caller takes bytes.
    fn take(&self) -> Option<Event> {
        let mut state = lock(&self.client.inner.state);
        let cmd = state.cmds.get_mut(&self.id)?;
        let (event, bytes) = cmd.events.pop_front()?;
        let mut grant = 0;
        if bytes > 0 {
            cmd.queued -= bytes;
            cmd.taken += bytes;
            if cmd.taken >= CREDIT_BATCH && !cmd.finished {
                grant = std::mem::take(&mut cmd.taken);
            }
        }
        drop(state);
        if grant > 0 {
            // A failed send ends the session, which the next take reports as Gone.
            let _ = self
                .client
                .send(self.id, Message::Credit { bytes: u32::try_from(grant).unwrap_or(u32::MAX) });
        }
        Some(event)
    }

    /// The next event; `Poll::Ready(None)` after the last one (`Exit`, `Failed` or `Gone`).
    pub(crate) fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        loop {
            if let Some(event) = self.take() {
                self.listener = None;
                return Poll::Ready(Some(event));
            }
            if self.is_over() {
                return Poll::Ready(None);
            }
            match &mut self.listener {
                None => self.listener = Some(self.notify.listen()),
                Some(l) => {
                    if std::pin::Pin::new(l).poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    self.listener = None;
                }
            }
        }
    }

    /// The next event, `None` after the last one.
    pub(crate) async fn next(&mut self) -> Option<Event> {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }

    fn is_over(&self) -> bool {
        let state = lock(&self.client.inner.state);
        state.cmds.get(&self.id).is_none_or(|c| c.finished && c.events.is_empty())
    }

    /// Sends `data` to the command's stdin (it must have been spawned with a piped stdin),
    /// waiting while sandboxd's window for it is full.
    ///
    /// # Errors
    ///
    /// Why the session or the command ended first.
    pub(crate) async fn write_stdin(&self, data: &[u8]) -> Result<(), String> {
        self.send_window(data, Kind::Stdin, MAX_CHUNK).await
    }

    /// Sends `data` for a file write request, waiting while sandboxd's window is full.
    ///
    /// # Errors
    ///
    /// Why the session ended or the write failed first.
    pub(crate) async fn send_data(&self, data: &[u8]) -> Result<(), String> {
        self.send_window(data, Kind::FsData, MAX_FILE_CHUNK).await
    }

    /// Sends `data` to the command's control channel (it must have been spawned with
    /// `control`), sharing the stdin window.
    ///
    /// # Errors
    ///
    /// Why the session or the command ended first.
    pub(crate) async fn send_control(&self, data: &[u8]) -> Result<(), String> {
        self.send_window(data, Kind::ControlIn, MAX_CHUNK).await
    }

    /// Ends a file write: sandboxd renames the file into place and answers `Done`.
    ///
    /// # Errors
    ///
    /// Why the session ended.
    pub(crate) fn finish(&self) -> Result<(), String> {
        self.client.send(self.id, Message::FsEnd)
    }

    /// Sends `data` in frames of `kind` of at most `chunk` bytes, within the request's window.
    async fn send_window(&self, mut data: &[u8], kind: Kind, chunk: usize) -> Result<(), String> {
        // Bytes sent since this future last let its executor run.
        let mut since_yield = 0;
        while !data.is_empty() {
            // A sandboxd that keeps its window open would let a large write finish inside one
            // poll: the caller's deadline (a timer raced against this future) and its other
            // tasks would wait for all of it. Yield every MiB so that both get their turn.
            if since_yield >= YIELD_EVERY {
                since_yield = 0;
                futures_lite::future::yield_now().await;
            }
            let n = self
                .client
                .wait_on(&self.notify, |s| {
                    if let Some(why) = &s.ended {
                        return Some(Err(why.clone()));
                    }
                    match s.cmds.get_mut(&self.id) {
                        Some(c) if c.finished => Some(Err("the request has ended".to_owned())),
                        Some(c) if c.stdin_window > 0 => {
                            let n = c.stdin_window.min(data.len()).min(chunk);
                            c.stdin_window -= n;
                            Some(Ok(n))
                        }
                        Some(_) => None,
                        None => Some(Err("the request has ended".to_owned())),
                    }
                })
                .await?;
            self.client.send_data(self.id, kind, &data[..n])?;
            data = &data[n..];
            since_yield += n;
        }
        Ok(())
    }

    /// Ends the command's stdin.
    ///
    /// # Errors
    ///
    /// Why the session ended.
    pub(crate) fn close_stdin(&self) -> Result<(), String> {
        self.client.send(self.id, Message::StdinEof)
    }

    /// Sends `signal` to the command; `SIGKILL` (9) ends it and everything it started.
    ///
    /// # Errors
    ///
    /// Why the session ended.
    pub(crate) fn signal(&self, signal: i32) -> Result<(), String> {
        self.client.send(self.id, Message::Signal { signal })
    }
}

impl Cmd {
    /// A handle that writes to this command (stdin, signals) while `next` borrows the
    /// command mutably elsewhere. It does not keep the command alive: dropping the `Cmd`
    /// still kills it.
    pub(crate) fn input(&self) -> CmdInput {
        CmdInput {
            cmd: Cmd {
                client: self.client.clone(),
                id: self.id,
                notify: Arc::clone(&self.notify),
                listener: None,
            },
        }
    }
}

/// The writing half of a [`Cmd`] (see [`Cmd::input`]).
pub(crate) struct CmdInput {
    cmd: Cmd,
}

impl std::fmt::Debug for CmdInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("sandboxd::CmdInput").field("id", &self.cmd.id).finish_non_exhaustive()
    }
}

impl std::ops::Deref for CmdInput {
    type Target = Cmd;

    fn deref(&self) -> &Cmd {
        &self.cmd
    }
}

impl Drop for CmdInput {
    fn drop(&mut self) {
        // Only the `Cmd` itself ends the command: make the inner handle's drop a no-op.
        self.cmd.id = 0;
    }
}

impl Drop for Cmd {
    fn drop(&mut self) {
        if self.id == 0 {
            return;
        }
        let finished = lock(&self.client.inner.state).cmds.remove(&self.id).is_none_or(|c| c.finished);
        if !finished {
            let _ = self.client.send(self.id, Message::Signal { signal: 9 });
        }
    }
}
