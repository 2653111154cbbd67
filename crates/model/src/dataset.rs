//! Datasets a job reads through the dataset cache (docs/datasets.md): `datasets =
//! ["BUCKET/PREFIX"]` in a job file or `--dataset BUCKET/PREFIX`. Before the job runs, its node
//! copies the files under `PREFIX` of the bucket's origin (a directory every node mounts) into
//! the cache, under the keys PFIO uses for local files, so the job's PFIO reads are hits.
//!
//! Here: the spec's [`DatasetRef`], what the manager sends an agent to fetch
//! ([`DatasetFetch`]), the cache key of an origin file ([`pfio_local_key`]) and what a job is
//! told ([`DatasetEnv`]).

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::SpecError;

/// The most datasets one job may name.
pub const MAX_DATASETS: usize = 16;

/// A dataset as a job names it: a cache bucket and a path prefix under the bucket's origin
/// (S3's meaning: every file whose path under the origin starts with it; empty: all of it).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DatasetRef {
    pub bucket: String,
    pub prefix: String,
}

impl std::str::FromStr for DatasetRef {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<DatasetRef, SpecError> {
        let (bucket, prefix) = s.split_once('/').unwrap_or((s, ""));
        if !crate::cache_api::valid_bucket_name(bucket) {
            return Err(SpecError(format!(
                "invalid dataset `{s}`: write BUCKET/PREFIX with a cache bucket's name ({})",
                crate::cache_api::bucket_name_error(bucket)
            )));
        }
        let bad = prefix.starts_with('/')
            || prefix.contains('\0')
            || prefix.len() > 1024
            || prefix.split('/').any(|c| c == ".." || c == ".")
            || prefix.contains("//");
        if bad {
            return Err(SpecError(format!(
                "invalid dataset `{s}`: the prefix is a path under the bucket's origin, without `.`, `..`, `//` or a leading `/` (e.g. {bucket}/train/)"
            )));
        }
        Ok(DatasetRef { bucket: bucket.to_string(), prefix: prefix.to_string() })
    }
}

impl std::fmt::Display for DatasetRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.bucket, self.prefix)
    }
}

impl Serialize for DatasetRef {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for DatasetRef {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<DatasetRef, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

impl DatasetRef {
    /// The path the job reads the dataset at: the origin joined with the prefix (a file name
    /// prefix such as `train/part-0` names the directory it is in).
    pub fn path_under(&self, origin: &str) -> String {
        let dir = match self.prefix.rsplit_once('/') {
            Some((d, _)) => d,
            None => "",
        };
        if dir.is_empty() { origin.to_string() } else { format!("{}/{dir}", origin.trim_end_matches('/')) }
    }

    /// The cache key prefix of this dataset's files (what [`pfio_local_key`] gives for them).
    pub fn key_prefix(&self, origin: &str) -> Vec<u8> {
        let mut p = PathBuf::from(origin);
        if !self.prefix.is_empty() {
            p.push(&self.prefix);
        }
        let mut k = pfio_local_key(&p);
        if self.prefix.is_empty() || self.prefix.ends_with('/') {
            k.push(b'/');
        }
        k
    }
}

/// Validates a job's datasets: at most [`MAX_DATASETS`], no repeats.
pub fn validate(datasets: &[DatasetRef]) -> Result<(), SpecError> {
    if datasets.len() > MAX_DATASETS {
        return Err(SpecError(format!("a job may name at most {MAX_DATASETS} datasets")));
    }
    let mut seen = std::collections::BTreeSet::new();
    for d in datasets {
        if !seen.insert(d) {
            return Err(SpecError(format!("dataset `{d}` is named twice")));
        }
    }
    Ok(())
}

/// The cache key PFIO gives a local file it caches (`pfio.v2.from_url(DIR, http_cache=...)`,
/// `HTTPCachedFS` over `Local`): `file:/` and the file's absolute, normalised path. `path` is
/// made absolute against `/` and normalised like Python's `os.path.normpath`, without
/// resolving links.
pub fn pfio_local_key(path: &Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    [b"file:/".as_slice(), out.as_os_str().as_bytes()].concat()
}

/// What the manager sends an agent for each of a job's datasets (`StartKernel`): where the
/// files are, which bucket they go into, and a cache token that may write there.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DatasetFetch {
    /// As the job named it (`BUCKET/PREFIX`).
    #[schema(value_type = String)]
    pub dataset: DatasetRef,
    /// The bucket's origin directory (absolute; on every node).
    pub origin: String,
    /// A token for the agent's writes into the bucket (the platform fills the cache from an
    /// origin the admin named, whatever the job's own token may do); never in the job's
    /// environment.
    pub token: String,
}

impl std::fmt::Debug for DatasetFetch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatasetFetch")
            .field("dataset", &self.dataset)
            .field("origin", &self.origin)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// One dataset as a job's environment describes it (`BERTH_DATASETS`, a JSON list): where to
/// read it and the PFIO `http_cache` URL that serves it from the node's cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatasetEnv {
    pub dataset: String,
    pub path: String,
    pub http_cache: String,
}

