//! File operations, done by sandboxd inside the sandbox, in the sandbox's own view of its
//! files, as the sandbox's user.
//!
//! Paths are resolved by the kernel in the sandbox's mount namespace, so a symbolic link can
//! only lead somewhere inside the sandbox. When sandboxd runs as root and the session names a
//! user, every operation runs with that user's filesystem identity (`setfsuid`/`setfsgid`,
//! and the user's group as the only supplementary group), so the kernel's permission checks
//! are the user's: root's file capabilities are dropped while the identity is switched.
//! Reads and listings are jobs that send data only within the host's credit.
//!
//! A write acts as the user's own `>` would, without its hazards: an existing regular file
//! (a link to one followed) is truncated and written in place, so it keeps its mode, owner
//! and hard links, and a file the user may not write is refused; a new file is written to an
//! exclusive temporary file with an unguessable name in the target's directory and renamed
//! into place at the end, so a reader never sees half of it and nothing planted at a name
//! can divert or block it. Special files (FIFOs, devices, sockets) are refused before they
//! are opened for reading or writing, and checked again on the opened descriptor.
//!
//! sandboxd never serves its own process files (`/proc/self`, `/proc/<its pid>`): the kernel
//! lets a process read and write its own `/proc` entries where it would refuse anyone else,
//! so a link the code plants there must not make sandboxd act on itself.

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::fs::{self, DirEntry, File, OpenOptions, ReadDir};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::proto::{Entry, Failure, FileType, MAX_FILE_CHUNK, Message};
use crate::sys;

/// `O_NOFOLLOW`: the generic ABI value (`x86_64`, `aarch64`).
const O_NOFOLLOW: i32 = 0o400_000;
/// `O_NONBLOCK`: opening a fifo must not wait for a writer.
const O_NONBLOCK: i32 = 0o4000;
/// `O_NOCTTY`: opening a terminal must not make it sandboxd's.
const O_NOCTTY: i32 = 0o400;

/// The most entries a listing job reads ahead of the host's credit.
const LIST_AHEAD: usize = 256;

/// A file request that takes more than one frame.
pub enum Job {
    /// Sending a file's bytes.
    Read { file: File, limit: u64, sent: u64 },
    /// Sending a directory's entries.
    List { dir: ReadDir, pending: VecDeque<Entry> },
    /// Receiving a file's bytes.
    Write(Sink),
    /// A write that failed and was answered: its remaining data frames are dropped.
    Failed,
}

/// Where a write's bytes go, and what its end does.
pub struct Sink {
    file: File,
    /// The temporary file of a new file, renamed to `dest` at the end; `None` when the
    /// bytes go straight into the target (an existing file, or a dangling link's target).
    temp: Option<PathBuf>,
    dest: PathBuf,
    /// The mode a file this write created gets at the end (it stays private until then).
    chmod: Option<u32>,
}

/// A failure as the protocol reports it.
pub fn failure(e: &io::Error) -> Message {
    let failure = match e.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory => Failure::NotFound,
        io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem => Failure::PermissionDenied,
        io::ErrorKind::IsADirectory => Failure::IsADirectory,
        io::ErrorKind::InvalidInput | io::ErrorKind::InvalidFilename => Failure::InvalidInput,
        io::ErrorKind::FileTooLarge => Failure::TooLarge,
        _ => Failure::Io,
    };
    Message::Failed { failure, message: e.to_string().into_bytes() }
}

fn refuse(failure: Failure, message: &str) -> Message {
    Message::Failed { failure, message: message.as_bytes().to_vec() }
}

fn path_of(bytes: &[u8]) -> Result<PathBuf, Message> {
    if bytes.is_empty() || bytes.contains(&0) || bytes[0] != b'/' {
        return Err(refuse(Failure::InvalidInput, "the path must be absolute and hold no NUL byte"));
    }
    Ok(PathBuf::from(OsStr::from_bytes(bytes)))
}

/// Runs `f` with the sandbox user's filesystem identity, when sandboxd is root and a user is
/// set; otherwise as sandboxd. The identity is restored whatever `f` returns.
pub fn as_user<T>(user: Option<(u32, u32)>, f: impl FnOnce() -> T) -> T {
    match user {
        Some((uid, gid)) if sys::is_root() => {
            let saved = sys::enter_fs_identity(uid, gid);
            let out = f();
            sys::leave_fs_identity(&saved);
            out
        }
        _ => f(),
    }
}

