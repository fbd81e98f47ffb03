//! The gate itself: one proxy connection from the sandbox, judged and then relayed.
//!
//! For each connection: read the request head ([`request`]), admit the destination
//! ([`decide::admit`]), resolve a name on the host and keep only the vetted addresses
//! ([`decide::vet`]), dial one of them, then either open the tunnel and check the TLS
//! `ClientHello`'s server name against the `CONNECT` host ([`sni`]), or forward the one
//! plain-HTTP request. Every refusal is answered at once (`400`, `403` or `502` with an
//! `X-Sandboxio-Egress` header naming the reason) or, once a tunnel is open, by closing it;
//! and every decision is reported as an [`Event`]. Nothing waits without a deadline before
//! the relay starts.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

use super::decide::{self, Reason, Refusal};
use super::handover::{self, Opening};
use super::request::{self, MAX_HEAD, ProxyRequest};
use super::resolve::{self, Resolve, SystemResolver};
use super::sni::{self, Hello, MAX_HELLO};
use crate::policy::address::Host;
use crate::policy::{AllowlistEntry, EgressResolver};

/// Bytes buffered per direction of a tunnel (tokio's default, 8 KiB, made a 100 MB download
/// through the gate a fifth as fast as a direct one), for the first [`LARGE_BUFFERED`]
/// connections a gate serves at once.
const RELAY_BUFFER: usize = 256 * 1024;

/// How many connections of one gate get [`RELAY_BUFFER`]s at once; the others get
/// [`SMALL_BUFFER`]s. A package install uses a few connections at a time; the sandbox's code
/// can hold the gate's limit of them, each full of bytes a destination does not read, and
/// with large buffers for all that held 128 MiB of the owner's memory per sandbox.
const LARGE_BUFFERED: usize = 8;

/// Bytes buffered per direction of the connections beyond [`LARGE_BUFFERED`].
const SMALL_BUFFER: usize = 16 * 1024;

/// What the gate decided about one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// Relayed to `addr`.
    Allowed { host: String, port: u16, addr: SocketAddr },
    /// Refused, with the reason's word and the words for a person.
    Refused { host: String, port: u16, reason: &'static str, detail: String },
}

/// A client connection of a gate: any byte stream (tests serve in-memory ones). A client on
/// the gate's socket is a Unix stream, or the TCP socket `sandboxd relay` handed over
/// (`handover.rs`); their tunnels the kernel relays (`splice.rs`).
pub(crate) trait Client: AsyncRead + AsyncWrite + Unpin {
    /// The socket this connection is, when the kernel can splice it.
    fn socket(&self) -> Option<Socket<'_>> {
        None
    }
}

/// A client socket a tunnel can be spliced from.
pub(crate) enum Socket<'a> {
    Unix(&'a UnixStream),
    Tcp(&'a TcpStream),
}

impl Client for UnixStream {
    fn socket(&self) -> Option<Socket<'_>> {
        Some(Socket::Unix(self))
    }
}

impl Client for TcpStream {
    fn socket(&self) -> Option<Socket<'_>> {
        Some(Socket::Tcp(self))
    }
}

impl Client for tokio::io::DuplexStream {}

/// A gate's policy and machinery, shared by its connections.
pub(crate) struct Gate {
    pub(crate) entries: Vec<AllowlistEntry>,
    pub(crate) resolver: Arc<dyn Resolve>,
    /// Whether an address the resolver gave is vetted as public although it is not (a test
    /// network's documentation-range hosts, `EgressResolver::treat_as_public`).
    pub(crate) treated_public: EgressResolver,
    /// Told of every decision (the sandbox's audit trail).
    pub(crate) events: Arc<dyn Fn(Event) + Send + Sync>,
    /// How long a client has to send its request head, and its `ClientHello`.
    pub(crate) read_timeout: Duration,
    /// How long a lookup, and a dial of one address, may take.
    pub(crate) dial_timeout: Duration,
    /// The most connections served at once (`server`).
    pub(crate) max_connections: usize,
    /// The connections that may relay with large buffers now ([`LARGE_BUFFERED`]).
    large_buffers: Arc<tokio::sync::Semaphore>,
}

/// The most connections a gate serves at once, by default: as many as `sandboxd relay`
/// relays.
pub(crate) const MAX_CONNECTIONS: usize = 256;

