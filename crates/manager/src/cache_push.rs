//! The task that pushes the dataset cache's member list and buckets
//! ([`crate::cache_members::CacheMembers::desired`]) to every cache node, with an admin token
//! minted for the push, whenever they change and every [`RECONCILE`] (docs/cache.md; what is
//! pushed and why is in `cache_members.rs`).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::cache_env::unix_now;
use crate::cache_members::RECONCILE;
use crate::manager::Manager;

/// Pushes the member list and buckets to every cache node when they change and every
/// [`RECONCILE`]. Runs only when the daemon handed in a [`crate::cache_env::CacheEnv`].
pub async fn run(m: Arc<Manager>) {
    let Some(env) = m.cache.clone() else { return };
    let mut shutdown = m.shutdown.clone();
    let mut last: Option<Vec<u8>> = None;
    let mut failing: BTreeMap<String, crate::cache_env::CacheCallError> = BTreeMap::new();
    loop {
        let changed = tokio::select! {
            _ = tokio::time::sleep(RECONCILE) => false,
            _ = m.cache_members.changed.notified() => true,
            _ = shutdown.changed() => break,
        };
        let (urls, body) = {
            let st = m.jobs.lock().await;
            m.cache_members.desired(&st)
        };
        if urls.is_empty() || (changed && last.as_ref() == Some(&body)) {
            continue;
        }
        let token = (env.mint_admin)((unix_now() + 3600) as i64);
        let pushes = urls.iter().map(|u| (env.push)(u.clone(), token.clone(), body.clone()));
        let results = futures_util::future::join_all(pushes).await;
        for (url, r) in urls.iter().zip(results) {
            match r {
                // said once per failure, not every reconcile
                Err(e) if failing.get(url) != Some(&e) => {
                    tracing::warn!(cache = %url, "cannot send the cache member list: {e}");
                    failing.insert(url.clone(), e);
                }
                Err(_) => {}
                Ok(()) => {
                    if failing.remove(url).is_some() {
                        tracing::info!(cache = %url, "cache node has the member list again");
                    }
                }
            }
        }
        last = Some(body);
    }
}
