//! The on-disk object store of one cache node.
//!
//! Layout under the data directory (directories 0700, files 0600: [`crate::private`]):
//! - `objects/ab/<32 hex>`: one file per object, named by the xxh3-128 of bucket and key (so no
//!   key, whatever bytes it holds, can name a path outside the directory), holding a
//!   [`Header`] and then the data.
//! - `tmp/`: PUTs being written. A PUT writes header and data to a temp file, fsyncs it and
//!   renames it over the object's name: the rename is atomic, so a reader (or a restart after
//!   `kill -9`) sees the old object, the new one or none, never half of one. Leftover temp
//!   files are removed at start.
//! - `buckets.json`: bucket settings.
//! - `deleting.json`: buckets whose deletion has begun ([`Store::delete_bucket`]). A bucket
//!   is named there before its settings, index entries and files go, and leaves it once its
//!   last file is unlinked; a start finds the names a crash left there and finishes the job
//!   (their objects are unlinked instead of indexed), so a half-deleted bucket is never
//!   served and its space never leaks.
//!
//! The index (key → size and eviction slot) lives in memory and is rebuilt from the object
//! headers at start. One mutex guards index, eviction queues, counters and the memory tier
//! ([`crate::hot`]); renames and unlinks happen under it, so the index and the files never
//! disagree for long enough to serve a wrong object (a reader also checks the header it
//! opened names its key), and an object leaves memory in the same step as it leaves the index.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use berth_model::api::{BucketPlacement, CachePrefixUsage};
use xxhash_rust::xxh3::{Xxh3, xxh3_128_with_seed};

use crate::bucket::{self, BucketConfig, validate_bucket_name, validate_key};
use crate::evict::Buckets;
use crate::files::{Files, OpenFile};
use crate::header::Header;
use crate::hot::{Hot, HotObject};
use crate::private;
use crate::{BucketStats, StoreError};

const SEED_FILE: u64 = 0x6265_7274_685f_6669; // "berth_fi"

/// Buckets whose deletion has begun (see the module doc).
const DELETING: &str = "deleting.json";

/// Bytes of small objects kept in memory unless [`Store::set_memory_limit`] says otherwise
/// (at most the capacity).
pub const DEFAULT_MEMORY: u64 = 256 << 20;

/// An object's id: names its file. Fixed across releases like the routing hash.
pub fn object_id(bucket: &str, key: &[u8]) -> u128 {
    let n = bucket.len() + 1 + key.len();
    // on the stack for the usual key (every request computes one)
    let mut stack = [0u8; 512];
    let mut heap = vec![];
    let buf = if n <= stack.len() {
        &mut stack[..n]
    } else {
        heap.resize(n, 0);
        &mut heap[..]
    };
    buf[..bucket.len()].copy_from_slice(bucket.as_bytes());
    buf[bucket.len()] = 0;
    buf[bucket.len() + 1..].copy_from_slice(key);
    xxh3_128_with_seed(buf, SEED_FILE)
}

fn object_path(root: &Path, id: u128) -> PathBuf {
    let hex = format!("{id:032x}");
    root.join("objects").join(&hex[..2]).join(hex)
}

fn now_us() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros() as i64).unwrap_or(0)
}

/// One node's store.
#[derive(Debug)]
pub struct Store {
    root: PathBuf,
    capacity: u64,
    inner: Mutex<Inner>,
    /// Bucket creations and deletions one at a time, so a bucket is not created again while
    /// the files of its deleted namesake are still being unlinked (outside the main lock).
    bucket_changes: Mutex<()>,
}

/// What the store's lock guards.
#[derive(Debug)]
struct Inner {
    b: Buckets,
    hot: Hot,
    files: Files,
    /// What `deleting.json` holds.
    deleting: Vec<String>,
}

impl Inner {
    /// What a lookup of object `id` of `size` bytes hands the reader.
    fn found(&mut self, id: u128, size: u64) -> Found {
        let hot = self.hot.get(id);
        let file = if hot.is_none() && size > crate::hot::MAX_OBJECT { self.files.get(id) } else { None };
        Found { id, size, hot, file, epoch: self.hot.epoch(), files_epoch: self.files.epoch() }
    }