/// Refuses what a read or write must not open: a directory (`IsADirectory`) or anything
/// but a regular file (`InvalidInput`).
fn regular(meta: &fs::Metadata) -> Result<(), Message> {
    if meta.is_dir() {
        Err(refuse(Failure::IsADirectory, "the path is a directory"))
    } else if meta.is_file() {
        Ok(())
    } else {
        Err(refuse(Failure::InvalidInput, "the path is not a regular file (a FIFO, device or socket)"))
    }
}

/// Refuses a descriptor that names one of sandboxd's own process files (what the kernel
/// shows as `/proc/<sandboxd's pid>/...` for it, whichever link led there).
fn not_sandboxd_itself(file: &File) -> Result<(), Message> {
    let Ok(target) = fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())) else {
        // No /proc to ask: then there are no process files to reach either.
        return Ok(());
    };
    if target.starts_with(format!("/proc/{}", sys::pid())) {
        return Err(refuse(Failure::PermissionDenied, "the path is one of sandboxd's own process files"));
    }
    Ok(())
}

/// Opens an existing regular file (links followed) with `options`: its kind is checked
/// before it is opened (a device is never opened) and again on the descriptor (a swap
/// between the two is refused too).
fn open_regular(path: &Path, options: &mut OpenOptions) -> Result<File, Message> {
    regular(&fs::metadata(path).map_err(|e| failure(&e))?)?;
    let file = options.custom_flags(O_NONBLOCK | O_NOCTTY).open(path).map_err(|e| failure(&e))?;
    regular(&file.metadata().map_err(|e| failure(&e))?)?;
    not_sandboxd_itself(&file)?;
    Ok(file)
}

/// Opens a regular file for a read job; anything else is refused before a byte is read.
pub fn start_read(path: &[u8], limit: u64, user: Option<(u32, u32)>) -> Result<Job, Message> {
    let path = path_of(path)?;
    let file = as_user(user, || open_regular(&path, OpenOptions::new().read(true)))?;
    let len = file.metadata().map_err(|e| failure(&e))?.len();
    if len > limit {
        return Err(refuse(
            Failure::TooLarge,
            &format!("the file holds {len} bytes, over the {limit}-byte limit"),
        ));
    }
    Ok(Job::Read { file, limit, sent: 0 })
}

/// Starts a listing job; a path that is not a directory is `InvalidInput`.
pub fn start_list(path: &[u8], user: Option<(u32, u32)>) -> Result<Job, Message> {
    let path = path_of(path)?;
    as_user(user, || {
        if fs::metadata(&path).is_ok_and(|m| !m.is_dir()) {
            return Err(refuse(Failure::InvalidInput, "the path is not a directory"));
        }
        let dir = fs::read_dir(&path).map_err(|e| failure(&e))?;
        Ok(Job::List { dir, pending: VecDeque::new() })
    })
}

/// Starts a write job: parents created, then the target written in place (an existing file,
/// or the target of a dangling link, as the user's `>` would) or a new file started under
/// an exclusive temporary name next to it.
pub fn start_write(path: &[u8], mode: u32, user: Option<(u32, u32)>) -> Result<Job, Message> {
    let dest = path_of(path)?;
    let (Some(dir), Some(name)) = (dest.parent(), dest.file_name()) else {
        return Err(refuse(Failure::InvalidInput, "the path names no file"));
    };
    let mode = mode & 0o7777;
    as_user(user, || {
        // A parent that cannot be made shows as the open's own error below.
        let _ = fs::DirBuilder::new().recursive(true).create(dir);
        match fs::metadata(&dest) {
            Ok(_) => {
                let file = open_regular(&dest, OpenOptions::new().write(true))?;
                file.set_len(0).map_err(|e| failure(&e))?;
                Ok(Job::Write(Sink { file, temp: None, dest: dest.clone(), chmod: None }))
            }
            Err(e)
                if e.kind() == io::ErrorKind::NotFound
                    && fs::symlink_metadata(&dest).is_ok_and(|m| m.file_type().is_symlink()) =>
            {
                // A dangling link: its target is created, as `>` would.
                let file = OpenOptions::new()
                    .write(true)
                    .create(true)
                    .mode(0o600)
                    .custom_flags(O_NONBLOCK | O_NOCTTY)
                    .open(&dest)
                    .map_err(|e| failure(&e))?;
                regular(&file.metadata().map_err(|e| failure(&e))?)?;
                not_sandboxd_itself(&file)?;
                Ok(Job::Write(Sink { file, temp: None, dest: dest.clone(), chmod: Some(mode) }))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let mut temp_name = b".".to_vec();
                temp_name.extend_from_slice(name.as_bytes());
                temp_name.extend_from_slice(format!(".sandboxd-{}", random_hex()).as_bytes());
                let temp = dir.join(OsStr::from_bytes(&temp_name));
                // Private (0600) until it is complete and renamed.
                let file = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .custom_flags(O_NOFOLLOW)
                    .open(&temp)
                    .map_err(|e| failure(&e))?;
                Ok(Job::Write(Sink { file, temp: Some(temp), dest: dest.clone(), chmod: Some(mode) }))
            }
            Err(e) => Err(failure(&e)),
        }
    })
}

