//! Members, buckets (settings, and what this node holds of a bucket's keys under a prefix),
//! stats and metrics.

use std::sync::Arc;

use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde::Deserialize;
use serde_json::json;

use super::{Body, Node, auth, error};
use crate::bucket::BucketConfig;
use crate::maglev::{HASH_VERSION, Member};
use crate::store::Checked;
use berth_model::api::{BucketPlacement, bucket_origin_error};

/// Largest JSON body the admin routes read.
pub(super) const MAX_JSON: usize = 1024 * 1024;

pub fn metrics(node: &Node) -> Response<Body> {
    let text = crate::metrics::render(
        &node.store.stats(),
        node.store.used(),
        node.store.capacity(),
        node.store.memory_stats(),
        &node.counters,
    );
    Response::builder()
        .header(http::header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)
        .body(Body::full(text.into()))
        .expect("response")
}

pub fn stats(node: &Node) -> Response<Body> {
    super::json(
        StatusCode::OK,
        &json!({
            "node": node.name,
            "used": node.store.used(),
            "capacity": node.store.capacity(),
            "buckets": node.store.stats(),
        }),
    )
}

/// The member list with what a client needs to route by itself.
pub fn members(node: &Node) -> Response<Body> {
    let m = node.maglev();
    super::json(
        StatusCode::OK,
        &json!({
            "self": node.name,
            "hash": format!("maglev-xxh3-v{HASH_VERSION}"),
            "table_size": m.table_size(),
            "members": m.members(),
        }),
    )
}

async fn read_json<T: for<'de> Deserialize<'de>>(req: Request<Incoming>) -> Result<T, auth::Refusal> {
    let body = http_body_util::Limited::new(req.into_body(), MAX_JSON)
        .collect()
        .await
        .map_err(|e| Box::new(error(StatusCode::BAD_REQUEST, &format!("reading the body failed: {e}"))))?
        .to_bytes();
    serde_json::from_slice(&body)
        .map_err(|e| Box::new(error(StatusCode::BAD_REQUEST, &format!("the body is not the expected JSON: {e}"))))
}

/// `PUT /v1/members`: a list of members, or `{"members": [...], "buckets": [...],
/// "deleted_buckets": [...]}` (what the manager pushes: the members it knows, every bucket's
/// settings, so that a node joining later learns the buckets created before it, and the
/// names of deleted buckets, which are deleted here, objects and all). A bucket the push
/// does not name either way is left alone.
#[derive(Deserialize)]
#[serde(untagged)]
enum MembersIn {
    List(Vec<Member>),
    Cluster {
        members: Vec<Member>,
        #[serde(default)]
        buckets: Vec<BucketConfig>,
        #[serde(default)]
        deleted_buckets: Vec<String>,
    },
}

pub async fn put_members(node: &Arc<Node>, req: Request<Incoming>) -> Response<Body> {
    if let Err(r) = auth::admin(node, req.headers()) {
        return *r;
    }
    let (list, buckets, deleted) = match read_json(req).await {
        Ok(MembersIn::List(l)) => (l, vec![], vec![]),
        Ok(MembersIn::Cluster { members, buckets, deleted_buckets }) => (members, buckets, deleted_buckets),
        Err(r) => return *r,
    };
    if list.iter().any(|m| !m.name.starts_with("http://") && !m.name.starts_with("https://")) {
        return error(StatusCode::BAD_REQUEST, "members are base URLs such as http://10.0.0.2:7171");
    }
    for name in buckets.iter().map(|b| &b.name).chain(&deleted) {
        if let Err(e) = crate::bucket::validate_bucket_name(name) {
            return error(StatusCode::BAD_REQUEST, &e.to_string());
        }
    }
    if let Some(b) = buckets.iter().find(|b| deleted.contains(&b.name)) {
        return error(StatusCode::BAD_REQUEST, &format!("bucket `{}` is both in buckets and deleted_buckets", b.name));
    }
    if !list.is_empty() && !list.iter().any(|m| m.name == node.name) {
        // it then forwards its own keys to the URL it is listed under: works, costs a hop
        tracing::warn!(node = %node.name, "the member list does not name this node: set --advertise to the URL its agent reports");
    }
    let n = node.clone();
    let applied = tokio::task::spawn_blocking(move || -> Result<(), String> {
        delete_buckets(&n, &deleted)?;
        for b in buckets {
            if n.store.bucket(&b.name).as_ref() != Some(&b) {
                n.store.put_bucket(b).map_err(|e| format!("saving a bucket failed: {e}"))?;
            }
        }
        n.set_members(list).map_err(|e| format!("saving members.json failed: {e}"))?;
        Ok(())
    })
    .await;
    match applied {
        Ok(Ok(())) => members(node),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, &e),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &format!("member update failed: {e}")),
    }
}

