//! Tar archive to host: a push-based parser that never holds more than one header (at most
//! [`MAX_ARCHIVE_HEADER`] bytes), never writes more than the download budget, and never
//! writes outside the host target.

use std::fs;
use std::io::{self, Read as _, Write as _};
use std::path::{Component, Path, PathBuf};

use super::host_writer::HostWriter;
use super::progress::TransferMeter;
use super::{host_error, over_budget};
use crate::error::{Error, Result};
use crate::fs::MAX_ARCHIVE_HEADER;

/// Where the parser is in the archive.
enum State {
    /// Collecting a 512-byte header block.
    Header,
    /// Collecting an extension entry (a GNU long name or link, a pax record).
    Extension { kind: u8, left: u64, pad: u64, data: Vec<u8> },
    /// Copying (or skipping, with `None`) an entry's contents.
    Body { out: Option<(fs::File, PathBuf)>, left: u64, pad: u64 },
    /// Past the end-of-archive block: what follows is padding, counted and dropped.
    Trailer { seen: u64 },
}

/// Unpacks a tar stream of sandbox path `abs` into `host` as it arrives (push-based,
/// so any transport can feed it). Every entry name must stay under the archive's
/// first entry (no `..`, no absolute name); links and special files are skipped; hard
/// links are copies of a file this download created; every byte pushed, and every
/// byte a hard-link copy writes, is charged to `budget`, checked *before* an entry is
/// written from its header's size, so an entry over the budget writes nothing.
pub(crate) struct Unpacker {
    abs: String,
    host: PathBuf,
    budget: u64,
    used: u64,
    state: State,
    block: Vec<u8>,
    root: Option<PathBuf>,
    long_name: Option<Vec<u8>>,
    long_link: Option<Vec<u8>>,
    writer: HostWriter,
    backend: &'static str,
    meter: TransferMeter,
}

fn malformed(backend: &str, abs: &str, why: &str) -> Error {
    Error::provider_message(backend, format!("the archive of {abs}: {why}"))
}

/// The most padding accepted after the end-of-archive block.
const MAX_TRAILER: u64 = 1024 * 1024;

fn padding(size: u64) -> u64 {
    (512 - size % 512) % 512
}

/// Only plain components: nothing that could leave the target.
fn plain(name: &Path) -> bool {
    name.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// Takes the next bytes of an entry from `data`: at most `left` of its contents, then at
/// most `pad` of the padding after them, both counted down by what was taken. Returns the
/// contents taken and what follows the part taken.
fn take_entry<'a>(data: &'a [u8], left: &mut u64, pad: &mut u64) -> (&'a [u8], &'a [u8]) {
    let take = usize::try_from((*left).min(data.len() as u64)).unwrap_or(data.len());
    let (body, rest) = data.split_at(take);
    *left -= take as u64;
    let skip = usize::try_from((*pad).min(rest.len() as u64)).unwrap_or(rest.len());
    *pad -= skip as u64;
    (body, &rest[skip..])
}

fn path_of(bytes: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt as _;
    let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
    PathBuf::from(std::ffi::OsStr::from_bytes(&bytes[..end]))
}

impl Unpacker {
    /// An unpacker counting the file bytes it writes into `meter`.
    pub(crate) fn new(
        backend: &'static str,
        abs: &str,
        host: &Path,
        budget: u64,
        meter: TransferMeter,
    ) -> Self {
        Unpacker {
            abs: abs.to_owned(),
            host: host.to_path_buf(),
            budget,
            used: 0,
            state: State::Header,
            block: Vec::with_capacity(512),
            root: None,
            long_name: None,
            long_link: None,
            writer: HostWriter::new(host),
            backend,
            meter,
        }
    }

    fn charge(&mut self, bytes: u64) -> Result<()> {
        super::charge(&mut self.used, bytes, self.budget, &self.abs)
    }

