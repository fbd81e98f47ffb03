//! The proxy requests the gate serves, read from the head a client sends (RFC 9110 §9.3.6
//! for `CONNECT`, RFC 9112 §3.2.2 for the absolute form of a plain-HTTP request).
//!
//! A head is at most [`MAX_HEAD`] bytes; anything else is a malformed request, answered
//! with `400` and never passed on.
//!
//! The gate reads a head more strictly than servers do, because what it checks (the `Host`
//! of a plain request, where the request ends) must be what the server will see: lines end
//! in CRLF only and carry no other control bytes (a server that also ends lines at a bare
//! LF would see headers the gate did not), field names are tokens with no space before the
//! colon, and a plain request's body is framed by one `Content-Length` or not at all
//! (`Transfer-Encoding` is refused: with it, where the request ends is the server's reading,
//! not the gate's, and what follows could be a second request to another virtual host).

use std::fmt::Write as _;

/// The longest request head read, in bytes.
pub(crate) const MAX_HEAD: usize = 16 * 1024;

/// What a client asked the gate for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ProxyRequest {
    /// `CONNECT host:port`: a tunnel.
    Connect { host: String, port: u16 },
    /// `METHOD http://host[:port]/path`: one plain-HTTP request, whose head is rewritten to
    /// the origin form for the server (`head`), with `Connection: close` so that the
    /// connection carries no second request to some other host; `body` is the length of
    /// the body that follows the head, the only bytes sent after it.
    Http { host: String, port: u16, head: Vec<u8>, body: u64 },
}

/// Where the head ends (the index after its blank line), once it has.
pub(crate) fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// Reads a complete head (`head_end` found its end).
///
/// # Errors
///
/// The words for a person when it is not a `CONNECT` or absolute-form `http://` request,
/// when it has a bare CR or LF, another control byte or a header that is no `token: value`,
/// or when a plain request's `Host` header names another host than its target, or its body
/// is not framed by one `Content-Length`.
pub(crate) fn parse(head: &[u8]) -> Result<ProxyRequest, String> {
    let text = std::str::from_utf8(head).map_err(|_| "the request head is not UTF-8".to_owned())?;
    check_line_ends(text)?;
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut words = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Err(format!("not a request line: {line:?}"));
    };
    if !matches!(version, "HTTP/1.1" | "HTTP/1.0")
        || method.is_empty()
        || !method.bytes().all(|b| b.is_ascii_uppercase())
    {
        return Err(format!("not an HTTP/1 request line: {line:?}"));
    }
    let headers: Vec<(&str, &str)> = lines
        .take_while(|l| !l.is_empty())
        .map(|l| match l.split_once(':') {
            Some((k, v)) if is_token(k) => Ok((k, v.trim_matches([' ', '\t']))),
            _ => Err(format!("not a header: {l:?}")),
        })
        .collect::<Result<_, _>>()?;
    if method == "CONNECT" {
        let (host, port) = authority(target, None)?;
        return Ok(ProxyRequest::Connect { host, port });
    }
    let rest = target.strip_prefix("http://").ok_or_else(|| {
        format!("a plain request must name an http:// URL (https goes through CONNECT): {target:?}")
    })?;
    let (auth, path) = match rest.find(['/', '?']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if auth.contains('@') {
        return Err("a URL with user information is not forwarded".to_owned());
    }
    let (host, port) = authority(auth, Some(80))?;
    let mut out = format!(
        "{method} {} {version}\r\n",
        if path.starts_with('?') { format!("/{path}") } else { path.to_owned() }
    );
    let mut saw_host = false;
    let mut body = None;
    for (name, value) in headers {
        let lower = name.to_ascii_lowercase();
        if lower == "transfer-encoding" {
            return Err(
                "a plain request with Transfer-Encoding is not forwarded (send Content-Length, or use https)"
                    .to_owned(),
            );
        }
        if lower == "content-length" {
            let length = value
                .parse::<u64>()
                .ok()
                .filter(|_| value.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| format!("not a Content-Length: {value:?}"))?;
            if body.replace(length).is_some() {
                return Err("a plain request with two Content-Length headers".to_owned());
            }
        }
        if lower == "host" {
            let (h, p) = authority(value, Some(80))?;
            if !h.eq_ignore_ascii_case(&host) || p != port {
                return Err(format!(
                    "the Host header {value:?} names another host than the request's {auth:?}"
                ));
            }
            saw_host = true;
        }
        // Hop-by-hop: the gate's own connection handling replaces these.
        if matches!(lower.as_str(), "connection" | "proxy-connection" | "keep-alive" | "proxy-authorization")
        {
            continue;
        }
        let _ = write!(out, "{name}: {value}\r\n");
    }
    if !saw_host {
        let _ = write!(out, "Host: {auth}\r\n");
    }
    out.push_str("Connection: close\r\n\r\n");
    Ok(ProxyRequest::Http { host, port, head: out.into_bytes(), body: body.unwrap_or(0) })
}

