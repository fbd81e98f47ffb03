//! One session: frames in on stdin, frames out on stdout, one poll loop, no threads.
//!
//! Flow control both ways keeps every buffer bounded:
//! - output: a command's pipes are read only while the host has granted it credit
//!   ([`Message::Credit`]); without credit the pipe fills and the command blocks in `write`.
//! - stdin: sandboxd holds at most [`STDIN_WINDOW`] unwritten bytes per command. The host may
//!   send that much before any acknowledgement; sandboxd returns credit frames as bytes reach
//!   the pipe. A host that overruns the window ends the session.
//!
//! The session ends when the host's stream ends (the owner is gone): every command is killed,
//! and for sandboxd's first session ([`Lifetime`]) sandboxd exits, which ends the sandbox.
//! After `Detach` the first session's end kills only that session's commands and file
//! requests, and sandboxd runs on until its TTL, serving `--listen-fd` connections (`listen.rs`).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Instant;

use crate::fs::{self, Job};
use crate::listen::Listener;
use crate::proto::{
    Decoder, Failure, Frame, MAX_CHUNK, MIN_FRAME_CREDIT, Message, ProtoError, Spawn, Status, StdinMode,
    Stream, VERSION, frame_credit,
};
use crate::shepherd::{self, REPORT_LEN, Report};
use crate::sys::{self, Ended, PollFd};

/// The most stdin bytes sandboxd buffers for one command, in bytes (256 KiB).
pub const STDIN_WINDOW: usize = 256 * 1024;

/// The most bytes one read of the host's stream takes (256 KiB: a file data frame in four
/// reads, where a pipe of the default size gave it in sixteen).
const INPUT_BUF: usize = 256 * 1024;

/// The most commands one session runs at once.
pub const MAX_COMMANDS: usize = 1024;

/// Frames to the host are gathered during a turn and written together at its end, or once
/// this many bytes wait (256 KiB): one write and one wake-up of the host for all the
/// commands a turn served, not one per frame (issue #28).
const FLUSH_AT: usize = 256 * 1024;

/// Why a session ended.
#[derive(Debug)]
pub enum End {
    /// The host closed its stream.
    HostGone,
    /// The TTL passed (sandboxd's first session only).
    Ttl,
    /// The host broke the protocol.
    Protocol(String),
    /// An I/O error on the session's own stream or the poll loop.
    Io(io::Error),
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            End::HostGone => f.write_str("the host closed the stream"),
            End::Ttl => f.write_str("TTL reached"),
            End::Protocol(why) => write!(f, "protocol error: {why}"),
            End::Io(e) => write!(f, "I/O error: {e}"),
        }
    }
}

impl From<io::Error> for End {
    fn from(e: io::Error) -> End {
        // A write that finds the stream closed is the host leaving, like a read of its end.
        match e.kind() {
            io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => End::HostGone,
            _ => End::Io(e),
        }
    }
}

/// What only sandboxd's first session has: its end is sandboxd's end.
pub struct Lifetime {
    /// When sandboxd ends whatever happens; never when absent.
    pub deadline: Option<Instant>,
    /// Where extra sessions connect.
    pub listener: Option<Listener>,
}

impl From<ProtoError> for End {
    fn from(e: ProtoError) -> End {
        End::Protocol(e.to_string())
    }
}

struct Pipe {
    file: File,
    stream: Stream,
}

struct Cmd {
    shepherd: i32,
    control: Option<File>,
    reports: Option<File>,
    outputs: Vec<Pipe>,
    stdin: Option<File>,
    stdin_buf: Vec<u8>,
    stdin_eof: bool,
    /// sandboxd's end of the control channel, and what waits to be written to it.
    channel: Option<File>,
    channel_buf: Vec<u8>,
    credit: u64,
    exit: Option<Message>,
    /// When the host asked for the command's end: a shepherd that has not reported by
    /// [`KILL_GRACE`] later is killed outright (a command of the same uid, a root sandbox
    /// user's, can stop its shepherd; then nothing else would end it).
    kill_asked: Option<Instant>,
}

/// How long a shepherd has to end its command after a kill before sandboxd kills the
/// shepherd itself, and the command's processes as orphans.
const KILL_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

impl Cmd {
    fn done(&self) -> bool {
        self.exit.is_some() && self.outputs.is_empty() && self.reports.is_none()
    }
}

/// What a slot in the poll set stands for.
#[derive(Clone, Copy)]
enum Slot {
    Host,
    Children,
    Listener,
    Reports(u32),
    Output(u32, usize),
    Stdin(u32),
    Channel(u32),
}

