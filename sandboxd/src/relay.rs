//! `sandboxd relay`: hands every TCP connection accepted on a loopback address inside the
//! sandbox over to the egress gate, through the Unix socket sandboxio binds into the sandbox.
//!
//! Tools read `HTTPS_PROXY=http://127.0.0.1:PORT` and speak TCP, and the sandbox's network
//! namespace has no route anywhere else. For each client the relay connects to the gate's
//! socket and sends one byte, [`HANDOVER`], with the client's TCP socket attached
//! (`SCM_RIGHTS`), then closes its own descriptors: from then on the gate reads and writes the
//! client's socket itself, and no byte of the connection passes through this process.
//!
//! Why hand the socket over rather than copy: a copy made the connection two user-space hops
//! long (this relay, then the gate), and on a machine whose cores are busy the throughput
//! follows the CPU each byte costs: a 100 MB download through both hops ran at a third of a
//! direct connection's rate. With the socket handed over, the gate moves the bytes between
//! two TCP sockets with `splice(2)`, which costs about what the direct path costs
//! (`scripts/egress-hop-cost`).
//!
//! The relay decides nothing and holds no privilege: it runs as a command of the sandbox, as
//! the sandbox's user, and code in the sandbox could reach the socket without it, or hand the
//! gate a socket of its own. Every decision is the gate's, which also bounds how many
//! connections it serves. The relay holds nothing per connection, so its memory is flat
//! whatever the clients do.

use std::io::{self, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use crate::sys;

/// The byte a hand-over carries: no proxy request starts with it (a request line starts with
/// a method's letters), so the gate tells a handed-over socket from a client speaking HTTP on
/// its socket directly.
pub const HANDOVER: u8 = 0;

/// How long the relay waits after a failed `accept` (out of descriptors, say) before it
/// accepts again.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// Runs the relay until the listener cannot be bound: accepts on `listen`, hands each client
/// over to the gate at `to`. Prints `listening` and a newline on stdout once clients can
/// connect. A client the gate cannot take (the gate is gone) is closed at once.
///
/// # Errors
///
/// Binding the listener, or saying so on stdout, failed.
pub fn run(listen: &str, to: &Path) -> io::Result<()> {
    let listener = TcpListener::bind(listen)?;
    let mut stdout = io::stdout();
    stdout.write_all(b"listening\n")?;
    stdout.flush()?;
    loop {
        match listener.accept() {
            Ok((client, _)) => {
                // On failure the client is dropped here: its connection closes, nothing hangs.
                let _ = hand_over(&client, to);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => std::thread::sleep(ACCEPT_RETRY),
        }
    }
}

/// Connects to the gate at `to` and sends it `client`.
fn hand_over(client: &TcpStream, to: &Path) -> io::Result<()> {
    let gate = UnixStream::connect(to)?;
    sys::send_fd(&gate, HANDOVER, client)
}
