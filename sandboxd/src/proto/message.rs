//! The messages of the protocol, and the kind byte each is sent as.

macro_rules! kinds {
    ($( $(#[$doc:meta])* $name:ident = $byte:literal, )*) => {
        /// The type byte of a frame.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Kind {
            $( $(#[$doc])* $name, )*
        }

        impl Kind {
            /// The kind a type byte names, if any.
            #[must_use]
            pub fn from_byte(byte: u8) -> Option<Kind> {
                match byte {
                    $( $byte => Some(Kind::$name), )*
                    _ => None,
                }
            }

            /// The type byte of this kind.
            #[must_use]
            pub fn byte(self) -> u8 {
                match self {
                    $( Kind::$name => $byte, )*
                }
            }
        }
    };
}

kinds! {
    /// Host to sandboxd: the first frame of a session.
    Hello = 0x01,
    /// Host to sandboxd: start a command.
    Spawn = 0x02,
    /// Host to sandboxd: bytes for a command's stdin.
    Stdin = 0x03,
    /// Host to sandboxd: end of a command's stdin.
    StdinEof = 0x04,
    /// Host to sandboxd: signal every process of a command.
    Signal = 0x05,
    /// Host to sandboxd: allow more output bytes for a command.
    Credit = 0x06,
    /// Host to sandboxd: liveness probe.
    Ping = 0x07,
    /// Host to sandboxd: bytes for a command's control channel.
    ControlIn = 0x08,
    /// Host to sandboxd: the end of this stream no longer ends sandboxd.
    Detach = 0x09,
    /// Host to sandboxd: read a file.
    FsRead = 0x10,
    /// Host to sandboxd: create or replace a file with the data frames that follow.
    FsWrite = 0x11,
    /// Host to sandboxd: a chunk of a file being written.
    FsData = 0x12,
    /// Host to sandboxd: the file being written is complete.
    FsEnd = 0x13,
    /// Host to sandboxd: list a directory.
    FsList = 0x14,
    /// Host to sandboxd: create a directory.
    FsMkdir = 0x15,
    /// Host to sandboxd: remove a path.
    FsRemove = 0x16,
    /// Host to sandboxd: describe a path.
    FsStat = 0x17,
    /// Host to sandboxd: read a file, its descriptor handed over where it can be (version 6).
    FsOpenRead = 0x18,
    /// Host to sandboxd: write a file through a descriptor handed over (version 6).
    FsOpenWrite = 0x19,
    /// Sandboxd to host: the answer to `Hello`.
    HelloAck = 0x81,
    /// Sandboxd to host: a command started.
    Spawned = 0x82,
    /// Sandboxd to host: bytes a command wrote.
    Output = 0x83,
    /// Sandboxd to host: a command ended, and every process it started is gone.
    Exit = 0x84,
    /// Sandboxd to host: a request failed.
    Failed = 0x85,
    /// Sandboxd to host: the answer to `Ping`.
    Pong = 0x87,
    /// Sandboxd to host: the answer to `Detach`.
    Detached = 0x89,
    /// Sandboxd to host: a chunk of a file being read.
    FsChunk = 0x90,
    /// Sandboxd to host: a file request completed.
    FsDone = 0x91,
    /// Sandboxd to host: a directory's entries.
    FsEntries = 0x92,
    /// Sandboxd to host: a path's description.
    FsStatReply = 0x93,
    /// Sandboxd to host: the descriptor of an `FsOpenRead` or `FsOpenWrite` came with this
    /// frame (version 6).
    FsHandle = 0x94,
}

/// Where a command's stdin comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StdinMode {
    /// `/dev/null`: the command sees end-of-file at once.
    #[default]
    Null,
    /// A pipe fed by [`Message::Stdin`] frames and closed by [`Message::StdinEof`].
    Pipe,
}

/// Which output stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
    /// The control channel (descriptor 3 of a command spawned with `control`). sandboxd
    /// forwards its bytes only once the command's stdout and stderr pipes are empty, so what
    /// the command wrote to them before writing here arrives first.
    Control,
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// It exited with this code (0 to 255).
    Code(i32),
    /// A signal ended it; the signal's number.
    Signal(i32),
}

/// The kind of a path, in [`Message::FsEntries`] and [`Message::FsStatReply`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileType {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (never followed by the file operations).
    Symlink,
    /// Anything else: a device, a fifo, a socket.
    Other,
}

