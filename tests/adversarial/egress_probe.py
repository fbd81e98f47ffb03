# Class 18: attacks on the egress allowlist, run inside a sandbox whose policy lists
#   127.0.0.2:LISTED (a canary that answers "canary" and records what it gets),
#   localhost:TLS and 127.0.0.1:TLS (a recorder: the only listed name),
# and nothing else. Host side (tests/adversarial/egress_attacks.rs): an unlisted canary on
# 0.0.0.0:UNLISTED (every host address), a UDP counter on 0.0.0.0:UDP, an abstract Unix
# socket. Each attack prints one line `R|name|what the sandbox saw`; the host's counters are
# the verdict, the lines are the record. `C|name|...` lines are positive controls.
import json, os, socket, ssl, struct, subprocess, sys, threading, time

A = json.loads(sys.argv[1])
LISTED, UNLISTED, TLS, UDP = A["listed"], A["unlisted"], A["tls"], A["udp"]
GATE = A["gate"]
PROXY = ("127.0.0.1", 3128)


def out(kind, name, saw):
    print(f"{kind}|{name}|{saw}".replace("\n", "\\n"), flush=True)


def head_of(c):
    h = b""
    c.settimeout(5)
    while b"\r\n\r\n" not in h:
        try:
            ch = c.recv(1)
        except Exception as e:
            return h + repr(e).encode()
        if not ch:
            break
        h += ch
    return h


def summary(h):
    lines = h.split(b"\r\n")
    why = [l.split(b"reason=")[-1] for l in lines if l.lower().startswith(b"x-sandboxio-egress")]
    return (lines[0] + (b" " + why[0] if why else b"")).decode("latin1")


def rest(c, limit=256, wait=2):
    c.settimeout(wait)
    got = b""
    try:
        while len(got) < limit:
            d = c.recv(limit)
            if not d:
                break
            got += d
    except Exception:
        pass
    return got


def proxy():
    return socket.create_connection(PROXY, 5)


def connect(target, kind="R", name=None, after=None):
    """CONNECT target; prints the gate's answer and what the tunnel gave back."""
    name = name or "CONNECT " + target
    try:
        c = proxy()
        c.sendall(b"CONNECT " + target.encode() + b" HTTP/1.1\r\n\r\n")
        h = head_of(c)
        saw = summary(h)
        if h.startswith(b"HTTP/1.1 200"):
            if after:
                for chunk in after:
                    c.sendall(chunk)
                    time.sleep(0.005)
            saw += " tunnel gave " + repr(rest(c, wait=1.5))
        c.close()
    except Exception as e:
        saw = "error " + repr(e)
    out(kind, name, saw)
    return saw


def raw(name, data, kind="R", pieces=None):
    try:
        c = proxy()
        for chunk in pieces or [data]:
            c.sendall(chunk)
            time.sleep(0.05 if pieces else 0)
        got = rest(c, 4096, 3)
        saw = summary(got) if got.startswith(b"HTTP/") else repr(got[:80])
        c.close()
    except Exception as e:
        saw = "error " + repr(e)
    out(kind, name, saw)


def hello(sni=None, ech=False):
    exts = b""
    if sni is not None:
        n = sni if isinstance(sni, bytes) else sni.encode()
        entry = b"\x00" + struct.pack(">H", len(n)) + n
        data = struct.pack(">H", len(entry)) + entry
        exts += struct.pack(">HH", 0, len(data)) + data
    if ech:
        exts += struct.pack(">HH", 0xFE0D, 1) + b"\x00"
    body = b"\x03\x03" + b"\x07" * 32 + b"\x00" + b"\x00\x02\x13\x01" + b"\x01\x00"
    body += struct.pack(">H", len(exts)) + exts
    return b"\x01" + struct.pack(">I", len(body))[1:] + body


def records(msg, size=16384):
    return b"".join(
        b"\x16\x03\x01" + struct.pack(">H", len(msg[i : i + size])) + msg[i : i + size]
        for i in range(0, len(msg), size)
    )


# ---- positive controls: the listed address, the listed name with its own SNI ----
connect(f"127.0.0.2:{LISTED}", "C", "listed address")
connect(f"localhost:{TLS}", "C", "listed name, SNI localhost",
        after=[records(hello("localhost"))])
