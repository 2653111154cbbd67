//! REST bodies of the dataset cache (docs/cache.md) on the manager: the cache members it
//! knows (one per node whose agent reported a cache URL) and the buckets it keeps and pushes
//! to every cache node. Re-exported by the `api` module, their public path.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A cache node as the manager sees it: `GET /v1/cache/members`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CacheMemberView {
    /// The berth node whose agent reported it.
    pub node: String,
    /// Its base URL, its name in the cache's member list.
    pub url: String,
    /// `up`, `down` while its node is lost (its keys are then served, as misses at first,
    /// by the other members), or `removed` by an admin (`berth cache member remove`: out of
    /// the members until `berth cache member add`).
    pub state: String,
    /// Its relative share of the keys: the weight an admin set, else its agent's.
    #[serde(default = "one")]
    pub weight: u32,
    /// Whether `weight` is the admin's (`berth cache member set`) rather than the agent's.
    #[serde(default)]
    pub weight_set: bool,
    /// Join sequence number: given when its URL was first seen, never reused, kept while it
    /// is removed and added back; the cache nodes order their members by it.
    #[serde(default)]
    pub seq: u64,
}

fn one() -> u32 {
    1
}

/// The largest cache member weight (`berth cache member set --weight`, `berth agent
/// --cache-weight`): a member of weight 1 next to one of this still owns slots of the
/// 65537-slot table.
pub const MAX_CACHE_WEIGHT: u32 = 1000;

/// Why a weight is refused, or `None` when it is in 1..=[`MAX_CACHE_WEIGHT`].
pub fn cache_weight_error(weight: u64) -> Option<String> {
    (weight == 0 || weight > u64::from(MAX_CACHE_WEIGHT)).then(|| {
        format!("cache weight {weight} is out of range: use a whole number from 1 to {MAX_CACHE_WEIGHT} (relative to the other members' weights)")
    })
}

/// `PUT /v1/admin/cache/members/{node}`: what an admin changes about a member.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub struct CacheMemberUpdate {
    /// Its weight, 1 to [`MAX_CACHE_WEIGHT`]; `null`: back to the weight its agent reports.
    #[serde(default)]
    pub weight: Option<u32>,
}

/// A bucket's settings: `PUT /v1/admin/cache/buckets/{name}` (the name comes from the path)
/// and `GET /v1/admin/cache/buckets`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub struct CacheBucket {
    #[serde(default)]
    pub name: String,
    /// Readable by everyone, without a token; writes and deletes still need a token of one of
    /// `projects` (or an admin token).
    #[serde(default)]
    pub public: bool,
    /// Most bytes the bucket may use on each cache node; none: a fair share.
    #[serde(default)]
    pub quota: Option<u64>,
    /// Projects whose tokens may use the bucket: read a private one, write to any.
    #[serde(default)]
    pub projects: Vec<String>,
    /// Where the bucket's data comes from: an absolute directory mounted at the same path on
    /// every node (a shared filesystem). Jobs naming `datasets = ["BUCKET/PREFIX"]` get the
    /// files under it prefetched into the cache before they run; `None`: no datasets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// How the bucket's objects are spread over the cache nodes.
    #[serde(default)]
    pub placement: BucketPlacement,
}

/// Where a bucket's objects live.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    Serialize,
    Deserialize,
    ToSchema,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum BucketPlacement {
    /// Each key on one node, chosen by Maglev hashing; any node forwards to it. The cluster's
    /// caches add up to one big cache.
    #[default]
    Spread,
    /// Each node keeps its own copies of what is written to it (no forwarding): reads stay on
    /// the node's disk, and the scheduler prefers nodes whose cache already holds a job's
    /// dataset.
    Node,
}

impl BucketPlacement {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl std::str::FromStr for BucketPlacement {
    type Err = String;

    fn from_str(s: &str) -> Result<BucketPlacement, String> {
        crate::names::parse(s).ok_or_else(|| {
            format!(
                "unknown bucket placement `{s}`: use `spread` (one copy, Maglev-routed) or `node` (a copy per node)"
            )
        })
    }
}

/// Why `origin` cannot be a bucket's origin: it must be an absolute, normal directory path
/// (each component named: no `.`, `..` or empty one, so no `//` and no trailing `/`; `/`
/// itself is allowed), at most 4096 bytes, without NUL.
pub fn bucket_origin_error(origin: &str) -> Option<String> {
    // split by hand: `Path::components` drops inner `.` and repeated separators silently
    let normal = origin == "/"
        || origin.strip_prefix('/').is_some_and(|rest| rest.split('/').all(|c| !c.is_empty() && c != "." && c != ".."));
    (!normal || origin.len() > 4096 || origin.contains('\0'))
        .then(|| format!("bucket origin `{origin}` must be an absolute directory path without `.`, `..`, `//` or a trailing `/` (e.g. /shared/datasets/imagenet)"))
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

/// `GET /v1/buckets/{bucket}/usage?prefix=P` on a cache node: what this node itself holds of
/// the bucket's keys that start with `P` (percent-encoded bytes in the query; empty: all),
/// not counting other nodes'. The manager asks each node for a job's datasets (cache-aware
/// placement).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub struct CachePrefixUsage {
    /// Objects of the bucket under the prefix on this node.
    pub objects: u64,
    /// Their bytes (object data, not counting the files' headers).
    pub bytes: u64,
}

/// The URL of `GET /v1/buckets/{bucket}/usage` on the cache node at `base` for the keys that
/// start with `prefix` (every byte but ASCII letters and digits percent-encoded, so `&`, `+`
/// and `=` in a key survive the query string).
pub fn prefix_usage_url(base: &str, bucket: &str, prefix: &[u8]) -> String {
    let p = percent_encoding::percent_encode(prefix, percent_encoding::NON_ALPHANUMERIC);
    format!("{}/v1/buckets/{bucket}/usage?prefix={p}", base.trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_absolute_normal_paths() {
        for good in ["/", "/shared/datasets/imagenet", "/a", "/with space/and.dots..x"] {
            assert_eq!(bucket_origin_error(good), None, "{good}");
        }
        for bad in
            ["", "relative", "shared/ds", "./ds", "/a/./b", "/a/../b", "/..", "/.", "/a//b", "/a/", "//", "/a\0b"]
        {
            assert!(bucket_origin_error(bad).is_some(), "{bad:?} accepted");
        }
        assert!(bucket_origin_error(&format!("/{}", "x".repeat(4096))).is_some());
    }

    #[test]
    fn placements_parse_and_print() {
        for p in [BucketPlacement::Spread, BucketPlacement::Node] {
            assert_eq!(p.as_str().parse::<BucketPlacement>(), Ok(p));
        }
        assert!("Node".parse::<BucketPlacement>().is_err());
        assert_eq!(BucketPlacement::default(), BucketPlacement::Spread);
    }
}
