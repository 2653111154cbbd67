//! Audit rows for uses of revoked and expired API tokens, at most one per token per minute.
//!
//! Every such request used to write its own row (2,000 rows in 0.4 s from one loop), so anyone
//! holding a dead token could flood the audit log and keep the store's writer busy. Now the
//! first use of a token is recorded at once, so an auditor sees it as it happens; later uses
//! within the minute are only counted, and when the minute is over one row says how many there
//! were (and a new minute starts if there were any). The counts add up to every use; at
//! shutdown the open counts are written too.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth_store::Store;
use tokio::sync::watch;

use crate::clock::Clock;

/// How long one audit row stands for a token's uses.
pub const WINDOW: Duration = Duration::from_secs(60);

/// What is audited: the action (`auth.revoked-token`) and the token's public id.
type Key = (&'static str, String);

/// A token's open minute: whose token, what happened, and the uses counted beyond the row
/// that opened the minute.
#[derive(Debug)]
struct Open {
    actor: String,
    what: &'static str,
    uses: u64,
    /// When the last of `uses` happened.
    last: jiff::Timestamp,
}

/// The tokens whose minute is open.
#[derive(Debug, Default)]
pub struct BadTokenAudit {
    open: Mutex<HashMap<Key, Open>>,
    /// The manager's clock (the rows' times; the minutes are tokio's, see `audit_use`).
    clock: Clock,
}

/// The row that stands for `n` uses after the one before, the last at `last`.
fn summary(what: &str, n: u64, last: jiff::Timestamp) -> String {
    let times = if n == 1 { "time" } else { "times" };
    format!("{what} {n} more {times} within a minute of the entry before, the last at {last:.0}")
}

impl BadTokenAudit {
    /// No minutes open, timed by `clock`.
    pub fn new(clock: Clock) -> BadTokenAudit {
        BadTokenAudit { open: Mutex::default(), clock }
    }

    /// Counts one use. `true`: it opens a minute, so the caller writes a row now and
    /// [`BadTokenAudit::close`]s the minute when it is over.
    fn record(&self, actor: &str, action: &'static str, target: &str, what: &'static str) -> bool {
        let mut open = self.open.lock().expect("bad token audit lock");
        match open.get_mut(&(action, target.to_string())) {
            Some(o) => {
                o.uses += 1;
                o.last = self.clock.now();
                false
            }
            None => {
                let o = Open { actor: actor.to_string(), what, uses: 0, last: self.clock.now() };
                open.insert((action, target.to_string()), o);
                true
            }
        }
    }

    /// Ends a minute: the actor and row detail for the uses counted in it, if any. When there
    /// were some, the next minute is open at once (its uses are counted for the next row); when
    /// there were none, the token's next use is written immediately again.
    fn close(&self, action: &'static str, target: &str) -> Option<(String, String)> {
        let mut open = self.open.lock().expect("bad token audit lock");
        let key = (action, target.to_string());
        let o = open.get_mut(&key)?;
        if o.uses == 0 {
            open.remove(&key);
            return None;
        }
        Some((o.actor.clone(), summary(o.what, std::mem::take(&mut o.uses), o.last)))
    }

    /// Ends every minute (at shutdown): the rows for the uses counted so far.
    fn drain(&self) -> Vec<(Key, String, String)> {
        let mut open = self.open.lock().expect("bad token audit lock");
        open.drain().filter(|(_, o)| o.uses > 0).map(|(k, o)| (k, o.actor, summary(o.what, o.uses, o.last))).collect()
    }

    /// A use of a dead token: writes the row that opens its minute to `store`, then one row
    /// per further minute with the uses counted in it; does nothing more when a minute is
    /// already open.
    pub async fn audit_use(
        self: &Arc<Self>,
        store: &Arc<dyn Store>,
        (actor, action, target): (&str, &'static str, &str),
        what: &'static str,
    ) {
        if !self.record(actor, action, target, what) {
            return;
        }
        write(store, self.clock.now(), actor, action, target, what).await;
        let (audit, store, target) = (self.clone(), store.clone(), target.to_string());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(WINDOW).await;
                let Some((actor, detail)) = audit.close(action, &target) else { break };
                write(&store, audit.clock.now(), &actor, action, &target, &detail).await;
            }
        });
    }

    /// Writes the open minutes' counts to `store` once `shutdown` is set (a task of the
    /// manager's, which shutdown awaits before it closes the store).
    pub async fn flush_at_shutdown(self: Arc<Self>, store: Arc<dyn Store>, mut shutdown: watch::Receiver<bool>) {
        let _ = shutdown.wait_for(|s| *s).await;
        for ((action, target), actor, detail) in self.drain() {
            write(&store, self.clock.now(), &actor, action, &target, &detail).await;
        }
    }
}

async fn write(store: &Arc<dyn Store>, at: jiff::Timestamp, actor: &str, action: &str, target: &str, detail: &str) {
    if let Err(e) = store.audit(at, actor, action, target, detail).await {
        tracing::error!(actor, action, target, "cannot write the audit log: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_row_opens_a_minute_and_the_close_counts_the_rest() {
        let a = BadTokenAudit::default();
        let use_ = |action, target| a.record("bob", action, target, "a revoked token was used");
        assert!(use_("auth.revoked-token", "abc"));
        for _ in 0..1999 {
            assert!(!use_("auth.revoked-token", "abc"));
        }
        // Another token, or another action on it, has its own minute.
        assert!(use_("auth.revoked-token", "def"));
        assert!(use_("auth.expired-token", "abc"));
        let (actor, detail) = a.close("auth.revoked-token", "abc").unwrap();
        assert_eq!(actor, "bob");
        let want = "a revoked token was used 1999 more times within a minute of the entry before, the last at ";
        assert!(detail.starts_with(want), "{detail}");
        // Uses go on: counted for the next row, not written one by one.
        assert!(!use_("auth.revoked-token", "abc"));
        assert!(a.close("auth.revoked-token", "abc").unwrap().1.contains(" 1 more time within"));
        // A quiet minute ends it: the next use is written at once again.
        assert_eq!(a.close("auth.revoked-token", "abc"), None);
        assert!(use_("auth.revoked-token", "abc"));
        assert!(!use_("auth.revoked-token", "abc"));
        // Shutdown writes what was counted, and only that.
        let rows = a.drain();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].0, ("auth.revoked-token", "abc".to_string()));
    }
}