pub struct Session<W: Write + AsRawFd> {
    input: File,
    output: W,
    decoder: Decoder,
    children: File,
    cmds: BTreeMap<u32, Cmd>,
    /// File requests in progress, with the output credit each has left.
    jobs: BTreeMap<u32, (Job, u64)>,
    greeted: bool,
    /// The sandbox's user from `Hello`.
    user: Option<(u32, u32)>,
    /// Encoded frames not yet written to the host (see [`FLUSH_AT`]).
    out: Vec<u8>,
    /// Where reads from the host and from commands' pipes land ([`MAX_CHUNK`] bytes, reused).
    scratch: Vec<u8>,
    /// Where the host's bytes are read into ([`INPUT_BUF`] once the first read comes).
    input_buf: Vec<u8>,
    /// The output is a Unix socket: files can be handed over (`FsOpenRead`, `FsOpenWrite`).
    passes_fds: bool,
    /// A shepherd died without its report, so processes of its command may have been
    /// reparented to sandboxd: each child event then looks for them, until a look finds none.
    /// (Without this, every command's exit would cost a scan of `/proc`.)
    orphans: bool,
    /// Set in sandboxd's first session only.
    lifetime: Option<Lifetime>,
    host: Host,
}

/// The state of the host's stream.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Host {
    /// Open; its end ends the session.
    Attached,
    /// Open, and the host sent `Detach` in the first session: its end ends only the
    /// session's commands and file requests, not sandboxd.
    Detached,
    /// Ended after a detach: no longer polled.
    Gone,
}

impl<W: Write + AsRawFd> Session<W> {
    /// A session whose end ends nothing but its own commands: a `--listen-fd` connection's.
    pub fn new(input: File, output: W, children: File) -> Session<W> {
        let passes_fds = sys::is_unix_stream(&output);
        Session {
            input,
            output,
            decoder: Decoder::new(),
            children,
            cmds: BTreeMap::new(),
            jobs: BTreeMap::new(),
            greeted: false,
            user: None,
            out: Vec::new(),
            scratch: vec![0; MAX_CHUNK],
            input_buf: Vec::new(),
            passes_fds,
            orphans: false,
            lifetime: None,
            host: Host::Attached,
        }
    }

    /// sandboxd's first session, whose end (or `lifetime`'s deadline) ends sandboxd.
    pub fn first(input: File, output: W, children: File, lifetime: Lifetime) -> Session<W> {
        Session { lifetime: Some(lifetime), ..Session::new(input, output, children) }
    }

    /// Runs until the host leaves (unless it detached), breaks the protocol, or the TTL
    /// passes; kills every command, and every session child, before returning.
    pub fn run(&mut self) -> End {
        let end = loop {
            match self.turn() {
                Ok(()) => {}
                Err(End::HostGone) if self.host == Host::Detached => {
                    // Nobody can read these commands' output or results any more.
                    self.host = Host::Gone;
                    self.out.clear();
                    self.kill_commands();
                    // Processes of shepherds killed outright are reparented here.
                    self.orphans = true;
                }
                Err(end) => break end,
            }
        };
        // Answers gathered before a protocol error still reach a host that reads.
        if matches!(end, End::Protocol(_)) {
            let _ = self.flush();
        }
        self.kill_everything();
        end
    }

    /// How long poll may wait, in milliseconds: until the deadline, or forever (-1).
    /// `Err(End::Ttl)` once the deadline has passed.
    fn timeout(&self) -> Result<i32, End> {
        let ttl = self.lifetime.as_ref().and_then(|l| l.deadline);
        if ttl.is_some_and(|d| d <= Instant::now()) {
            return Err(End::Ttl);
        }
        let kills = self.cmds.values().filter(|c| c.reports.is_some()).filter_map(|c| c.kill_asked);
        let Some(deadline) = kills.map(|asked| asked + KILL_GRACE).chain(ttl).min() else { return Ok(-1) };
        let left = deadline.saturating_duration_since(Instant::now());
        // Rounded up, so a wake-up never comes before the deadline and spins on a 0 timeout.
        let ms = left.as_micros().div_ceil(1000);
        Ok(i32::try_from(ms).unwrap_or(i32::MAX))
    }

    /// Queues a frame for the host; it is written at the end of the turn (or at once when
    /// [`FLUSH_AT`] bytes wait).
    fn send(&mut self, id: u32, message: Message) -> Result<(), End> {
        Frame::new(id, message).encode(&mut self.out)?;
        if self.out.len() >= FLUSH_AT {
            self.flush()?;
        }
        Ok(())
    }

    /// Queues `message` and writes everything queued at once, `fd` attached to the first
    /// bytes written (`SCM_RIGHTS`; the output must be a Unix socket, [`Session::passes_fds`]):
    /// the descriptor arrives no later than the frame announcing it.
    fn send_with_fd(&mut self, id: u32, message: Message, fd: &File) -> Result<(), End> {
        Frame::new(id, message).encode(&mut self.out)?;
        self.flush_with(Some(fd))
    }