/// The file systems whose files sandboxd hands over to the host (`FsOpenRead`,
/// `FsOpenWrite`): disk and memory file systems, where a file's bytes are the same whoever
/// reads or writes them. Anything else (`/proc`, `/sys`, a FUSE mount: contents that can
/// depend on who reads, or a read that can wait on a process) is streamed by sandboxd.
const PASSABLE_FS: [u64; 8] = [
    0x0102_1994, // tmpfs
    0xef53,      // ext2, ext3, ext4
    0x794c_7630, // overlayfs
    0x5846_5342, // xfs
    0x9123_683e, // btrfs
    0xf2f5_2010, // f2fs
    0x2fc1_2fc1, // zfs
    0x6969,      // nfs
];

/// The open file of a read or write job, and the file's size (a read's) when sandboxd may
/// hand its descriptor to the host: a regular file (checked when it was opened) on one of
/// [`PASSABLE_FS`]. The descriptor carries what the open checked (the path resolved in the
/// sandbox's view, as the sandbox's user); the host only moves bytes through it.
pub fn handle(job: &Job) -> Option<(&File, u64)> {
    let (file, size) = match job {
        Job::Read { file, sent: 0, .. } => (file, file.metadata().ok()?.len()),
        Job::Write(sink) => (&sink.file, 0),
        _ => return None,
    };
    passable(file).then_some((file, size))
}

fn passable(file: &File) -> bool {
    sys::fs_magic(file).is_ok_and(|magic| PASSABLE_FS.contains(&magic))
}

/// Appends a chunk to a write job's file.
pub fn write_chunk(job: &mut Job, data: &[u8]) -> Result<(), Message> {
    match job {
        Job::Write(sink) => sink.file.write_all(data).map_err(|e| failure(&e)),
        _ => Ok(()),
    }
}

/// Ends a write job: a file it created gets its mode, and a new file is renamed into place
/// (its temporary file removed if that fails).
pub fn finish_write(job: Job, user: Option<(u32, u32)>) -> Result<(), Message> {
    let Job::Write(Sink { file, temp, dest, chmod }) = job else { return Ok(()) };
    as_user(user, || {
        let done = chmod
            .map_or(Ok(()), |mode| file.set_permissions(fs::Permissions::from_mode(mode)))
            .and_then(|()| temp.as_ref().map_or(Ok(()), |t| fs::rename(t, &dest)));
        drop(file);
        if done.is_err()
            && let Some(t) = &temp
        {
            let _ = fs::remove_file(t);
        }
        done.map_err(|e| failure(&e))
    })
}

/// Ends a write that failed or was cancelled: a new file's temporary file is removed (an
/// existing file keeps what was written to it).
pub fn abandon(job: Job, user: Option<(u32, u32)>) {
    if let Job::Write(Sink { temp: Some(temp), .. }) = job {
        let _ = as_user(user, || fs::remove_file(temp));
    }
}

/// The next frame of a read or list job within `credit` bytes, and whether the job is done.
/// `None` when the job cannot send anything with this credit.
pub fn progress(job: &mut Job, credit: u64, user: Option<(u32, u32)>) -> Option<(Message, bool)> {
    match job {
        Job::Read { file, limit, sent } => {
            let want = usize::try_from(credit).unwrap_or(usize::MAX).min(MAX_FILE_CHUNK);
            if want == 0 {
                return None;
            }
            // Read into spare capacity (no zeroing of a MiB per chunk), up to `want` bytes:
            // a regular file gives them in one read or two.
            let mut buf = Vec::with_capacity(want);
            match Read::take(&mut *file, want as u64).read_to_end(&mut buf) {
                Ok(0) => Some((Message::FsDone, true)),
                Ok(n) if *sent + n as u64 > *limit => Some((
                    refuse(Failure::TooLarge, &format!("the file grew past the {limit}-byte limit")),
                    true,
                )),
                Ok(n) => {
                    *sent += n as u64;
                    Some((Message::FsChunk { data: buf }, false))
                }
                Err(e) => Some((failure(&e), true)),
            }
        }
        Job::List { dir, pending } => {
            // Entries are read as the user (the kernel checks search permission on the
            // directory), each described relative to the open directory, never by path.
            as_user(user, || {
                while pending.len() < LIST_AHEAD {
                    match dir.next() {
                        None => break,
                        Some(Err(e)) => return Some((failure(&e), true)),
                        Some(Ok(e)) => pending.push_back(entry(&e)),
                    }
                }
                None
            })
            .or_else(|| {
                let mut entries = Vec::new();
                let mut bytes = 0u64;
                while let Some(e) = pending.front() {
                    if bytes + e.wire_len() > credit {
                        break;
                    }
                    bytes += e.wire_len();
                    entries.extend(pending.pop_front());
                }
                if !entries.is_empty() {
                    Some((Message::FsEntries { entries }, false))
                } else if pending.is_empty() {
                    Some((Message::FsDone, true))
                } else {
                    None
                }
            })
        }
        Job::Write(_) | Job::Failed => None,
    }
}

