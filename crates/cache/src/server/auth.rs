//! Who may do what: tokens are checked locally against the node's key ([`crate::token`]).
//! Public buckets are readable by everyone, without a token; everything else (writes and
//! deletes in any bucket, reads of a private one) needs a token naming one of the bucket's
//! projects, or an admin token. Public is about reading only: a token of another project may
//! not write to or delete from a public bucket.

use std::sync::Arc;

use http::{HeaderMap, Response, StatusCode};

use super::{Body, Node, error};

/// A refusal to send as is (boxed: a response is large next to the Ok values).
pub type Refusal = Box<Response<Body>>;
use crate::bucket::BucketConfig;
use crate::metrics::NodeCounters;
use crate::token::{Claims, unix_now};

/// The bearer token of a request, if any.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim()).filter(|t| !t.is_empty())
}

/// The request's verified claims, or the 401 to answer.
pub fn claims(node: &Node, headers: &HeaderMap) -> Result<Arc<Claims>, Refusal> {
    let Some(t) = bearer(headers) else {
        NodeCounters::bump(&node.counters.auth_failures);
        return Err(Box::new(error(
            StatusCode::UNAUTHORIZED,
            "this request needs a cache token: send `Authorization: Bearer <token>` (jobs get BERTH_CACHE_TOKEN)",
        )));
    };
    let now = unix_now();
    if let Some(c) = node.tokens.get(t, now) {
        return Ok(c);
    }
    let c = node.key.verify(t, now).map(Arc::new).map_err(|e| {
        NodeCounters::bump(&node.counters.auth_failures);
        Box::new(error(StatusCode::UNAUTHORIZED, &e.to_string()))
    })?;
    node.tokens.put(t, &c);
    Ok(c)
}

/// Tokens verified recently, so that a job's thousands of requests cost one HMAC. Keyed by
/// an xxh3 of the token; the token itself is kept and compared in constant time, so the map
/// only ever answers for the exact token that was verified. Expiry is checked on every use.
#[derive(Debug, Default)]
pub struct TokenCache {
    map: std::sync::Mutex<std::collections::HashMap<u128, (String, Arc<Claims>)>>,
}

/// Entries kept before the cache starts over (a job has one token; nodes see few).
const TOKEN_CACHE_MAX: usize = 4096;

impl TokenCache {
    fn get(&self, token: &str, now: i64) -> Option<Arc<Claims>> {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let (t, c) = map.get(&xxhash_rust::xxh3::xxh3_128(token.as_bytes()))?;
        (c.exp > now && ct_eq(t.as_bytes(), token.as_bytes())).then(|| c.clone())
    }

    fn put(&self, token: &str, c: &Arc<Claims>) {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= TOKEN_CACHE_MAX {
            map.clear();
        }
        map.insert(xxhash_rust::xxh3::xxh3_128(token.as_bytes()), (token.to_string(), c.clone()));
    }
}

/// Equality whose time does not depend on where the inputs differ.
fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    subtle::ConstantTimeEq::ct_eq(a, b).into()
}

/// Only admin tokens.
pub fn admin(node: &Node, headers: &HeaderMap) -> Result<Arc<Claims>, Refusal> {
    let c = claims(node, headers)?;
    if c.admin {
        Ok(c)
    } else {
        Err(Box::new(error(
            StatusCode::FORBIDDEN,
            "this needs an admin cache token: mint one with `berth cache token --admin`",
        )))
    }
}

/// May the request read (`write` false) or write `bucket`?
pub fn bucket_access(node: &Node, headers: &HeaderMap, b: &BucketConfig, write: bool) -> Result<(), Refusal> {
    if b.public && !write {
        return Ok(());
    }
    let c = claims(node, headers)?;
    if c.admin || b.projects.iter().any(|p| c.projects.contains(p)) {
        return Ok(());
    }
    let what = if b.public {
        format!(
            "bucket `{}` is public to read, but only projects [{}] may write to it or delete from it",
            b.name,
            b.projects.join(", ")
        )
    } else {
        format!("bucket `{}` is private to projects [{}]", b.name, b.projects.join(", "))
    };
    Err(Box::new(error(
        StatusCode::FORBIDDEN,
        &format!(
            "{what} and this token (for `{}`) is for projects [{}]: use a token of one of the bucket's projects, or an admin token",
            c.sub,
            c.projects.join(", ")
        ),
    )))
}