raw("plain GET to the listed address", f"GET http://127.0.0.2:{LISTED}/control HTTP/1.1\r\nHost: 127.0.0.2:{LISTED}\r\n\r\n".encode(), "C")

# ---- 1. IP literals in every spelling, names for loopback, host addresses ----
spellings = ["127.0.0.1", "127.1", "127.0.1", "2130706433", "0x7f000001", "0x7F000001", "0x7f.1",
             "0177.0.0.1", "0177.1", "017700000001", "127.0.0.1.", "0.0.0.0", "0", "0x0",
             "[::1]", "[::]", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[0:0:0:0:0:ffff:127.0.0.1]",
             "[::127.0.0.1]", "[::ffff:0.0.0.0]", "[fe80::1%25lo]", "[fe80::1%lo]", "::1", "::ffff:127.0.0.1",
             "127%2e0%2e0%2e1", "127.0.0.1%00", "localhost", "localhost.", "LOCALHOST", "foo.localhost",
             "sandbox", "127.0.0.1.nip.io", "ip6-localhost", "ip6-loopback",
             "\u202e1.0.0.721", "x\u009b2J", "a\tb", "\u2028forged"]
spellings += A["host_names"] + A["host_addrs"]
for host in spellings:
    connect(f"{host}:{UNLISTED}")
# The listed address and name, on other ports; the listed name's address on the canary port.
connect(f"127.0.0.2:{UNLISTED}")
connect(f"localhost:{UNLISTED}")
connect(f"127.0.0.1:{LISTED}")
connect(f"localhost:{LISTED}")
# userinfo, odd authorities, percent-encoding, the relay, the gate socket, metadata
for target in [f"user@127.0.0.2:{LISTED}", f"127.0.0.2:{LISTED}@127.0.0.1:{UNLISTED}",
               f"127.0.0.1:{UNLISTED}#@127.0.0.2:{LISTED}", f"127.0.0.2:{LISTED}:{UNLISTED}",
               f"127.0.0.2:+{LISTED}", f"127.0.0.2:0{LISTED}", f"127.0.0.2 :{LISTED}",
               f"127.0.0.2%3A{LISTED}", f"http://127.0.0.1:{UNLISTED}", "127.0.0.1:3128",
               f"{GATE}:80", "unix:" + GATE, "169.254.169.254:80", "[fd00:ec2::254]:80",
               "metadata.google.internal:80"]:
    connect(target)