    /// Drops object `id` from memory and from the open files, in the same step as it leaves
    /// or changes in the index; returns its open file, for the caller to close after it let
    /// go of the lock.
    #[must_use]
    fn forget(&mut self, id: u128) -> Option<Arc<OpenFile>> {
        self.hot.invalidate(id);
        self.files.invalidate(id)
    }
}

/// What [`Store::delete_bucket`] removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketDeleted {
    pub objects: u64,
    pub bytes: u64,
}

/// An object found in the index (the file is the truth: see [`Store::open_object`]), with its
/// data when the memory tier holds it.
#[derive(Debug, Clone)]
pub struct Found {
    pub id: u128,
    pub size: u64,
    pub hot: Option<HotObject>,
    /// The object's file, open, when the open-file tier keeps it ([`crate::files`]).
    pub file: Option<Arc<OpenFile>>,
    /// The memory tier's epoch at the lookup, for [`Store::keep_in_memory`].
    epoch: u64,
    /// The open-file tier's epoch at the lookup, for [`Store::keep_open`].
    files_epoch: u64,
}

/// Why [`Store::lookup_checked`] did not look.
#[derive(Debug)]
pub enum Checked<E> {
    NoBucket,
    Refused(E),
}

/// An opened object: its file, header and where its data starts; small objects come with
/// their data, read together with the header in one read.
#[derive(Debug)]
pub struct Opened {
    pub file: File,
    pub header: Header,
    pub data_offset: u64,
    pub data: Option<bytes::Bytes>,
}

impl Store {
    /// Opens (creating if needed) the store in `root` with `capacity` bytes of object data,
    /// rebuilding the index from the object files.
    pub fn open(root: &Path, capacity: u64) -> Result<Store, StoreError> {
        for d in ["objects", "tmp"] {
            private::create_dir(&root.join(d)).map_err(|e| StoreError::io(&root.join(d), e))?;
        }
        // a data dir an older release made readable by others (the objects are fixed as
        // they are read below)
        match private::secure_data_dir(root) {
            Ok(0) => {}
            Ok(n) => tracing::info!(dir = %root.display(), changed = n, "made the cache's files private (0600/0700)"),
            Err(e) => return Err(StoreError::Private { path: root.display().to_string(), source: e }),
        }
        // PUTs that were cut off: never objects
        if let Ok(rd) = std::fs::read_dir(root.join("tmp")) {
            for e in rd.flatten() {
                let _ = std::fs::remove_file(e.path());
            }
        }
        let deleting: Vec<String> = bucket::load(&root.join(DELETING))?;
        let configs: Vec<BucketConfig> = bucket::load(&root.join("buckets.json"))?;
        let configs = configs.into_iter().filter(|c| !deleting.contains(&c.name)).collect();
        let mut b = Buckets::new(capacity, configs);
        let mut found = load_objects(root)?;
        found.sort_by_key(|(h, _)| h.created_us);
        for (h, id) in found {
            if deleting.contains(&h.bucket) {
                // a deletion a crash cut short: finish it
                let _ = std::fs::remove_file(object_path(root, id));
                continue;
            }
            let bi = b.index_or_create(&h.bucket);
            b.insert(id, bi, h.key.into_boxed_slice(), h.size);
        }
        // objects of a bucket whose settings were lost stay, in a private bucket only admins use
        bucket::save(&root.join("buckets.json"), &b.configs())?;
        if !deleting.is_empty() {
            tracing::info!(buckets = ?deleting, "finished deleting buckets a restart cut short");
            bucket::save::<String>(&root.join(DELETING), &[])?;
        }
        // over capacity (it was lowered): evict now
        let evicted = b.evict_to_fit(None);
        let hot = Hot::new(DEFAULT_MEMORY.min(capacity));
        let inner = Inner { b, hot, files: Files::new(crate::files::default_limit()), deleting: vec![] };
        let store =
            Store { root: root.to_path_buf(), capacity, inner: Mutex::new(inner), bucket_changes: Mutex::new(()) };
        store.unlink(&evicted);
        Ok(store)
    }

    /// Bounds the bytes of small objects kept in memory (0: none; reads then go to the files).
    pub fn set_memory_limit(&self, bytes: u64) {
        self.lock().hot.set_limit(bytes);
    }

    /// Bytes of object data held in memory.
    pub fn memory_used(&self) -> u64 {
        self.lock().hot.used()
    }

