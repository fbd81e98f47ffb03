//! `multipart/form-data` as envd's `POST /files` takes it: E2B's SDKs upload a `bytes` or
//! `str` body this way (one part named `file` per file, its `filename` the target path),
//! and raw `application/octet-stream` only for streamed data on envd 0.5.7 and later.

/// The boundary of a `multipart/form-data` content type, if it is one.
pub fn boundary(content_type: &str) -> Option<String> {
    let mut params = content_type.split(';').map(str::trim);
    if !params.next()?.eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    params
        .filter_map(|p| p.split_once('='))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("boundary"))
        .map(|(_, v)| v.trim().trim_matches('"').to_owned())
}

/// One uploaded file: the part's `filename` and its bytes.
pub struct Part {
    pub filename: Option<String>,
    pub data: Vec<u8>,
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The parts named `file` of `body`, or `None` when the body is not well-formed.
pub fn files(body: &[u8], boundary: &str) -> Option<Vec<Part>> {
    let delimiter = format!("--{boundary}").into_bytes();
    let mut rest = &body[find(body, &delimiter)? + delimiter.len()..];
    let mut parts = Vec::new();
    loop {
        if rest.starts_with(b"--") {
            return Some(parts);
        }
        rest = rest.strip_prefix(b"\r\n")?;
        let head_end = find(rest, b"\r\n\r\n")?;
        let head = String::from_utf8_lossy(&rest[..head_end]).into_owned();
        rest = &rest[head_end + 4..];
        let end = find(rest, &[b"\r\n".as_slice(), &delimiter].concat())?;
        let data = rest[..end].to_vec();
        rest = &rest[end + 2 + delimiter.len()..];
        let disposition =
            head.lines().find(|l| l.to_ascii_lowercase().starts_with("content-disposition:"))?.to_owned();
        let param = |name: &str| {
            disposition
                .split(';')
                .map(str::trim)
                .find_map(|p| p.strip_prefix(&format!("{name}=")).map(|v| v.trim_matches('"').to_owned()))
        };
        if param("name").as_deref() == Some("file") {
            parts.push(Part { filename: param("filename"), data });
        }
    }
}
