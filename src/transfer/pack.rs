//! Host tree to tar archive: built file by file from disk, never following a host link, so an
//! upload holds one buffer whatever its size.

use std::fs;
use std::io::{self, Read};
use std::path::Path;

use super::progress::TransferMeter;
use super::{host_error, sorted_names};
use crate::error::{Error, Result};

/// A reader that yields exactly `left` bytes or fails: a host file that shrinks or
/// grows while it is archived never corrupts the archive.
struct Exactly<'m, R> {
    inner: io::Take<R>,
    left: u64,
    meter: &'m TransferMeter,
}

impl<R: Read> Read for Exactly<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && self.left > 0 && !buf.is_empty() {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the file shrank while uploading"));
        }
        self.left -= n as u64;
        self.meter.add(n as u64);
        Ok(n)
    }
}

/// Appends the host tree at `host` to `builder` under the archive name `name`, never
/// following links (a host link or special file is skipped), files streamed from disk
/// (so an upload holds one buffer, whatever the size). File bytes are counted into
/// `meter` as they are read into the archive.
pub(crate) fn append_host_tree<W: io::Write>(
    builder: &mut tar::Builder<W>,
    host: &Path,
    name: &str,
    backend: &str,
    meter: &TransferMeter,
) -> Result<()> {
    use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
    let meta = fs::symlink_metadata(host).map_err(|e| host_error(host, e))?;
    let mut header = tar::Header::new_gnu();
    header.set_mode(meta.permissions().mode() & 0o777);
    header.set_mtime(meta.mtime().try_into().unwrap_or(0));
    let tar_err = |e| Error::provider(backend, format!("archiving {}", host.display()), e);
    if meta.is_dir() {
        header.set_entry_type(tar::EntryType::Directory);
        header.set_size(0);
        builder.append_data(&mut header, format!("{name}/"), io::empty()).map_err(tar_err)?;
        for child in sorted_names(host)? {
            let Some(child_name) = child.to_str() else {
                return Err(Error::invalid_input(format!("host file name {} is not UTF-8", child.display())));
            };
            append_host_tree(builder, &host.join(&child), &format!("{name}/{child_name}"), backend, meter)?;
        }
    } else if meta.is_file() {
        // Never through a link, and never blocking on a FIFO swapped in after the check.
        let file = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(host)
            .map_err(|e| host_error(host, e))?;
        // The file opened must be the one checked: a link swapped in between is refused.
        let opened = file.metadata().map_err(|e| host_error(host, e))?;
        if (opened.dev(), opened.ino()) != (meta.dev(), meta.ino()) {
            return Err(Error::invalid_input(format!(
                "{} changed while uploading; upload never follows links",
                host.display()
            )));
        }
        header.set_entry_type(tar::EntryType::Regular);
        header.set_size(meta.len());
        let exact = Exactly { inner: file.take(meta.len()), left: meta.len(), meter };
        builder.append_data(&mut header, name, exact).map_err(tar_err)?;
    } else {
        tracing::debug!(path = %host.display(), "upload skips a host link or special file");
    }
    Ok(())
}