/// Bytes a cache key may hold that must be escaped in a URL path (`/` and `:` stay, so a
/// PFIO key reads as itself in logs).
pub const KEY_ESCAPE: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}')
    .add(b'\\')
    .add(b'^')
    .add(b'|');

/// The URL of object `key` of `bucket` on the cache node at `base`.
pub fn object_url(base: &str, bucket: &str, key: &[u8]) -> String {
    format!("{}/v1/objects/{bucket}/{}", base.trim_end_matches('/'), percent_encoding::percent_encode(key, KEY_ESCAPE))
}

/// The `http_cache` URL of `bucket` on the cache at `cache_url`.
pub fn http_cache_url(cache_url: &str, bucket: &str) -> String {
    format!("{}/v1/objects/{bucket}/", cache_url.trim_end_matches('/'))
}

/// Bytes of a job's datasets a node's cache holds (cache-aware placement, `berth show`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DatasetHolding {
    pub node: String,
    pub bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_bucket_and_prefix() {
        let d: DatasetRef = "imagenet/train/".parse().unwrap();
        assert_eq!((d.bucket.as_str(), d.prefix.as_str()), ("imagenet", "train/"));
        let d: DatasetRef = "imagenet".parse().unwrap();
        assert_eq!(d.prefix, "");
        assert_eq!(d.to_string(), "imagenet/");
        for bad in ["Bad/x", "/x", "b//x", "b/../etc", "b/./x", "b/x/..", ""] {
            assert!(bad.parse::<DatasetRef>().is_err(), "{bad} must be refused");
        }
    }

    #[test]
    fn keys_match_what_pfio_names_local_files() {
        assert_eq!(pfio_local_key(Path::new("/srv/ds/./a/../b.bin")), b"file://srv/ds/b.bin");
        let d: DatasetRef = "ds/train/".parse().unwrap();
        assert_eq!(d.key_prefix("/srv/ds"), b"file://srv/ds/train/");
        assert_eq!(d.path_under("/srv/ds"), "/srv/ds/train");
        let d: DatasetRef = "ds/train/part-".parse().unwrap();
        assert_eq!(d.key_prefix("/srv/ds"), b"file://srv/ds/train/part-");
        assert_eq!(d.path_under("/srv/ds"), "/srv/ds/train");
        let d: DatasetRef = "ds".parse().unwrap();
        assert_eq!(d.key_prefix("/srv/ds"), b"file://srv/ds/");
        assert_eq!(d.path_under("/srv/ds"), "/srv/ds");
    }

    #[test]
    fn repeats_are_refused() {
        let a: DatasetRef = "ds/x".parse().unwrap();
        assert!(validate(&[a.clone(), a]).is_err());
    }
}