/// Why a request failed, in [`Message::Failed`]; the host maps these to its error codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The path or the program does not exist.
    NotFound,
    /// The sandbox's user may not do this.
    PermissionDenied,
    /// The path is a directory where a file was asked for.
    IsADirectory,
    /// The request was malformed or named something invalid.
    InvalidInput,
    /// A file was over the limit the request gave.
    TooLarge,
    /// Anything else the operating system reported.
    Io,
    /// A [`Spawn::undumpable`] program could not be started out of the other processes'
    /// reach (version 5); the message says why. Nothing was left running.
    Exposed,
}

/// One entry of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The entry's name (not a path).
    pub name: Vec<u8>,
    /// What it is.
    pub file_type: FileType,
    /// Its size in bytes.
    pub size: u64,
    /// Its permission bits (`st_mode & 0o7777`).
    pub mode: u32,
}

impl Entry {
    /// The bytes this entry takes in a [`Message::FsEntries`] body (name length, name, type,
    /// size, mode): what it costs of a listing's output credit.
    #[must_use]
    pub fn wire_len(&self) -> u64 {
        17 + self.name.len() as u64
    }
}

/// Environment variables as `NAME` and value pairs.
pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// The fields of [`Message::Spawn`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Spawn {
    /// The program and its arguments; the program is looked up on the command's `PATH`.
    pub argv: Vec<Vec<u8>>,
    /// Environment variables, `NAME` and value.
    pub env: Pairs,
    /// Environment variables whose values are secrets: set like `env`, never logged.
    pub secrets: Pairs,
    /// The working directory; sandboxd's own when absent.
    pub cwd: Option<Vec<u8>>,
    /// Where stdin comes from.
    pub stdin: StdinMode,
    /// The uid and gid to run as (the only group); sandboxd's own when absent.
    pub user: Option<(u32, u32)>,
    /// Give the command a control channel: a socket at its descriptor 3, fed by
    /// [`Message::ControlIn`] and read as [`Stream::Control`] output.
    pub control: bool,
    /// Start the program out of reach of the sandbox's other processes from its first
    /// instruction (version 5): not dumpable, so no process of the same uid without
    /// `CAP_SYS_PTRACE` can take its descriptors (`pidfd_getfd`), its memory
    /// (`/proc/<pid>/mem`, ptrace) or its environment. sandboxd executes the program's ELF
    /// interpreter (its dynamic loader, or a static program itself) from an execute-only copy
    /// (the kernel makes a process whose executable it may not read undumpable at `execve`),
    /// then checks with the command's own identity that the kernel refuses it the process's
    /// memory; anything else fails the spawn ([`Failure::Exposed`]), never a reachable
    /// process.
    pub undumpable: bool,
}

