//! Unfinished uploads: what each reserves of its folder's quota, whose it is, and when it is
//! given up. Without this a user could start any number of uploads, never finish them, and
//! fill the manager's disk past every quota (the partial files wait outside the folders, so
//! measuring a folder does not see them).
//!
//! - **Quota**: the first piece reserves the whole file's announced `size` (or, with none, the
//!   bytes as they come); a folder's use for an upload is what it holds plus every other
//!   unfinished upload's reservation.
//! - **Count**: one user may have [`PER_USER`] unfinished uploads at once (over all folders);
//!   a piece of one they already have (a resume, a restart at offset 0) is no new one.
//! - **Expiry**: a partial file untouched for [`MAX_AGE`] (its mtime: every piece writes it)
//!   is deleted, at the next upload and every few minutes.
//!
//! The reservations live in memory; at start the partials on disk are read back as nobody's,
//! each reserving its length, so they still count against their folders and still expire.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use axum::http::StatusCode;
use berth_store::FolderRow;

use crate::error::ApiError;

/// Unfinished uploads one user may have at once.
pub const PER_USER: usize = 16;
/// A partial upload untouched this long is given up.
pub const MAX_AGE: Duration = Duration::from_secs(24 * 3600);
/// How often partials are swept besides at each upload.
pub const SWEEP_EVERY: Duration = Duration::from_secs(600);

/// Where partial uploads wait, under the root: `.uploads/<folder id>/<name>`.
pub const UPLOADS: &str = ".uploads";

#[derive(Debug, Clone, Copy)]
struct Partial {
    /// Who started it (`None`: found on disk at start).
    user: Option<i64>,
    /// Bytes it counts against its folder's quota.
    reserved: u64,
}

/// The unfinished uploads, by folder id and partial file name.
#[derive(Default)]
pub struct Partials {
    known: Mutex<HashMap<(i64, String), Partial>>,
}

impl Partials {
    /// Reads back the partials under `root` (at start): nobody's, each reserving its length.
    pub fn load(&self, root: &Path) {
        let mut known = self.known.lock().expect("partials lock");
        let Ok(folders) = std::fs::read_dir(root.join(UPLOADS)) else { return };
        for f in folders.flatten() {
            let Some(id) = f.file_name().to_str().and_then(|s| s.parse::<i64>().ok()) else { continue };
            let Ok(files) = std::fs::read_dir(f.path()) else { continue };
            for p in files.flatten() {
                let (Ok(name), Ok(md)) = (p.file_name().into_string(), p.metadata()) else { continue };
                known.insert((id, name), Partial { user: None, reserved: md.len() });
            }
        }
    }

    /// Bytes the unfinished uploads to folder `id` reserve, but for `except`'s.
    fn pending(known: &HashMap<(i64, String), Partial>, id: i64, except: &str) -> u64 {
        known.iter().filter(|((f, n), _)| *f == id && n != except).map(|(_, p)| p.reserved).sum()
    }

