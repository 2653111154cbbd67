//! `Range: bytes=...` (RFC 9110 §14): one range is served as a 206; a malformed or
//! multi-range header is ignored (the whole object, as the RFC allows); a range that starts
//! past the end is a 416.

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
    let Some(spec) = header.and_then(|h| h.trim().strip_prefix("bytes=")) else { return Want::All };
    if spec.contains(',') {
        return Want::All;
    }
    let Some((a, b)) = spec.trim().split_once('-') else { return Want::All };
    let (a, b) = (a.trim(), b.trim());
    if a.is_empty() {
        // suffix: the last n bytes
        let Ok(n) = b.parse::<u64>() else { return Want::All };
        if n == 0 || size == 0 {
            return Want::Unsatisfiable;
        }
        return Want::Part { start: size.saturating_sub(n), end: size - 1 };
    }
    let Ok(start) = a.parse::<u64>() else { return Want::All };
    let end = if b.is_empty() {
        u64::MAX
    } else {
        match b.parse::<u64>() {
            Ok(e) if e >= start => e,
            _ => return Want::All,
        }
    };
    if start >= size {
        return Want::Unsatisfiable;
    }
    Want::Part { start, end: end.min(size - 1) }
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
        assert_eq!(parse(Some("bytes=10-"), 10), Want::Unsatisfiable);
        assert_eq!(parse(Some("bytes=-0"), 10), Want::Unsatisfiable);
        assert_eq!(parse(Some("bytes=0-0"), 0), Want::Unsatisfiable);
        assert_eq!(parse(Some("bytes=0-1,4-5"), 10), Want::All);
        assert_eq!(parse(Some("bytes=5-2"), 10), Want::All);
        assert_eq!(parse(Some("items=0-1"), 10), Want::All);
    }
}
