//! Taking and keeping the leader lease (docs/ha.md): several managers share one store, one
//! leads. [`campaign`] waits, as a standby, until the lease is free and takes it; [`keep`]
//! renews it while the manager leads and gives it up at shutdown. A leader that cannot renew
//! in time, or finds another holder, loses it: it stops acting at once ([`Lease::lose`]) and
//! tells its owner, who shuts it down (a restart comes back as a standby).
//!
//! Defaults (`--lease-timeout 5s`): renewed every second, standbys look twice a second, the
//! leader stops acting 1 s before its lease can run out; a killed leader is replaced within
//! about 5.5 s.

use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_store::{LeaseRow, Store};
use tokio::sync::watch;

use crate::lease::Lease;

/// Who campaigns, and the lease's timing.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Unique for this run of this manager (host, pid, random), so a restart is a new holder.
    pub holder: String,
    /// The URL it serves the API at, as other managers' clients reach it.
    pub url: String,
    /// How long the lease lasts without renewal.
    pub ttl: Duration,
}

impl Candidate {
    pub fn new(url: String, ttl: Duration) -> Candidate {
        let holder = format!("{}:{}:{:08x}", process_space(), std::process::id(), rand::random::<u32>());
        Candidate { holder, url, ttl }
    }

    fn renew_every(&self) -> Duration {
        self.ttl / 5
    }

    fn poll_every(&self) -> Duration {
        (self.ttl / 10).max(Duration::from_millis(50))
    }

    /// How long before the lease can run out the leader stops acting: room for the renewal's
    /// own trip and for clocks that run at slightly different rates.
    fn margin(&self) -> Duration {
        self.ttl / 5
    }

    /// A store call that takes longer than this counts as failed.
    fn call_timeout(&self) -> Duration {
        self.ttl / 2
    }

    /// Until when a lease taken or renewed by a call sent at `sent` may be acted on.
    fn valid_until(&self, sent: Instant) -> Instant {
        sent + self.ttl - self.margin()
    }
}

/// Where this process's pid means something: the machine (its machine id, else its host name)
/// and the pid namespace, so that two holders with the same one can check each other's pid.
fn process_space() -> String {
    let machine = std::fs::read_to_string("/etc/machine-id")
        .or_else(|_| std::fs::read_to_string("/proc/sys/kernel/hostname"))
        .unwrap_or_default();
    let pidns = std::fs::read_link("/proc/self/ns/pid").map(|l| l.to_string_lossy().into_owned()).unwrap_or_default();
    let pidns: String = pidns.chars().filter(char::is_ascii_digit).collect();
    format!("{}-{pidns}", machine.trim())
}

