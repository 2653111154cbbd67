//! Who may do what: tokens are checked locally against the node's key ([`crate::token`]).
//! Public buckets are readable without a token; writes always need one. Private buckets are
//! for tokens naming one of their projects; admin tokens may do anything.

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
pub fn claims(node: &Node, headers: &HeaderMap) -> Result<Claims, Refusal> {
    let Some(t) = bearer(headers) else {
        NodeCounters::bump(&node.counters.auth_failures);
        return Err(Box::new(error(
            StatusCode::UNAUTHORIZED,
            "this request needs a cache token: send `Authorization: Bearer <token>` (jobs get BERTH_CACHE_TOKEN)",
        )));
    };
    node.key.verify(t, unix_now()).map_err(|e| {
        NodeCounters::bump(&node.counters.auth_failures);
        Box::new(error(StatusCode::UNAUTHORIZED, &e.to_string()))
    })
}

/// Only admin tokens.
pub fn admin(node: &Node, headers: &HeaderMap) -> Result<Claims, Refusal> {
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
    if c.admin || b.public || b.projects.iter().any(|p| c.projects.contains(p)) {
        return Ok(());
    }
    Err(Box::new(error(
        StatusCode::FORBIDDEN,
        &format!(
            "bucket `{}` is private to projects [{}] and this token (for `{}`) is for projects [{}]: use a token of one of the bucket's projects",
            b.name,
            b.projects.join(", "),
            c.sub,
            c.projects.join(", ")
        ),
    )))
}