    /// The memory tier for `/metrics`: bytes held, its bound, GETs it answered.
    pub fn memory_stats(&self) -> crate::metrics::MemoryStats {
        let inner = self.lock();
        crate::metrics::MemoryStats { used: inner.hot.used(), limit: inner.hot.limit(), hits: inner.hot.hits() }
    }

    /// The file an object lives in.
    pub fn path_of(&self, found: &Found) -> PathBuf {
        object_path(&self.root, found.id)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // a panic while holding the lock leaves counters possibly off by one, never unsafe
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn unlink(&self, ids: &[u128]) {
        for &id in ids {
            let _ = std::fs::remove_file(object_path(&self.root, id));
        }
    }

    /// Creates or updates a bucket.
    pub fn put_bucket(&self, cfg: BucketConfig) -> Result<(), StoreError> {
        validate_bucket_name(&cfg.name)?;
        let _changes = self.bucket_changes.lock().unwrap_or_else(|p| p.into_inner());
        // declared before the guard, so dropped (the files closed) after the lock is let go
        let mut closing = vec![];
        let mut inner = self.lock();
        inner.b.set_config(cfg);
        bucket::save(&self.root.join("buckets.json"), &inner.b.configs())?;
        let evicted = inner.b.evict_to_fit(None);
        for &id in &evicted {
            closing.extend(inner.forget(id));
            let _ = std::fs::remove_file(object_path(&self.root, id));
        }
        Ok(())
    }

    /// Deletes a bucket with every object in it (index, memory tier, files); a later
    /// lookup, GET or PUT finds no bucket. Crash-safe: the bucket is first named in
    /// `deleting.json`, then forgotten in memory and in `buckets.json` (one step under the
    /// lock, so nothing of it is served from then on), then its files are unlinked outside
    /// the lock, and only then does it leave `deleting.json`; a start finishes a deletion a
    /// crash cut short. A PUT begun before and committed after finds its bucket gone (or
    /// another bucket of the same name) and is dropped. Blocks for the unlinks: call from a
    /// blocking thread.
    pub fn delete_bucket(&self, name: &str) -> Result<BucketDeleted, StoreError> {
        let _changes = self.bucket_changes.lock().unwrap_or_else(|p| p.into_inner());
        let mut closing = vec![];
        let (ids, bytes) = {
            let mut inner = self.lock();
            if inner.b.config(name).is_none() {
                return Err(StoreError::NoBucket(name.to_string()));
            }
            let mut deleting = inner.deleting.clone();
            deleting.push(name.to_string());
            bucket::save(&self.root.join(DELETING), &deleting)?;
            inner.deleting = deleting;
            let (ids, bytes) = inner.b.delete(name).expect("the bucket was just found");
            for &id in &ids {
                closing.extend(inner.forget(id));
            }
            if let Err(e) = bucket::save(&self.root.join("buckets.json"), &inner.b.configs()) {
                // still named in deleting.json: a start drops it from buckets.json
                tracing::warn!(bucket = name, "cannot save buckets.json after a deletion: {e}");
            }
            (ids, bytes)
        };
        drop(closing);
        for &id in &ids {
            let _ = std::fs::remove_file(object_path(&self.root, id));
        }
        let mut inner = self.lock();
        let deleting: Vec<String> = inner.deleting.iter().filter(|d| *d != name).cloned().collect();
        bucket::save(&self.root.join(DELETING), &deleting)?;
        inner.deleting = deleting;
        Ok(BucketDeleted { objects: ids.len() as u64, bytes })
    }

    pub fn bucket(&self, name: &str) -> Option<BucketConfig> {
        self.lock().b.config(name).cloned()
    }

    pub fn buckets(&self) -> Vec<BucketConfig> {
        self.lock().b.configs()
    }

    /// A bucket's placement (no copy of its settings); `None` for an unknown bucket.
    pub fn placement(&self, bucket: &str) -> Option<BucketPlacement> {
        self.lock().b.config(bucket).map(|c| c.placement)
    }

    /// What this store holds of `bucket`'s keys starting with `prefix` (empty: the whole
    /// bucket), after `check` passed on the bucket's settings, under one lock acquisition: a
    /// walk over the index in memory (the bucket's totals for an empty prefix), no file is read:
    /// about 40 ms per million objects on the node.
    pub fn prefix_usage_checked<E>(
        &self,
        bucket: &str,
        prefix: &[u8],
        check: impl FnOnce(&BucketConfig) -> Result<(), E>,
    ) -> Result<CachePrefixUsage, Checked<E>> {
        let inner = self.lock();
        let bi = inner.b.index(bucket).ok_or(Checked::NoBucket)?;
        check(inner.b.config(bucket).ok_or(Checked::NoBucket)?).map_err(Checked::Refused)?;
        let (objects, bytes) = inner.b.prefix_usage(bi, prefix);
        Ok(CachePrefixUsage { objects, bytes })
    }

    /// Per-bucket counters and usage, sorted by bucket name.
    pub fn stats(&self) -> Vec<BucketStats> {
        self.lock().b.stats()
    }

    /// Looks an object up; with `count` a GET's hit or miss is counted and a hit marked for
    /// the eviction policy.
    pub fn lookup(&self, bucket: &str, key: &[u8], count: bool) -> Option<Found> {
        let id = object_id(bucket, key);
        let mut inner = self.lock();
        let size = inner.b.lookup(id, bucket, key, count)?;
        Some(inner.found(id, size))
    }

    /// Like [`Store::lookup`], after `check` passed on the bucket's settings, all under one
    /// lock acquisition (the GET path: access check and index in one step).
    pub fn lookup_checked<E>(
        &self,
        bucket: &str,
        key: &[u8],
        count: bool,
        check: impl FnOnce(&BucketConfig) -> Result<(), E>,
    ) -> Result<Option<Found>, Checked<E>> {
        let id = object_id(bucket, key);
        let mut inner = self.lock();
        let cfg = inner.b.config(bucket).ok_or(Checked::NoBucket)?;
        check(cfg).map_err(Checked::Refused)?;
        let Some(size) = inner.b.lookup(id, bucket, key, count) else { return Ok(None) };
        Ok(Some(inner.found(id, size)))
    }

    /// Keeps a small object just read whole from its file in memory, unless the index changed
    /// since `found` was looked up (the file read may then be an older version).
    pub fn keep_in_memory(&self, found: &Found, opened: &Opened) {
        let Some(data) = &opened.data else { return };
        if found.hot.is_some() || data.len() as u64 != found.size || found.size > crate::hot::MAX_OBJECT {
            return;
        }
        let obj = HotObject { data: data.clone(), etag: opened.header.etag };
        self.lock().hot.fill(found.id, found.epoch, obj);
    }

    /// Keeps the file of a big object just opened for a GET open for the next ones, unless
    /// the index changed since `found` was looked up (the file may then be an older version).
    pub fn keep_open(&self, found: &Found, file: &Arc<OpenFile>) {
        if found.size <= crate::hot::MAX_OBJECT || found.file.is_some() || file.size != found.size {
            return;
        }
        let (_, dropped) = self.lock().files.fill(found.id, found.files_epoch, file.clone());
        // closed here, after the lock is let go
        drop(dropped);
    }

    /// Files the open-file tier keeps (tests, stats).
    pub fn open_files(&self) -> usize {
        self.lock().files.len()
    }

    /// Opens a found object; `None` if it went away meanwhile (evicted, deleted) or the file
    /// now holds another key (a hash collision replaced it), which both read as a miss.
    /// Objects of at most `read_whole` bytes are read with their header in one go (into a
    /// buffer that is not zeroed first: for small objects that is a good part of the cost).
    pub fn open_object(
        &self,
        bucket: &str,
        key: &[u8],
        found: &Found,
        read_whole: u64,
    ) -> std::io::Result<Option<Opened>> {
        let file = match File::open(object_path(&self.root, found.id)) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let hl = Header::len_for(bucket, key);
        let mut buf;
        if found.size <= read_whole {
            buf = Vec::with_capacity(hl + found.size as usize);
            (&file).take(hl as u64 + found.size).read_to_end(&mut buf)?;
        } else {
            buf = vec![0u8; hl];
            let n = read_full_at(&file, &mut buf, 0)?;
            buf.truncate(n);
        }
        match Header::decode(&buf) {
            Some(h) if h.bucket == bucket && h.key == key => {
                // a newer, bigger version replaced the file since the lookup: read it at offsets
                let data = (buf.len() as u64 == hl as u64 + h.size && found.size <= read_whole)
                    .then(|| bytes::Bytes::from(buf).slice(hl..));
                Ok(Some(Opened { file, header: h, data_offset: hl as u64, data }))
            }
            _ => Ok(None),
        }
    }

    /// Starts a PUT of `size` bytes; the data is then written with [`PutFile::write`] and made
    /// visible by [`Store::commit`]. Refuses early what can never fit.
    pub fn begin_put(&self, bucket: &str, key: &[u8], size: u64) -> Result<PutFile, StoreError> {
        validate_key(key)?;
        let bucket_index = {
            let inner = self.lock();
            let Some(bi) = inner.b.index(bucket) else {
                return Err(StoreError::NoBucket(bucket.to_string()));
            };
            let cfg = inner.b.config(bucket).expect("an indexed bucket has settings");
            let limit = cfg.quota.unwrap_or(self.capacity).min(self.capacity);
            if size > limit {
                return Err(StoreError::TooLarge(format!(
                    "the object is {size} bytes but bucket `{bucket}` can hold at most {limit}: raise the bucket quota or the node capacity"
                )));
            }
            bi
        };
        let tmp = self.root.join("tmp").join(format!("{:032x}.{}", rand::random::<u128>(), std::process::id()));
        let mut file = private::create_file(&tmp).map_err(|e| StoreError::io(&tmp, e))?;
        let header = Header { size, etag: 0, created_us: now_us(), bucket: bucket.to_string(), key: key.to_vec() };
        // placeholder header, rewritten with the etag once the data is in
        file.write_all(&header.encode()).map_err(|e| StoreError::io(&tmp, e))?;
        Ok(PutFile { tmp, file: Some(file), header, written: 0, hasher: Xxh3::new(), bucket_index })
    }

    /// Makes a fully written PUT visible: header with etag, fsync, rename, index, eviction.
    pub fn commit(&self, mut put: PutFile) -> Result<Header, StoreError> {
        if put.written != put.header.size {
            return Err(StoreError::BadRequest(format!(
                "the body had {} bytes but Content-Length said {}: send the whole object",
                put.written, put.header.size
            )));
        }
        put.header.etag = put.hasher.digest();
        let file = put.file.take().expect("an uncommitted put has its file");
        let enc = put.header.encode();
        file.write_all_at(&enc, 0).map_err(|e| StoreError::io(&put.tmp, e))?;
        file.sync_data().map_err(|e| StoreError::io(&put.tmp, e))?;
        drop(file);
        let id = object_id(&put.header.bucket, &put.header.key);
        let path = object_path(&self.root, id);
        // declared before the guard, so dropped (the files closed) after the lock is let go
        let mut closing = vec![];
        let mut inner = self.lock();
        // the bucket was deleted since the PUT began (maybe created again: another index):
        // its objects must not come back
        let Some(bi) = inner.b.index(&put.header.bucket).filter(|&bi| bi == put.bucket_index) else {
            return Err(StoreError::NoBucket(put.header.bucket.clone()));
        };
        if let Err(e) = std::fs::rename(&put.tmp, &path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                return Err(StoreError::io(&path, e));
            }
            let dir = path.parent().expect("object paths have a parent");
            private::create_dir(dir).map_err(|e| StoreError::io(dir, e))?;
            std::fs::rename(&put.tmp, &path).map_err(|e| StoreError::io(&path, e))?;
        }
        put.tmp = PathBuf::new(); // renamed: nothing for Drop to remove
        closing.extend(inner.forget(id));
        inner.b.insert(id, bi, put.header.key.clone().into_boxed_slice(), put.header.size);
        inner.b.count_put(bi, put.header.size);
        let evicted = inner.b.evict_to_fit(Some(id));
        for &v in &evicted {
            closing.extend(inner.forget(v));
            let _ = std::fs::remove_file(object_path(&self.root, v));
        }
        Ok(put.header.clone())
    }

