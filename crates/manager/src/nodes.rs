//! Node states as admins see them (`ready`, `draining`, `drained`, `lost`) and drain/undrain.
//!
//! A node takes new jobs only when it is ready, its agent is connected and no admin drained
//! it; [`State::refresh_schedulable`] is the one place that turns those facts into the
//! scheduler's `schedulable` flag, so every path (register, disconnect, lost, drain) agrees.
//! A drain is stored and survives both agent re-registration and manager restarts.

use berth_model::api::NodeState;

use crate::error::ApiError;
use crate::manager::Manager;
use crate::state::State;

impl State {
    /// What `berth nodes` shows for `name`.
    pub fn node_state(&self, name: &str) -> Option<NodeState> {
        let n = self.nodes.get(name)?;
        Some(match (&n.drain, n.ready) {
            (_, false) => NodeState::Lost,
            (Some(_), true) if self.jobs_on(name).is_empty() => NodeState::Drained,
            (Some(_), true) => NodeState::Draining,
            (None, true) => NodeState::Ready,
        })
    }

    /// Sets the scheduler's flag for `name` from its state, connection and drain.
    pub fn refresh_schedulable(&mut self, name: &str) {
        let Some(n) = self.nodes.get(name) else { return };
        let on = n.ready && n.conn.is_some() && n.drain.is_none();
        let idx = n.ledger;
        if let Some(l) = self.ledgers.get_mut(idx) {
            l.set_schedulable(on);
        }
    }
}

impl Manager {
    /// Drains `name`: running jobs go on, no new job starts there. Draining a drained node
    /// only updates the reason.
    pub async fn drain(&self, name: &str, reason: Option<String>, by: &str) -> Result<NodeState, ApiError> {
        let mut st = self.lock_state().await;
        if !st.nodes.contains_key(name) {
            return Err(unknown_node(&st, name));
        }
        let reason = reason.map(|r| r.trim().to_string()).filter(|r| !r.is_empty());
        let reason = reason.unwrap_or_else(|| format!("drained by {by}"));
        if reason.len() > 512 {
            return Err(ApiError::bad_request("drain reason too long: keep it under 512 bytes"));
        }
        self.store.set_node_drain(name, Some(&reason)).await?;
        let n = st.nodes.get_mut(name).expect("checked above");
        n.drain = Some(reason.clone());
        st.refresh_schedulable(name);
        tracing::info!(node = name, by, reason, "node drained");
        Ok(st.node_state(name).expect("checked above"))
    }

    /// Undrains `name`: it takes jobs again (once its agent is connected).
    pub async fn undrain(&self, name: &str, by: &str) -> Result<NodeState, ApiError> {
        let mut st = self.lock_state().await;
        if !st.nodes.contains_key(name) {
            return Err(unknown_node(&st, name));
        }
        self.store.set_node_drain(name, None).await?;
        st.nodes.get_mut(name).expect("checked above").drain = None;
        st.refresh_schedulable(name);
        tracing::info!(node = name, by, "node undrained");
        self.wake.notify_one();
        Ok(st.node_state(name).expect("checked above"))
    }
}

fn unknown_node(st: &State, name: &str) -> ApiError {
    let mut names: Vec<&str> = st.nodes.keys().map(String::as_str).collect();
    names.sort_unstable();
    let known = if names.is_empty() { "none yet".to_string() } else { names.join(", ") };
    ApiError::not_found(format!("no node `{name}`: known nodes are {known} (see `berth nodes`)"))
}
