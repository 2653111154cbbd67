//! The node's cache of Python environments (docs/environments.md): `<data dir>/envs/<key>/`, one
//! virtual environment per [`EnvSpec::key`], built once with uv ([`build`]) and shared by every
//! kernel on the node that asks for the same inputs.
//!
//! A finished environment is root-owned and read-only (the agent's own user's when the agent is
//! not root), so no kernel can change an environment another user's kernel runs with. Builds
//! happen in `.build-*` temp dirs and are renamed in whole, so a kernel never sees half an
//! environment. The cache's bookkeeping (which environments live kernels use, which are being
//! built) sits behind one mutex, taken for microseconds; lookups, renames for eviction and
//! removals all take it, so an environment in use is never deleted under a kernel.
//!
//! Which environment a kernel may use is decided by [`inputs`]: the key covers the spec, the
//! node's uv and interpreter ([`python`]) and the admin's index settings, and the kernel's
//! user when its environment is private. What each environment was built from and what it
//! holds is in its `.berth/meta.json` ([`record`]).
//!
//! Past the size limit (`--env-cache-size`) the least recently used environments that no live
//! kernel uses are deleted ([`victims`]).

pub(crate) mod build;
mod check;
mod error;
mod inputs;
mod lease;
mod prepare;
mod python;
mod record;
mod seal;

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use berth_model::environment::{BuildInputs, EnvEntry, EnvKind, IndexSettings};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

pub use error::EnvError;
pub(crate) use inputs::user_settings;
pub(crate) use lease::Lease;
pub(crate) use prepare::{Kernel, prepare};

/// The default of `--env-cache-size`: a few CUDA-sized environments.
pub const DEFAULT_CACHE_BYTES: u64 = 20 << 30;

/// What the agent writes beside an environment's packages: `<env>/.berth/`.
const META_DIR: &str = ".berth";
/// Its description (python, kind, size), written once when it is built.
const META_FILE: &str = "meta.json";
/// An empty file whose modification time is the environment's last use.
const USED_FILE: &str = "used";

/// How to find uv and how much the cache may hold.
#[derive(Debug, Clone)]
pub struct EnvOptions {
    /// The uv executable (`--uv`, `BERTH_UV`); `None`: `uv` on the agent's PATH.
    pub uv: Option<PathBuf>,
    /// The most bytes of environments kept (`--env-cache-size`).
    pub cache_bytes: u64,
    /// Where builds take packages from (`--uv-index-url` and the like): the admin's, the only
    /// index settings a shared build sees.
    pub index: IndexSettings,
}

impl Default for EnvOptions {
    fn default() -> Self {
        EnvOptions { uv: None, cache_bytes: DEFAULT_CACHE_BYTES, index: IndexSettings::default() }
    }
}

/// `<env>/.berth/meta.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Meta {
    python: String,
    kind: EnvKind,
    size_bytes: u64,
    /// What it was built from (index URLs without their credentials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    inputs: Option<BuildInputs>,
    /// Why only its user's jobs use it, when so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    private: Option<String>,
    /// What it holds, with the hashes that verify it.
    #[serde(default)]
    installed: Vec<record::Installed>,
}

/// A build's state, as the kernels waiting for it see it.
#[derive(Debug, Clone)]
pub(crate) enum Status {
    /// `done` of `total` phases, with what uv last said.
    Running { done: u32, detail: Option<String> },
    /// It ended: the environment is in the cache, or why not.
    Done(Result<build::Built, build::BuildError>),
}

#[derive(Default)]
struct Book {
    /// Live kernels per environment key.
    in_use: HashMap<String, u32>,
    /// Builds under way; a kernel that needs one subscribes instead of building again.
    builds: HashMap<String, Arc<watch::Sender<Status>>>,
}

/// The cache; cheap to clone (one per agent, shared with the build tasks).
#[derive(Clone)]
pub(crate) struct EnvCache {
    root: PathBuf,
    opts: EnvOptions,
    book: Arc<Mutex<Book>>,
    pythons: Arc<python::Pythons>,
}