    /// Reserves `need` bytes (the whole file) of folder `f`, which holds `used`, for upload
    /// `name` by `user`; `restart` (a piece at offset 0) replaces what it reserved before.
    /// Returns whether the upload is new (to release it if nothing comes of it).
    pub fn reserve(
        &self,
        f: &FolderRow,
        name: &str,
        user: i64,
        need: u64,
        used: u64,
        restart: bool,
    ) -> Result<bool, ApiError> {
        let mut known = self.known.lock().expect("partials lock");
        let key = (f.id, name.to_string());
        let had = known.get(&key).copied();
        let mine = known.iter().filter(|(k, p)| p.user == Some(user) && **k != key).count();
        if had.is_none_or(|p| p.user != Some(user)) && mine >= PER_USER {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "you have {PER_USER} unfinished uploads, the most one user may have at once: finish them \
                     (berth upload resumes each where it stopped) or wait for abandoned ones to expire \
                     ({} hours untouched)",
                    MAX_AGE.as_secs() / 3600
                ),
            ));
        }
        let reserved = match had {
            Some(p) if !restart => p.reserved.max(need),
            _ => need,
        };
        if let Some(e) = super::over_quota_with(f, used, Self::pending(&known, f.id, name), reserved) {
            return Err(e);
        }
        known.insert(key, Partial { user: Some(user), reserved });
        Ok(had.is_none())
    }

    /// Upload `name` to `f` (which holds `used`) has `have` bytes (one announced no size):
    /// refused past the quota, else it reserves them.
    pub fn grow(&self, f: &FolderRow, name: &str, used: u64, have: u64) -> Result<(), ApiError> {
        let mut known = self.known.lock().expect("partials lock");
        if let Some(e) = super::over_quota_with(f, used, Self::pending(&known, f.id, name), have) {
            return Err(e);
        }
        if let Some(p) = known.get_mut(&(f.id, name.to_string())) {
            p.reserved = p.reserved.max(have);
        }
        Ok(())
    }

    /// Upload `name` to folder `id` is done (put in place, refused or dropped).
    pub fn release(&self, id: i64, name: &str) {
        self.known.lock().expect("partials lock").remove(&(id, name.to_string()));
    }

    /// Folder `id` is gone, and its partials with it.
    pub fn forget_folder(&self, id: i64) {
        self.known.lock().expect("partials lock").retain(|(f, _), _| *f != id);
    }

    /// Deletes the partials under `root` untouched for `max_age` (blocking: it looks at each
    /// file); returns how many.
    pub fn sweep(&self, root: &Path, max_age: Duration) -> usize {
        let keys: Vec<(i64, String)> = self.known.lock().expect("partials lock").keys().cloned().collect();
        let now = SystemTime::now();
        let mut gone = 0;
        for (id, name) in keys {
            let p = root.join(UPLOADS).join(id.to_string()).join(&name);
            // A partial not there yet (its first piece is on its way) is no old one.
            let old = std::fs::symlink_metadata(&p)
                .and_then(|m| m.modified())
                .is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age > max_age));
            if !old {
                continue;
            }
            match std::fs::remove_file(&p) {
                Ok(()) => {
                    tracing::info!(folder = id, "deleted a partial upload untouched for {}h", max_age.as_secs() / 3600)
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!("cannot delete the abandoned partial upload {}: {e}", p.display());
                    continue;
                }
            }
            self.release(id, &name);
            gone += 1;
        }
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(quota: Option<u64>) -> FolderRow {
        FolderRow {
            id: 1,
            name: "q".into(),
            owner_id: 1,
            owner: "alice".into(),
            project: None,
            quota_bytes: quota,
            shares: vec![],
            created_at: jiff::Timestamp::UNIX_EPOCH,
        }
    }

    #[test]
    fn unfinished_uploads_reserve_their_size_of_the_quota() {
        let p = Partials::default();
        let f = folder(Some(1000));
        assert!(p.reserve(&f, "a", 1, 600, 100, true).unwrap(), "a new upload");
        let e = p.reserve(&f, "b", 1, 400, 100, true).unwrap_err();
        assert_eq!(e.status, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(e.message.contains("600B more are reserved by unfinished uploads"), "{}", e.message);
        // Its own resume is not counted twice; a restart may announce another size.
        assert!(!p.reserve(&f, "a", 1, 600, 100, false).unwrap());
        assert!(!p.reserve(&f, "a", 1, 300, 100, true).unwrap());
        assert!(p.reserve(&f, "b", 1, 400, 100, true).is_ok());
        // Without a size, the bytes count as they come.
        assert!(p.reserve(&f, "c", 1, 0, 100, true).is_ok());
        assert!(p.grow(&f, "c", 100, 200).is_ok());
        assert_eq!(p.grow(&f, "c", 100, 201).unwrap_err().status, StatusCode::PAYLOAD_TOO_LARGE);
        p.release(1, "a");
        assert!(p.grow(&f, "c", 100, 500).is_ok());
    }

    #[test]
    fn a_user_may_have_only_so_many_unfinished_uploads() {
        let p = Partials::default();
        let f = folder(None);
        for i in 0..PER_USER {
            p.reserve(&f, &format!("u{i}"), 1, 10, 0, true).unwrap();
        }
        let e = p.reserve(&f, "one-more", 1, 10, 0, true).unwrap_err();
        assert_eq!(e.status, StatusCode::TOO_MANY_REQUESTS);
        assert!(e.message.contains("16 unfinished uploads"), "{}", e.message);
        assert!(p.reserve(&f, "u3", 1, 10, 0, false).is_ok(), "a resume is no new upload");
        assert!(p.reserve(&f, "other", 2, 10, 0, true).is_ok(), "another user's count is their own");
        p.forget_folder(1);
        assert!(p.reserve(&f, "one-more", 1, 10, 0, true).is_ok());
    }

    #[test]
    fn untouched_partials_expire_and_fresh_ones_stay() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join(UPLOADS).join("1");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("old"), "12345").unwrap();
        std::fs::write(dir.join("new"), "12345").unwrap();
        let day_ago = SystemTime::now() - Duration::from_secs(25 * 3600);
        std::fs::File::options().write(true).open(dir.join("old")).unwrap().set_modified(day_ago).unwrap();
        let p = Partials::default();
        p.load(t.path());
        let f = folder(Some(12));
        // Read back at start: both count (10 bytes), nobody's.
        assert!(p.reserve(&f, "x", 1, 3, 0, true).is_err());
        assert_eq!(p.sweep(t.path(), MAX_AGE), 1);
        assert!(!dir.join("old").exists() && dir.join("new").exists());
        assert!(p.reserve(&f, "x", 1, 3, 0, true).is_ok(), "the expired one no longer counts");
    }
}