    /// Deletes an object; `false` if there was none.
    pub fn delete(&self, bucket: &str, key: &[u8]) -> bool {
        let id = object_id(bucket, key);
        let mut inner = self.lock();
        if inner.b.remove(id, bucket, key) {
            let closing = inner.forget(id);
            let _ = std::fs::remove_file(object_path(&self.root, id));
            // the file closed after the lock is let go
            drop(inner);
            drop(closing);
            true
        } else {
            false
        }
    }

    /// Bytes of object data held.
    pub fn used(&self) -> u64 {
        self.lock().b.used()
    }
}

/// A PUT being written to its temp file; dropped without [`Store::commit`], the temp file goes.
pub struct PutFile {
    tmp: PathBuf,
    file: Option<File>,
    header: Header,
    written: u64,
    hasher: Xxh3,
    /// The bucket's index at [`Store::begin_put`] (see [`Buckets::delete`]).
    bucket_index: usize,
}

impl std::fmt::Debug for PutFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PutFile").field("tmp", &self.tmp).field("written", &self.written).finish()
    }
}

impl PutFile {
    /// Appends data; more than the announced size is refused.
    pub fn write(&mut self, data: &[u8]) -> Result<(), StoreError> {
        if self.written + data.len() as u64 > self.header.size {
            return Err(StoreError::BadRequest(format!(
                "the body is longer than Content-Length ({} bytes): send a matching Content-Length",
                self.header.size
            )));
        }
        let f = self.file.as_mut().expect("an uncommitted put has its file");
        f.write_all(data).map_err(|e| StoreError::io(&self.tmp, e))?;
        self.hasher.update(data);
        self.written += data.len() as u64;
        Ok(())
    }
}