/// Deletes the buckets the manager deleted that this node still has (blocks on the
/// deletions' unlinks).
fn delete_buckets(node: &Node, deleted: &[String]) -> Result<(), String> {
    for name in deleted {
        match node.store.delete_bucket(name) {
            Ok(d) => {
                tracing::info!(bucket = %name, objects = d.objects, bytes = d.bytes, "deleted a bucket the manager deleted")
            }
            // gone already: an earlier push, or a DELETE
            Err(crate::StoreError::NoBucket(_)) => {}
            Err(e) => return Err(format!("deleting bucket `{name}` failed: {e}")),
        }
    }
    Ok(())
}

pub fn buckets(node: &Node, req: &Request<Incoming>) -> Response<Body> {
    if let Err(r) = auth::claims(node, req.headers()) {
        return *r;
    }
    super::json(StatusCode::OK, &serde_json::to_value(node.store.buckets()).expect("json"))
}

#[derive(Deserialize)]
struct BucketIn {
    #[serde(default)]
    public: bool,
    #[serde(default)]
    quota: Option<u64>,
    #[serde(default)]
    projects: Vec<String>,
    #[serde(default)]
    origin: Option<String>,
    #[serde(default)]
    placement: BucketPlacement,
}

pub async fn put_bucket(node: &Arc<Node>, req: Request<Incoming>) -> Response<Body> {
    if let Err(r) = auth::admin(node, req.headers()) {
        return *r;
    }
    let name = req.uri().path().trim_start_matches("/v1/buckets/").to_string();
    let b: BucketIn = match read_json(req).await {
        Ok(b) => b,
        Err(r) => return *r,
    };
    if let Some(e) = b.origin.as_deref().and_then(bucket_origin_error) {
        return error(StatusCode::BAD_REQUEST, &e);
    }
    let cfg = BucketConfig {
        name,
        public: b.public,
        quota: b.quota,
        projects: b.projects,
        origin: b.origin,
        placement: b.placement,
    };
    let store = node.store.clone();
    let c = cfg.clone();
    match tokio::task::spawn_blocking(move || store.put_bucket(c)).await {
        Ok(Ok(())) => super::json(StatusCode::OK, &serde_json::to_value(cfg).expect("json")),
        Ok(Err(e)) => error(StatusCode::BAD_REQUEST, &e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &format!("bucket update failed: {e}")),
    }
}

/// `DELETE /v1/buckets/{name}` (admin): deletes a bucket and every object in it on this node
/// (a cache run without a manager; the manager deletes through its pushes).
pub async fn delete_bucket(node: &Arc<Node>, req: Request<Incoming>) -> Response<Body> {
    if let Err(r) = auth::admin(node, req.headers()) {
        return *r;
    }
    let name = req.uri().path().trim_start_matches("/v1/buckets/").to_string();
    let store = node.store.clone();
    let n = name.clone();
    match tokio::task::spawn_blocking(move || store.delete_bucket(&n)).await {
        Ok(Ok(d)) => super::json(StatusCode::OK, &json!({"bucket": name, "objects": d.objects, "bytes": d.bytes})),
        Ok(Err(e @ crate::StoreError::NoBucket(_))) => error(StatusCode::NOT_FOUND, &e.to_string()),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, &format!("deleting bucket `{name}` failed: {e}")),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &format!("bucket deletion failed: {e}")),
    }
}