/// A decoded frame body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// The first frame of a session, with the host's protocol version.
    Hello {
        /// [`VERSION`](super::VERSION) of the host.
        version: u16,
        /// The sandbox's user, as uid and gid: file operations run as this user, and so do
        /// commands whose `Spawn` names none. sandboxd's own identity when absent.
        user: Option<(u32, u32)>,
    },
    /// Start a command under the frame's id, which must be new in this session.
    Spawn(Spawn),
    /// Bytes for the command's stdin.
    Stdin {
        /// At most [`MAX_CHUNK`](super::MAX_CHUNK) bytes.
        data: Vec<u8>,
    },
    /// End of the command's stdin.
    StdinEof,
    /// Send a signal to every process of the command; for a file request, cancel it.
    Signal {
        /// The signal number.
        signal: i32,
    },
    /// Allow the command this many more bytes of output.
    Credit {
        /// Bytes, added to what is left of earlier grants.
        bytes: u32,
    },
    /// Bytes for the command's control channel (shares the stdin window).
    ControlIn {
        /// At most [`MAX_CHUNK`](super::MAX_CHUNK) bytes.
        data: Vec<u8>,
    },
    /// Liveness probe; answered with `Pong` carrying the same nonce.
    Ping {
        /// Any value.
        nonce: u64,
    },
    /// Sent with id 0: from now on the end of this session's stream kills the session's
    /// commands and file requests but not sandboxd, which runs until its TTL. Answered with
    /// `Detached`; in a session that is not sandboxd's first (a `--listen-fd` connection, whose
    /// end never ends sandboxd) it changes nothing.
    Detach,
    /// Read a file, failing with `TooLarge` past `limit`.
    FsRead {
        /// The path, resolved inside the sandbox.
        path: Vec<u8>,
        /// The most bytes to send.
        limit: u64,
    },
    /// Create or replace a file; data follows in `FsData` frames and `FsEnd`.
    FsWrite {
        /// The path, resolved inside the sandbox.
        path: Vec<u8>,
        /// Permission bits for a new file.
        mode: u32,
    },
    /// A chunk of the file being written.
    FsData {
        /// At most [`MAX_FILE_CHUNK`](super::MAX_FILE_CHUNK) bytes.
        data: Vec<u8>,
    },
    /// The file being written is complete: rename it into place.
    FsEnd,
    /// List a directory.
    FsList {
        /// The path, resolved inside the sandbox.
        path: Vec<u8>,
    },
    /// Create a directory.
    FsMkdir {
        /// The path, resolved inside the sandbox.
        path: Vec<u8>,
        /// Create missing parents too.
        parents: bool,
    },
    /// Remove a path.
    FsRemove {
        /// The path, resolved inside the sandbox.
        path: Vec<u8>,
        /// Remove a directory and everything in it.
        recursive: bool,
    },
    /// Describe a path without following a final symbolic link.
    FsStat {
        /// The path, resolved inside the sandbox.
        path: Vec<u8>,
    },
    /// `FsRead`, except that sandboxd may answer with the opened file's descriptor instead
    /// of its bytes: [`Message::FsHandle`] carrying it (`SCM_RIGHTS`, so only on a Unix
    /// socket), then `FsDone`; the host reads at most `limit` bytes from it. sandboxd opens
    /// and checks the file exactly as for `FsRead`, and streams it as for `FsRead` where it
    /// cannot or will not hand it over (its stream is no socket; a file on anything but a
    /// disk or memory file system, such as `/proc`, whose contents can depend on who reads).
    FsOpenRead {
        /// The path, resolved inside the sandbox.
        path: Vec<u8>,
        /// The most bytes the file may hold.
        limit: u64,
    },
    /// `FsWrite`, except that the host may write the bytes itself: sandboxd opens the file
    /// as for `FsWrite` and answers [`Message::FsHandle`], carrying the descriptor
    /// (write-only) where it can hand it over (as for `FsOpenRead`); the host then writes
    /// the data there, else sends `FsData` frames, and ends with `FsEnd` (or drops the
    /// request).
    FsOpenWrite {
        /// The path, resolved inside the sandbox.
        path: Vec<u8>,
        /// Permission bits for a new file.
        mode: u32,
    },
    /// The answer to `Hello`.
    HelloAck {
        /// [`VERSION`](super::VERSION) of sandboxd.
        version: u16,
        /// sandboxd's pid in its own PID namespace.
        pid: u32,
    },
    /// The command started.
    Spawned {
        /// Its pid in the sandbox's PID namespace.
        pid: u32,
    },
    /// Bytes the command wrote.
    Output {
        /// Which stream.
        stream: Stream,
        /// At most [`MAX_CHUNK`](super::MAX_CHUNK) bytes, never more than the credit left.
        data: Vec<u8>,
    },
    /// The command ended and every process it started is gone.
    Exit {
        /// How its first process ended.
        status: Status,
        /// The kernel's out-of-memory killer ended a process of the command.
        oom_killed: bool,
    },
    /// The request with this frame's id failed.
    Failed {
        /// What kind of failure.
        failure: Failure,
        /// The operating system's or sandboxd's own words.
        message: Vec<u8>,
    },
    /// The answer to `Ping`.
    Pong {
        /// The nonce of the `Ping`.
        nonce: u64,
    },
    /// The answer to `Detach` (id 0).
    Detached,
    /// A chunk of the file being read.
    FsChunk {
        /// At most [`MAX_FILE_CHUNK`](super::MAX_FILE_CHUNK) bytes, never more than the
        /// credit left.
        data: Vec<u8>,
    },
    /// The file request completed.
    FsDone,
    /// A directory's entries.
    FsEntries {
        /// In no particular order.
        entries: Vec<Entry>,
    },
    /// The answer to an `FsOpenRead` or `FsOpenWrite` whose file sandboxd opened: with
    /// `passed`, its descriptor came with this frame's first byte (`SCM_RIGHTS`); without,
    /// sandboxd keeps it and the request goes on as `FsRead` or `FsWrite` would (chunks
    /// follow; the host sends `FsData`).
    FsHandle {
        /// The file's size when it was opened, in bytes (0 for a write).
        size: u64,
        /// The descriptor came with this frame.
        passed: bool,
    },
    /// A path's description.
    FsStatReply {
        /// What it is.
        file_type: FileType,
        /// Its size in bytes.
        size: u64,
        /// Its permission bits.
        mode: u32,
    },
}

