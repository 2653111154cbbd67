//! Cache tokens: HMAC-SHA256-signed claims that every cache node verifies locally.
//!
//! `bct1.<base64url(JSON claims)>.<base64url(HMAC-SHA256(key, "bct1." + claims))>`. The key
//! (32 random bytes, hex, in a 0600 key file) is shared by the cache nodes and the manager,
//! which mints a job-scoped token for each job (its projects, expiring with the job's time
//! limit). Nodes need no database and no call to the manager to check a token, so a manager
//! outage never stops reads. The signature is checked in constant time (`hmac`'s
//! `verify_slice`) before the claims are parsed; expiry is checked after.

use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::StoreError;

const PREFIX: &str = "bct1.";

/// What a token grants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// Who it was issued to (a user, `job-12`, ...): for logs only.
    pub sub: String,
    /// Projects whose private buckets the holder may use.
    #[serde(default)]
    pub projects: Vec<String>,
    /// Admins create buckets, change members and use every bucket.
    #[serde(default)]
    pub admin: bool,
    /// Expiry, Unix seconds.
    pub exp: i64,
}

/// The shared signing key.
#[derive(Clone)]
pub struct Key(Vec<u8>);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

fn mac(key: &Key) -> Hmac<Sha256> {
    Hmac::<Sha256>::new_from_slice(&key.0).expect("hmac takes keys of any length")
}

impl Key {
    pub fn random() -> Key {
        Key(rand::random::<[u8; 32]>().to_vec())
    }

    /// Reads a key file (hex). One that other users can read is used, with a warning: it may
    /// be shared on purpose (a group of the manager and the nodes), so it is not changed here;
    /// the key in a cache's data dir is made private at start like the rest of it.
    pub fn load(path: &Path) -> Result<Key, StoreError> {
        use std::os::unix::fs::MetadataExt;
        let text = std::fs::read_to_string(path).map_err(|e| StoreError::io(path, e))?;
        if let Ok(m) = std::fs::metadata(path)
            && m.mode() & 0o007 != 0
        {
            tracing::warn!(
                "the cache key file {} can be read by every user (mode {:o}), who can then mint admin tokens: `chmod 600` it",
                path.display(),
                m.mode() & 0o7777
            );
        }
        let bytes = hex::decode(text.trim()).map_err(|_| {
            StoreError::BadRequest(format!(
                "{} is not a cache key file (32 random bytes in hex): use the one `berth cache serve --key-file FILE` created (it makes one where none exists), or `openssl rand -hex 32 > FILE`",
                path.display()
            ))
        })?;
        if bytes.len() < 16 {
            return Err(StoreError::BadRequest(format!(
                "{} holds a key under 16 bytes: use 32 random bytes",
                path.display()
            )));
        }
        Ok(Key(bytes))
    }

    /// Reads the key file, creating it (0600, random) when it does not exist.
    pub fn load_or_create(path: &Path) -> Result<Key, StoreError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        if path.exists() {
            return Self::load(path);
        }
        // the directory as usual: it may be shared (`/etc/berth`, read by the manager too)
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d).map_err(|e| StoreError::io(d, e))?;
        }
        let key = Key::random();
        let mut f = std::fs::File::options()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| StoreError::io(path, e))?;
        writeln!(f, "{}", hex::encode(&key.0)).map_err(|e| StoreError::io(path, e))?;
        f.sync_all().map_err(|e| StoreError::io(path, e))?;
        Ok(key)
    }

    /// Signs claims into a token.
    pub fn sign(&self, claims: &Claims) -> String {
        let body = B64.encode(serde_json::to_vec(claims).expect("claims serialize"));
        let mut m = mac(self);
        m.update(PREFIX.as_bytes());
        m.update(body.as_bytes());
        let sig = B64.encode(m.finalize().into_bytes());
        format!("{PREFIX}{body}.{sig}")
    }

    /// Verifies a token's signature and expiry at `now` (Unix seconds).
    pub fn verify(&self, token: &str, now: i64) -> Result<Claims, TokenError> {
        let rest = token.strip_prefix(PREFIX).ok_or(TokenError::Malformed)?;
        let (body, sig) = rest.split_once('.').ok_or(TokenError::Malformed)?;
        let sig = B64.decode(sig).map_err(|_| TokenError::Malformed)?;
        let mut m = mac(self);
        m.update(PREFIX.as_bytes());
        m.update(body.as_bytes());
        m.verify_slice(&sig).map_err(|_| TokenError::BadSignature)?;
        let claims: Claims = serde_json::from_slice(&B64.decode(body).map_err(|_| TokenError::Malformed)?)
            .map_err(|_| TokenError::Malformed)?;
        if claims.exp <= now {
            return Err(TokenError::Expired);
        }
        Ok(claims)
    }
}

/// Why a token was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("the cache token is malformed: use a token from `berth cache token` or BERTH_CACHE_TOKEN")]
    Malformed,
    #[error(
        "the cache token's signature does not match this cache's key: mint it with the key file the cache nodes use"
    )]
    BadSignature,
    #[error("the cache token has expired: ask for a new one (`berth cache token`)")]
    Expired,
}

/// Unix seconds now.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(exp: i64) -> Claims {
        Claims { sub: "job-1".into(), projects: vec!["vision".into()], admin: false, exp }
    }

    #[test]
    fn signed_tokens_verify_and_tampering_is_refused() {
        let k = Key::random();
        let t = k.sign(&claims(100));
        assert_eq!(k.verify(&t, 50), Ok(claims(100)));
        assert_eq!(k.verify(&t, 100), Err(TokenError::Expired));
        assert_eq!(Key::random().verify(&t, 50), Err(TokenError::BadSignature));
        // swap in claims that grant admin, keep the old signature
        let forged = Claims { admin: true, ..claims(100) };
        let body = B64.encode(serde_json::to_vec(&forged).unwrap());
        let sig = t.rsplit_once('.').unwrap().1;
        assert_eq!(k.verify(&format!("{PREFIX}{body}.{sig}"), 50), Err(TokenError::BadSignature));
        assert_eq!(k.verify("not-a-token", 50), Err(TokenError::Malformed));
    }

    #[test]
    fn key_files_are_private_and_reloadable() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("cache.key");
        let k = Key::load_or_create(&p).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        let t = k.sign(&claims(100));
        assert!(Key::load_or_create(&p).unwrap().verify(&t, 1).is_ok());
        std::fs::write(&p, "zz").unwrap();
        assert!(Key::load(&p).is_err());
    }
}
