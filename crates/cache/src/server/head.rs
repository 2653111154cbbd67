//! What the guard (`guard.rs`) judges of a request head: where it ends, and the body
//! length its `Content-Length` values give, or why they are refused (400: not a whole number
//! of bytes below 2^64, or values that differ; 413: more than any route of the node takes).

use http::StatusCode;

/// Whether `buf` holds the empty line that ends a head (`\n\n` or `\n\r\n`) from `from` on.
pub(super) fn has_head_end(buf: &[u8], from: usize) -> bool {
    let tail = buf.get(from..).unwrap_or_default();
    tail.windows(2)
        .enumerate()
        .any(|(i, w)| w[0] == b'\n' && (w[1] == b'\n' || (w[1] == b'\r' && tail.get(i + 2) == Some(&b'\n'))))
}

/// The body length the `Content-Length` values of a head give (0 without one), or the status
/// and message to refuse the request with.
pub(super) fn body_length(values: &[&[u8]], max_body: u64) -> Result<u64, (StatusCode, String)> {
    let mut length = None;
    for v in values.iter().flat_map(|v| v.split(|&b| b == b',')) {
        let v = v.trim_ascii();
        let shown = String::from_utf8_lossy(v);
        let n = if !v.is_empty() && v.iter().all(u8::is_ascii_digit) {
            // digits only, so the one way to fail is a number of 2^64 or more
            std::str::from_utf8(v).ok().and_then(|s| s.parse::<u64>().ok()).ok_or_else(|| {
                (
                    StatusCode::BAD_REQUEST,
                    format!("Content-Length {shown} is not a size this cache can hold (2^64 or more): send the body's size in bytes"),
                )
            })?
        } else {
            return Err((
                StatusCode::BAD_REQUEST,
                format!(
                    "Content-Length `{shown}` is not a whole number of bytes: send the body's size in bytes, e.g. `Content-Length: 1024`"
                ),
            ));
        };
        if length.is_some_and(|l| l != n) {
            return Err((
                StatusCode::BAD_REQUEST,
                "the request has several Content-Length values that differ: send one, the body's size in bytes".into(),
            ));
        }
        length = Some(n);
    }
    let n = length.unwrap_or(0);
    if n > max_body {
        return Err((
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "Content-Length {n} is more than this cache node can take in one request ({max_body} bytes): store a smaller object, or raise the node's capacity"
            ),
        ));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_ends() {
        assert!(has_head_end(b"GET / HTTP/1.1\r\n\r\n", 14) && has_head_end(b"GET /\n\n", 0));
        assert!(!has_head_end(b"GET / HTTP/1.1\r\nhost: x\r\n", 0));
        assert!(!has_head_end(b"", 0) && !has_head_end(b"\n\n", 5));
    }

    #[test]
    fn lengths() {
        let cap = 1000;
        assert_eq!(body_length(&[], cap), Ok(0));
        assert_eq!(body_length(&[b"12"], cap), Ok(12));
        assert_eq!(body_length(&[b" 12 , 12"], cap), Ok(12));
        assert_eq!(body_length(&[b"12", b"12"], cap), Ok(12));
        for bad in [&b"-1"[..], b"abc", b"1e3", b"", b"+5", b"99999999999999999999", b"18446744073709551616"] {
            let (status, msg) = body_length(&[bad], cap).unwrap_err();
            assert_eq!(status, StatusCode::BAD_REQUEST, "{msg}");
        }
        assert_eq!(body_length(&[b"12", b"13"], cap).unwrap_err().0, StatusCode::BAD_REQUEST);
        for big in ["1001", "18446744073709551615", "18446744073709551614"] {
            let (status, msg) = body_length(&[big.as_bytes()], cap).unwrap_err();
            assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
            assert!(msg.contains(big), "{msg}");
        }
    }
}