impl Gate {
    /// A gate for `entries` with the host's resolver, reporting to `events`, with 10-second
    /// deadlines and at most [`MAX_CONNECTIONS`] connections.
    pub(crate) fn new(entries: Vec<AllowlistEntry>, events: Arc<dyn Fn(Event) + Send + Sync>) -> Gate {
        Gate {
            entries,
            resolver: Arc::new(SystemResolver),
            treated_public: EgressResolver::system(),
            events,
            read_timeout: Duration::from_secs(10),
            dial_timeout: Duration::from_secs(10),
            max_connections: MAX_CONNECTIONS,
            large_buffers: Arc::new(tokio::sync::Semaphore::new(LARGE_BUFFERED)),
        }
    }

    /// The buffer size for a connection about to relay, and the permit that holds a large
    /// one until the connection ends.
    fn buffer(&self) -> (usize, Option<tokio::sync::OwnedSemaphorePermit>) {
        match Arc::clone(&self.large_buffers).try_acquire_owned() {
            Ok(permit) => (RELAY_BUFFER, Some(permit)),
            Err(_) => (SMALL_BUFFER, None),
        }
    }

    /// The same gate resolving through `resolver` (and vetting the addresses it treats as
    /// public as public).
    ///
    /// # Errors
    ///
    /// When the resolver's DNS client cannot be set up.
    pub(crate) fn with_resolver(mut self, resolver: &EgressResolver) -> std::io::Result<Gate> {
        self.resolver = resolve::resolver_for(resolver)?;
        self.treated_public = resolver.clone();
        Ok(self)
    }

    /// Serves one connection to the gate's socket to its end: the client socket it hands over,
    /// or the connection itself (`handover.rs`). The client has [`Gate::read_timeout`] to send
    /// its first bytes, and again to end its request head.
    pub(crate) async fn serve_socket(&self, stream: UnixStream) {
        let opening = tokio::time::timeout(self.read_timeout, handover::open(&stream))
            .await
            .unwrap_or_else(|_| Err(format!("no request within {:?}", self.read_timeout)));
        match opening {
            Ok(Opening::HandedOver(client)) => {
                drop(stream);
                self.serve(client, Vec::new()).await;
            }
            Ok(Opening::Direct(first)) => self.serve(stream, first).await,
            Ok(Opening::Closed) => {}
            Err(why) => {
                let mut stream = stream;
                self.refuse(&mut stream, "", 0, Refusal::new(Reason::Malformed, why)).await;
            }
        }
    }

    /// Serves one client connection to its end; `first` is what it already sent.
    pub(crate) async fn serve<S: Client>(&self, mut client: S, first: Vec<u8>) {
        let (request, leftover) = match self.read_head(&mut client, first).await {
            Ok(read) => read,
            Err(refusal) => {
                self.refuse(&mut client, "", 0, refusal).await;
                return;
            }
        };
        let (host, port) = match &request {
            ProxyRequest::Connect { host, port } | ProxyRequest::Http { host, port, .. } => {
                (host.clone(), *port)
            }
        };
        if let ProxyRequest::Http { body, .. } = &request
            && leftover.len() as u64 > *body
        {
            let why = "bytes after the request's body: a plain-HTTP connection carries one request";
            self.refuse(&mut client, &host, port, Refusal::new(Reason::Malformed, why)).await;
            return;
        }
        let upstream = match self.open(&host, port).await {
            Ok(open) => open,
            Err(refusal) => {
                self.refuse(&mut client, &host, port, refusal).await;
                return;
            }
        };
        let (target, mut upstream, addr) = upstream;
        match request {
            ProxyRequest::Connect { .. } => {
                if client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.is_err() {
                    return;
                }
                let first = match self.check_hello(&mut client, &target, leftover).await {
                    Ok(hello) => hello,
                    Err(refusal) => {
                        // The tunnel is open: the refusal is the connection's end.
                        self.report_refusal(&host, port, &refusal);
                        return;
                    }
                };
                (self.events)(Event::Allowed { host: target.to_string(), port, addr });
                if upstream.write_all(&first).await.is_err() {
                    return;
                }
                let (size, large) = self.buffer();
                // A socket: the kernel moves the bytes (`splice`), through two pipes (four
                // descriptors), for the few connections that get large buffers; the others
                // copy through small ones.
                match client.socket().filter(|_| large.is_some()) {
                    Some(Socket::Unix(unix)) => {
                        let _ = super::splice::relay(unix, &upstream, size).await;
                    }
                    Some(Socket::Tcp(tcp)) => {
                        let _ = super::splice::relay(tcp, &upstream, size).await;
                    }
                    None => {
                        let _ =
                            tokio::io::copy_bidirectional_with_sizes(&mut client, &mut upstream, size, size)
                                .await;
                    }
                }
            }
            ProxyRequest::Http { head, body, .. } => {
                (self.events)(Event::Allowed { host: target.to_string(), port, addr });
                let (size, _large) = self.buffer();
                forward_one(client, upstream, head, leftover, body, size).await;
            }
        }
    }