impl EnvCache {
    /// Opens `<data_dir>/envs`, removing what a previous agent left half done (temp build dirs,
    /// evicted environments not yet deleted).
    pub fn new(data_dir: &Path, opts: EnvOptions) -> EnvCache {
        let root = data_dir.join("envs");
        if let Err(e) = std::fs::create_dir_all(&root) {
            tracing::warn!("cannot create `{}`: {e}; jobs with an environment will fail here", root.display());
        }
        // Kernels of other users must reach their environments: traversal, no listing.
        let _ = std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o711));
        for e in std::fs::read_dir(&root).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(".build-") || name.starts_with(".trash-") {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        // The agent's own uv and pip variables no longer reach builds: the key could not
        // cover them. Say so rather than build from another index than the admin meant.
        let ignored: Vec<String> = std::env::vars()
            .map(|(k, _)| k)
            .filter(|k| (k.starts_with("UV_") || k.starts_with("PIP_")) && k != "UV_CACHE_DIR")
            .collect();
        if !ignored.is_empty() {
            tracing::warn!(
                "environment builds ignore the agent's {}: give the index with --uv-index-url, \
                 --uv-extra-index-url, --uv-find-links or --uv-no-index",
                ignored.join(", ")
            );
        }
        let cache = EnvCache { root, opts, book: Arc::default(), pythons: Arc::default() };
        if nix::unistd::Uid::effective().is_root()
            && let Some(w) = python::uv_warning(&cache.uv_program())
        {
            tracing::warn!("{w}");
        }
        cache
    }

    /// The uv builds run: `--uv`, else the `uv` on the agent's PATH, as an absolute path.
    fn uv_program(&self) -> PathBuf {
        python::resolve_uv(self.opts.uv.as_deref().unwrap_or(Path::new("uv")))
    }

    /// Where environment `key` lives once built.
    pub fn dir(&self, key: &str) -> PathBuf {
        self.root.join(key)
    }

    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        // A panic while holding it leaves plain counters: still usable.
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A live kernel uses `key` from now on (until [`EnvCache::release`]): it is not evicted.
    pub fn acquire(&self, key: &str) {
        *self.book().in_use.entry(key.to_string()).or_default() += 1;
    }

    pub fn release(&self, key: &str) {
        let mut book = self.book();
        if let Some(n) = book.in_use.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                book.in_use.remove(key);
            }
        }
    }

    /// The cached environments, most recently used first.
    pub fn list(&self) -> Vec<EnvEntry> {
        let in_use = self.book().in_use.clone();
        self.scan(&in_use)
    }

    /// Reads the cache's directory; `in_use` counts the live kernels per key. (Callers that
    /// hold the book pass its counts: the mutex is not reentrant.)
    fn scan(&self, in_use: &HashMap<String, u32>) -> Vec<EnvEntry> {
        let mut out: Vec<EnvEntry> = std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let key = e.file_name().to_str()?.to_string();
                if key.starts_with('.') {
                    return None;
                }
                let (meta, last_used) = read_meta(&e.path())?;
                let in_use = in_use.get(&key).copied().unwrap_or(0);
                Some(EnvEntry {
                    key,
                    python: meta.python,
                    kind: meta.kind,
                    size_bytes: meta.size_bytes,
                    last_used,
                    in_use,
                })
            })
            .collect();
        out.sort_by(|a, b| b.last_used.cmp(&a.last_used).then_with(|| a.key.cmp(&b.key)));
        out
    }

    /// Takes the environment whose key starts with `prefix` out of the cache, unless a live
    /// kernel uses it or it is being built; returns its full key and where it now is, for the
    /// caller to delete (which may take a while).
    pub fn remove(&self, prefix: &str) -> Result<(String, PathBuf), EnvError> {
        let (trash, key) = {
            let book = self.book();
            let matching: Vec<EnvEntry> =
                self.scan(&book.in_use).into_iter().filter(|e| e.key.starts_with(prefix)).collect();
            let entry = match matching.as_slice() {
                [] => return Err(EnvError::NoSuchEnv(prefix.to_string())),
                [one] => one,
                _ => return Err(EnvError::Ambiguous(prefix.to_string())),
            };
            if book.in_use.contains_key(&entry.key) || book.builds.contains_key(&entry.key) {
                return Err(EnvError::InUse(short(&entry.key).to_string()));
            }
            let trash = self
                .to_trash(&entry.key)
                .map_err(|source| EnvError::Remove { short: short(&entry.key).to_string(), source })?;
            (trash, entry.key.clone())
        };
        Ok((key, trash))
    }

    /// Renames `key`'s directory out of the cache (the caller holds the book's lock).
    fn to_trash(&self, key: &str) -> std::io::Result<PathBuf> {
        let trash = self.root.join(format!(".trash-{key}-{}", rand::random::<u32>()));
        std::fs::rename(self.dir(key), &trash)?;
        Ok(trash)
    }

    /// Deletes least recently used environments no kernel uses until the cache fits its limit;
    /// returns how many went. Blocking (deletes files).
    pub fn evict(&self) -> usize {
        let trash: Vec<PathBuf> = {
            let book = self.book();
            let entries = self.scan(&book.in_use);
            let busy: HashSet<&str> = book.in_use.keys().chain(book.builds.keys()).map(String::as_str).collect();
            victims(&entries, &busy, self.opts.cache_bytes)
                .into_iter()
                .filter_map(|key| match self.to_trash(&key) {
                    Ok(t) => {
                        tracing::info!(env = %short(&key), "evicted environment (cache over --env-cache-size)");
                        Some(t)
                    }
                    Err(e) => {
                        tracing::warn!(env = %short(&key), "cannot evict environment: {e}");
                        None
                    }
                })
                .collect()
        };
        for t in &trash {
            let _ = std::fs::remove_dir_all(t);
        }
        trash.len()
    }
}