impl Message {
    /// The frame kind this message is sent as.
    #[must_use]
    pub fn kind(&self) -> Kind {
        match self {
            Message::Hello { .. } => Kind::Hello,
            Message::Spawn(_) => Kind::Spawn,
            Message::Stdin { .. } => Kind::Stdin,
            Message::StdinEof => Kind::StdinEof,
            Message::Signal { .. } => Kind::Signal,
            Message::Credit { .. } => Kind::Credit,
            Message::Ping { .. } => Kind::Ping,
            Message::ControlIn { .. } => Kind::ControlIn,
            Message::Detach => Kind::Detach,
            Message::FsRead { .. } => Kind::FsRead,
            Message::FsWrite { .. } => Kind::FsWrite,
            Message::FsData { .. } => Kind::FsData,
            Message::FsEnd => Kind::FsEnd,
            Message::FsList { .. } => Kind::FsList,
            Message::FsMkdir { .. } => Kind::FsMkdir,
            Message::FsRemove { .. } => Kind::FsRemove,
            Message::FsStat { .. } => Kind::FsStat,
            Message::FsOpenRead { .. } => Kind::FsOpenRead,
            Message::FsOpenWrite { .. } => Kind::FsOpenWrite,
            Message::HelloAck { .. } => Kind::HelloAck,
            Message::Spawned { .. } => Kind::Spawned,
            Message::Output { .. } => Kind::Output,
            Message::Exit { .. } => Kind::Exit,
            Message::Failed { .. } => Kind::Failed,
            Message::Pong { .. } => Kind::Pong,
            Message::Detached => Kind::Detached,
            Message::FsChunk { .. } => Kind::FsChunk,
            Message::FsDone => Kind::FsDone,
            Message::FsEntries { .. } => Kind::FsEntries,
            Message::FsStatReply { .. } => Kind::FsStatReply,
            Message::FsHandle { .. } => Kind::FsHandle,
        }
    }
}