    /// Reads the request head, starting with the `first` bytes already read, with what came
    /// after it.
    async fn read_head<S: AsyncRead + Unpin>(
        &self,
        client: &mut S,
        first: Vec<u8>,
    ) -> Result<(ProxyRequest, Vec<u8>), Refusal> {
        let mut buf = first;
        let end = tokio::time::timeout(self.read_timeout, async {
            loop {
                if let Some(end) = request::head_end(&buf) {
                    return Ok(end);
                }
                if buf.len() >= MAX_HEAD {
                    return Err(format!("a request head over {MAX_HEAD} bytes"));
                }
                let mut chunk = [0u8; 4096];
                let n = client.read(&mut chunk).await.map_err(|e| e.to_string())?;
                if n == 0 {
                    return Err("the client closed the connection before its request head ended".to_owned());
                }
                buf.extend_from_slice(&chunk[..n]);
            }
        })
        .await
        .map_err(|_| format!("no request head within {:?}", self.read_timeout))
        .and_then(|r| r)
        .map_err(|why| Refusal::new(Reason::Malformed, why))?;
        let request = request::parse(&buf[..end]).map_err(|why| Refusal::new(Reason::Malformed, why))?;
        Ok((request, buf[end..].to_vec()))
    }

    /// Admits, resolves, vets and dials: the canonical host, the connection, and its address.
    async fn open(&self, host: &str, port: u16) -> Result<(Host, TcpStream, SocketAddr), Refusal> {
        let target = decide::admit(&self.entries, host, port)?;
        let addrs = match &target {
            Host::Ip(ip) => vec![*ip],
            Host::Name(name) => {
                let found = tokio::time::timeout(self.dial_timeout, self.resolver.lookup(name))
                    .await
                    .map_err(|_| {
                        Refusal::new(
                            Reason::Unresolved,
                            format!("looking up {name} took over {:?}", self.dial_timeout),
                        )
                    })?
                    .map_err(|e| Refusal::new(Reason::Unresolved, format!("looking up {name}: {e}")))?;
                decide::vet(&self.entries, name, port, &found, |ip| {
                    self.treated_public.treated_as_public(ip)
                })?
            }
        };
        let mut last = String::new();
        for ip in addrs {
            let addr = SocketAddr::new(ip, port);
            match tokio::time::timeout(self.dial_timeout, TcpStream::connect(addr)).await {
                Ok(Ok(stream)) => return Ok((target, stream, addr)),
                Ok(Err(e)) => last = format!("{addr}: {e}"),
                Err(_) => last = format!("{addr}: no answer within {:?}", self.dial_timeout),
            }
        }
        Err(Refusal::new(
            Reason::Unreachable,
            format!("{target}:{port} did not accept the connection ({last})"),
        ))
    }

