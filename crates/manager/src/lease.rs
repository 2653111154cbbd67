//! This manager's hold on the leader lease, as the rest of the manager asks about it: whether
//! it may act (send commands to agents, schedule) and with which epoch. A leaf: `leader.rs`
//! takes and renews the lease and tells this; agent connections and the scheduling loop ask.
//!
//! The deadline is local and monotonic: a renewal sent at `t` that succeeds holds the lease on
//! the database's clock until at least `t + ttl`, and this manager stops acting a margin before
//! that, so it has stopped before any standby can take over, whatever the clocks say.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// Epoch 0 and no deadline: a manager that holds no lease (the in-process fixtures of the
/// tests) may always act.
#[derive(Debug, Default)]
pub struct Lease {
    epoch: AtomicU64,
    until: Mutex<Option<Instant>>,
    lost: AtomicBool,
}

impl Lease {
    /// This manager leads with `epoch`, until `until` unless renewed.
    pub fn lead(&self, epoch: u64, until: Instant) {
        self.epoch.store(epoch, Ordering::SeqCst);
        *self.until.lock().expect("lease lock") = Some(until);
    }

    /// A renewal that was sent at `sent` succeeded: act until `until`.
    pub fn extend(&self, until: Instant) {
        let mut u = self.until.lock().expect("lease lock");
        if u.is_some_and(|old| until > old) {
            *u = Some(until);
        }
    }

    /// The lease is gone (taken over, or not renewed in time): never act again.
    pub fn lose(&self) {
        self.lost.store(true, Ordering::SeqCst);
    }

    /// Whether this manager may send a command or start a job now.
    pub fn may_act(&self) -> bool {
        if self.lost.load(Ordering::SeqCst) {
            return false;
        }
        self.until.lock().expect("lease lock").is_none_or(|u| Instant::now() < u)
    }

    /// Whether the lease was lost.
    pub fn lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// The deadline, when it leads under one.
    pub fn until(&self) -> Option<Instant> {
        *self.until.lock().expect("lease lock")
    }

    /// The epoch every command carries (0: no lease in use).
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn acts_only_within_its_deadline_and_never_after_a_loss() {
        let l = Lease::default();
        assert!(l.may_act(), "no lease in use: the manager acts");
        let now = Instant::now();
        l.lead(3, now + Duration::from_secs(60));
        assert!(l.may_act());
        assert_eq!(l.epoch(), 3);
        l.extend(now + Duration::from_secs(1));
        assert_eq!(l.until(), Some(now + Duration::from_secs(60)), "a late renewal never shortens it");
        l.lead(3, now);
        assert!(!l.may_act(), "past the deadline");
        l.extend(now + Duration::from_secs(60));
        assert!(l.may_act());
        l.lose();
        assert!(!l.may_act() && l.lost());
    }
}
