//! A kernel's hold on its environment ([`Lease`]): taken when the kernel's setup resolved
//! the environment's key, handed to the kernel table when the setup ends, released when the
//! kernel ends, or by itself when the setup's outcome is dropped on the way (a stop).

use std::path::PathBuf;

use super::EnvCache;

/// A kernel's hold on environment `key`: it is not evicted or removed while the lease lives.
/// The kernel table keeps it ([`Lease::keep`]) for the kernel's life; a lease dropped on the
/// way (the kernel stopped during its setup) lets go by itself.
pub(crate) struct Lease {
    cache: EnvCache,
    key: Option<String>,
}

impl Lease {
    /// Takes a hold on `key` now.
    pub(super) fn take(cache: &EnvCache, key: &str) -> Lease {
        cache.acquire(key);
        Lease { cache: cache.clone(), key: Some(key.to_string()) }
    }

    /// The environment's directory.
    pub fn dir(&self) -> PathBuf {
        self.cache.dir(self.key.as_deref().unwrap_or_default())
    }

    /// Hands the hold over to the caller: from now on it calls [`EnvCache::release`] with the
    /// key returned.
    pub fn keep(mut self) -> String {
        self.key.take().unwrap_or_default()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(k) = self.key.take() {
            self.cache.release(&k);
        }
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Lease").field(&self.key).finish()
    }
}
