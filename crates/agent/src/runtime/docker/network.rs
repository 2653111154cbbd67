//! The private network of a job with several kernels on this node (`berth submit --kernels
//! N`): a Docker bridge network per job attempt, on which the kernels' containers are `main`,
//! `sub1`, ... (host name and network alias, resolved by Docker's embedded DNS).
//!
//! - Named `berth-<scope>-job-<job>.<attempt>` and labelled with the agent's scope and the
//!   job, so two agents on one Docker daemon never share one, a requeued job gets a fresh one,
//!   and a restarted agent finds its own.
//! - Created by the first kernel that starts, removed by the last one whose container is
//!   removed: a network goes when no container labelled with it is left. One lock per agent
//!   orders "ensure the network, create and start a container" against "no container left,
//!   remove the network", so a kernel never starts on a network that another one's end
//!   is removing.
//! - `berth agent --internal-job-networks` makes them Docker `internal` networks: the kernels
//!   reach each other and nothing else (no route to the host or outside).
//! - On agent start ([`Networks::prune`], after re-adoption) networks of this scope without
//!   containers (their jobs ended while no agent watched, or a start never got that far) are
//!   removed; those of re-adopted running kernels stay.

use std::collections::HashMap;
use std::sync::Arc;

use berth_model::protocol::KernelKey;
use bollard::models::NetworkCreateRequest;
use bollard::query_parameters::{InspectNetworkOptions, ListContainersOptions, ListNetworksOptions};
use tokio::sync::{Mutex, OwnedMutexGuard};

use super::labels::{LABEL_JOB, LABEL_NETWORK, LABEL_SCOPE};
use super::{EngineError, is_not_found, text};

/// The network of a job attempt's kernels on this agent.
pub fn network_name(scope: &str, key: &KernelKey) -> String {
    format!("berth-{scope}-job-{}.{}", key.job_id, key.attempt)
}

/// The per-agent lock and options of job networks. Cheap to clone.
#[derive(Debug, Clone)]
pub(super) struct Networks {
    lock: Arc<Mutex<()>>,
    scope: String,
    internal: bool,
}

/// Held from "ensure the network" until the container runs (or is removed again).
pub(super) type Held = OwnedMutexGuard<()>;

impl Networks {
    pub fn new(scope: &str, internal: bool) -> Networks {
        Networks { lock: Arc::new(Mutex::new(())), scope: scope.to_string(), internal }
    }

    pub async fn lock(&self) -> Held {
        self.lock.clone().lock_owned().await
    }

    /// Makes sure the job's network exists (the lock held): an existing one is used when it
    /// is ours; a network of that name that berth did not create is an error with the fix.
    pub async fn ensure(
        &self,
        client: &bollard::Docker,
        name: &str,
        key: &KernelKey,
        _held: &Held,
    ) -> Result<(), EngineError> {
        match client.inspect_network(name, None::<InspectNetworkOptions>).await {
            Ok(n) => {
                let ours = n.labels.as_ref().and_then(|l| l.get(LABEL_SCOPE)).is_some_and(|s| *s == self.scope);
                return if ours { Ok(()) } else { Err(EngineError::ForeignNetwork { name: name.to_string() }) };
            }
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(EngineError::InspectNetwork { name: name.to_string(), why: text(&e) }),
        }
        let labels = HashMap::from([
            (LABEL_SCOPE.to_string(), self.scope.clone()),
            (LABEL_JOB.to_string(), key.job_id.to_string()),
        ]);
        let req = NetworkCreateRequest {
            name: name.to_string(),
            driver: Some("bridge".into()),
            internal: Some(self.internal),
            labels: Some(labels),
            ..Default::default()
        };
        match client.create_network(req).await {
            Ok(_) => {
                tracing::info!(network = name, internal = self.internal, "created a job network");
                Ok(())
            }
            Err(e) => Err(EngineError::CreateNetwork { name: name.to_string(), why: text(&e) }),
        }
    }

    /// Removes the network when no container labelled with it is left (the lock held).
    pub async fn release_held(&self, client: &bollard::Docker, name: &str, _held: &Held) {
        let filters = HashMap::from([("label".to_string(), vec![format!("{LABEL_NETWORK}={name}")])]);
        let opts = ListContainersOptions { all: true, filters: Some(filters), ..Default::default() };
        match client.list_containers(Some(opts)).await {
            Ok(list) if !list.is_empty() => return,
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(network = name, "cannot list the containers of a job network: {}", text(&e));
                return;
            }
        }
        match client.remove_network(name).await {
            Ok(()) => tracing::info!(network = name, "removed a job network"),
            Err(e) if is_not_found(&e) => {}
            Err(e) => tracing::warn!(network = name, "cannot remove a job network: {}", text(&e)),
        }
    }

    /// [`release_held`](Self::release_held), taking the lock.
    pub async fn release(&self, client: &bollard::Docker, name: &str) {
        let held = self.lock().await;
        self.release_held(client, name, &held).await;
    }

    /// Removes this scope's job networks that no container uses (agent start, after the
    /// containers of a previous agent process were re-adopted or removed).
    pub async fn prune(&self, client: &bollard::Docker) {
        let filters = HashMap::from([("label".to_string(), vec![format!("{LABEL_SCOPE}={}", self.scope)])]);
        let opts = ListNetworksOptions { filters: Some(filters) };
        let list = match client.list_networks(Some(opts)).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!("cannot list job networks of a previous agent: {}", text(&e));
                return;
            }
        };
        let held = self.lock().await;
        for n in list {
            if let Some(name) = n.name {
                self.release_held(client, &name, &held).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_differ_per_scope_job_and_attempt() {
        let k = |job_id, attempt| KernelKey { job_id, attempt, index: 1 };
        assert_eq!(network_name("n1-ab12", &k(7, 0)), "berth-n1-ab12-job-7.0");
        assert_ne!(network_name("n1-ab12", &k(7, 0)), network_name("n1-ab12", &k(7, 1)));
        assert_ne!(network_name("n1-ab12", &k(7, 0)), network_name("n2-ab12", &k(7, 0)));
    }
}