/// Every line ends in CRLF, and no other control byte but a tab is there.
fn check_line_ends(text: &str) -> Result<(), String> {
    let bytes = text.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        let ok = match b {
            b'\r' => bytes.get(i + 1) == Some(&b'\n'),
            b'\n' => i > 0 && bytes[i - 1] == b'\r',
            b'\t' => true,
            _ => !b.is_ascii_control(),
        };
        if !ok {
            return Err(format!(
                "a request head with a bare CR or LF, or control byte {b:#04x}, at byte {i}"
            ));
        }
    }
    Ok(())
}

/// An HTTP field name: one or more `tchar`s (RFC 9110 §5.6.2), so no space before the colon
/// and no line that continues the one before it (obsolete line folding).
fn is_token(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Splits `host:port` (IPv6 in brackets); `default` when the port is left out, else it is
/// required.
fn authority(text: &str, default: Option<u16>) -> Result<(String, u16), String> {
    let (host, port) = if let Some(end) = text.strip_prefix('[').and_then(|r| r.find(']')).map(|i| i + 2) {
        match &text[end..] {
            "" => (&text[..end], None),
            rest => (
                &text[..end],
                Some(rest.strip_prefix(':').ok_or_else(|| format!("not host:port: {text:?}"))?),
            ),
        }
    } else {
        match text.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (text, None),
        }
    };
    let port = match (port, default) {
        (Some(p), _) => {
            p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| format!("not a port: {p:?}"))?
        }
        (None, Some(d)) => d,
        (None, None) => return Err(format!("CONNECT needs host:port, got {text:?}")),
    };
    if host.is_empty() {
        return Err(format!("no host in {text:?}"));
    }
    Ok((host.to_owned(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_requests_name_host_and_port() {
        let r = parse(b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n").unwrap();
        assert_eq!(r, ProxyRequest::Connect { host: "pypi.org".into(), port: 443 });
        let r = parse(b"CONNECT [::1]:8443 HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(r, ProxyRequest::Connect { host: "[::1]".into(), port: 8443 });
        for bad in [
            &b"CONNECT pypi.org HTTP/1.1\r\n\r\n"[..],
            b"CONNECT pypi.org:0 HTTP/1.1\r\n\r\n",
            b"CONNECT :443 HTTP/1.1\r\n\r\n",
            b"CONNECT a:443 HTTP/2\r\n\r\n",
            b"connect a:443 HTTP/1.1\r\n\r\n",
            b"CONNECT a:443  HTTP/1.1\r\n\r\n",
            b"CONNECT a:443 HTTP/1.1\r\nbroken header\r\n\r\n",
            b"\xff\r\n\r\n",
        ] {
            assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn plain_requests_are_rewritten_to_origin_form_with_one_request_per_connection() {
        let head = b"GET http://mirror.test/simple/?q=1 HTTP/1.1\r\nHost: mirror.test\r\nProxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n";
        let ProxyRequest::Http { host, port, head, body } = parse(head).unwrap() else { panic!("not http") };
        assert_eq!((host.as_str(), port, body), ("mirror.test", 80, 0));
        assert_eq!(
            String::from_utf8(head).unwrap(),
            "GET /simple/?q=1 HTTP/1.1\r\nHost: mirror.test\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        let ProxyRequest::Http { port, head, .. } =
            parse(b"POST http://m.test:8080 HTTP/1.0\r\n\r\n").unwrap()
        else {
            panic!("not http")
        };
        assert_eq!(port, 8080);
        assert_eq!(
            String::from_utf8(head).unwrap(),
            "POST / HTTP/1.0\r\nHost: m.test:8080\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn a_host_header_naming_another_host_is_refused() {
        let err = parse(b"GET http://allowed.test/ HTTP/1.1\r\nHost: other.test\r\n\r\n").unwrap_err();
        assert!(err.contains("another host"), "{err}");
        assert!(parse(b"GET https://allowed.test/ HTTP/1.1\r\n\r\n").is_err());
        assert!(parse(b"GET /relative HTTP/1.1\r\nHost: allowed.test\r\n\r\n").is_err());
        assert!(parse(b"GET http://user@allowed.test/ HTTP/1.1\r\n\r\n").is_err());
    }

    #[test]
    fn heads_a_server_could_read_otherwise_are_refused() {
        // Each of these put `Host: evil.test` (or a second request) before a server that ends
        // lines at a bare LF or CR, or reads a name with a NUL or a space as `Host`.
        for bad in [
            "GET http://m.test/ HTTP/1.1\r\nX-A: 1\nHost: evil.test\r\n\r\n",
            "GET http://m.test/ HTTP/1.1\r\nX-A: 1\rHost: evil.test\r\n\r\n",
            "GET http://m.test/ HTTP/1.1\r\nX-A: 1\n\nGET / HTTP/1.1\nHost: evil.test\r\n\r\n",
            "GET http://m.test/ HTTP/1.1\r\nHost\0: evil.test\r\n\r\n",
            "GET http://m.test/ HTTP/1.1\r\nHost : evil.test\r\n\r\n",
            "GET http://m.test/ HTTP/1.1\r\nX-A: 1\r\n Host: evil.test\r\n\r\n",
            "GET http://m.test/ HTTP/1.1\r\nX-A: a\u{1}b\r\n\r\n",
            "CONNECT m.test:443 HTTP/1.1\nHost: m.test\r\n\r\n",
        ] {
            let err = parse(bad.as_bytes()).unwrap_err();
            assert!(err.contains("bare CR") || err.contains("not a header"), "{err}");
        }
        // The control: tabs in values and a clean head are fine.
        assert!(parse(b"GET http://m.test/ HTTP/1.1\r\nX-A:\ta b\t\r\n\r\n").is_ok());
    }

    #[test]
    fn a_plain_body_is_framed_by_one_content_length_or_the_request_is_refused() {
        let ProxyRequest::Http { body, head, .. } =
            parse(b"POST http://m.test/ HTTP/1.1\r\nContent-Length: 12\r\n\r\n").unwrap()
        else {
            panic!("not http")
        };
        assert_eq!(body, 12);
        assert!(String::from_utf8(head).unwrap().contains("Content-Length: 12\r\n"));
        for (bad, why) in [
            (&b"POST http://m.test/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"[..], "Transfer-Encoding"),
            (
                b"POST http://m.test/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n",
                "Transfer-Encoding",
            ),
            (
                b"POST http://m.test/ HTTP/1.1\r\nContent-Length: 4\r\nContent-Length: 40\r\n\r\n",
                "two Content-Length",
            ),
            (b"POST http://m.test/ HTTP/1.1\r\nContent-Length: +4\r\n\r\n", "not a Content-Length"),
            (b"POST http://m.test/ HTTP/1.1\r\nContent-Length: 4, 4\r\n\r\n", "not a Content-Length"),
        ] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains(why), "{err}");
        }
    }

    #[test]
    fn the_head_ends_at_its_blank_line() {
        assert_eq!(head_end(b"CONNECT a:1 HTTP/1.1\r\n\r\nrest"), Some(24));
        assert_eq!(head_end(b"CONNECT a:1 HTTP/1.1\r\n"), None);
    }
}
