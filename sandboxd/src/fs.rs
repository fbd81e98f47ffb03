//! File operations, done by sandboxd inside the sandbox, in the sandbox's own view of its
//! files, as the sandbox's user.
//!
//! Paths are resolved by the kernel in the sandbox's mount namespace, so a symbolic link can
//! only lead somewhere inside the sandbox. When sandboxd runs as root and the session names a
//! user, every operation runs with that user's filesystem identity (`setfsuid`/`setfsgid`,
//! and the user's group as the only supplementary group), so the kernel's permission checks
//! are the user's: root's file capabilities are dropped while the identity is switched.
//! Reads and listings are jobs that send data only within the host's credit; writes go to an
//! exclusive temporary file with an unguessable name in the target's directory and are renamed
//! into place at the end, so a reader never sees half a file.

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions, ReadDir};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::proto::{Entry, Failure, FileType, MAX_CHUNK, Message};
use crate::sys;

/// `O_NOFOLLOW`: the generic ABI value (`x86_64`, `aarch64`).
const O_NOFOLLOW: i32 = 0o400_000;
/// `O_NONBLOCK`: opening a fifo must not wait for a writer.
const O_NONBLOCK: i32 = 0o4000;

/// A file request that takes more than one frame.
pub enum Job {
    /// Sending a file's bytes.
    Read { file: File, limit: u64, sent: u64 },
    /// Sending a directory's entries.
    List { dir: ReadDir, path: PathBuf, pending: VecDeque<Entry> },
    /// Receiving a file's bytes into a temporary file.
    Write { file: File, temp: PathBuf, dest: PathBuf },
    /// A write that failed and was answered: its remaining data frames are dropped.
    Failed,
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

/// Opens a regular file for a read job; anything else is refused before a byte is read.
pub fn start_read(path: &[u8], limit: u64, user: Option<(u32, u32)>) -> Result<Job, Message> {
    let path = path_of(path)?;
    let file = as_user(user, || OpenOptions::new().read(true).custom_flags(O_NONBLOCK).open(&path))
        .map_err(|e| failure(&e))?;
    let meta = file.metadata().map_err(|e| failure(&e))?;
    if meta.is_dir() {
        return Err(refuse(Failure::IsADirectory, "the path is a directory"));
    }
    if !meta.is_file() {
        return Err(refuse(Failure::InvalidInput, "the path is not a regular file"));
    }
    if meta.len() > limit {
        return Err(refuse(
            Failure::TooLarge,
            &format!("the file holds {} bytes, over the {limit}-byte limit", meta.len()),
        ));
    }
    Ok(Job::Read { file, limit, sent: 0 })
}

/// Starts a listing job.
pub fn start_list(path: &[u8], user: Option<(u32, u32)>) -> Result<Job, Message> {
    let path = path_of(path)?;
    let dir = as_user(user, || fs::read_dir(&path)).map_err(|e| failure(&e))?;
    Ok(Job::List { dir, path, pending: VecDeque::new() })
}

/// Creates the temporary file of a write job, next to `path`.
pub fn start_write(path: &[u8], mode: u32, user: Option<(u32, u32)>) -> Result<Job, Message> {
    let dest = path_of(path)?;
    let (Some(dir), Some(name)) = (dest.parent(), dest.file_name()) else {
        return Err(refuse(Failure::InvalidInput, "the path names no file"));
    };
    as_user(user, || {
        if fs::symlink_metadata(&dest).is_ok_and(|m| m.is_dir()) {
            return Err(refuse(Failure::IsADirectory, "the path is a directory"));
        }
        let mut temp_name = b".".to_vec();
        temp_name.extend_from_slice(name.as_bytes());
        temp_name.extend_from_slice(format!(".sandboxd-{}", random_hex()).as_bytes());
        let temp = dir.join(OsStr::from_bytes(&temp_name));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode & 0o7777)
            .custom_flags(O_NOFOLLOW)
            .open(&temp)
            .map_err(|e| failure(&e))?;
        // The umask narrowed the mode at creation; the caller asked for this one.
        file.set_permissions(fs::Permissions::from_mode(mode & 0o7777)).map_err(|e| failure(&e))?;
        Ok(Job::Write { file, temp, dest: dest.clone() })
    })
}

