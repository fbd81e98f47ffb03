//! The client against the sandboxd that build.rs built (and stand-in peers).

use std::process::{Child, Command, Stdio};

use futures_lite::future::block_on;

use super::*;

struct Daemon {
    child: Child,
    client: Client,
    /// The directory holding the binary, removed on drop; `None` for a stand-in peer.
    dir: Option<std::path::PathBuf>,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn daemon_with(program: &str, args: &[&str], dir: Option<std::path::PathBuf>) -> Daemon {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let client = Client::start(child.stdout.take().unwrap(), child.stdin.take().unwrap(), None).unwrap();
    Daemon { child, client, dir }
}

/// sandboxd as `build.rs` left it in `OUT_DIR`. Not a copy written here: writing an
/// executable while another test thread forks lets the child hold the file open for
/// writing, and executing it then fails with `ETXTBSY`.
fn daemon() -> Daemon {
    static N: AtomicU32 = AtomicU32::new(0);
    let binary = env!("SANDBOXIO_SANDBOXD");
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("sandboxd-client-{}-{n}", std::process::id()));
    std::fs::create_dir(&dir).unwrap();
    let d = daemon_with(binary, &[], Some(dir));
    block_on(d.client.hello()).unwrap();
    d
}

fn spec(argv: &[&str]) -> Spawn {
    Spawn {
        argv: argv.iter().map(|a| a.as_bytes().to_vec()).collect(),
        env: vec![(b"PATH".to_vec(), b"/usr/bin:/bin".to_vec())],
        ..Spawn::default()
    }
}

fn collect(mut cmd: Cmd) -> (Vec<u8>, Vec<u8>, Event) {
    block_on(async {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        loop {
            match cmd.next().await.expect("a last event") {
                Event::Spawned(_) => {}
                Event::Output(Stream::Stdout, d) => out.extend(d),
                Event::Output(Stream::Stderr, d) => err.extend(d),
                last => return (out, err, last),
            }
        }
    })
}

#[test]
fn a_command_runs_with_exact_output_and_status() {
    let d = daemon();
    let cmd = d.client.spawn(spec(&["sh", "-c", "printf out; printf err >&2; exit 4"])).unwrap();
    let (out, err, last) = collect(cmd);
    assert_eq!((out.as_slice(), err.as_slice()), (&b"out"[..], &b"err"[..]));
    assert_eq!(last, Event::Exit { status: Status::Code(4), oom_killed: false });
    block_on(d.client.ping()).unwrap();
}

#[test]
fn large_output_arrives_whole_through_a_bounded_window() {
    let d = daemon();
    let cmd = d.client.spawn(spec(&["head", "-c", "20000000", "/dev/zero"])).unwrap();
    let id = cmd.id;
    let mut cmd = cmd;
    let (mut total, mut most_queued) = (0usize, 0usize);
    block_on(async {
        while let Some(event) = cmd.next().await {
            most_queued = most_queued.max(lock(&d.client.inner.state).cmds.get(&id).map_or(0, |c| c.queued));
            if let Event::Output(_, data) = event {
                total += data.len();
            }
        }
    });
    assert_eq!(total, 20_000_000);
    assert!(most_queued <= OUTPUT_WINDOW as usize, "{most_queued} bytes queued");
}

#[test]
fn stdin_larger_than_the_window_reaches_the_command() {
    let d = daemon();
    let mut s = spec(&["sh", "-c", "wc -c"]);
    s.stdin = super::super::proto::StdinMode::Pipe;
    let cmd = d.client.spawn(s).unwrap();
    let data = vec![7u8; 1_000_000];
    block_on(cmd.write_stdin(&data)).unwrap();
    cmd.close_stdin().unwrap();
    let (out, _, last) = collect(cmd);
    assert_eq!(String::from_utf8_lossy(&out).trim(), "1000000");
    assert_eq!(last, Event::Exit { status: Status::Code(0), oom_killed: false });
}

