//! The manager's clock: every read of "now" that decides something (token expiry, usage,
//! time limits, heartbeats, idle timeouts) goes through the one [`Clock`] the manager holds,
//! so that a test can move time forward instead of sleeping for it.
//!
//! Reads that must stay real are left on the system clock on purpose: how long an operation
//! took (metrics, logs), deadlines that tokio's timers wait on, and the leader lease, which
//! other managers judge by their own clocks.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use jiff::Timestamp;

/// Where the manager reads the time: the system's, or (in tests) a manual one that stands
/// still until [`Clock::advance`] moves it. Cheap to clone: clones share one time.
#[derive(Clone, Debug, Default)]
pub struct Clock(Option<Arc<Manual>>);

/// A stopped clock: the moment it was made plus what [`Clock::advance`] added.
#[derive(Debug)]
struct Manual {
    at: Timestamp,
    instant: Instant,
    /// Nanoseconds added since (u64: 584 years of advancing).
    advanced: AtomicU64,
}

impl Clock {
    /// The system's clock (what a running manager uses).
    pub fn system() -> Clock {
        Clock(None)
    }

    /// A clock stopped at the current time, moved only by [`Clock::advance`].
    pub fn manual() -> Clock {
        let manual = Manual { at: Timestamp::now(), instant: Instant::now(), advanced: AtomicU64::new(0) };
        Clock(Some(Arc::new(manual)))
    }

    /// Moves a manual clock (and its clones) forward by `by`.
    ///
    /// # Panics
    /// On the system clock: only a test moves time, and a test that meant to must not pass
    /// while time stood still.
    pub fn advance(&self, by: Duration) {
        let m = self.0.as_ref().expect("only a manual clock can be advanced");
        m.advanced.fetch_add(u64::try_from(by.as_nanos()).unwrap_or(u64::MAX), Ordering::SeqCst);
    }

    /// The wall-clock time now.
    pub fn now(&self) -> Timestamp {
        match &self.0 {
            None => Timestamp::now(),
            Some(m) => m.at + m.elapsed(),
        }
    }

    /// [`Clock::now`] in milliseconds since the Unix epoch (the scheduler's `Millis`).
    pub fn now_ms(&self) -> i64 {
        self.now().as_millisecond()
    }

    /// [`Clock::now`] in whole seconds since the Unix epoch (cache tokens' expiry).
    pub fn unix_secs(&self) -> u64 {
        u64::try_from(self.now().as_second()).unwrap_or(0)
    }

    /// The monotonic time now, for intervals the manager decides on (heartbeat timeouts,
    /// idle links, backoffs), never for tokio's timers.
    pub fn instant(&self) -> Instant {
        match &self.0 {
            None => Instant::now(),
            Some(m) => m.instant + m.elapsed(),
        }
    }
}

impl Manual {
    fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.advanced.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_stands_still_until_advanced_and_clones_share_it() {
        let c = Clock::manual();
        let (t, i) = (c.now(), c.instant());
        assert_eq!((c.now(), c.instant()), (t, i));
        let clone = c.clone();
        clone.advance(Duration::from_secs(90));
        assert_eq!(c.now(), t + Duration::from_secs(90));
        assert_eq!(c.instant(), i + Duration::from_secs(90));
        assert_eq!(c.now_ms(), t.as_millisecond() + 90_000);
    }

    #[test]
    #[should_panic(expected = "only a manual clock")]
    fn the_system_clock_cannot_be_advanced() {
        Clock::system().advance(Duration::from_secs(1));
    }
}
