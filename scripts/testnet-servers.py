#!/usr/bin/env python3
"""The servers of sandboxio's test network, run by `scripts/testnet up` inside its network
namespace (standard library only). Every server writes what it saw to a log in the test
network's directory, one line each, so that tests can tell what reached it:

- DNS, UDP and TCP on DNS_ADDR:53, authoritative for `sandboxio.test` and counting every
  query in dns-queries.log (`<time> <udp|tcp> <client> <name> <type>`);
- HTTP on WEB_ADDR:80, WEB_ADDR:8080 (the port no test lists), OTHER_ADDR:80 and
  PRIVATE_ADDR:80, and HTTPS (a certificate from the script's test CA) on WEB_ADDR:443 and
  OTHER_ADDR:443, each request logged in http.log (`<server> <method> <path> <host>`) and
  each connection as `<server> CONNECTION <client>`;
- UDP echo on WEB_ADDR:7, each datagram logged in udp.log.

The records: `web.sandboxio.test` and every name below it is WEB_ADDR, `other...` is
OTHER_ADDR, `private...` is PRIVATE_ADDR (a private address); any other name in the zone
is NXDOMAIN, and a name outside it is REFUSED. Usage: testnet-servers.py DIR WEB OTHER
PRIVATE DNS (addresses).
"""

import http.server
import os
import socket
import socketserver
import ssl
import struct
import sys
import threading
import time

DIR, WEB, OTHER, PRIVATE, DNS = sys.argv[1:6]
ZONE = "sandboxio.test"
RECORDS = {"web." + ZONE: WEB, "other." + ZONE: OTHER, "private." + ZONE: PRIVATE}
LOCK = threading.Lock()


def log(name, line):
    with LOCK, open(os.path.join(DIR, name), "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()


# ---- DNS


def read_name(msg, at):
    labels = []
    while True:
        n = msg[at]
        if n == 0:
            return ".".join(labels), at + 1
        if n & 0xC0:
            raise ValueError("compressed name in a question")
        labels.append(msg[at + 1 : at + 1 + n].decode("ascii", "replace"))
        at += 1 + n


def answer(query, proto, client):
    """The response to one query, and logs it."""
    ident, flags, qdcount = struct.unpack("!HHH", query[:6])
    if qdcount != 1:
        return None
    name, end = read_name(query, 12)
    qtype, qclass = struct.unpack("!HH", query[end : end + 4])
    question = query[12 : end + 4]
    name = name.lower().rstrip(".")
    log("dns-queries.log", f"{time.time():.3f} {proto} {client} {name} {qtype}")
    rcode, address = 0, None
    if name == ZONE or name.endswith("." + ZONE):
        for base, addr in RECORDS.items():
            if name == base or name.endswith("." + base):
                address = addr
        if address is None:
            rcode = 3  # NXDOMAIN
    else:
        rcode = 5  # REFUSED
    answers = b""
    count = 0
    if address is not None and qtype in (1, 255) and qclass == 1:
        answers = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 5, 4) + socket.inet_aton(address)
        count = 1
    # QR, AA, the client's RD; no recursion available.
    out_flags = 0x8400 | (flags & 0x0100) | rcode
    return struct.pack("!HHHHHH", ident, out_flags, 1, count, 0, 0) + question + answers


class DnsUdp(socketserver.ThreadingUDPServer):
    allow_reuse_address = True


class DnsUdpHandler(socketserver.BaseRequestHandler):
    def handle(self):
        data, sock = self.request
        try:
            reply = answer(data, "udp", self.client_address[0])
        except (ValueError, IndexError, struct.error):
            return
        if reply:
            sock.sendto(reply, self.client_address)


class DnsTcp(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


class DnsTcpHandler(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.settimeout(5)
        try:
            while True:
                head = self.request.recv(2, socket.MSG_WAITALL)
                if len(head) < 2:
                    return
                (n,) = struct.unpack("!H", head)
                data = self.request.recv(n, socket.MSG_WAITALL)
                reply = answer(data, "tcp", self.client_address[0])
                if not reply:
                    return
                self.request.sendall(struct.pack("!H", len(reply)) + reply)
        except (OSError, ValueError, IndexError, struct.error):
            return


# ---- HTTP and HTTPS


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def setup(self):
        super().setup()
        log("http.log", f"{self.server.label} CONNECTION {self.client_address[0]}")

    def respond(self):
        host = self.headers.get("Host", "-")
        log("http.log", f"{self.server.label} {self.command} {self.path} {host}")
        body = f"sandboxio-testnet {self.server.label} {self.command} {self.path}\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_HEAD = do_CONNECT = respond

    def log_message(self, *args):
        pass


class Http(http.server.ThreadingHTTPServer):
    allow_reuse_address = True
    daemon_threads = True

    def __init__(self, addr, port, tls=None):
        self.label = f"{addr}:{port}"
        self.tls = tls
        super().__init__((addr, port), Handler)

    def finish_request(self, request, client_address):
        # The handshake runs on the connection's own thread, with a deadline, so a client
        # that never speaks holds only itself.
        if self.tls is not None:
            request.settimeout(10)
            try:
                request = self.tls.wrap_socket(request, server_side=True)
            except (OSError, ssl.SSLError) as e:
                log("http.log", f"{self.label} TLS-FAILED {client_address[0]} {type(e).__name__}")
                return
        super().finish_request(request, client_address)


# ---- UDP echo


class Echo(socketserver.ThreadingUDPServer):
    allow_reuse_address = True


class EchoHandler(socketserver.BaseRequestHandler):
    def handle(self):
        data, sock = self.request
        log("udp.log", f"{WEB}:7 {self.client_address[0]} {data[:64]!r}")
        sock.sendto(data, self.client_address)


def main():
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(os.path.join(DIR, "server.pem"), os.path.join(DIR, "server.key"))
    servers = [
        DnsUdp((DNS, 53), DnsUdpHandler),
        DnsTcp((DNS, 53), DnsTcpHandler),
        Http(WEB, 80),
        Http(WEB, 8080),
        Http(OTHER, 80),
        Http(PRIVATE, 80),
        Http(WEB, 443, tls),
        Http(OTHER, 443, tls),
        Echo((WEB, 7), EchoHandler),
    ]
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    with open(os.path.join(DIR, "ready"), "w", encoding="utf-8") as f:
        f.write(f"{os.getpid()}\n")
    threading.Event().wait()


if __name__ == "__main__":
    main()
