//! Whether the store takes writes. A write refused because the disk under the data dir is full
//! marks the store full; the next committed write clears the mark. While it is set, `/v1/health`
//! reports it (and probes with a tiny write, so it clears itself once space is back), and every
//! write answered 507 names the data dir to free space in. Reads keep working meanwhile: the
//! store's readers never need space.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use berth_store::{Store, StoreError};
use jiff::Timestamp;

use crate::clock::Clock;

/// The store's write health, shared by the API and the background loops.
#[derive(Debug)]
pub struct StoreHealth {
    data_dir: PathBuf,
    full: Mutex<Option<Full>>,
    /// The manager's clock (since when the disk is full).
    clock: Clock,
}

#[derive(Debug, Clone)]
struct Full {
    since: Timestamp,
    error: String,
}

impl StoreHealth {
    pub fn new(data_dir: &Path, clock: Clock) -> StoreHealth {
        StoreHealth { data_dir: data_dir.to_path_buf(), full: Mutex::new(None), clock }
    }

    /// Records the outcome of a write (not of a read: reads succeed on a full disk).
    pub fn observe_write<T>(&self, r: &Result<T, StoreError>) {
        match r {
            Ok(_) => self.committed(),
            Err(e) if e.is_disk_full() => self.refused(&e.to_string()),
            Err(_) => {}
        }
    }

    /// A write was refused for lack of space.
    pub fn refused(&self, error: &str) {
        let mut full = self.full.lock().expect("store health lock");
        if full.is_none() {
            tracing::error!(data_dir = %self.data_dir.display(), "the store's disk is full: writes are refused until space is freed ({error})");
            *full = Some(Full { since: self.clock.now(), error: error.to_string() });
        }
    }

    /// A write was committed: there is space again.
    pub fn committed(&self) {
        if self.full.lock().expect("store health lock").take().is_some() {
            tracing::info!(data_dir = %self.data_dir.display(), "the store takes writes again");
        }
    }

    pub fn is_full(&self) -> bool {
        self.full.lock().expect("store health lock").is_some()
    }

    /// What `/v1/health` says while writes are refused.
    pub fn problem(&self) -> Option<String> {
        let full = self.full.lock().expect("store health lock").clone()?;
        Some(format!(
            "store: the disk of the data dir {} is full since {} ({}): writes are refused with 507 until space is freed there; reads work",
            self.data_dir.display(),
            full.since,
            full.error
        ))
    }

    /// While the store is marked full, tries a one-row write to `store` to learn whether
    /// space is back.
    pub async fn probe(&self, store: &dyn Store) {
        if self.is_full() {
            let r = store.meta_set("write_probe", &self.clock.now().to_string()).await;
            self.observe_write(&r);
        }
    }

    /// The message of a 507 answer.
    pub fn refusal(&self) -> String {
        format!(
            "the manager's disk is full: nothing was written; free space in its data dir {} and try again (reads still work)",
            self.data_dir.display()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_write_marks_the_store_full_until_a_write_commits() {
        let h = StoreHealth::new(Path::new("/var/lib/berth"), Clock::system());
        assert!(h.problem().is_none());
        h.observe_write::<()>(&Err(StoreError::DiskFull("database or disk is full".into())));
        assert!(h.is_full());
        let p = h.problem().unwrap();
        assert!(p.contains("/var/lib/berth") && p.contains("database or disk is full"), "{p}");
        assert!(h.refusal().contains("/var/lib/berth"));
        // Other errors say nothing about space.
        h.observe_write::<()>(&Err(StoreError::NotFound("job 3".into())));
        assert!(h.is_full());
        h.observe_write(&Ok(()));
        assert!(h.problem().is_none());
    }
}
