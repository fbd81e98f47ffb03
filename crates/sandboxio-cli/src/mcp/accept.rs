//! The accept loop of `sandboxio mcp --transport http`, bounded before any request is read:
//! at most `max` connections are served at once (one more is answered `503` and closed at
//! once), and an accept error that is not about one connection (the process is out of file
//! descriptors, `EMFILE`) backs off instead of retrying at once, which would spin a core for
//! as long as the condition lasts.

use std::future::Future;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The first pause after an accept error; each further error in a row doubles it.
const FIRST_BACKOFF: Duration = Duration::from_millis(10);
/// The longest pause: the loop then tries about once a second (and logs as often).
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// What a client over the connection cap reads before the server closes the connection.
const BUSY: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\nRetry-After: 1\r\n\r\n";

/// Whether `e` concerns only the connection being accepted (the next accept may succeed).
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::ConnectionRefused | ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset
    )
}

/// Accepts on `listener` until `stop` resolves, spawning `serve` for each connection with a
/// permit that is released when it ends; at most `max` at once.
///
/// # Cancel safety
///
/// Dropping the future stops accepting; connections already spawned go on.
pub async fn accept_until<S, F>(
    listener: &TcpListener,
    max: usize,
    mut serve: S,
    stop: impl Future<Output = ()>,
) where
    S: FnMut(TcpStream, SocketAddr, OwnedSemaphorePermit) -> F,
    F: Future<Output = ()> + Send + 'static,
{
    let permits = Arc::new(Semaphore::new(max));
    let mut backoff = FIRST_BACKOFF;
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut stop => return,
        };
        match accepted {
            Ok((stream, peer)) => {
                backoff = FIRST_BACKOFF;
                if let Ok(permit) = Arc::clone(&permits).try_acquire_owned() {
                    tokio::spawn(serve(stream, peer, permit));
                } else {
                    // Best effort and without waiting: a client that does not read gets a
                    // closed connection all the same.
                    let _ = stream.try_write(BUSY);
                    eprintln!(
                        "sandboxio mcp: refused {peer}: {max} connections are open (--max-connections)"
                    );
                }
            }
            Err(e) if is_connection_error(&e) => {}
            Err(e) => {
                eprintln!("sandboxio mcp: accept failed ({e}); retrying in {} ms", backoff.as_millis());
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = &mut stop => return,
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}