# ---- 2. plain-HTTP smuggling ----
L = f"127.0.0.2:{LISTED}"
U = f"127.0.0.1:{UNLISTED}"
for name, data in [
    ("absolute-form to an unlisted host", f"GET http://{U}/ HTTP/1.1\r\nHost: {U}\r\n\r\n"),
    ("absolute-form listed, Host header unlisted", f"GET http://{L}/ HTTP/1.1\r\nHost: {U}\r\n\r\n"),
    ("absolute-form with userinfo", f"GET http://x@{L}/ HTTP/1.1\r\n\r\n"),
    ("absolute-form listed@unlisted", f"GET http://{L}@{U}/ HTTP/1.1\r\n\r\n"),
    ("absolute-form backslash", f"GET http://{L}\\@{U}/ HTTP/1.1\r\n\r\n"),
    ("absolute-form fragment", f"GET http://{U}#@{L}/ HTTP/1.1\r\n\r\n"),
    ("absolute-form uppercase scheme", f"GET HTTP://{U}/ HTTP/1.1\r\n\r\n"),
    ("https absolute-form", f"GET https://{U}/ HTTP/1.1\r\n\r\n"),
    ("origin-form with Host", f"GET / HTTP/1.1\r\nHost: {U}\r\n\r\n"),
    ("two requests in one packet", f"GET http://{L}/a HTTP/1.1\r\nHost: {L}\r\n\r\nGET http://{U}/SMUGGLED HTTP/1.1\r\nHost: {U}\r\n\r\n"),
    ("second request same server in one packet", f"GET http://{L}/a HTTP/1.1\r\n\r\nGET /SMUGGLED HTTP/1.1\r\nHost: evil\r\n\r\n"),
    ("Transfer-Encoding chunked", f"POST http://{L}/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /SMUGGLED HTTP/1.1\r\n\r\n"),
    ("Transfer-Encoding obfuscated", f"POST http://{L}/ HTTP/1.1\r\nTransfer-Encoding : chunked\r\n\r\n"),
    ("CL and TE", f"POST http://{L}/ HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
    ("two Content-Length", f"POST http://{L}/ HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 30\r\n\r\n"),
    ("header folding", f"GET http://{L}/ HTTP/1.1\r\nX-A: 1\r\n Host: {U}\r\n\r\n"),
    ("bare LF header", f"GET http://{L}/ HTTP/1.1\r\nX-A: 1\nHost: {U}\r\n\r\n"),
    ("NUL in header", f"GET http://{L}/ HTTP/1.1\r\nHost\x00: {U}\r\n\r\n"),
    ("lowercase method", f"get http://{U}/ HTTP/1.1\r\n\r\n"),
    ("HTTP/0.9-ish", f"GET http://{U}/\r\n\r\n"),
    ("HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
    ("very long head", f"GET http://{L}/ HTTP/1.1\r\nX-A: {'a' * 70000}\r\n\r\n"),
]:
    raw(name, data.encode("latin1"))
# A body with more bytes than its Content-Length, sent after the head in a later packet.
raw("pipelined after a pause", b"", pieces=[f"POST http://{L}/ HTTP/1.1\r\nContent-Length: 2\r\n\r\n".encode(), b"ok", f"GET /SMUGGLED HTTP/1.1\r\nHost: {U}\r\n\r\n".encode()])

# ---- 3. chained CONNECT, tunnels in tunnels ----
connect(f"127.0.0.2:{LISTED}", name="CONNECT listed, then CONNECT unlisted in the tunnel",
        after=[f"CONNECT {U} HTTP/1.1\r\n\r\nSMUGGLED".encode()])
connect(f"localhost:{TLS}", name="CONNECT listed name, TLS hello then a CONNECT",
        after=[records(hello("localhost")), f"CONNECT {U} HTTP/1.1\r\n\r\nSMUGGLED".encode()])

# ---- 4. TLS: SNI games on the listed name ----
tls = f"localhost:{TLS}"
for name, after in [
    ("SNI other than the CONNECT host", [records(hello("sni-other.test"))]),
    ("SNI an IP literal", [records(hello("127.0.0.1"))]),
    ("SNI missing", [records(hello(None))]),
    ("SNI localhost with ECH", [records(hello("localhost", ech=True))]),
    ("SNI other, hello split in 1-byte records", [records(hello("sni-split.test"), 1)]),
    ("SNI other, hello in 1-byte writes", [bytes([b]) for b in records(hello("sni-writes.test"))]),
    ("SNI with newline and ANSI", [records(hello(b"localhost\n2026-01-01T00:00:00Z INFO forged \x1b[2J"))]),
    ("SNI localhost with trailing junk", [records(hello("localhost.sni-junk.test"))]),
    ("non-TLS after CONNECT to a name", [b"GET /SNI-NOT-TLS HTTP/1.1\r\nHost: x\r\n\r\n"]),
    ("SSLv2-looking hello", [b"\x80\x2e\x01\x00\x02SNI-V2"]),
    ("alert record first", [b"\x15\x03\x01\x00\x02\x02\x28" + records(hello("sni-alert.test"))]),
]:
    connect(tls, name=name, after=after)
# Controls that must pass: the name's hello in 1-byte records, in 1-byte writes, trailing dot.
connect(tls, "C", "SNI localhost in 1-byte records", after=[records(hello("localhost"), 1)])
connect(tls, "C", "SNI localhost in 1-byte writes", after=[bytes([b]) for b in records(hello("localhost"))])
connect(f"LOCALHOST.:{TLS}", "C", "SNI localhost. to LOCALHOST.", after=[records(hello("localhost."))])
# A valid hello, then a second hello naming another host: reaches the listed server only.
connect(tls, name="valid hello then a second hello", after=[records(hello("localhost")) + records(hello("sni-second.test"))])
# SNI naming the allowed host, CONNECT to an arbitrary address.
connect(f"127.0.0.1:{UNLISTED}", name="SNI localhost to an unlisted address", after=[records(hello("localhost"))])

# ---- 5. the gate socket itself, bypassing the relay ----
try:
    c = socket.socket(socket.AF_UNIX)
    c.connect(GATE)
    c.sendall(f"CONNECT {U} HTTP/1.1\r\n\r\n".encode())
    out("R", "gate socket direct, CONNECT unlisted", summary(head_of(c)))
    c = socket.socket(socket.AF_UNIX)
    c.connect(GATE)
    c.sendall(f"CONNECT {L} HTTP/1.1\r\n\r\n".encode())
    out("C", "gate socket direct, CONNECT listed", summary(head_of(c)) + " " + repr(rest(c, wait=1)))
except Exception as e:
    out("R", "gate socket direct", "error " + repr(e))

# ---- 5b. hand-overs of our own (sandboxd's relay hands the gate each client's socket) ----
def hand_over(fds, data=b"\0"):
    g = socket.socket(socket.AF_UNIX)
    g.connect(GATE)
    socket.send_fds(g, [data], fds)
    return g

def tcp_pair():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    c = socket.create_connection(srv.getsockname(), 5)
    s, _ = srv.accept()
    srv.close()
    return c, s

for name, target, kind in [("own hand-over, CONNECT listed", L, "C"), ("own hand-over, CONNECT unlisted", U, "R")]:
    try:
        c, s = tcp_pair()
        g = hand_over([s.fileno()])
        s.close()
        c.sendall(f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
        h = head_of(c)
        out(kind, name, summary(h) + (" " + repr(rest(c, wait=1)) if h.startswith(b"HTTP/1.1 200") else ""))
    except Exception as e:
        out(kind, name, "error " + repr(e))
def forged(name, make):
    try:
        fds, data, keep = make()
        g = hand_over(fds, data)
        out("R", name, summary(head_of(g)))
    except Exception as e:
        out("R", name, "error " + repr(e))
forged("hand-over of a pipe", lambda: (lambda p: ([p[0]], b"\0", p))(os.pipe()))
forged("hand-over of a UDP socket", lambda: (lambda u: ([u.fileno()], b"\0", u))(socket.socket(socket.AF_INET, socket.SOCK_DGRAM)))
forged("hand-over of a listening socket", lambda: (lambda l: (l.bind(("127.0.0.1", 0)), l.listen(1), ([l.fileno()], b"\0", l))[-1])(socket.socket()))
forged("hand-over of a Unix socket", lambda: (lambda p: ([p[0].fileno()], b"\0", p))(socket.socketpair()))
forged("hand-over of two sockets", lambda: (lambda a, b: ([a[1].fileno(), b[1].fileno()], b"\0", (a, b)))(tcp_pair(), tcp_pair()))
forged("hand-over with request bytes", lambda: (lambda a: ([a[1].fileno()], f"\0CONNECT {U} HTTP/1.1\r\n\r\n".encode(), a))(tcp_pair()))
forged("hand-over byte without a socket", lambda: ([], b"\0", None))

# ---- 6. around the gate: direct TCP, UDP, DNS, raw sockets, IPv6, Unix sockets ----
def attempt(name, f):
    try:
        saw = f()
    except Exception as e:
        saw = "error " + repr(e)
    out("R", name, saw)

def tcp(addr, port, fam=socket.AF_INET):
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(2)
    s.connect((addr, port))
    return "connected, got " + repr(rest(s, wait=1))

def udp(addr, port, fam=socket.AF_INET):
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.sendto(b"sandboxio-udp-probe", (addr, port))
    return "sent (to this namespace's own interfaces at most)"

resolvers = []
try:
    resolvers = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")]
except Exception as e:
    out("R", "read /etc/resolv.conf", repr(e))
dns_query = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01"
targets = sorted(set(resolvers + ["127.0.0.53", "127.0.0.11", "8.8.8.8", "1.1.1.1", "169.254.169.254", "192.0.2.1"] + A["host_addrs"]))
for addr in targets:
    attempt(f"UDP 53 to {addr}", lambda: udp(addr, 53))
    attempt(f"TCP 53 to {addr}", lambda: tcp(addr, 53))
for addr in ["127.0.0.1", "127.0.0.2"] + A["host_addrs"]:
    attempt(f"UDP to {addr}:{UDP}", lambda: udp(addr, UDP))
    attempt(f"direct TCP to {addr}:{UNLISTED}", lambda: tcp(addr, UNLISTED))
    attempt(f"direct TCP to {addr}:{LISTED}", lambda: tcp(addr, LISTED))
attempt("UDP to [::1]", lambda: udp("::1", UDP, socket.AF_INET6))
attempt("TCP to [::ffff:192.0.2.2]", lambda: tcp("::ffff:" + (A["host_addrs"] or ["192.0.2.2"])[0], UNLISTED, socket.AF_INET6))
attempt("TCP to [2001:db8::1]", lambda: tcp("2001:db8::1", 80, socket.AF_INET6))
attempt("getaddrinfo example.com", lambda: repr(socket.getaddrinfo("example.com", 443)))
for name in A["host_names"]:
    attempt(f"getaddrinfo {name}", lambda: repr(socket.getaddrinfo(name, 443)))
attempt("interfaces", lambda: repr(socket.if_nameindex()))
attempt("routes", lambda: open("/proc/net/route").read().strip().replace("\n", " / "))
attempt("IPv6 routes", lambda: open("/proc/net/ipv6_route").read().strip().replace("\n", " / "))
attempt("raw ICMP socket", lambda: repr(socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)))
attempt("ping socket", lambda: repr(socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)))
attempt("packet socket", lambda: repr(socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0x0300)))
def abstract():
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(2)
    s.connect("\0" + A["abstract"])
    return "connected to the host's abstract socket"