#[test]
fn a_kill_is_a_signal_death_and_sandboxd_dying_is_gone() {
    let mut d = daemon();
    let cmd = d.client.spawn(spec(&["sleep", "1000"])).unwrap();
    cmd.signal(9).unwrap();
    let (_, _, last) = collect(cmd);
    assert_eq!(last, Event::Exit { status: Status::Signal(9), oom_killed: false });

    // sandboxd is no PID-namespace init here, so killing it orphans the command to the
    // host's init: a short sleep keeps that from outliving the test by much.
    let cmd = d.client.spawn(spec(&["sleep", "2"])).unwrap();
    block_on(d.client.ping()).unwrap();
    d.child.kill().unwrap();
    let (_, _, last) = collect(cmd);
    assert!(matches!(last, Event::Gone(_)), "{last:?}");
    assert!(d.client.spawn(spec(&["true"])).is_err(), "a spawn after the end is refused");
}

#[test]
fn file_requests_round_trip_through_the_session() {
    let d = daemon();
    let dir = d.dir.clone().unwrap();
    let path = dir.join("data.bin");
    let path_bytes = path.to_str().unwrap().as_bytes().to_vec();
    let data: Vec<u8> = (0..700_000u32).map(|i| (i % 253) as u8).collect();
    let mut write = d.client.request(Message::FsWrite { path: path_bytes.clone(), mode: 0o600 }).unwrap();
    block_on(write.send_data(&data)).unwrap();
    write.finish().unwrap();
    assert_eq!(block_on(write.next()), Some(Event::Done));

    let mut read = d.client.request(Message::FsRead { path: path_bytes.clone(), limit: 1 << 30 }).unwrap();
    let mut back = Vec::new();
    let last = block_on(async {
        loop {
            match read.next().await.unwrap() {
                Event::Chunk(bytes) => back.extend(bytes),
                last => return last,
            }
        }
    });
    assert_eq!(last, Event::Done);
    assert_eq!(back, data);

    let mut stat = d.client.request(Message::FsStat { path: path_bytes }).unwrap();
    assert_eq!(
        block_on(stat.next()),
        Some(Event::Stat { file_type: FileType::File, size: 700_000, mode: 0o600 })
    );
    let missing = dir.join("missing").to_str().unwrap().as_bytes().to_vec();
    let mut read = d.client.request(Message::FsRead { path: missing, limit: 10 }).unwrap();
    assert!(matches!(block_on(read.next()), Some(Event::Failed(Failure::NotFound, _))));
}

/// sandboxd on a socket pair (its stdin and stdout), as `local://` runs it: files can be
/// handed over.
fn daemon_on_socket() -> Daemon {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("sandboxd-client-socket-{}-{n}", std::process::id()));
    std::fs::create_dir(&dir).unwrap();
    let (host, inside) = UnixStream::pair().unwrap();
    let inside = OwnedFd::from(inside);
    let child = Command::new(env!("SANDBOXIO_SANDBOXD"))
        .stdin(Stdio::from(inside.try_clone().unwrap()))
        .stdout(Stdio::from(inside))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let client = Client::start_socket(host, None).unwrap();
    block_on(client.hello()).unwrap();
    Daemon { child, client, dir: Some(dir) }
}

/// Reads `path` with `FsOpenRead`: what came, and whether its descriptor was handed over.
fn open_read(client: &Client, path: &std::path::Path, limit: u64) -> (Result<Vec<u8>, Event>, bool) {
    let path = path.to_str().unwrap().as_bytes().to_vec();
    let mut cmd = client.request(Message::FsOpenRead { path, limit }).unwrap();
    let (mut data, mut handed) = (Vec::new(), false);
    block_on(async {
        loop {
            match cmd.next().await.unwrap() {
                Event::Handle(Some(file), _) => {
                    handed = true;
                    std::io::Read::read_to_end(&mut file.into_file().unwrap(), &mut data).unwrap();
                }
                Event::Chunk(bytes) => data.extend(bytes),
                Event::Done => return (Ok(data), handed),
                other => return (Err(other), handed),
            }
        }
    })
}

