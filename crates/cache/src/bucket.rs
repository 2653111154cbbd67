//! Buckets: their settings (public, quota, projects allowed), name and key rules, and the
//! `buckets.json` file that keeps them across restarts, next to `deleting.json`, the buckets
//! whose deletion has begun (both 0600, written to a temp file, fsynced and renamed, so a
//! crash leaves the old or the new file, never half of one).

use std::path::Path;

use crate::StoreError;

/// Longest key accepted (bytes, after percent-decoding); PFIO sends whole URLs as keys.
pub const MAX_KEY_LEN: usize = 4096;

/// A bucket's settings (public, quota, projects): the manager's API type, so what the
/// manager keeps and pushes is exactly what a node stores.
pub use berth_model::api::CacheBucket as BucketConfig;

/// Checks a bucket name: 1–63 of `a-z 0-9 . _ -`, starting with a letter or digit.
pub fn validate_bucket_name(name: &str) -> Result<(), StoreError> {
    if berth_model::api::valid_bucket_name(name) {
        Ok(())
    } else {
        Err(StoreError::BadRequest(berth_model::api::bucket_name_error(name)))
    }
}

/// Checks a key: any bytes (including `:`, `//` and `..`: keys never become paths) but not
/// empty and at most [`MAX_KEY_LEN`] bytes.
pub fn validate_key(key: &[u8]) -> Result<(), StoreError> {
    if key.is_empty() {
        return Err(StoreError::BadRequest("the object key is empty: use /v1/objects/BUCKET/KEY".into()));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(StoreError::BadRequest(format!(
            "the object key is {} bytes long: keys may be at most {MAX_KEY_LEN} bytes",
            key.len()
        )));
    }
    Ok(())
}

/// Reads `buckets.json` (bucket settings) or `deleting.json` (bucket names); none: empty.
pub(crate) fn load<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Vec<T>, StoreError> {
    match std::fs::read(path) {
        Ok(b) => serde_json::from_slice(&b).map_err(|e| {
            StoreError::Corrupt(format!("{} is not valid bucket JSON ({e}): fix or remove it", path.display()))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(vec![]),
        Err(e) => Err(StoreError::io(path, e)),
    }
}

/// Replaces `buckets.json` or `deleting.json` (0600, like every file of the cache).
pub(crate) fn save<T: serde::Serialize>(path: &Path, items: &[T]) -> Result<(), StoreError> {
    let body = serde_json::to_vec_pretty(items).expect("bucket configs and names serialize");
    crate::private::write_atomic(path, &body).map_err(|e| StoreError::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_keys() {
        for good in ["imagenet", "a", "ds-2024.v1_x"] {
            validate_bucket_name(good).unwrap();
        }
        for bad in ["", "Upper", "-x", "a/b", "a b", &"x".repeat(64), ".."] {
            assert!(validate_bucket_name(bad).is_err(), "{bad:?} accepted");
        }
        validate_key(b"s3://host/bucket//a/../../etc/passwd").unwrap();
        assert!(validate_key(b"").is_err());
        assert!(validate_key(&vec![b'k'; MAX_KEY_LEN + 1]).is_err());
    }

    #[test]
    fn save_then_load() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("buckets.json");
        assert_eq!(load::<BucketConfig>(&p).unwrap(), vec![]);
        let b = vec![BucketConfig {
            name: "x".into(),
            public: true,
            quota: Some(5),
            projects: vec!["p".into()],
            ..Default::default()
        }];
        save(&p, &b).unwrap();
        assert_eq!(load::<BucketConfig>(&p).unwrap(), b);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
    }
}