impl Drop for PutFile {
    fn drop(&mut self) {
        if !self.tmp.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

fn read_full_at(f: &File, buf: &mut [u8], mut off: u64) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read_at(&mut buf[n..], off)? {
            0 => break,
            k => {
                n += k;
                off += k as u64;
            }
        }
    }
    Ok(n)
}

/// Reads every object header, making each directory and file private on the way (an older
/// release made them readable by others); damaged or misnamed files are removed.
fn load_objects(root: &Path) -> Result<Vec<(Header, u128)>, StoreError> {
    let mut out = vec![];
    let Ok(dirs) = std::fs::read_dir(root.join("objects")) else { return Ok(out) };
    let private_err = |path: &Path, source| StoreError::Private { path: path.display().to_string(), source };
    for d in dirs.flatten() {
        private::secure_entry(&d.path()).map_err(|e| private_err(&d.path(), e))?;
        let Ok(files) = std::fs::read_dir(d.path()) else { continue };
        for f in files.flatten() {
            let path = f.path();
            // a link or a fifo is no object this cache wrote: never followed, never opened
            if !f.file_type().is_ok_and(|t| t.is_file()) {
                tracing::warn!(path = %path.display(), "ignoring what is not a plain file among the objects");
                continue;
            }
            let header = match read_header(&path) {
                Ok(h) => h,
                Err(e) => return Err(private_err(&path, e)),
            };
            match header {
                Some(h)
                    if format!("{:032x}", object_id(&h.bucket, &h.key))
                        == path.file_name().and_then(|n| n.to_str()).unwrap_or_default() =>
                {
                    let id = object_id(&h.bucket, &h.key);
                    out.push((h, id));
                }
                _ => {
                    tracing::warn!(path = %path.display(), "removing a damaged object file");
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
    }
    Ok(out)
}

/// The header of an object file (`None`: not a whole object file), after making the file
/// private; `Err` only when that fails.
fn read_header(path: &Path) -> std::io::Result<Option<Header>> {
    let Ok(f) = private::open_nofollow(path) else { return Ok(None) };
    let Ok(meta) = f.metadata() else { return Ok(None) };
    if !meta.is_file() {
        return Ok(None);
    }
    private::secure_open_file(&f, &meta)?;
    Ok(check_header(f, meta.len()))
}

fn check_header(mut f: File, len: u64) -> Option<Header> {
    let mut start = [0u8; 12];
    f.read_exact(&mut start).ok()?;
    let hl = Header::peek_len(&start)?;
    if hl > 64 * 1024 {
        return None;
    }
    let mut buf = vec![0u8; hl];
    buf[..12].copy_from_slice(&start);
    f.read_exact(&mut buf[12..]).ok()?;
    let h = Header::decode(&buf)?;
    (len == hl as u64 + h.size).then_some(h)
}
