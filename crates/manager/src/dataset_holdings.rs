//! The manager's recent measurements of what the dataset caches hold of jobs' datasets
//! (`datasets.rs` measures; cache-aware placement reads them): one measurement of a dataset
//! serves every ask for [`FRESH`], and a dataset job's start drops them all.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a measurement of one dataset serves later asks (a burst of submits with the same
/// dataset, a job array, costs one round of requests).
pub const FRESH: Duration = Duration::from_secs(5);
/// Recent measurements: (bucket, key prefix) → when, and the bytes each node held.
type Measured = BTreeMap<(String, Vec<u8>), (Instant, Arc<Vec<(String, u64)>>)>;

/// The manager's recent measurements of datasets in the caches.
#[derive(Debug, Default)]
pub struct Holdings {
    recent: Mutex<Measured>,
}

impl Holdings {
    /// The measurement of a dataset, if one was made within [`FRESH`].
    pub fn fresh(&self, key: &(String, Vec<u8>)) -> Option<Arc<Vec<(String, u64)>>> {
        let recent = self.recent.lock().expect("dataset holdings");
        recent.get(key).filter(|(at, _)| at.elapsed() < FRESH).map(|(_, v)| v.clone())
    }

    /// Drops every measurement (a prefetch ended: some cache holds more now).
    pub fn forget(&self) {
        self.recent.lock().expect("dataset holdings").clear();
    }

    /// Keeps a new measurement (and drops stale ones).
    pub fn remember(&self, key: (String, Vec<u8>), v: Arc<Vec<(String, u64)>>) {
        let mut recent = self.recent.lock().expect("dataset holdings");
        recent.retain(|_, (at, _)| at.elapsed() < FRESH);
        recent.insert(key, (Instant::now(), v));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_measurement_serves_until_forgotten() {
        let h = Holdings::default();
        let key = ("ds".to_string(), b"file://o/".to_vec());
        assert!(h.fresh(&key).is_none());
        h.remember(key.clone(), Arc::new(vec![("n1".into(), 5)]));
        assert_eq!(h.fresh(&key).unwrap().as_slice(), [("n1".to_string(), 5)]);
        h.forget();
        assert!(h.fresh(&key).is_none());
    }
}