    /// Reads the tunnel's first flight and checks its server name against `target`: the
    /// bytes to send on.
    async fn check_hello<S: AsyncRead + Unpin>(
        &self,
        client: &mut S,
        target: &Host,
        mut buf: Vec<u8>,
    ) -> Result<Vec<u8>, Refusal> {
        let Host::Name(name) = target else {
            // An address block was listed: the address is the decision, whatever is spoken
            // (and a server that speaks first, as SSH's does, must not wait for the client).
            return Ok(buf);
        };
        let hello = tokio::time::timeout(self.read_timeout, async {
            loop {
                match sni::client_hello(&buf) {
                    Hello::Incomplete if buf.len() < MAX_HELLO => {}
                    Hello::Incomplete => return Hello::Malformed("a ClientHello over 64 KiB"),
                    done => return done,
                }
                let mut chunk = [0u8; 4096];
                match client.read(&mut chunk).await {
                    Ok(0) | Err(_) => {
                        return Hello::Malformed("the client closed the tunnel before its ClientHello ended");
                    }
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
        })
        .await
        .unwrap_or(Hello::Malformed("no ClientHello in time"));
        let mismatch = |why: String| Err(Refusal::new(Reason::SniMismatch, why));
        match hello {
            Hello::Tls { ech: true, .. } => mismatch(format!(
                "the ClientHello for {name} offers Encrypted Client Hello, which hides the name it wants"
            )),
            Hello::Tls { sni: Some(sni), .. } if sni.strip_suffix('.').unwrap_or(&sni) == name => Ok(buf),
            Hello::Tls { sni: Some(sni), .. } => {
                mismatch(format!("the tunnel to {name} carries TLS for {sni}"))
            }
            Hello::Tls { sni: None, .. } => {
                mismatch(format!("the tunnel to {name} carries TLS without a server name"))
            }
            Hello::NotTls => mismatch(format!("the tunnel to {name} does not start with a TLS ClientHello")),
            Hello::Malformed(why) => mismatch(format!("the tunnel to {name}: {why}")),
            Hello::Incomplete => mismatch(format!("the tunnel to {name}: an incomplete ClientHello")),
        }
    }

    /// Reports a refusal. Its host and detail carry what the sandbox sent (a host that is no
    /// host, a TLS server name), and they reach log lines and audit records: anything but
    /// printable ASCII in them is escaped, so no line break or terminal escape of the
    /// sandbox's choosing gets there.
    fn report_refusal(&self, host: &str, port: u16, refusal: &Refusal) {
        (self.events)(Event::Refused {
            host: printable(host),
            port,
            reason: refusal.reason.as_str(),
            detail: printable(&refusal.detail),
        });
    }

    /// Answers a refusal before any tunnel exists, and reports it.
    async fn refuse<S: AsyncWrite + Unpin>(&self, client: &mut S, host: &str, port: u16, refusal: Refusal) {
        self.report_refusal(host, port, &refusal);
        let status = refusal.reason.status();
        let text = match status {
            400 => "Bad Request",
            403 => "Forbidden",
            _ => "Bad Gateway",
        };
        let body = format!("sandboxio egress gate: {}\n", refusal.detail);
        // The rule is the policy's own text (a parsed entry: no quote, space or line break).
        let rule = refusal.rule.as_deref().map_or_else(String::new, |r| format!("; rule=\"{r}\""));
        let response = format!(
            "HTTP/1.1 {status} {text}\r\nX-Sandboxio-Egress: refused; reason={}{rule}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            refusal.reason.as_str(),
            body.len()
        );
        let _ = client.write_all(response.as_bytes()).await;
        let _ = client.shutdown().await;
    }
}

/// `text` with every character but printable ASCII and the space written as `\u{..}`.
fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c == ' ' || c.is_ascii_graphic() {
            out.push(c);
        } else {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        }
    }
    out
}

/// Sends one plain-HTTP request (its rewritten `head`, then the `body` bytes long body, of
/// which `read` came with the head) and relays the answer, through a `buffer`-byte buffer,
/// until the server closes. The
/// client's bytes after the body are never read: a second request on the connection, which
/// could name another virtual host of the same server, does not reach it.
async fn forward_one<S>(
    client: S,
    mut upstream: TcpStream,
    head: Vec<u8>,
    read: Vec<u8>,
    body: u64,
    buffer: usize,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let rest = body.saturating_sub(read.len() as u64);
    if upstream.write_all(&[head, read].concat()).await.is_err() {
        return;
    }
    let (mut from_client, mut to_client) = tokio::io::split(client);
    let (mut from_server, mut to_server) = upstream.split();
    let up = async {
        let _ = tokio::io::copy(&mut (&mut from_client).take(rest), &mut to_server).await;
        std::future::pending::<()>().await;
    };
    let down = async {
        let mut from_server = tokio::io::BufReader::with_capacity(buffer, &mut from_server);
        let _ = tokio::io::copy_buf(&mut from_server, &mut to_client).await;
        let _ = to_client.shutdown().await;
    };
    tokio::select! {
        () = up => {}
        () = down => {}
    }
}