/// `GET /v1/buckets/{bucket}/usage?prefix=P`: objects and bytes of `bucket` whose keys start
/// with `P` (percent-encoded bytes, `+` a plus; absent or empty: the whole bucket) that this
/// node's own store holds; never forwarded. Readable by whoever may read the bucket. The walk
/// over the bucket's index runs on the blocking pool, not on the worker's event loop.
pub async fn usage(node: &Arc<Node>, req: &Request<Incoming>, bucket: &str) -> Response<Body> {
    let prefix = match req.uri().query().map(prefix_param).transpose() {
        Ok(p) => p.flatten().unwrap_or_default(),
        Err(e) => return error(StatusCode::BAD_REQUEST, &e),
    };
    let (node, headers, bucket) = (node.clone(), req.headers().clone(), bucket.to_string());
    let counted = tokio::task::spawn_blocking(move || {
        let check = |cfg: &BucketConfig| auth::bucket_access(&node, &headers, cfg, false);
        match node.store.prefix_usage_checked(&bucket, &prefix, check) {
            Ok(u) => super::json(StatusCode::OK, &serde_json::to_value(u).expect("json")),
            Err(Checked::NoBucket) => error(StatusCode::NOT_FOUND, &crate::StoreError::NoBucket(bucket).to_string()),
            Err(Checked::Refused(r)) => *r,
        }
    })
    .await;
    counted.unwrap_or_else(|e| {
        error(StatusCode::INTERNAL_SERVER_ERROR, &format!("counting the bucket's usage failed: {e}"))
    })
}

/// The bytes of the `prefix` parameter of a query string (the last one named so), strictly
/// percent-decoded: a `%` must start two hex digits. `None` when the query has none.
fn prefix_param(query: &str) -> Result<Option<Vec<u8>>, String> {
    let mut found = None;
    for pair in query.split('&') {
        if let Some(v) = pair.strip_prefix("prefix=") {
            found = Some(v);
        } else if pair == "prefix" {
            found = Some("");
        }
    }
    let Some(v) = found else { return Ok(None) };
    let bad =
        || format!("the prefix `{v}` is not percent-encoded: write each byte as itself or as %XX (two hex digits)");
    let (raw, mut out) = (v.as_bytes(), Vec::with_capacity(v.len()));
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'%' {
            let hex = raw.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok()).ok_or_else(bad)?;
            if !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
                return Err(bad());
            }
            out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
            i += 3;
        } else {
            out.push(raw[i]);
            i += 1;
        }
    }
    if out.len() > crate::bucket::MAX_KEY_LEN {
        return Err(format!(
            "the prefix is {} bytes long: keys are at most {} bytes",
            out.len(),
            crate::bucket::MAX_KEY_LEN
        ));
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::prefix_param;

    #[test]
    fn prefixes_are_strictly_percent_decoded() {
        assert_eq!(prefix_param("").unwrap(), None);
        assert_eq!(prefix_param("other=1").unwrap(), None);
        assert_eq!(prefix_param("prefix=").unwrap(), Some(vec![]));
        assert_eq!(prefix_param("prefix").unwrap(), Some(vec![]));
        assert_eq!(prefix_param("x=1&prefix=train/a%20b%2B+%26").unwrap(), Some(b"train/a b++&".to_vec()));
        assert_eq!(prefix_param("prefix=%00%ff").unwrap(), Some(vec![0, 0xff]));
        for bad in ["prefix=%", "prefix=%2", "prefix=%zz", "prefix=a%g0", "prefix=%+1"] {
            assert!(prefix_param(bad).is_err(), "{bad} accepted");
        }
        assert!(prefix_param(&format!("prefix={}", "k".repeat(4097))).is_err());
    }

    #[test]
    fn the_models_usage_url_decodes_to_its_prefix() {
        let prefix = b"s3://b/train a&b=c+d%/\xff\x00".to_vec();
        let url = berth_model::api::prefix_usage_url("http://n:7171/", "ds", &prefix);
        let (path, query) = url.split_once('?').unwrap();
        assert_eq!(path, "http://n:7171/v1/buckets/ds/usage");
        assert_eq!(prefix_param(query).unwrap(), Some(prefix));
    }
}
