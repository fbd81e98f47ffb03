//! The tar transfers of `local://`: an archive written to, or read from, a shell script run
//! through the sandbox's exec stream, driven on a library thread at a bounded pace.

use std::fs;
use std::io;
use std::path::Path;

use super::cancel::{Cancel, CancelOnDrop};
use super::host_error;
use super::pack::append_host_tree;
use super::progress::TransferMeter;
use super::unpack::Unpacker;
use crate::backend::BackendExecStream;
use crate::error::{Error, Result};

/// Starts a command and returns its exec stream: a sandbox's [`stream`] (or a transport's
/// own, when the backend has more than one).
///
/// [`stream`]: crate::backend::BackendSandbox::stream
pub(crate) trait StartStream:
    FnOnce(crate::exec::Command) -> Result<Box<dyn BackendExecStream>>
{
}

impl<F: FnOnce(crate::exec::Command) -> Result<Box<dyn BackendExecStream>>> StartStream for F {}

/// How much is written to a stream's stdin at once.
const CHUNK: usize = 256 * 1024;

/// The next chunk of `stream`, `None` at its end.
async fn next_chunk(stream: &mut Box<dyn BackendExecStream>) -> Result<Option<crate::exec::OutputChunk>> {
    std::future::poll_fn(|cx| stream.poll_chunk(cx)).await.transpose()
}

/// Drains what a stream has left, keeping at most `stdout_cap` bytes of stdout (more
/// ends the drain at once, `true` returned: the caller drops the stream, which kills
/// the process) and [`STDERR_LIMIT`](crate::backends::file_errors::STDERR_LIMIT) of stderr.
async fn drain(
    stream: &mut Box<dyn BackendExecStream>,
    stdout_cap: u64,
    out: &mut Vec<u8>,
    err: &mut Vec<u8>,
) -> Result<bool> {
    use crate::backends::file_errors::STDERR_LIMIT;
    while let Some(chunk) = next_chunk(stream).await? {
        if chunk.stream == crate::exec::StreamKind::Stdout {
            let room =
                usize::try_from(stdout_cap.saturating_add(1)).unwrap_or(usize::MAX).saturating_sub(out.len());
            out.extend_from_slice(&chunk.data[..chunk.data.len().min(room)]);
            if out.len() as u64 > stdout_cap {
                return Ok(true);
            }
        } else {
            let room = STDERR_LIMIT.saturating_sub(err.len());
            err.extend_from_slice(&chunk.data[..chunk.data.len().min(room)]);
        }
    }
    Ok(false)
}

/// Writes to a stream's stdin in [`CHUNK`]s, from a thread that drives the stream.
struct StdinSink<'a> {
    stream: &'a mut Box<dyn BackendExecStream>,
    buf: Vec<u8>,
    cancel: &'a Cancel,
}

impl StdinSink<'_> {
    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let (stream, buf) = (&mut *self.stream, &self.buf);
        self.cancel.run(stream.write_stdin(buf)).map_err(io::Error::other)?;
        self.buf.clear();
        Ok(())
    }
}

impl io::Write for StdinSink<'_> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(CHUNK - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == CHUNK {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