    fn flush(&mut self) -> Result<(), End> {
        self.flush_with(None)
    }

    /// Writes the queued frames, `fd` attached to their first bytes. Where the stream is
    /// non-blocking (the first session's, see `main.rs`), a host that stops reading is waited
    /// for only until the TTL: it cannot hold sandboxd, and so the sandbox, past its deadline.
    fn flush_with(&mut self, mut fd: Option<&File>) -> Result<(), End> {
        if self.host == Host::Gone {
            // Nobody reads any more (a detached host left): what waits is dropped, not retried.
            self.out.clear();
            return Ok(());
        }
        let mut done = 0;
        while done < self.out.len() {
            let sent = match fd {
                Some(fd) => sys::send_with_fd(&self.output, &self.out[done..], fd),
                None => self.output.write(&self.out[done..]),
            };
            match sent {
                Ok(0) => return Err(End::HostGone),
                Ok(n) => {
                    done += n;
                    // The descriptor went with those bytes.
                    fd = None;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let ttl = self.lifetime.as_ref().and_then(|l| l.deadline);
                    let timeout = match ttl {
                        Some(d) if d <= Instant::now() => return Err(End::Ttl),
                        Some(d) => {
                            let ms = d.saturating_duration_since(Instant::now()).as_micros().div_ceil(1000);
                            i32::try_from(ms).unwrap_or(i32::MAX)
                        }
                        None => -1,
                    };
                    let mut fds = [PollFd { fd: self.output.as_raw_fd(), events: sys::POLLOUT, revents: 0 }];
                    sys::poll_fds(&mut fds, timeout)?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        self.out.clear();
        self.output.flush()?;
        Ok(())
    }

    fn turn(&mut self) -> Result<(), End> {
        let timeout = self.timeout()?;
        let mut fds = vec![PollFd { fd: self.children.as_raw_fd(), events: sys::POLLIN, revents: 0 }];
        let mut slots = vec![Slot::Children];
        if self.host != Host::Gone {
            fds.push(PollFd { fd: self.input.as_raw_fd(), events: sys::POLLIN, revents: 0 });
            slots.push(Slot::Host);
        }
        if let Some(listener) = self.lifetime.as_ref().and_then(|l| l.listener.as_ref()) {
            fds.push(PollFd { fd: listener.fd(), events: sys::POLLIN, revents: 0 });
            slots.push(Slot::Listener);
        }
        for (&id, cmd) in &self.cmds {
            if let Some(r) = &cmd.reports {
                fds.push(PollFd { fd: r.as_raw_fd(), events: sys::POLLIN, revents: 0 });
                slots.push(Slot::Reports(id));
            }
            // An output frame takes at least MIN_FRAME_CREDIT, so a pipe is read only when
            // that much is left.
            if cmd.credit >= u64::from(MIN_FRAME_CREDIT) {
                for (i, pipe) in cmd.outputs.iter().enumerate() {
                    fds.push(PollFd { fd: pipe.file.as_raw_fd(), events: sys::POLLIN, revents: 0 });
                    slots.push(Slot::Output(id, i));
                }
            }
            if let (Some(w), false) = (&cmd.stdin, cmd.stdin_buf.is_empty()) {
                fds.push(PollFd { fd: w.as_raw_fd(), events: sys::POLLOUT, revents: 0 });
                slots.push(Slot::Stdin(id));
            }
            if let (Some(w), false) = (&cmd.channel, cmd.channel_buf.is_empty()) {
                fds.push(PollFd { fd: w.as_raw_fd(), events: sys::POLLOUT, revents: 0 });
                slots.push(Slot::Channel(id));
            }
        }
        // Reads and listings are always ready to go on while they have credit: do not wait then.
        let busy = self
            .jobs
            .values()
            .any(|(job, credit)| *credit > 0 && matches!(job, Job::Read { .. } | Job::List { .. }));
        sys::poll_fds(&mut fds, if busy { 0 } else { timeout })?;
        // Outputs are handled before reports so a command's last bytes go out before its exit;
        // reverse order keeps the indices of a command's output list valid while removing.
        let mut host_ready = false;
        for (fd, slot) in fds.iter().zip(&slots).rev() {
            if fd.revents == 0 {
                continue;
            }
            match *slot {
                Slot::Host => host_ready = true,
                Slot::Children => self.reap(),
                Slot::Listener => {
                    if let Some(listener) = self.lifetime.as_mut().and_then(|l| l.listener.as_mut()) {
                        listener.accept();
                    }
                }
                Slot::Reports(id) => self.read_report(id)?,
                Slot::Output(id, i) => self.read_output(id, i)?,
                Slot::Stdin(id) => self.write_input(id, false)?,
                Slot::Channel(id) => self.write_input(id, true)?,
            }
        }
        if host_ready {
            // What the commands said goes out before the host's new requests are handled: a
            // read may hold many spawns, each a fork, and the exits of commands that ended
            // must not wait for all of them (at 64 at once they did: issue #28).
            self.finish_done()?;
            self.flush()?;
            self.read_host()?;
        }
        self.kill_stuck_shepherds();
        self.finish_done()?;
        self.progress_jobs()?;
        self.flush()
    }

    /// Kills the shepherds that did not end their command within [`KILL_GRACE`] of the
    /// host's kill; their report pipes then close, and their processes die as orphans.
    fn kill_stuck_shepherds(&mut self) {
        for cmd in self.cmds.values_mut() {
            if cmd.reports.is_some() && cmd.kill_asked.is_some_and(|asked| asked.elapsed() >= KILL_GRACE) {
                sys::signal_process(cmd.shepherd, sys::SIGKILL);
                cmd.kill_asked = None;
            }
        }
    }

    /// Sends one frame of every read or listing that has credit.
    fn progress_jobs(&mut self) -> Result<(), End> {
        let ids: Vec<u32> =
            self.jobs.iter().filter(|(_, (_, credit))| *credit > 0).map(|(&id, _)| id).collect();
        for id in ids {
            let Some((job, credit)) = self.jobs.get_mut(&id) else { continue };
            let Some((message, done)) = fs::progress(job, *credit, self.user) else { continue };
            *credit -= fs::cost(&message);
            if done {
                self.jobs.remove(&id);
            }
            self.send(id, message)?;
        }
        Ok(())
    }

    fn fresh(&self, id: u32) -> Result<(), End> {
        if id == 0 || self.cmds.contains_key(&id) || self.jobs.contains_key(&id) {
            return Err(End::Protocol(format!("a request with id {id}, which is 0 or in use")));
        }
        Ok(())
    }

    /// Starts or answers a file request.
    fn file_request(&mut self, id: u32, message: Message) -> Result<(), End> {
        let started = match &message {
            Message::FsRead { path, limit } | Message::FsOpenRead { path, limit } => {
                Some(fs::start_read(path, *limit, self.user))
            }
            Message::FsList { path } => Some(fs::start_list(path, self.user)),
            Message::FsWrite { path, mode } | Message::FsOpenWrite { path, mode } => {
                Some(fs::start_write(path, *mode, self.user))
            }
            _ => None,
        };
        match started {
            Some(result) => {
                self.fresh(id)?;
                match result {
                    Ok(job) => self.start_job(id, &message, job),
                    Err(refusal) => {
                        // A refused write's data frames still arrive: drop them quietly.
                        if matches!(message, Message::FsWrite { .. } | Message::FsOpenWrite { .. }) {
                            self.jobs.insert(id, (Job::Failed, 0));
                        }
                        self.send(id, refusal)
                    }
                }
            }
            None => match message {
                Message::FsData { data } => {
                    let Some((job, _)) = self.jobs.get_mut(&id) else { return Ok(()) };
                    if matches!(job, Job::Failed) {
                        return Ok(());
                    }
                    match fs::write_chunk(job, &data) {
                        Ok(()) => self.send(
                            id,
                            Message::Credit { bytes: u32::try_from(data.len()).unwrap_or(u32::MAX) },
                        ),
                        Err(refusal) => {
                            let job = std::mem::replace(job, Job::Failed);
                            fs::abandon(job, self.user);
                            self.send(id, refusal)
                        }
                    }
                }
                Message::FsEnd => match self.jobs.remove(&id) {
                    Some((job @ Job::Write { .. }, _)) => {
                        let reply = fs::finish_write(job, self.user)
                            .map_or_else(|refusal| refusal, |()| Message::FsDone);
                        self.send(id, reply)
                    }
                    _ => Ok(()),
                },
                other => {
                    let reply = fs::immediate(&other, self.user);
                    self.send(id, reply)
                }
            },
        }
    }

    /// Keeps a file request's job, or for `FsOpenRead` and `FsOpenWrite` hands its file to
    /// the host where it can (`fs::handle`): a read is then over once its descriptor has
    /// gone, a write waits for `FsEnd` (or the host's drop) as any write does.
    fn start_job(&mut self, id: u32, message: &Message, job: Job) -> Result<(), End> {
        let open_read = matches!(message, Message::FsOpenRead { .. });
        let open_write = matches!(message, Message::FsOpenWrite { .. });
        let handed = if (open_read || open_write) && self.passes_fds { fs::handle(&job) } else { None };
        // A copy that cannot be made (out of descriptors) is no reason to fail: stream then.
        if let Some((file, size)) = handed.and_then(|(file, size)| Some((file.try_clone().ok()?, size))) {
            if open_read {
                self.send_with_fd(id, Message::FsHandle { size, passed: true }, &file)?;
                return self.send(id, Message::FsDone);
            }
            self.jobs.insert(id, (job, 0));
            return self.send_with_fd(id, Message::FsHandle { size, passed: true }, &file);
        }
        self.jobs.insert(id, (job, 0));
        if open_write {
            // No descriptor: the bytes come in FsData frames, as for FsWrite.
            return self.send(id, Message::FsHandle { size: 0, passed: false });
        }
        Ok(())
    }

    /// Reads what the host sent, up to [`INPUT_BUF`] bytes, and handles every frame in it: a
    /// spawn and its credit cost one turn, not four (a read for each header and each body,
    /// each turn polling every command's pipes: issue #28).
    fn read_host(&mut self) -> Result<(), End> {
        // One buffer for the session's life: a file's data frames are a MiB each, and a
        // fresh zeroed buffer per read cost as much as the read.
        if self.input_buf.is_empty() {
            self.input_buf = vec![0; INPUT_BUF];
        }
        let n = match self.input.read(&mut self.input_buf) {
            Ok(0) => return Err(End::HostGone),
            Ok(n) => n,
            // A socket stream's input shares the output's non-blocking flag (one open file).
            Err(e) if matches!(e.kind(), io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock) => {
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        let mut at = 0;
        while at < n {
            // What the decoder wants at a time: it then holds at most one frame.
            let take = self.decoder.wants().clamp(1, n - at);
            self.decoder.push(&self.input_buf[at..at + take]);
            at += take;
            while let Some(frame) = self.decoder.next_frame()? {
                self.handle(frame)?;
            }
        }
        Ok(())
    }

    fn handle(&mut self, frame: Frame) -> Result<(), End> {
        let Frame { id, message } = frame;
        if !self.greeted {
            return match message {
                Message::Hello { version, user } if version == VERSION => {
                    self.greeted = true;
                    self.user = user;
                    let pid = u32::try_from(sys::pid()).unwrap_or(0);
                    self.send(0, Message::HelloAck { version: VERSION, pid })
                }
                Message::Hello { version, .. } => {
                    Err(End::Protocol(format!("host speaks version {version}, sandboxd speaks {VERSION}")))
                }
                other => Err(End::Protocol(format!("{:?} before Hello", other.kind()))),
            };
        }
        match message {
            Message::Spawn(spec) => self.spawn(id, &spec),
            Message::Stdin { data } => {
                let Some(cmd) = self.cmds.get_mut(&id) else { return Ok(()) };
                if cmd.stdin_eof || cmd.stdin_buf.len() + cmd.channel_buf.len() + data.len() > STDIN_WINDOW {
                    return Err(End::Protocol(format!("command {id}: stdin past its window or its end")));
                }
                if cmd.stdin.is_some() {
                    cmd.stdin_buf.extend_from_slice(&data);
                }
                Ok(())
            }
            Message::ControlIn { data } => {
                let Some(cmd) = self.cmds.get_mut(&id) else { return Ok(()) };
                if cmd.stdin_buf.len() + cmd.channel_buf.len() + data.len() > STDIN_WINDOW {
                    return Err(End::Protocol(format!("command {id}: control input past its window")));
                }
                if cmd.channel.is_some() {
                    cmd.channel_buf.extend_from_slice(&data);
                }
                Ok(())
            }
            Message::StdinEof => {
                if let Some(cmd) = self.cmds.get_mut(&id) {
                    cmd.stdin_eof = true;
                    if cmd.stdin_buf.is_empty() {
                        cmd.stdin = None;
                    }
                }
                Ok(())
            }
            Message::Signal { signal } => {
                if let Some(cmd) = self.cmds.get_mut(&id) {
                    signal_shepherd(cmd, signal);
                    if signal == sys::SIGKILL && cmd.reports.is_some() {
                        // A stopped shepherd could not act on it.
                        sys::signal_process(cmd.shepherd, sys::SIGCONT);
                        cmd.kill_asked.get_or_insert_with(Instant::now);
                    }
                } else if let Some((job, _)) = self.jobs.remove(&id) {
                    // A signal to a file request cancels it: the host stopped waiting.
                    fs::abandon(job, self.user);
                }
                Ok(())
            }
            Message::Credit { bytes } => {
                if let Some(cmd) = self.cmds.get_mut(&id) {
                    cmd.credit = cmd.credit.saturating_add(u64::from(bytes));
                } else if let Some((_, credit)) = self.jobs.get_mut(&id) {
                    *credit = credit.saturating_add(u64::from(bytes));
                }
                Ok(())
            }
            Message::Ping { nonce } => self.send(id, Message::Pong { nonce }),
            Message::Detach if id == 0 => {
                // In a --listen-fd session this changes nothing: its end never ends sandboxd.
                if self.lifetime.is_some() {
                    self.host = Host::Detached;
                }
                self.send(0, Message::Detached)
            }
            Message::Detach => Err(End::Protocol(format!("Detach with id {id}, not 0"))),
            Message::Hello { .. } => Err(End::Protocol("a second Hello".into())),
            Message::FsRead { .. }
            | Message::FsWrite { .. }
            | Message::FsData { .. }
            | Message::FsEnd
            | Message::FsList { .. }
            | Message::FsMkdir { .. }
            | Message::FsRemove { .. }
            | Message::FsStat { .. }
            | Message::FsOpenRead { .. }
            | Message::FsOpenWrite { .. } => self.file_request(id, message),
            reply => Err(End::Protocol(format!("{:?} is sandboxd's to send", reply.kind()))),
        }
    }

    fn spawn(&mut self, id: u32, spec: &Spawn) -> Result<(), End> {
        self.fresh(id)?;
        if self.cmds.len() >= MAX_COMMANDS {
            let message = format!("{MAX_COMMANDS} commands are already running").into_bytes();
            return self.send(id, Message::Failed { failure: Failure::InvalidInput, message });
        }
        if let Some(why) = invalid(spec) {
            return self.send(id, Message::Failed { failure: Failure::InvalidInput, message: why.into() });
        }
        let spec = Spawn { user: spec.user.or(self.user), ..spec.clone() };
        match start(&spec) {
            Ok(cmd) => {
                self.cmds.insert(id, cmd);
                Ok(())
            }
            Err(e) => {
                self.send(id, Message::Failed { failure: Failure::Io, message: e.to_string().into_bytes() })
            }
        }
    }

    fn read_report(&mut self, id: u32) -> Result<(), End> {
        let Some(cmd) = self.cmds.get_mut(&id) else { return Ok(()) };
        let Some(reports) = cmd.reports.as_mut() else { return Ok(()) };
        let mut buf = [0u8; REPORT_LEN];
        // Reports are written whole and are smaller than PIPE_BUF, so a read gets all of one.
        // A read that would block or was interrupted read nothing: the next turn looks again
        // (only end-of-file, a part of a report or garbage mean the shepherd is gone).
        let report = match reports.read(&mut buf) {
            Ok(REPORT_LEN) => Report::decode(buf),
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {
                return Ok(());
            }
            _ => None,
        };
        let reply = match report {
            Some(Report::Spawned(pid)) => Some(Message::Spawned { pid: u32::try_from(pid).unwrap_or(0) }),
            Some(Report::SpawnFailed(errno)) => {
                cmd.reports = None;
                cmd.exit = Some(spawn_failure(errno));
                None
            }
            Some(Report::SetupFailed(errno)) => {
                cmd.reports = None;
                let why = io::Error::from_raw_os_error(errno);
                let message = format!(
                    "sandboxd could not set up the command's shepherd (it needs a child subreaper, \
                     which gVisor 20221219 refuses outside init): {why}"
                );
                cmd.exit = Some(Message::Failed { failure: Failure::Io, message: message.into_bytes() });
                None
            }
            Some(Report::Exposed(why)) => {
                cmd.reports = None;
                cmd.exit =
                    Some(Message::Failed { failure: Failure::Exposed, message: why.message().into_bytes() });
                None
            }
            Some(Report::Exited { ended, oom_killed }) => {
                cmd.reports = None;
                let status = match ended {
                    Ended::Code(c) => Status::Code(c),
                    Ended::Signal(s) => Status::Signal(s),
                };
                cmd.exit = Some(Message::Exit { status, oom_killed });
                None
            }
            None => {
                // The shepherd died without a report: the command killed it (same uid). Its
                // processes were reparented to sandboxd; reap() kills them.
                cmd.reports = None;
                cmd.exit = Some(Message::Failed {
                    failure: Failure::Io,
                    message: b"the command's shepherd was killed; its processes were killed too".to_vec(),
                });
                self.kill_orphans();
                // Some may not be reparented yet: the next child events look again.
                self.orphans = true;
                None
            }
        };
        match reply {
            Some(message) => self.send(id, message),
            None => Ok(()),
        }
    }

    fn read_output(&mut self, id: u32, index: usize) -> Result<(), End> {
        let Some(cmd) = self.cmds.get_mut(&id) else { return Ok(()) };
        // The control channel waits until stdout and stderr hold nothing: what the command wrote
        // there before it wrote here must reach the host first.
        if cmd.outputs.get(index).is_some_and(|p| p.stream == Stream::Control)
            && cmd.outputs.iter().any(|p| p.stream != Stream::Control && sys::pending(&p.file) > 0)
        {
            return Ok(());
        }
        // Another of the command's pipes may have taken the credit in this turn.
        if cmd.credit < u64::from(MIN_FRAME_CREDIT) {
            return Ok(());
        }
        let Some(pipe) = cmd.outputs.get_mut(index) else { return Ok(()) };
        let want = usize::try_from(cmd.credit).unwrap_or(usize::MAX).min(MAX_CHUNK);
        match pipe.file.read(&mut self.scratch[..want]) {
            Ok(0) => {
                cmd.outputs.remove(index);
                Ok(())
            }
            Ok(n) => {
                // n <= credit, and credit >= MIN_FRAME_CREDIT (checked above).
                cmd.credit -= frame_credit(n);
                let stream = pipe.stream;
                let data = self.scratch[..n].to_vec();
                self.send(id, Message::Output { stream, data })
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => {
                Ok(())
            }
            Err(_) => {
                cmd.outputs.remove(index);
                Ok(())
            }
        }
    }

    /// Writes buffered stdin (or control channel) bytes, returning their credit to the host.
    fn write_input(&mut self, id: u32, channel: bool) -> Result<(), End> {
        let Some(cmd) = self.cmds.get_mut(&id) else { return Ok(()) };
        let (target, buf) = if channel {
            (&mut cmd.channel, &mut cmd.channel_buf)
        } else {
            (&mut cmd.stdin, &mut cmd.stdin_buf)
        };
        let Some(w) = target.as_mut() else { return Ok(()) };
        match w.write(buf) {
            Ok(n) => {
                buf.drain(..n);
                if !channel && cmd.stdin_buf.is_empty() && cmd.stdin_eof {
                    cmd.stdin = None;
                }
                let bytes = u32::try_from(n).unwrap_or(u32::MAX);
                self.send(id, Message::Credit { bytes })
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => {
                Ok(())
            }
            Err(_) => {
                // The command closed its end (EPIPE): what is left will never be read.
                *target = None;
                *buf = Vec::new();
                Ok(())
            }
        }
    }

    /// Sends `Exit` (or the spawn failure) for every command whose report is in and whose
    /// output is drained, and forgets it.
    fn finish_done(&mut self) -> Result<(), End> {
        let done: Vec<u32> = self.cmds.iter().filter(|(_, c)| c.done()).map(|(&id, _)| id).collect();
        for id in done {
            if let Some(mut cmd) = self.cmds.remove(&id)
                && let Some(exit) = cmd.exit.take()
            {
                self.send(id, exit)?;
            }
        }
        Ok(())
    }

    /// Reaps every child that ended: shepherds, session children, and orphans of a killed
    /// shepherd.
    fn reap(&mut self) {
        let mut byte = [0u8; 64];
        while matches!(self.children.read(&mut byte), Ok(n) if n > 0) {}
        while let Ok(Some((pid, ended))) = sys::reap_or_continue() {
            let Some(ended) = ended else { continue };
            if let Some(listener) = self.lifetime.as_mut().and_then(|l| l.listener.as_mut())
                && listener.is_session(pid)
            {
                listener.reaped(pid);
                // A session child that was killed could not kill its commands: their
                // processes come here once its shepherds die with it.
                self.orphans |= matches!(ended, Ended::Signal(_));
            }
        }
        // A shepherd the command killed leaves its processes to sandboxd; they are reparented
        // before sandboxd hears of the death, so this is the place to find them, and the
        // children of an orphan killed here arrive with its death's event.
        if self.orphans {
            self.orphans = self.kill_orphans() > 0;
        }
    }

    /// Kills this session's commands and file requests and waits for their shepherds, which
    /// end only once every process of their command is gone.
    fn kill_commands(&mut self) {
        for (_, (job, _)) in std::mem::take(&mut self.jobs) {
            fs::abandon(job, self.user);
        }
        for cmd in self.cmds.values_mut() {
            signal_shepherd(cmd, sys::SIGKILL);
            cmd.control = None;
        }
        // Without its report pipe a shepherd is gone or going, and may have been reaped
        // already: its pid could name another child by now.
        let mut left: Vec<i32> = std::mem::take(&mut self.cmds)
            .into_values()
            .filter(|c| c.reports.is_some())
            .map(|c| c.shepherd)
            .collect();
        for &pid in &left {
            // A stopped shepherd could not act on the kill.
            sys::signal_process(pid, sys::SIGCONT);
        }
        let asked = Instant::now();
        while !left.is_empty() && asked.elapsed() < KILL_GRACE {
            left.retain(|&pid| !sys::try_reap(pid));
            if !left.is_empty() {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        }
        // Shepherds that did not end in time (a root command stopped its own again) are killed
        // outright; their processes are orphans now, which the caller's sweep kills.
        for pid in left {
            sys::signal_process(pid, sys::SIGKILL);
            sys::wait_for(pid);
        }
    }

    fn kill_everything(&mut self) {
        self.kill_commands();
        if let Some(listener) = self.lifetime.as_mut().and_then(|l| l.listener.as_mut()) {
            listener.kill_sessions();
        }
        // Whatever is left is an orphan (a killed session child's processes, reparented here):
        // kill until no child is left, so nothing outlives sandboxd, init or not.
        loop {
            self.kill_orphans();
            match sys::reap_any() {
                Ok(Some(_)) => {}
                Ok(None) => std::thread::sleep(std::time::Duration::from_millis(1)),
                Err(_) => break,
            }
        }
    }

    /// Kills sandboxd's children that are neither a live shepherd nor a session child:
    /// processes reparented to sandboxd because the command killed its shepherd, or because
    /// a session child was killed. Returns how many it found.
    fn kill_orphans(&self) -> usize {
        let listener = self.lifetime.as_ref().and_then(|l| l.listener.as_ref());
        let mut found = 0;
        for pid in shepherd::children_of(sys::pid()) {
            let shepherd = self.cmds.values().any(|c| c.shepherd == pid && c.reports.is_some());
            if !shepherd && !listener.is_some_and(|l| l.is_session(pid)) {
                sys::signal_process(pid, sys::SIGKILL);
                found += 1;
            }
        }
        found
    }
}

fn signal_shepherd(cmd: &mut Cmd, signal: i32) {
    if let Some(control) = cmd.control.as_mut()
        && control.write_all(&signal.to_be_bytes()).is_err()
    {
        cmd.control = None;
    }
}

fn invalid(spec: &Spawn) -> Option<&'static str> {
    if spec.argv.is_empty() || spec.argv[0].is_empty() {
        return Some("the command is empty");
    }
    let strings = spec.argv.iter().chain(spec.cwd.iter());
    let pairs = spec.env.iter().chain(&spec.secrets);
    if strings.clone().any(|s| s.contains(&0)) || pairs.clone().any(|(k, v)| k.contains(&0) || v.contains(&0))
    {
        return Some("an argument, variable or working directory holds a NUL byte");
    }
    if pairs.clone().any(|(k, _)| k.is_empty() || k.contains(&b'=')) {
        return Some("an environment variable name is empty or holds '='");
    }
    None
}

fn spawn_failure(errno: i32) -> Message {
    let failure = match errno {
        2 | 20 => Failure::NotFound,         // ENOENT, ENOTDIR
        1 | 13 => Failure::PermissionDenied, // EPERM, EACCES
        _ => Failure::Io,
    };
    let message = io::Error::from_raw_os_error(errno).to_string().into_bytes();
    Message::Failed { failure, message }
}

fn start(spec: &Spawn) -> io::Result<Cmd> {
    let (stdin_r, stdin_w) = match spec.stdin {
        StdinMode::Pipe => {
            let (r, w) = sys::pipe()?;
            sys::set_nonblocking(&w)?;
            (r, Some(File::from(w)))
        }
        StdinMode::Null => (OwnedFd::from(File::open("/dev/null")?), None),
    };
    let (out_r, out_w) = sys::pipe()?;
    let (err_r, err_w) = sys::pipe()?;
    let (control_r, control_w) = sys::pipe()?;
    let (report_r, report_w) = sys::pipe()?;
    for fd in [&out_r, &err_r] {
        sys::set_nonblocking(fd)?;
    }
    let (channel, control_channel) = if spec.control {
        let (ours, theirs) = sys::socket_pair()?;
        sys::set_nonblocking(&ours)?;
        (Some(File::from(ours)), Some(theirs))
    } else {
        (None, None)
    };
    let fds = shepherd::Fds {
        stdin: stdin_r,
        stdout: out_w,
        stderr: err_w,
        control: control_r,
        report: report_w,
        control_channel,
    };
    // `start` drops the child's ends in the parent when `fds` goes out of scope there.
    let pid = shepherd::start(spec, fds)?;
    let mut outputs = vec![
        Pipe { file: File::from(out_r), stream: Stream::Stdout },
        Pipe { file: File::from(err_r), stream: Stream::Stderr },
    ];
    if let Some(c) = &channel {
        outputs.push(Pipe { file: c.try_clone()?, stream: Stream::Control });
    }
    Ok(Cmd {
        shepherd: pid,
        control: Some(File::from(control_w)),
        reports: Some(File::from(report_r)),
        outputs,
        stdin: stdin_w,
        stdin_buf: Vec::new(),
        stdin_eof: spec.stdin == StdinMode::Null,
        channel,
        channel_buf: Vec::new(),
        credit: 0,
        exit: None,
        kill_asked: None,
    })
}
