//! The server name a TLS client asks for, read from its first flight: the `ClientHello`'s
//! `server_name` extension (RFC 8446 §4.1.2 and §4.2, RFC 6066 §3), across as many TLS
//! records as the client split it into (RFC 8446 §5.1).
//!
//! The gate reads it after opening a `CONNECT` tunnel, so that a tunnel opened for an allowed
//! host cannot carry a TLS session to another one behind the same address. A `ClientHello`
//! that offers Encrypted Client Hello (`encrypted_client_hello`, type `0xfe0d`) hides the
//! name it really wants, so it is reported, and the gate refuses it.

/// The most bytes of a first flight read, records and headers included.
pub(crate) const MAX_HELLO: usize = 64 * 1024;

const HANDSHAKE: u8 = 22;
const CLIENT_HELLO: u8 = 1;
const SERVER_NAME: u16 = 0;
const ENCRYPTED_CLIENT_HELLO: u16 = 0xfe0d;

/// What the client's first bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Hello {
    /// More bytes are needed.
    Incomplete,
    /// They are not a TLS handshake.
    NotTls,
    /// A whole `ClientHello`: its server name, and whether it offers Encrypted Client Hello.
    Tls { sni: Option<String>, ech: bool },
    /// A TLS handshake that does not parse.
    Malformed(&'static str),
}

/// Reads the `ClientHello` at the start of `buf`.
pub(crate) fn client_hello(buf: &[u8]) -> Hello {
    match buf.first() {
        None => return Hello::Incomplete,
        Some(&HANDSHAKE) => {}
        Some(_) => return Hello::NotTls,
    }
    // The handshake message, reassembled from the records' fragments.
    let mut message = Vec::new();
    let mut at = 0;
    loop {
        let Some(header) = buf.get(at..at + 5) else { return Hello::Incomplete };
        if header[0] != HANDSHAKE {
            return Hello::Malformed("a record other than a handshake before the ClientHello ended");
        }
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if len == 0 || len > 16384 + 256 {
            return Hello::Malformed("a TLS record of an impossible length");
        }
        let Some(fragment) = buf.get(at + 5..at + 5 + len) else {
            return if buf.len() >= MAX_HELLO {
                Hello::Malformed("a ClientHello over 64 KiB")
            } else {
                Hello::Incomplete
            };
        };
        message.extend_from_slice(fragment);
        at += 5 + len;
        if message.len() >= 4 {
            if message[0] != CLIENT_HELLO {
                return Hello::Malformed("the first handshake message is not a ClientHello");
            }
            let body = usize::from(message[1]) << 16 | usize::from(message[2]) << 8 | usize::from(message[3]);
            if body + 4 > MAX_HELLO {
                return Hello::Malformed("a ClientHello over 64 KiB");
            }
            if message.len() >= body + 4 {
                return parse_body(&message[4..4 + body])
                    .unwrap_or(Hello::Malformed("a ClientHello that does not parse"));
            }
        }
    }
}

/// A cursor over a `ClientHello`'s body; every read is bounds-checked.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = rest;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }

    /// A vector with a one- or two-byte length prefix.
    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()?;
        self.take(usize::from(n))
    }

    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()?;
        self.take(usize::from(n))
    }
}

fn parse_body(body: &[u8]) -> Option<Hello> {
    let mut r = Reader(body);
    r.take(2 + 32)?; // legacy_version, random
    r.vec8()?; // legacy_session_id
    r.vec16()?; // cipher_suites
    r.vec8()?; // legacy_compression_methods
    if r.0.is_empty() {
        // No extensions at all: no name.
        return Some(Hello::Tls { sni: None, ech: false });
    }
    let mut exts = Reader(r.vec16()?);
    let (mut sni, mut ech) = (None, false);
    while !exts.0.is_empty() {
        let kind = exts.u16()?;
        let data = exts.vec16()?;
        match kind {
            SERVER_NAME => {
                if sni.is_some() {
                    return Some(Hello::Malformed("two server_name extensions"));
                }
                sni = Some(server_name(data)?);
            }
            ENCRYPTED_CLIENT_HELLO => ech = true,
            _ => {}
        }
    }
    Some(match sni {
        Some(Err(why)) => Hello::Malformed(why),
        Some(Ok(name)) => Hello::Tls { sni: Some(name), ech },
        None => Hello::Tls { sni: None, ech },
    })
}