#[test]
fn on_a_socket_files_are_handed_over_and_proc_files_are_streamed() {
    let d = daemon_on_socket();
    assert!(d.client.passes_fds());
    let path = d.dir.clone().unwrap().join("handed.bin");
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let mut write = d
        .client
        .request(Message::FsOpenWrite { path: path.to_str().unwrap().as_bytes().to_vec(), mode: 0o640 })
        .unwrap();
    let Some(Event::Handle(Some(file), 0)) = block_on(write.next()) else {
        panic!("sandboxd did not hand the new file over");
    };
    std::io::Write::write_all(&mut file.into_file().unwrap(), &data).unwrap();
    // Not in place until the end: a new file is written under a temporary name.
    assert!(!path.exists(), "the file appeared before FsEnd");
    write.finish().unwrap();
    assert_eq!(block_on(write.next()), Some(Event::Done));
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777, 0o640);
    assert_eq!(open_read(&d.client, &path, 1 << 30), (Ok(data), true));

    // Over the limit: refused before anything is handed over.
    let (over, handed) = open_read(&d.client, &path, 10);
    assert!(matches!(over, Err(Event::Failed(Failure::TooLarge, _))), "{over:?}");
    assert!(!handed);
    // A /proc file (its contents depend on who reads) is streamed, never handed over;
    // the control: the same request on a disk file was handed over above.
    let (status, handed) = open_read(&d.client, std::path::Path::new("/proc/self/status"), 1 << 20);
    let (version, streamed) = open_read(&d.client, std::path::Path::new("/proc/version"), 1 << 20);
    assert!(matches!(status, Err(Event::Failed(Failure::PermissionDenied, _))), "{status:?}");
    assert!(!handed && !streamed, "a /proc file was handed over");
    assert!(version.unwrap().starts_with(b"Linux"));
}

#[test]
fn a_write_dropped_after_its_handover_leaves_no_file() {
    let d = daemon_on_socket();
    let path = d.dir.clone().unwrap().join("dropped.bin");
    let mut write = d
        .client
        .request(Message::FsOpenWrite { path: path.to_str().unwrap().as_bytes().to_vec(), mode: 0o644 })
        .unwrap();
    let Some(Event::Handle(Some(file), _)) = block_on(write.next()) else { panic!("not handed over") };
    std::io::Write::write_all(&mut file.into_file().unwrap(), b"half").unwrap();
    drop(write);
    block_on(d.client.ping()).unwrap();
    let left: Vec<_> =
        std::fs::read_dir(d.dir.as_ref().unwrap()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "a dropped write left {left:?}");
}

#[test]
fn a_peer_announcing_a_descriptor_it_did_not_pass_ends_the_session() {
    let (host, mut peer) = UnixStream::pair().unwrap();
    let client = Client::start_socket(host, None).unwrap();
    let mut write = client.request(Message::FsOpenWrite { path: b"/x".to_vec(), mode: 0o644 }).unwrap();
    let mut bytes = Frame::new(0, Message::HelloAck { version: VERSION, pid: 1 }).to_bytes().unwrap();
    bytes.extend(Frame::new(write.id, Message::FsHandle { size: 0, passed: true }).to_bytes().unwrap());
    peer.write_all(&bytes).unwrap();
    block_on(client.hello()).unwrap();
    let last = block_on(write.next());
    assert!(matches!(&last, Some(Event::Gone(why)) if why.contains("did not come")), "{last:?}");
    // The control: the same frame with its descriptor is a handover.
    let (host, peer) = UnixStream::pair().unwrap();
    let client = Client::start_socket(host, None).unwrap();
    let mut write = client.request(Message::FsOpenWrite { path: b"/x".to_vec(), mode: 0o644 }).unwrap();
    let hello = Frame::new(0, Message::HelloAck { version: VERSION, pid: 1 }).to_bytes().unwrap();
    (&peer).write_all(&hello).unwrap();
    let handle = Frame::new(write.id, Message::FsHandle { size: 0, passed: true }).to_bytes().unwrap();
    let file = std::fs::File::open("/dev/null").unwrap();
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = rustix::net::SendAncillaryBuffer::new(&mut space);
    let fds = [std::os::fd::AsFd::as_fd(&file)];
    assert!(control.push(rustix::net::SendAncillaryMessage::ScmRights(&fds)));
    let io = [std::io::IoSlice::new(&handle)];
    rustix::net::sendmsg(&peer, &io, &mut control, rustix::net::SendFlags::empty()).unwrap();
    block_on(client.hello()).unwrap();
    assert!(matches!(block_on(write.next()), Some(Event::Handle(Some(_), 0))));
}