/// How many credit bytes a frame from [`progress`] used.
pub fn cost(message: &Message) -> u64 {
    match message {
        Message::FsChunk { data } => data.len() as u64,
        Message::FsEntries { entries } => entries.iter().map(Entry::wire_len).sum(),
        _ => 0,
    }
}

/// One listing entry, described without following it (`fstatat` on the open directory):
/// an entry removed meanwhile is `Other`, of size 0.
fn entry(e: &DirEntry) -> Entry {
    let (file_type, size, mode) = match e.metadata() {
        Ok(m) => (kind(&m), m.size(), m.mode() & 0o7777),
        Err(_) => (FileType::Other, 0, 0),
    };
    Entry { name: e.file_name().as_bytes().to_vec(), file_type, size, mode }
}

fn kind(m: &fs::Metadata) -> FileType {
    let t = m.file_type();
    if t.is_symlink() {
        FileType::Symlink
    } else if t.is_dir() {
        FileType::Dir
    } else if t.is_file() {
        FileType::File
    } else {
        FileType::Other
    }
}

/// `mkdir`, `remove` and `stat`: one answer each.
pub fn immediate(message: &Message, user: Option<(u32, u32)>) -> Message {
    let done = |r: io::Result<()>| r.map_or_else(|e| failure(&e), |()| Message::FsDone);
    let result = match message {
        Message::FsMkdir { path, parents } => path_of(path).map(|p| {
            as_user(user, || {
                let made = if *parents {
                    fs::DirBuilder::new().recursive(true).create(&p)
                } else {
                    fs::create_dir(&p)
                };
                match made {
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists && !p.is_dir() => {
                        refuse(Failure::InvalidInput, "the path exists and is not a directory")
                    }
                    made => done(made),
                }
            })
        }),
        Message::FsRemove { path, recursive } => path_of(path).map(|p| {
            as_user(user, || {
                let meta = match fs::symlink_metadata(&p) {
                    Ok(m) => m,
                    Err(e) => return failure(&e),
                };
                match (meta.is_dir(), *recursive) {
                    (true, true) => done(fs::remove_dir_all(&p)),
                    (true, false) => match fs::remove_dir(&p) {
                        Err(e) if e.kind() == io::ErrorKind::DirectoryNotEmpty => refuse(
                            Failure::IsADirectory,
                            "the directory is not empty and the removal is not recursive",
                        ),
                        removed => done(removed),
                    },
                    (false, _) => done(fs::remove_file(&p)),
                }
            })
        }),
        Message::FsStat { path } => path_of(path).map(|p| {
            as_user(user, || match fs::symlink_metadata(&p) {
                Ok(m) => {
                    Message::FsStatReply { file_type: kind(&m), size: m.size(), mode: m.mode() & 0o7777 }
                }
                Err(e) => failure(&e),
            })
        }),
        _ => Ok(refuse(Failure::InvalidInput, "not a file operation")),
    };
    result.unwrap_or_else(|refusal| refusal)
}

/// 16 hex digits from the kernel's random source, for temporary file names nobody can guess.
fn random_hex() -> String {
    let mut bytes = [0u8; 8];
    if File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes)).is_err() {
        // Without /dev/urandom the name is still exclusive (create_new), only guessable.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        bytes = (u64::from(nanos) | (u64::from(std::process::id()) << 32)).to_le_bytes();
    }
    bytes.iter().fold(String::with_capacity(16), |mut out, b| {
        use std::fmt::Write as _;
        let _ = write!(out, "{b:02x}");
        out
    })
}
