//! The agent-report loop: every agent connection hands what its agent sent to this one task,
//! which takes all reports waiting from all agents, applies them under one state lock in one
//! store transaction (`batch.rs`), then answers each connection. A connection reads its next
//! messages only once its last ones are applied, so reports are never reordered per agent
//! and a busy manager slows its agents down instead of queueing without bound.

use std::sync::Arc;

use crate::hub::{Report, ReportsRx};
use crate::manager::Manager;

/// Most agent messages applied in one batch: bounds how long the state lock is held and how
/// long the scheduling pass may wait for it.
const MAX_BATCH_MESSAGES: usize = 4096;

/// Applies reports until every connection is gone (the manager's own sender is dropped at
/// shutdown with it).
pub async fn run(m: Arc<Manager>, mut rx: ReportsRx) {
    let mut shutdown = m.shutdown.clone();
    loop {
        let first = tokio::select! {
            r = rx.recv() => match r {
                Some(r) => r,
                None => break,
            },
            _ = shutdown.changed() => break,
        };
        let mut reports = vec![first];
        let mut count = reports[0].msgs.len();
        while count < MAX_BATCH_MESSAGES
            && let Ok(r) = rx.try_recv()
        {
            count += r.msgs.len();
            reports.push(r);
        }
        apply_reports(&m, reports).await;
    }
}

/// Applies the reports of several agents in one batch. If the store refuses the batch,
/// memory is restored and each message is applied again on its own (and deferred or
/// dropped as it would have been without batching).
pub async fn apply_reports(m: &Manager, reports: Vec<Report>) {
    let mut st = m.jobs.lock().await;
    st.begin_batch();
    for r in &reports {
        for msg in &r.msgs {
            crate::agent_conn::handle(m, &mut st, &r.node, msg).await;
        }
    }
    let mut batch = st.close_batch().expect("opened above");
    let stored = if batch.changes().is_empty() {
        Ok(())
    } else {
        let started = std::time::Instant::now();
        let stored = m.store.apply(batch.changes()).await;
        m.metrics.commit(crate::metrics::Commit::Reports, started.elapsed());
        stored
    };
    match stored {
        Ok(()) => {
            st.send_all(batch.take_outbox());
            for e in batch.take_events() {
                m.jobs.announce(e);
            }
            for ev in batch.take_metric_events() {
                m.metrics.job_event(ev);
            }
        }
        Err(e) => {
            tracing::warn!(
                changes = batch.changes().len(),
                "a batch of agent reports was not stored ({e}): applying them one by one"
            );
            st.reopen_batch(batch);
            st.undo_batch();
            for r in &reports {
                for msg in &r.msgs {
                    crate::agent_conn::handle(m, &mut st, &r.node, msg).await;
                }
            }
        }
    }
    drop(st);
    for r in reports {
        let _ = r.done.send(());
    }
}
