//! The `date` header value of fast-path answers (`fast.rs`), formatted once a second per
//! worker thread like hyper's own, so that both paths send the same header.

use std::cell::RefCell;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

struct Cached {
    text: String,
    next: SystemTime,
}

thread_local!(static CACHED: RefCell<Cached> = const { RefCell::new(Cached { text: String::new(), next: UNIX_EPOCH }) });

/// Appends the current `date` value (`Sun, 06 Nov 1994 08:49:37 GMT`) to `dst`.
pub fn extend(dst: &mut Vec<u8>) {
    CACHED.with(|c| {
        let mut c = c.borrow_mut();
        let now = SystemTime::now();
        if now >= c.next {
            c.text = httpdate::fmt_http_date(now);
            let nanos = now.duration_since(UNIX_EPOCH).unwrap_or_default().subsec_nanos();
            c.next = now + Duration::from_secs(1) - Duration::from_nanos(u64::from(nanos));
        }
        dst.extend_from_slice(c.text.as_bytes());
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn is_an_http_date_of_now() {
        let mut v = vec![];
        super::extend(&mut v);
        let s = String::from_utf8(v).unwrap();
        assert_eq!(s.len(), 29, "{s}");
        let t = httpdate::parse_http_date(&s).unwrap();
        let age = std::time::SystemTime::now().duration_since(t).unwrap();
        assert!(age.as_secs() <= 2, "{s} is not now");
    }
}
