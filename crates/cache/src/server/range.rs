//! `Range: bytes=...` (RFC 9110 §14), parsed by the `http-range-header` crate: one range is
//! served as a 206; a malformed header, or one asking for several ranges, is ignored (the
//! whole object, as the RFC allows: no multipart answers); a range that starts past the end
//! (or a zero-length suffix) is a 416.

use http_range_header::{RangeUnsatisfiableError, parse_range_header};

/// What to send of an object of `size` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    All,
    /// `start..=end`, both within the object.
    Part {
        start: u64,
        end: u64,
    },
    Unsatisfiable,
}

pub fn parse(header: Option<&str>, size: u64) -> Want {
    let Some(header) = header else { return Want::All };
    let Ok(ranges) = parse_range_header(header.trim()) else { return Want::All };
    if ranges.len() != 1 {
        return Want::All;
    }
    match ranges.validate(size).as_deref() {
        Ok([r]) => Want::Part { start: *r.start(), end: *r.end() },
        // an empty object has no byte to send: a suffix of it is as unsatisfiable as any range
        Ok(_) | Err(RangeUnsatisfiableError::Unsatisfiable) => Want::Unsatisfiable,
        Err(_) => Want::All,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(parse(None, 10), Want::All);
        assert_eq!(parse(Some("bytes=0-3"), 10), Want::Part { start: 0, end: 3 });
        assert_eq!(parse(Some("bytes=5-"), 10), Want::Part { start: 5, end: 9 });
        assert_eq!(parse(Some("bytes=-3"), 10), Want::Part { start: 7, end: 9 });
        assert_eq!(parse(Some("bytes=-30"), 10), Want::Part { start: 0, end: 9 });
        assert_eq!(parse(Some("bytes=8-100"), 10), Want::Part { start: 8, end: 9 });
        assert_eq!(parse(Some("bytes=9-9"), 10), Want::Part { start: 9, end: 9 });
        assert_eq!(parse(Some(" bytes=2-4 "), 10), Want::Part { start: 2, end: 4 }, "white space around the value");
        assert_eq!(parse(Some("bytes=10-"), 10), Want::Unsatisfiable);
        assert_eq!(parse(Some("bytes=10-20"), 10), Want::Unsatisfiable);
        assert_eq!(parse(Some("bytes=-0"), 10), Want::Unsatisfiable);
        assert_eq!(parse(Some("bytes=0-0"), 0), Want::Unsatisfiable);
        assert_eq!(parse(Some("bytes=-5"), 0), Want::Unsatisfiable, "an empty object has no suffix");
        assert_eq!(parse(Some("bytes=0-1,4-5"), 10), Want::All, "several ranges: the whole object");
        assert_eq!(parse(Some("bytes=20-30, 0-5"), 10), Want::All);
        assert_eq!(parse(Some("bytes=5-2"), 10), Want::All, "reversed");
        assert_eq!(parse(Some("items=0-1"), 10), Want::All, "another unit");
        for bad in ["bytes=", "bytes=abc", "bytes=1-x", "bytes=--1", "bytes=+1-2", "bytes=1", "0-1", ""] {
            assert_eq!(parse(Some(bad), 10), Want::All, "{bad:?} is malformed: ignored");
        }
    }
}