/// Whether `holder` is a manager of this machine's pid namespace whose process is gone: a
/// manager restarted after a crash need not wait its own old lease out.
fn gone(holder: &str) -> bool {
    let mut parts = holder.split(':');
    let (Some(space), Some(pid)) = (parts.next(), parts.next().and_then(|p| p.parse::<u32>().ok())) else {
        return false;
    };
    space == process_space() && pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Waits until this manager holds the lease: its epoch and until when it may act. Meanwhile
/// `seen` says who leads (for the standby's answers), and `on_leader` hears of each new leader.
pub async fn campaign(
    store: &dyn Store,
    me: &Candidate,
    seen: &watch::Sender<Option<LeaseRow>>,
    on_leader: impl Fn(&str),
) -> (u64, Instant) {
    let mut told: Option<(String, u64)> = None;
    let mut failing = false;
    loop {
        let sent = Instant::now();
        let acquire = store.lease_acquire(&me.holder, &me.url, me.ttl, None);
        let tried = tokio::time::timeout(me.call_timeout(), acquire).await;
        match tried {
            Ok(Ok(Some(epoch))) => {
                tracing::info!(epoch, holder = me.holder, "this manager leads now");
                return (epoch, me.valid_until(sent));
            }
            Ok(Ok(None)) => {
                failing = false;
                if let Ok(Ok(row)) = tokio::time::timeout(me.call_timeout(), store.lease()).await {
                    if row.held() && gone(&row.holder) {
                        let replace = store.lease_acquire(&me.holder, &me.url, me.ttl, Some(&row.holder));
                        if let Ok(Ok(Some(epoch))) = tokio::time::timeout(me.call_timeout(), replace).await {
                            tracing::info!(
                                epoch,
                                previous = row.holder,
                                "the previous leader on this machine is gone: this manager leads now"
                            );
                            return (epoch, me.valid_until(sent));
                        }
                    }
                    let now = (row.url.clone(), row.epoch);
                    if row.held() && told.as_ref() != Some(&now) {
                        // The caller first: `berth up` exits with its own clear error there, and
                        // must not log that it stands by before it does.
                        on_leader(&row.url);
                        tracing::info!(leader = row.url, epoch = row.epoch, "standing by: another manager leads");
                        told = Some(now);
                    }
                    seen.send_replace(Some(row));
                }
            }
            Ok(Err(e)) if !failing => {
                tracing::warn!("cannot read the leader lease: {e} (retrying)");
                failing = true;
            }
            Err(_) if !failing => {
                tracing::warn!("the store did not answer about the leader lease in {:?} (retrying)", me.call_timeout());
                failing = true;
            }
            _ => {}
        }
        tokio::time::sleep(me.poll_every()).await;
    }
}

/// Renews the lease while this manager leads. On a loss it stops the manager acting and sends
/// the reason on `deposed`; at shutdown it gives the lease up.
pub async fn keep(
    store: Arc<dyn Store>,
    me: Candidate,
    lease: Arc<Lease>,
    deposed: watch::Sender<Option<String>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let epoch = lease.epoch();
    let lose = |why: String| {
        lease.lose();
        tracing::error!(epoch, "lost the leadership: {why}; this manager stops acting");
        deposed.send_replace(Some(why));
    };
    let ran_out = || format!("the lease could not be renewed within {:?}", me.ttl - me.margin());
    let mut full = false;
    loop {
        let Some(until) = lease.until() else { return };
        let until = tokio::time::Instant::from_std(until);
        tokio::select! {
            _ = tokio::time::sleep(me.renew_every()) => {}
            _ = tokio::time::sleep_until(until) => {
                return lose(ran_out());
            }
            _ = shutdown.wait_for(|s| *s) => break,
        }
        let sent = Instant::now();
        let renew = tokio::time::timeout(me.call_timeout(), store.lease_renew(&me.holder, epoch, me.ttl));
        let renewed = tokio::select! {
            r = renew => r,
            _ = tokio::time::sleep_until(until) => {
                return lose(ran_out());
            }
        };
        match renewed {
            Ok(Ok(true)) => {
                lease.extend(me.valid_until(sent));
                full = false;
            }
            Ok(Ok(false)) => return lose("another manager took the lease over".into()),
            // The database answers but takes no write (its disk is full): nobody can take the
            // lease over either, and whatever this manager would act on is a store write first,
            // fenced by the epoch. So it goes on acting (and pinging its agents, which would
            // otherwise fence their kernels) rather than stopping the cluster for a full disk.
            Ok(Err(e)) if e.is_disk_full() => {
                lease.extend(me.valid_until(sent));
                if !full {
                    tracing::warn!("cannot renew the leader lease: {e}; acting on while the disk is full");
                }
                full = true;
                continue;
            }
            Ok(Err(e)) => tracing::warn!("cannot renew the leader lease: {e} (retrying)"),
            Err(_) => {
                tracing::warn!("the store did not answer the lease renewal in {:?} (retrying)", me.call_timeout())
            }
        }
    }
    // A clean shutdown: stop acting first, then let a standby in without waiting the lease out.
    lease.lose();
    if let Err(e) = store.lease_release(&me.holder, epoch).await {
        tracing::warn!("cannot give the leader lease up: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_dead_holder_of_this_machine_is_gone() {
        let here = process_space();
        assert!(!gone(&format!("{here}:{}:1", std::process::id())), "this process");
        // pid 1 lives as long as the machine (or the container)
        assert!(!gone(&format!("{here}:1:1")));
        assert!(gone(&format!("{here}:{}:1", u32::MAX - 1)), "no such process");
        assert!(!gone(&format!("elsewhere-1:{}:1", u32::MAX - 1)), "another machine's pid says nothing here");
        assert!(!gone("") && !gone("garbage"));
    }
}