/// The host name of a `server_name` extension: exactly one `host_name` entry, ASCII.
fn server_name(data: &[u8]) -> Option<Result<String, &'static str>> {
    let mut r = Reader(data);
    let mut list = Reader(r.vec16()?);
    let mut name = None;
    while !list.0.is_empty() {
        let kind = list.u8()?;
        let value = list.vec16()?;
        if kind != 0 {
            continue;
        }
        if name.is_some() {
            return Some(Err("two host names in server_name"));
        }
        if value.is_empty() || !value.is_ascii() {
            return Some(Err("a server name that is not an ASCII host name"));
        }
        name = Some(String::from_utf8_lossy(value).to_ascii_lowercase());
    }
    Some(name.ok_or("a server_name extension without a host name"))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal `ClientHello` in one record, with `sni` (and an ECH extension when `ech`).
    pub(crate) fn hello(sni: Option<&str>, ech: bool) -> Vec<u8> {
        let mut exts = Vec::new();
        if let Some(name) = sni {
            let name = name.as_bytes();
            let entry_len = u16::try_from(name.len() + 3).unwrap();
            let mut data = entry_len.to_be_bytes().to_vec();
            data.push(0);
            data.extend_from_slice(&u16::try_from(name.len()).unwrap().to_be_bytes());
            data.extend_from_slice(name);
            exts.extend_from_slice(&SERVER_NAME.to_be_bytes());
            exts.extend_from_slice(&u16::try_from(data.len()).unwrap().to_be_bytes());
            exts.extend_from_slice(&data);
        }
        if ech {
            exts.extend_from_slice(&ENCRYPTED_CLIENT_HELLO.to_be_bytes());
            exts.extend_from_slice(&[0, 1, 0]);
        }
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7; 32]);
        body.push(0); // session id
        body.extend_from_slice(&[0, 2, 0x13, 0x01]); // one suite
        body.extend_from_slice(&[1, 0]); // null compression
        body.extend_from_slice(&u16::try_from(exts.len()).unwrap().to_be_bytes());
        body.extend_from_slice(&exts);
        let mut message = vec![CLIENT_HELLO, 0];
        message.extend_from_slice(&u16::try_from(body.len()).unwrap().to_be_bytes());
        message.extend_from_slice(&body);
        records(&message, message.len())
    }

    /// `message` split into handshake records of at most `size` bytes each.
    pub(crate) fn records(message: &[u8], size: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for chunk in message.chunks(size) {
            out.extend_from_slice(&[HANDSHAKE, 3, 1]);
            out.extend_from_slice(&u16::try_from(chunk.len()).unwrap().to_be_bytes());
            out.extend_from_slice(chunk);
        }
        out
    }

    #[test]
    fn the_server_name_is_read_however_the_hello_is_split() {
        let whole = hello(Some("Allowed.Test"), false);
        let message = whole[5..].to_vec();
        for size in [1, 7, 40, message.len()] {
            let bytes = records(&message, size);
            for cut in 0..bytes.len() {
                assert_eq!(
                    client_hello(&bytes[..cut]),
                    Hello::Incomplete,
                    "record size {size}, cut at {cut}"
                );
            }
            assert_eq!(
                client_hello(&bytes),
                Hello::Tls { sni: Some("allowed.test".into()), ech: false },
                "{size}"
            );
        }
    }

    #[test]
    fn no_name_ech_and_other_protocols_are_told_apart() {
        assert_eq!(client_hello(&hello(None, false)), Hello::Tls { sni: None, ech: false });
        assert_eq!(
            client_hello(&hello(Some("public.test"), true)),
            Hello::Tls { sni: Some("public.test".into()), ech: true }
        );
        assert_eq!(client_hello(b"GET / HTTP/1.1\r\n"), Hello::NotTls);
        assert_eq!(client_hello(b"SSH-2.0-OpenSSH\r\n"), Hello::NotTls);
    }

    #[test]
    fn hostile_hellos_are_malformed_never_a_panic() {
        let good = hello(Some("a.test"), false);
        // Every truncation of the body, with the lengths left claiming more.
        for cut in 9..good.len() {
            let mut bad = good.clone();
            bad.truncate(cut);
            let r = client_hello(&bad);
            assert!(matches!(r, Hello::Incomplete | Hello::Malformed(_)), "{cut}: {r:?}");
        }
        // Every single-byte corruption.
        for i in 0..good.len() {
            for v in [0u8, 0xff] {
                let mut bad = good.clone();
                bad[i] = v;
                let _ = client_hello(&bad);
            }
        }
        assert!(matches!(client_hello(&[HANDSHAKE, 3, 1, 0, 0]), Hello::Malformed(_)));
        assert!(matches!(client_hello(&[HANDSHAKE, 3, 1, 0xff, 0xff]), Hello::Malformed(_)));
        let mut huge = vec![HANDSHAKE, 3, 1, 0, 4, CLIENT_HELLO, 0xff, 0xff, 0xff];
        huge.truncate(9);
        assert!(matches!(client_hello(&huge), Hello::Malformed(_)));
    }
}
