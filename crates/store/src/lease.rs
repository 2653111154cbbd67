//! The leader lease: several managers share one store and one of them leads (docs/ha.md).
//! The lease is one row: who holds it, the URL it serves at, an epoch that grows at every
//! takeover, and when it runs out, on the database's clock so that the managers' clocks need
//! not agree. A supertrait of [`crate::Store`], like [`crate::Tenancy`].
//!
//! The epoch fences: once a manager leads with epoch E it calls [`LeaderLease::fence`], and
//! from then on every job and node write of that store checks, inside its transaction, that
//! the lease still has epoch E (PostgreSQL takes a key-share lock on the row, so a takeover waits
//! for a write in flight and a write after the takeover fails). A leader that lost the lease
//! can therefore not commit anything, however late it wakes up.

use std::time::Duration;

use async_trait::async_trait;

use crate::Result;

/// The lease as the database sees it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRow {
    /// Who holds (or last held) it: a manager's unique id for this run. Empty: never held.
    pub holder: String,
    /// The URL the holder serves the API at.
    pub url: String,
    /// 0 before the first leader; more at every takeover (the database's time in milliseconds
    /// when that is more than one more: see `sql_lease.rs`).
    pub epoch: u64,
    /// How long until it runs out (zero when it has), on the database's clock.
    pub remaining: Duration,
}

impl LeaseRow {
    /// Whether someone holds it right now.
    pub fn held(&self) -> bool {
        !self.holder.is_empty() && !self.remaining.is_zero()
    }
}

#[async_trait]
pub trait LeaderLease {
    /// Takes the lease for `ttl` if nobody holds it (it was never held, ran out or was
    /// released), or if `replacing` holds it (a holder the caller knows to be dead): the new
    /// epoch, or `None` when another manager holds it.
    async fn lease_acquire(
        &self,
        holder: &str,
        url: &str,
        ttl: Duration,
        replacing: Option<&str>,
    ) -> Result<Option<u64>>;
    /// Extends the lease `holder` holds with `epoch` to `ttl` from now; `false` when it no
    /// longer holds it (another manager took over).
    async fn lease_renew(&self, holder: &str, epoch: u64, ttl: Duration) -> Result<bool>;
    /// Gives the lease up at once (a clean shutdown), so a standby need not wait it out.
    async fn lease_release(&self, holder: &str, epoch: u64) -> Result<()>;
    /// The lease as it stands.
    async fn lease(&self) -> Result<LeaseRow>;
    /// From now on, job and node writes commit only while the lease has `epoch`; otherwise
    /// they fail with [`crate::StoreError::Fenced`] and write nothing.
    fn fence(&self, epoch: u64);
}