    /// Feeds the next bytes of the archive.
    pub(crate) fn push(&mut self, mut data: &[u8]) -> Result<()> {
        while !data.is_empty() {
            let before = data.len();
            match &mut self.state {
                State::Header => {
                    let n = (512 - self.block.len()).min(data.len());
                    self.block.extend_from_slice(&data[..n]);
                    data = &data[n..];
                    if self.block.len() == 512 {
                        let block = std::mem::replace(&mut self.block, Vec::with_capacity(512));
                        self.header(&block)?;
                    }
                }
                State::Extension { left, pad, data: kept, .. } => {
                    let (body, rest) = take_entry(data, left, pad);
                    kept.extend_from_slice(body);
                    data = rest;
                }
                State::Body { out, left, pad } => {
                    let (body, rest) = take_entry(data, left, pad);
                    if let Some((file, path)) = out {
                        file.write_all(body).map_err(|e| host_error(path, e))?;
                        self.meter.add(body.len() as u64);
                    }
                    data = rest;
                }
                State::Trailer { seen } => {
                    // `tar` pads to its record size (10 KiB for GNU tar); more is junk.
                    *seen += data.len() as u64;
                    if *seen > MAX_TRAILER {
                        return Err(malformed(self.backend, &self.abs, "junk after the end of the archive"));
                    }
                    data = &[];
                }
            }
            // An entry whose contents and padding are all in ends here.
            self.settle()?;
            self.charge((before - data.len()) as u64)?;
        }
        Ok(())
    }

    fn extension(&mut self, kind: u8, data: &[u8]) -> Result<()> {
        match kind {
            b'L' => self.long_name = Some(data.to_vec()),
            b'K' => self.long_link = Some(data.to_vec()),
            b'x' => {
                // Records `<len> <key>=<value>\n`; only the names matter here.
                let mut rest = data;
                while !rest.is_empty() {
                    let bad = || malformed(self.backend, &self.abs, "a malformed pax record");
                    let space = rest.iter().position(|b| *b == b' ').ok_or_else(bad)?;
                    let len: usize = std::str::from_utf8(&rest[..space])
                        .ok()
                        .and_then(|s| s.parse().ok())
                        .ok_or_else(bad)?;
                    if len <= space + 1 || len > rest.len() {
                        return Err(bad());
                    }
                    let record = &rest[space + 1..len - 1];
                    rest = &rest[len..];
                    if let Some(value) = record.strip_prefix(b"path=") {
                        self.long_name = Some(value.to_vec());
                    } else if let Some(value) = record.strip_prefix(b"linkpath=") {
                        self.long_link = Some(value.to_vec());
                    }
                }
            }
            _ => {} // a global pax header: nothing here needs it
        }
        Ok(())
    }

    fn header(&mut self, block: &[u8]) -> Result<()> {
        if block.iter().all(|b| *b == 0) {
            self.state = State::Trailer { seen: 0 };
            return Ok(());
        }
        let header = tar::Header::from_byte_slice(block);
        let stored =
            header.cksum().map_err(|_| malformed(self.backend, &self.abs, "a bad checksum field"))?;
        let sum: u32 = block
            .iter()
            .enumerate()
            .map(|(i, b)| if (148..156).contains(&i) { u32::from(b' ') } else { u32::from(*b) })
            .sum();
        if sum != stored {
            return Err(malformed(self.backend, &self.abs, "a header with a wrong checksum"));
        }
        let size = header.entry_size().map_err(|_| malformed(self.backend, &self.abs, "a bad size field"))?;
        let pad = padding(size);
        let kind = header.entry_type().as_byte();
        if matches!(kind, b'L' | b'K' | b'x' | b'g') {
            if size > MAX_ARCHIVE_HEADER {
                return Err(Error::TooLarge {
                    path: self.abs.clone(),
                    limit: MAX_ARCHIVE_HEADER,
                    what: "the size of one archive header from the sandbox (a long name or pax record)"
                        .to_owned(),
                });
            }
            self.state = State::Extension { kind, left: size, pad, data: Vec::new() };
            return self.settle();
        }
        if matches!(kind, b'S' | b'V' | b'M' | b'N' | b'D') {
            return Err(malformed(self.backend, &self.abs, "a GNU sparse, volume or dump entry"));
        }
        // Checked from the header, before anything of the entry is written: an entry over
        // the budget writes nothing.
        if self.used.saturating_add(512).saturating_add(size).saturating_add(pad) > self.budget {
            return Err(over_budget(&self.abs, self.budget));
        }
        let name = match self.long_name.take() {
            Some(bytes) => path_of(&bytes),
            None => path_of(&header.path_bytes()),
        };
        let link = match self.long_link.take() {
            Some(bytes) => Some(path_of(&bytes)),
            None => header.link_name_bytes().map(|b| path_of(&b)),
        };
        if !plain(&name) {
            return Err(Error::invalid_input(format!(
                "the archive of {} holds an entry named {}, which would escape the host target",
                self.abs,
                name.display()
            )));
        }
        let rel = match &self.root {
            None => {
                self.root = Some(name.clone());
                PathBuf::new()
            }
            Some(root) => match name.strip_prefix(root) {
                Ok(rel) => rel.to_path_buf(),
                Err(_) => {
                    return Err(Error::invalid_input(format!(
                        "the archive of {} holds {} outside its root {}",
                        self.abs,
                        name.display(),
                        root.display()
                    )));
                }
            },
        };
        let target = if rel.as_os_str().is_empty() { self.host.clone() } else { self.host.join(&rel) };
        let mode = header.mode().unwrap_or(0o644);
        let mut out = None;
        match kind {
            b'5' => self.writer.dir(&target, mode)?,
            b'0' | b'\0' | b'7' => out = Some((self.writer.file(&target, mode)?, target)),
            b'1' => self.hard_link(link.as_deref(), &target, mode, &name)?,
            _ if rel.as_os_str().is_empty() => {
                return Err(Error::invalid_input(format!(
                    "sandbox path {:?} is a link or special file; download never follows links",
                    self.abs
                )));
            }
            _ => tracing::debug!(entry = ?name, "download skips a sandbox link or special file"),
        }
        self.state = State::Body { out, left: size, pad };
        self.settle()
    }