/// `upload` as one tar stream into [`UNTAR`](super::scripts::UNTAR) run
/// through `sandbox`'s exec stream: the archive is built from the host tree on a
/// library thread, one [`CHUNK`] at a time, so client memory stays flat whatever the
/// size. `dir` is where the archive is extracted, `name` its root entry's name; file
/// bytes are counted into `meter` as they go into the archive.
pub(crate) async fn upload_via_stream(
    start: impl StartStream,
    backend: &'static str,
    host_path: &Path,
    abs: &str,
    (dir, name): (&str, &str),
    meter: TransferMeter,
) -> Result<()> {
    use super::scripts::UNTAR;
    use crate::backends::file_errors::exec_failure;
    let meta = fs::symlink_metadata(host_path).map_err(|e| host_error(host_path, e))?;
    if !(meta.is_dir() || meta.is_file()) {
        return Err(Error::invalid_input(format!(
            "host path {} is a symlink or special file; upload never follows links",
            host_path.display()
        )));
    }
    let command = crate::exec::Command::new("/bin/sh").arg("-c").arg(UNTAR).arg("sandboxio-fs").arg(dir);
    let mut stream = start(command)?;
    let cancel = Cancel::default();
    let _on_drop = CancelOnDrop(cancel.clone());
    let (host, name, abs) = (host_path.to_path_buf(), name.to_owned(), abs.to_owned());
    crate::runtime::unblock(move || {
        let archived = {
            let sink = StdinSink { stream: &mut stream, buf: Vec::with_capacity(CHUNK), cancel: &cancel };
            let mut builder = tar::Builder::new(sink);
            let appended = append_host_tree(&mut builder, &host, &name, backend, &meter);
            // Whatever happened, the archive ends and stdin closes: `tar -x` must see
            // end-of-file, or it waits for more until the deadline.
            let finished = builder.into_inner().and_then(|mut sink| io::Write::flush(&mut sink));
            appended.and(finished.map_err(|e| Error::provider(backend, "sending the archive", e)))
        };
        if cancel.cancelled() {
            return archived;
        }
        let _ = cancel.run(stream.close_stdin());
        let (mut out, mut err) = (Vec::new(), Vec::new());
        cancel.run(drain(&mut stream, 64 * 1024, &mut out, &mut err))?;
        let ran = cancel.run(stream.wait())?;
        // A host error explains a broken upload better than what `tar` said of it.
        archived?;
        if ran.success() { Ok(()) } else { Err(exec_failure(backend, &abs, &err)) }
    })
    .await
}

/// `download` as one tar stream, unpacked by an [`Unpacker`] on a library thread as it
/// arrives (the host's disk bounded by `budget`). `paced`: run
/// [`TAR_PACED`](super::scripts::TAR_PACED), asking for each next chunk only
/// once the last is on disk, for a transport that queues without limit (client memory
/// stays flat); else plain [`TAR`](super::scripts::TAR), for a transport that
/// pushes back on its own (sandboxd's output credit), where `TAR_PACED`'s chunk files in a
/// shared `/tmp` would be a name other commands could plant. File bytes written on the
/// host are counted into `meter`.
pub(crate) async fn download_via_stream(
    start: impl StartStream,
    backend: &'static str,
    abs: &str,
    (dir, name): (&str, &str),
    (host_path, budget): (&Path, u64),
    paced: bool,
    meter: TransferMeter,
) -> Result<()> {
    use super::scripts::{PACE_CHUNK, TAR, TAR_PACED};
    use crate::backends::file_errors::{STDERR_LIMIT, exec_failure};
    /// How many chunks may be in flight: what the host asks for ahead of what it wrote.
    const WINDOW: usize = 4;
    let script = if paced { TAR_PACED } else { TAR };
    let command =
        crate::exec::Command::new("/bin/sh").arg("-c").arg(script).arg("sandboxio-fs").arg(dir).arg(name);
    let mut stream = start(command)?;
    let cancel = Cancel::default();
    let _on_drop = CancelOnDrop(cancel.clone());
    let (host, abs) = (host_path.to_path_buf(), abs.to_owned());
    crate::runtime::unblock(move || {
        // Asks for the first chunks; each chunk unpacked asks for one more, so at most
        // WINDOW chunks are ever queued on the host, however fast the sandbox writes.
        // (A script that has ended refuses the ask: that is not an error.)
        if paced {
            let _ = cancel.run(stream.write_stdin(&[b'\n'; WINDOW]));
        }
        let mut unpacker = Unpacker::new(backend, &abs, &host, budget, meter);
        let mut err = Vec::new();
        let mut since_ask = 0u64;
        // An error here returns at once: the stream is dropped (killing `tar`) and the
        // unpacker removes what it created.
        while let Some(chunk) = cancel.run(next_chunk(&mut stream))? {
            if chunk.stream == crate::exec::StreamKind::Stdout {
                unpacker.push(&chunk.data)?;
                since_ask += chunk.data.len() as u64;
                while paced && since_ask >= PACE_CHUNK {
                    since_ask -= PACE_CHUNK;
                    let _ = cancel.run(stream.write_stdin(b"\n"));
                }
            } else {
                let room = STDERR_LIMIT.saturating_sub(err.len());
                err.extend_from_slice(&chunk.data[..chunk.data.len().min(room)]);
            }
        }
        let ran = cancel.run(stream.wait())?;
        match ran.exit_code() {
            Some(0) => unpacker.finish(),
            Some(3) => Err(Error::NotFound { path: abs }),
            _ => Err(exec_failure(backend, &abs, &err)),
        }
    })
    .await
}