#[test]
fn detach_is_answered_and_the_session_goes_on() {
    let d = daemon();
    block_on(d.client.detach()).unwrap();
    let cmd = d.client.spawn(spec(&["echo", "still here"])).unwrap();
    let (out, _, last) = collect(cmd);
    assert_eq!(out, b"still here\n");
    assert_eq!(last, Event::Exit { status: Status::Code(0), oom_killed: false });
    // A peer that ends instead of answering: detach reports the end, it does not hang.
    let gone = daemon_with("sh", &["-c", "head -c 12 >/dev/null"], None);
    assert!(block_on(gone.client.detach()).is_err());
}

/// A peer that sends `frames` one-byte output frames for request 1 (stdout and stderr in
/// turn, so none can be joined) within the credit the client grants it, and what the
/// client then says: `None` while the session lives, else why it ended.
fn one_byte_frames(frames: usize) -> Option<String> {
    let (read, mut write) = std::io::pipe().unwrap();
    let client = Client::start(read, std::io::sink(), None).unwrap();
    let cmd = client.spawn(spec(&["true"])).unwrap();
    let mut bytes = Frame::new(0, Message::HelloAck { version: VERSION, pid: 1 }).to_bytes().unwrap();
    for i in 0..frames {
        let stream = if i % 2 == 0 { Stream::Stdout } else { Stream::Stderr };
        bytes.extend(Frame::new(cmd.id, Message::Output { stream, data: vec![b'x'] }).to_bytes().unwrap());
    }
    write.write_all(&bytes).unwrap();
    drop(write);
    block_on(client.hello()).unwrap();
    // The stream's end ends the session after the frames: wait for it.
    while client.ended().is_none() {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let queued = lock(&client.inner.state).cmds.get(&cmd.id).map_or(0, |c| c.events.len());
    let why = client.ended().unwrap_or_default();
    if why.contains("more data than it was granted") {
        Some(why)
    } else {
        assert!(queued > frames);
        None
    }
}

#[test]
fn one_byte_output_frames_take_their_minimum_credit() {
    // Each frame takes MIN_FRAME_CREDIT of the window: a peer may send the window's worth
    // of them (the control: all are queued, nothing is refused) and not one more, so a
    // command writing a byte at a time holds the host to a bounded number of events.
    let allowed = OUTPUT_WINDOW as usize / super::super::proto::MIN_FRAME_CREDIT as usize;
    assert_eq!(one_byte_frames(allowed), None, "control: {allowed} frames fit the window");
    let why = one_byte_frames(allowed + 1).expect("a frame past the window's worth ends the session");
    assert!(why.contains("request 1"), "{why}");
}

#[test]
fn a_peer_that_sends_garbage_ends_the_session_with_a_reason() {
    let d = daemon_with("sh", &["-c", "printf '\\377\\377\\377\\377garbage'; sleep 5"], None);
    let why = block_on(d.client.hello()).unwrap_err();
    assert!(why.contains("malformed"), "{why}");
}
