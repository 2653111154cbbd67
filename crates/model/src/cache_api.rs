//! REST bodies of the dataset cache (DESIGN.md §10) on the manager: the cache members it
//! knows (one per node whose agent reported a cache URL) and the buckets it keeps and pushes
//! to every cache node. Re-exported from [`crate::api`].

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A cache node as the manager sees it: `GET /v1/cache/members`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CacheMemberView {
    /// The berth node whose agent reported it.
    pub node: String,
    /// Its base URL, its name in the cache's member list.
    pub url: String,
    /// `up`, or `down` while its node is lost (its keys are then served, as misses at first,
    /// by the other members).
    pub state: String,
}

/// A bucket's settings: `PUT /v1/admin/cache/buckets/{name}` (the name comes from the path)
/// and `GET /v1/admin/cache/buckets`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub struct CacheBucket {
    #[serde(default)]
    pub name: String,
    /// Readable without a token (writes still need one).
    #[serde(default)]
    pub public: bool,
    /// Most bytes the bucket may use on each cache node; none: a fair share.
    #[serde(default)]
    pub quota: Option<u64>,
    /// Projects whose tokens may use a private bucket.
    #[serde(default)]
    pub projects: Vec<String>,
}

/// Whether `name` can name a bucket: 1–63 of `a-z 0-9 . _ -`, starting with a letter or digit
/// (the cache nodes' rule, checked by the manager too before it stores a bucket).
pub fn valid_bucket_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"._-".contains(&c))
        && name.as_bytes()[0].is_ascii_alphanumeric()
}

/// Why a bucket name is refused, and what to use instead.
pub fn bucket_name_error(name: &str) -> String {
    format!(
        "bucket name `{name}` is not valid: use 1-63 lowercase letters, digits, `.`, `_` or `-`, starting with a letter or digit"
    )
}