/// Appends a chunk to a write job's temporary file.
pub fn write_chunk(job: &mut Job, data: &[u8]) -> Result<(), Message> {
    match job {
        Job::Write { file, .. } => file.write_all(data).map_err(|e| failure(&e)),
        _ => Ok(()),
    }
}

/// Renames a write job's temporary file into place.
pub fn finish_write(job: Job, user: Option<(u32, u32)>) -> Result<(), Message> {
    let Job::Write { file, temp, dest } = job else { return Ok(()) };
    drop(file);
    as_user(user, || fs::rename(&temp, &dest)).map_err(|e| failure(&e))
}

/// Removes a write job's temporary file (the write failed or the session ended).
pub fn abandon(job: Job, user: Option<(u32, u32)>) {
    if let Job::Write { temp, .. } = job {
        let _ = as_user(user, || fs::remove_file(temp));
    }
}

/// The next frame of a read or list job within `credit` bytes, and whether the job is done.
/// `None` when the job cannot send anything with this credit.
pub fn progress(job: &mut Job, credit: u64, user: Option<(u32, u32)>) -> Option<(Message, bool)> {
    match job {
        Job::Read { file, limit, sent } => {
            let want = usize::try_from(credit).unwrap_or(usize::MAX).min(MAX_CHUNK);
            if want == 0 {
                return None;
            }
            let mut buf = vec![0; want];
            match file.read(&mut buf) {
                Ok(0) => Some((Message::FsDone, true)),
                Ok(n) if *sent + n as u64 > *limit => Some((
                    refuse(Failure::TooLarge, &format!("the file grew past the {limit}-byte limit")),
                    true,
                )),
                Ok(n) => {
                    *sent += n as u64;
                    buf.truncate(n);
                    Some((Message::FsChunk { data: buf }, false))
                }
                Err(e) => Some((failure(&e), true)),
            }
        }
        Job::List { dir, path, pending } => {
            // Entries are read as the user (the kernel checks search permission on `path`).
            as_user(user, || {
                while pending.len() < 256 {
                    match dir.next() {
                        None => break,
                        Some(Err(e)) => return Some((failure(&e), true)),
                        Some(Ok(e)) => pending.push_back(entry(path, &e.file_name())),
                    }
                }
                None
            })
            .or_else(|| {
                let mut entries = Vec::new();
                let mut bytes = 0u64;
                while let Some(e) = pending.front() {
                    let size = 13 + e.name.len() as u64;
                    if bytes + size > credit {
                        break;
                    }
                    bytes += size;
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
        Job::Write { .. } | Job::Failed => None,
    }
}

/// How many credit bytes a frame from [`progress`] used.
pub fn cost(message: &Message) -> u64 {
    match message {
        Message::FsChunk { data } => data.len() as u64,
        Message::FsEntries { entries } => entries.iter().map(|e| 13 + e.name.len() as u64).sum(),
        _ => 0,
    }
}

fn entry(dir: &Path, name: &OsStr) -> Entry {
    let meta = fs::symlink_metadata(dir.join(name));
    let (file_type, size) = match &meta {
        Ok(m) => (kind(m), m.size()),
        Err(_) => (FileType::Other, 0),
    };
    Entry { name: name.as_bytes().to_vec(), file_type, size }
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
                done(if *parents {
                    fs::DirBuilder::new().recursive(true).create(&p)
                } else {
                    fs::create_dir(&p)
                })
            })
        }),
        Message::FsRemove { path, recursive } => path_of(path).map(|p| {
            as_user(user, || {
                let meta = match fs::symlink_metadata(&p) {
                    Ok(m) => m,
                    Err(e) => return failure(&e),
                };
                done(match (meta.is_dir(), *recursive) {
                    (true, true) => fs::remove_dir_all(&p),
                    (true, false) => fs::remove_dir(&p),
                    (false, _) => fs::remove_file(&p),
                })
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