attempt("abstract Unix socket of the host", abstract)
for path in ["/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock",
             "/run/dbus/system_bus_socket", "/run/systemd/resolve/io.systemd.Resolve", "/var/run/nscd/socket"]:
    def unix(path=path):
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(2)
        s.connect(path)
        return "connected"
    attempt("Unix socket " + path, unix)

# ---- 7. tampering with the way out (last: it may end this sandbox's egress) ----
def bind3128():
    s = socket.socket()
    s.bind(("127.0.0.1", 3128))
    return "bound 127.0.0.1:3128 beside the relay"
attempt("bind 127.0.0.1:3128 while the relay runs", bind3128)
def replace_socket():
    d = os.path.dirname(GATE)
    os.rename(GATE, GATE + ".moved")
    os.rename(GATE + ".moved", GATE)
    return "renamed the gate socket and back (the directory is the sandbox's)"
attempt("rename the gate socket", replace_socket)
def own_relay():
    # Kill the relay (as this user can) and serve 3128 ourselves, straight to the gate.
    killed = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            except Exception:
                continue
            if b"relay" in cmd[:2]:
                try:
                    os.kill(int(pid), 9)
                    killed.append(pid)
                except Exception as e:
                    killed.append(f"{pid}:{e!r}")
    time.sleep(0.3)
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 3128))
    srv.listen(8)
    def serve():
        while True:
            c, _ = srv.accept()
            g = socket.socket(socket.AF_UNIX)
            g.connect(GATE)
            def pump(a, b):
                try:
                    while True:
                        d = a.recv(65536)
                        if not d:
                            break
                        b.sendall(d)
                except Exception:
                    pass
                try:
                    b.shutdown(socket.SHUT_WR)
                except Exception:
                    pass
            threading.Thread(target=pump, args=(c, g), daemon=True).start()
            threading.Thread(target=pump, args=(g, c), daemon=True).start()
    threading.Thread(target=serve, daemon=True).start()
    return f"killed {killed}, serving 127.0.0.1:3128 ourselves"
attempt("kill the relay and relay ourselves", own_relay)
connect(f"127.0.0.2:{LISTED}", "C", "listed address through our own relay")
connect(f"127.0.0.1:{UNLISTED}", name="unlisted through our own relay")
print("DONE", flush=True)
