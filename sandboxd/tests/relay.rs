//! `sandboxd relay`: each TCP connection on loopback is handed over to the Unix socket's
//! server (one byte, the client's socket attached), which then talks to the client itself,
//! byte for byte both ways with half-closes; a missing socket ends the client's connection at
//! once.

use std::io::{Read, Write};
use std::mem::MaybeUninit;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The relay process, killed when dropped.
struct Relay(Child);

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts the relay and waits until it accepts.
fn relay(port: u16, socket: &Path) -> Relay {
    let child = Command::new(env!("CARGO_BIN_EXE_sandboxd"))
        .args(["relay", &format!("127.0.0.1:{port}")])
        .arg(socket)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut relay = Relay(child);
    let mut said = [0u8; 10];
    relay.0.stdout.take().unwrap().read_exact(&mut said).unwrap();
    assert_eq!(&said, b"listening\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the relay never listened");
        std::thread::sleep(Duration::from_millis(10));
    }
    relay
}

/// What one connection to the gate's socket carried: its byte, and the sockets attached.
fn receive(conn: &UnixStream) -> (Vec<u8>, Vec<TcpStream>) {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, recvmsg};
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut data = [0u8; 16];
    let got =
        recvmsg(conn, &mut [std::io::IoSliceMut::new(&mut data)], &mut control, RecvFlags::CMSG_CLOEXEC)
            .unwrap();
    let mut sockets = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = message {
            sockets.extend(fds.map(TcpStream::from));
        }
    }
    (data[..got.bytes].to_vec(), sockets)
}

/// A gate stand-in: takes each handed-over client socket and echoes it back exactly, after a
/// `>` prefix, half-closing when the client has.
fn echo_server(path: &Path) {
    let listener = UnixListener::bind(path).unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            std::thread::spawn(move || {
                let (byte, mut sockets) = receive(&conn);
                assert_eq!(
                    (byte.as_slice(), sockets.len()),
                    (&[0u8][..], 1),
                    "one hand-over byte, one socket"
                );
                drop(conn);
                let mut conn = sockets.pop().unwrap();
                let mut out = conn.try_clone().unwrap();
                out.write_all(b">").unwrap();
                let _ = std::io::copy(&mut conn, &mut out);
                let _ = out.shutdown(Shutdown::Write);
            });
        }
    });
}

fn socket_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sandboxd-relay-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("gate.sock")
}

#[test]
fn connections_are_relayed_byte_for_byte_with_half_closes() {
    let path = socket_path("echo");
    echo_server(&path);
    let port = free_port();
    let _relay = relay(port, &path);
    let workers: Vec<_> = (0u8..16)
        .map(|n| {
            std::thread::spawn(move || {
                let data: Vec<u8> = (0..300_000u32).map(|i| i.to_le_bytes()[0] ^ n).collect();
                let mut conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
                conn.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                let mut reader = conn.try_clone().unwrap();
                let reading = std::thread::spawn(move || {
                    let mut got = Vec::new();
                    reader.read_to_end(&mut got).unwrap();
                    got
                });
                conn.write_all(&data).unwrap();
                // The half-close travels to the server, whose own close travels back.
                conn.shutdown(Shutdown::Write).unwrap();
                let got = reading.join().unwrap();
                assert_eq!(got.len(), data.len() + 1, "connection {n}");
                assert!(got[0] == b'>' && got[1..] == data[..], "connection {n} came back changed");
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

#[test]
fn a_missing_gate_ends_the_client_connection_at_once() {
    let path = socket_path("missing");
    // The control: with the gate there, the relay answers.
    echo_server(&path);
    let port = free_port();
    let _relay = relay(port, &path);
    let mut conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut first = [0u8; 1];
    conn.read_exact(&mut first).unwrap();
    assert_eq!(&first, b">");
    // Without it: the connection is accepted and closed, never left hanging.
    std::fs::remove_file(&path).unwrap();
    let mut conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = Vec::new();
    let read = conn.read_to_end(&mut buf);
    assert!(
        matches!(read, Ok(0)) || read.is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "{buf:?}"
    );
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

#[test]
fn bad_relay_arguments_are_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_sandboxd")).args(["relay", "nowhere", "/s"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not an IP address and port"));
}