/// The first 12 digits of a key: how people see it.
pub fn short(key: &str) -> &str {
    &key[..key.len().min(12)]
}

/// Reads an environment's description and last use; `None` for a directory that is not one.
fn read_meta(env: &Path) -> Option<(Meta, jiff::Timestamp)> {
    let dir = env.join(META_DIR);
    let meta: Meta = serde_json::from_slice(&std::fs::read(dir.join(META_FILE)).ok()?).ok()?;
    let used = std::fs::metadata(dir.join(USED_FILE)).and_then(|m| m.modified()).ok()?;
    Some((meta, jiff::Timestamp::try_from(used).ok()?))
}

/// Marks `env` used now.
fn touch(env: &Path) {
    let path = env.join(META_DIR).join(USED_FILE);
    let now = std::time::SystemTime::now();
    if let Err(e) = std::fs::File::options().write(true).open(&path).and_then(|f| f.set_modified(now)) {
        tracing::warn!("cannot mark `{}` used: {e}", path.display());
    }
}

/// Which environments to delete so that the rest fit in `limit` bytes: the least recently used
/// first, never one in `busy` (a live kernel's, or one being built). Ties go by key, so the
/// choice is the same on every run.
pub(crate) fn victims(entries: &[EnvEntry], busy: &HashSet<&str>, limit: u64) -> Vec<String> {
    let mut total: u64 = entries.iter().map(|e| e.size_bytes).sum();
    let mut by_age: Vec<&EnvEntry> = entries.iter().filter(|e| !busy.contains(e.key.as_str())).collect();
    by_age.sort_by(|a, b| a.last_used.cmp(&b.last_used).then_with(|| a.key.cmp(&b.key)));
    let mut out = Vec::new();
    for e in by_age {
        if total <= limit {
            break;
        }
        total -= e.size_bytes;
        out.push(e.key.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, size: u64, used_secs: i64) -> EnvEntry {
        EnvEntry {
            key: key.into(),
            python: "3.11".into(),
            kind: EnvKind::Requirements,
            size_bytes: size,
            last_used: jiff::Timestamp::from_second(used_secs).unwrap(),
            in_use: 0,
        }
    }

    #[test]
    fn eviction_takes_the_least_recently_used_first_and_spares_busy_ones() {
        let entries = [entry("a", 10, 100), entry("b", 10, 50), entry("c", 10, 10), entry("d", 10, 200)];
        // 40 bytes, limit 25: two must go, the oldest two
        assert_eq!(victims(&entries, &HashSet::new(), 25), ["c", "b"]);
        // c is in use: b and a go instead
        assert_eq!(victims(&entries, &HashSet::from(["c"]), 25), ["b", "a"]);
        // under the limit: nothing
        assert!(victims(&entries, &HashSet::new(), 40).is_empty());
        // everything busy: nothing, even over the limit
        assert!(victims(&entries, &HashSet::from(["a", "b", "c", "d"]), 0).is_empty());
        // limit 0: every idle one
        assert_eq!(victims(&entries, &HashSet::from(["d"]), 0), ["c", "b", "a"]);
    }

    /// A built environment of `size` bytes, as `build::seal` leaves it.
    fn fake_env(cache: &EnvCache, key: &str, size: u64) -> PathBuf {
        let env = cache.dir(key);
        std::fs::create_dir_all(env.join(META_DIR)).unwrap();
        let meta = Meta {
            python: "3.11".into(),
            kind: EnvKind::Requirements,
            size_bytes: size,
            inputs: None,
            private: None,
            installed: vec![],
        };
        std::fs::write(env.join(META_DIR).join(META_FILE), serde_json::to_vec(&meta).unwrap()).unwrap();
        std::fs::write(env.join(META_DIR).join(USED_FILE), b"").unwrap();
        env
    }

    #[test]
    fn a_lease_holds_its_environment_until_dropped_or_kept() {
        let dir = tempfile::tempdir().unwrap();
        let cache = EnvCache::new(dir.path(), EnvOptions::default());
        let key = "cd".repeat(32);
        fake_env(&cache, &key, 10);
        let lease = Lease::take(&cache, &key);
        assert_eq!(lease.dir(), cache.dir(&key));
        assert_eq!(cache.list()[0].in_use, 1);
        assert!(matches!(cache.remove("cdcd").unwrap_err(), EnvError::InUse(_)));
        // dropped on the way (the kernel stopped during its setup): let go
        drop(lease);
        assert_eq!(cache.list()[0].in_use, 0);
        // kept: the keeper releases it, not the lease
        let kept = Lease::take(&cache, &key).keep();
        assert_eq!(cache.list()[0].in_use, 1);
        cache.release(&kept);
        assert_eq!(cache.list()[0].in_use, 0);
    }

    #[test]
    fn eviction_deletes_idle_environments_past_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let cache = EnvCache::new(dir.path(), EnvOptions { cache_bytes: 150, ..EnvOptions::default() });
        let (a, b) = ("aa".repeat(32), "bb".repeat(32));
        fake_env(&cache, &a, 100);
        fake_env(&cache, &b, 100);
        cache.acquire(&a);
        assert_eq!(cache.evict(), 1);
        assert!(cache.dir(&a).exists() && !cache.dir(&b).exists());
        // under the limit now: nothing more goes, even once idle
        cache.release(&a);
        assert_eq!(cache.evict(), 0);
        assert_eq!(cache.list().len(), 1);
    }

    #[test]
    fn the_cache_lists_touches_and_removes_what_is_not_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let cache = EnvCache::new(dir.path(), EnvOptions::default());
        let key = "ab".repeat(32);
        let env = fake_env(&cache, &key, 123);
        // a half-built one of a previous agent is not listed, and goes at the next start
        std::fs::create_dir_all(dir.path().join("envs/.build-x")).unwrap();
        let listed = cache.list();
        assert_eq!(listed.len(), 1);
        assert_eq!((listed[0].size_bytes, listed[0].in_use), (123, 0));
        touch(&env);
        cache.acquire(&key);
        assert_eq!(cache.list()[0].in_use, 1);
        let e = cache.remove("abab").unwrap_err().to_string();
        assert!(e.contains("in use"), "{e}");
        assert!(cache.remove("cdcd").unwrap_err().to_string().contains("no environment cdcd"));
        cache.release(&key);
        let (removed, trash) = cache.remove("abab").unwrap();
        assert_eq!(removed, key);
        assert!(!env.exists() && trash.exists() && cache.list().is_empty());
        EnvCache::new(dir.path(), EnvOptions::default());
        assert!(!dir.path().join("envs/.build-x").exists());
    }
}