    /// A state with nothing left to read ends at once.
    fn settle(&mut self) -> Result<()> {
        match &self.state {
            State::Body { left: 0, pad: 0, .. } => self.state = State::Header,
            State::Extension { left: 0, pad: 0, .. } => {
                let State::Extension { kind, data, .. } = std::mem::replace(&mut self.state, State::Header)
                else {
                    unreachable!("matched above")
                };
                self.extension(kind, &data)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// A second name of a file this download already wrote: a copy of it, charged to
    /// the budget (a file with 200 names costs 200 times its size, and is refused
    /// when that is over the budget).
    fn hard_link(&mut self, link: Option<&Path>, target: &Path, mode: u32, name: &Path) -> Result<()> {
        let source = link
            .filter(|l| plain(l))
            .and_then(|l| self.root.as_ref().and_then(|r| l.strip_prefix(r).ok()))
            .map(|rel| if rel.as_os_str().is_empty() { self.host.clone() } else { self.host.join(rel) })
            .filter(|src| self.writer.created_file(src));
        let Some(src) = source else {
            tracing::debug!(entry = ?name, "download skips a hard link to a file it did not write");
            return Ok(());
        };
        let meta = fs::symlink_metadata(&src).map_err(|e| host_error(&src, e))?;
        if !meta.is_file() {
            return Ok(());
        }
        self.charge(meta.len())?;
        let mut from = fs::File::open(&src).map_err(|e| host_error(&src, e))?;
        let mut to = self.writer.file(target, mode)?;
        let copied =
            io::copy(&mut (&mut from).take(meta.len()), &mut to).map_err(|e| host_error(target, e))?;
        self.meter.add(copied);
        Ok(())
    }

    /// Ends the archive: it must not stop inside an entry, and must hold the path.
    pub(crate) fn finish(mut self) -> Result<()> {
        match self.state {
            State::Header if self.block.is_empty() => {}
            State::Trailer { .. } => {}
            _ => return Err(malformed(self.backend, &self.abs, "the archive was cut short")),
        }
        if self.root.is_none() {
            return Err(Error::NotFound { path: self.abs.clone() });
        }
        self.writer.keep();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("sbx-unpacker-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn entry(builder: &mut tar::Builder<Vec<u8>>, name: &str, kind: tar::EntryType, data: &[u8]) {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(kind);
        header.set_size(data.len() as u64);
        header.set_mode(0o4777);
        builder.append_data(&mut header, name, data).unwrap();
    }

    fn unpack_in(tar: &[u8], host: &Path, budget: u64, chunk: usize) -> Result<()> {
        let mut unpacker = Unpacker::new("test", "/w/out", host, budget, TransferMeter::none());
        for piece in tar.chunks(chunk) {
            unpacker.push(piece)?;
        }
        unpacker.finish()
    }

    #[test]
    fn unpacks_in_any_chunking_and_masks_new_modes() {
        use std::os::unix::fs::PermissionsExt as _;
        let mut builder = tar::Builder::new(Vec::new());
        entry(&mut builder, "out/", tar::EntryType::Directory, b"");
        let long = format!("out/{}", "n".repeat(150));
        entry(&mut builder, &long, tar::EntryType::Regular, b"long name");
        entry(&mut builder, "out/a", tar::EntryType::Regular, &[7u8; 1000]);
        let tar = builder.into_inner().unwrap();
        for chunk in [1, 7, 512, 513, 100_000] {
            let dir = scratch(&format!("ok{chunk}"));
            unpack_in(&tar, &dir.join("o"), 1 << 20, chunk).unwrap();
            assert_eq!(fs::read(dir.join("o").join("n".repeat(150))).unwrap(), b"long name");
            assert_eq!(fs::read(dir.join("o/a")).unwrap(), vec![7u8; 1000]);
            let mode = fs::metadata(dir.join("o/a")).unwrap().permissions().mode() & 0o7777;
            assert_eq!(mode & !0o755, 0, "{mode:o}");
            let _ = fs::remove_dir_all(dir);
        }
    }

    #[test]
    fn the_meter_counts_file_contents_and_link_copies_only() {
        let mut builder = tar::Builder::new(Vec::new());
        entry(&mut builder, "out/", tar::EntryType::Directory, b"");
        let long = format!("out/{}", "n".repeat(150)); // a GNU long-name entry: not counted
        entry(&mut builder, &long, tar::EntryType::Regular, b"long name");
        entry(&mut builder, "out/a", tar::EntryType::Regular, &[7u8; 1000]);
        entry(&mut builder, "out/s", tar::EntryType::Symlink, b""); // skipped: not counted
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Link);
        header.set_size(0);
        builder.append_link(&mut header, "out/l", "out/a").unwrap(); // a copy: counted
        let tar = builder.into_inner().unwrap();
        assert!(tar.len() > 4 * 512, "the archive is bigger than its file contents");
        for chunk in [1, 511, 4096] {
            let dir = scratch(&format!("meter{chunk}"));
            let meter = TransferMeter::counting();
            let mut unpacker = Unpacker::new("test", "/w/out", &dir.join("o"), 1 << 20, meter.clone());
            for piece in tar.chunks(chunk) {
                unpacker.push(piece).unwrap();
            }
            unpacker.finish().unwrap();
            assert_eq!(meter.bytes(), 9 + 1000 + 1000, "chunks of {chunk}");
            let _ = fs::remove_dir_all(dir);
        }
    }

    #[test]
    fn a_huge_long_name_header_is_too_large_before_it_is_read() {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::GNULongName);
        header.set_size(3 << 30);
        header.as_gnu_mut().unwrap().name[..13].copy_from_slice(b"././@LongLink");
        header.set_cksum();
        let dir = scratch("longname");
        let mut unpacker = Unpacker::new("test", "/w/out", &dir.join("o"), 1 << 40, TransferMeter::none());
        let err = unpacker.push(header.as_bytes()).unwrap_err();
        assert_eq!(err.code(), crate::ErrorCode::TooLarge, "{err}");
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn over_budget_writes_nothing_and_removes_what_it_created() {
        let mut builder = tar::Builder::new(Vec::new());
        entry(&mut builder, "out/", tar::EntryType::Directory, b"");
        entry(&mut builder, "out/small", tar::EntryType::Regular, b"x");
        entry(&mut builder, "out/big", tar::EntryType::Regular, &vec![0u8; 100_000]);
        let tar = builder.into_inner().unwrap();
        let dir = scratch("budget");
        let err = unpack_in(&tar, &dir.join("o"), 50_000, 4096).unwrap_err();
        assert_eq!(err.code(), crate::ErrorCode::TooLarge, "{err}");
        assert!(!dir.join("o").exists(), "what the download created is removed");
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn hard_links_are_charged_copies() {
        let mut builder = tar::Builder::new(Vec::new());
        entry(&mut builder, "out/", tar::EntryType::Directory, b"");
        entry(&mut builder, "out/f", tar::EntryType::Regular, &[1u8; 10_000]);
        for i in 0..20 {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(tar::EntryType::Link);
            header.set_size(0);
            builder.append_link(&mut header, format!("out/l{i}"), "out/f").unwrap();
        }
        let tar = builder.into_inner().unwrap();
        let dir = scratch("links");
        let err = unpack_in(&tar, &dir.join("o"), 100_000, 4096).unwrap_err();
        assert_eq!(err.code(), crate::ErrorCode::TooLarge, "{err}");
        let dir2 = scratch("links-ok");
        unpack_in(&tar, &dir2.join("o"), 1 << 20, 4096).unwrap();
        assert_eq!(fs::read(dir2.join("o/l19")).unwrap(), vec![1u8; 10_000]);
        let _ = fs::remove_dir_all(dir);
        let _ = fs::remove_dir_all(dir2);
    }

    #[test]
    fn a_host_link_in_the_target_is_never_written_through() {
        let dir = scratch("hostlink");
        let outside = dir.join("outside");
        fs::create_dir_all(&outside).unwrap();
        fs::write(outside.join("passwd"), "host").unwrap();
        fs::create_dir_all(dir.join("o")).unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("o/sub")).unwrap();
        let mut builder = tar::Builder::new(Vec::new());
        entry(&mut builder, "out/", tar::EntryType::Directory, b"");
        // No entry for `out/sub/`: straight to a file below it.
        entry(&mut builder, "out/sub/passwd", tar::EntryType::Regular, b"evil");
        entry(&mut builder, "out/sub/new", tar::EntryType::Regular, b"evil");
        let tar = builder.into_inner().unwrap();
        let err = unpack_in(&tar, &dir.join("o"), 1 << 20, 512).unwrap_err();
        assert_eq!(err.code(), crate::ErrorCode::InvalidInput, "{err}");
        assert_eq!(fs::read_to_string(outside.join("passwd")).unwrap(), "host");
        assert!(!outside.join("new").exists());
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn junk_after_the_end_of_the_archive_is_bounded() {
        let mut builder = tar::Builder::new(Vec::new());
        entry(&mut builder, "out", tar::EntryType::Regular, b"x");
        let mut tar = builder.into_inner().unwrap();
        tar.extend(std::iter::repeat_n(0u8, 2 << 20));
        let dir = scratch("junk");
        assert!(unpack_in(&tar, &dir.join("o"), 1 << 30, 65536).is_err());
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn escaping_names_and_cut_archives_are_refused() {
        for hostile in ["out/../../escaped", "/etc/escaped", "other/escaped"] {
            let mut builder = tar::Builder::new(Vec::new());
            entry(&mut builder, "out/", tar::EntryType::Directory, b"");
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(tar::EntryType::Regular);
            header.set_size(1);
            let bytes = hostile.as_bytes();
            header.as_old_mut().name[..bytes.len()].copy_from_slice(bytes);
            header.set_cksum();
            builder.append(&header, &b"x"[..]).unwrap();
            let tar = builder.into_inner().unwrap();
            let dir = scratch("escape");
            let err = unpack_in(&tar, &dir.join("o"), 1 << 20, 512).unwrap_err();
            assert_eq!(err.code(), crate::ErrorCode::InvalidInput, "{hostile}: {err}");
            assert!(!dir.join("escaped").exists());
            let _ = fs::remove_dir_all(dir);
        }
        let mut builder = tar::Builder::new(Vec::new());
        entry(&mut builder, "out", tar::EntryType::Regular, &[1u8; 2000]);
        let tar = builder.into_inner().unwrap();
        let dir = scratch("cut");
        assert!(unpack_in(&tar[..1200], &dir.join("o"), 1 << 20, 512).is_err());
        assert!(!dir.join("o").exists());
        let _ = fs::remove_dir_all(dir);
    }
}
