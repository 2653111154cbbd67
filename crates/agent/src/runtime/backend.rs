//! The seam between the runtime and what runs kernels: a [`KernelBackend`] starts a kernel,
//! takes over the kernels an earlier agent process left, signals one now and says where a
//! stream into one goes (`exec`, `attach`, `forward`). The runtime picks the backend once per
//! kernel ([`super::Runtime::start`]): the `process` backend for jobs without an image, the
//! node's container backend (Docker or Podman, `berth agent --container-runtime`) for jobs with
//! one.
//!
//! What every backend shares is not in the trait: a kernel is stopped through its
//! [`KernelHandle`] (SIGTERM, SIGKILL after the grace, by the backend's own watch task), ends
//! as a `Finished` event on the agent's channel, and its usage is read from the cgroups of its
//! host pid (`Started { pid }`), which containers have as well (`crate::meter`).

use std::collections::BTreeMap;
use std::fmt;

use berth_model::protocol::{ContainerInfo, KernelKey};
use berth_model::signal::SignalTarget;
use berth_model::{Binding, JobSpec};
use futures_util::future::BoxFuture;
use tokio::sync::mpsc;

use super::signal_now::Reached;
use super::{Adopted, JobData, KernelHandle, KernelUpdate, RunUser};

/// Which backend runs a kernel: processes, or the node's container backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    Process,
    Container,
}

/// Why a kernel did not start; its text is the `Finished` message of the `LaunchFailed`
/// kernel (what failed and how to fix it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartError {
    /// The job asks for what this node cannot give it (folders without a mount namespace, a
    /// work dir the node lacks, an owner it may not run as, an empty command).
    #[error("{0}")]
    Refused(String),
    /// The node could not prepare the kernel: its dirs, logs, cgroup, code or cache token.
    #[error("{0}")]
    Prepare(String),
    /// The kernel's program could not be run (exec failed, or the kernel supervisor did not).
    #[error("{0}")]
    Exec(String),
}

impl StartError {
    /// The node refuses the job, for the reason `why` gives.
    pub fn refused(why: impl fmt::Display) -> StartError {
        StartError::Refused(why.to_string())
    }

    /// The node could not prepare the kernel, for the reason `why` gives.
    pub fn prepare(why: impl fmt::Display) -> StartError {
        StartError::Prepare(why.to_string())
    }
}

/// A kernel to start, as the runtime hands it to a backend: the run user resolved and the
/// manager's variables completed for this node.
pub(crate) struct Kernel<'a> {
    pub key: KernelKey,
    pub spec: &'a JobSpec,
    pub binding: &'a Binding,
    pub manager_env: &'a BTreeMap<String, String>,
    pub user: RunUser,
    pub data: JobData<'a>,
    pub events: &'a mpsc::UnboundedSender<KernelUpdate>,
}

/// What runs kernels on a node. A new backend (Kubernetes, say) is one module implementing
/// this, and one arm where [`super::Runtime::new`] builds the node's backends.
pub(crate) trait KernelBackend: Send + Sync + fmt::Debug {
    /// Its name as people know it (`process`, `docker`, `podman`), for messages.
    fn name(&self) -> &'static str;

    /// Starts a kernel. Its `Finished` event comes on `kernel.events`; so does `Started` when
    /// the handle is [`KernelHandle::deferred`] (the kernel starts in the background).
    fn start(&self, kernel: Kernel<'_>) -> Result<KernelHandle, StartError>;

    /// Takes over the kernels an earlier agent process with this data dir left: running ones
    /// are watched again (`Started`), ended ones report their end. Only the first call finds any.
    fn adopt<'a>(&'a self, events: &'a mpsc::UnboundedSender<KernelUpdate>) -> BoxFuture<'a, Vec<Adopted>>;

    /// Where a stream into running kernel `key` (main process `pid`) goes; `attach`: its own
    /// input and output rather than a new command or a port.
    fn target(
        &self,
        key: KernelKey,
        pid: u32,
        attach: bool,
    ) -> Result<crate::streams::Target, crate::streams::TargetError>;

    /// Sends `sig` now to kernel `key` (main process `pid`): to its main process, its steps or
    /// both, as `to` says (`scancel --signal`).
    fn signal(&self, key: KernelKey, pid: u32, sig: u8, to: SignalTarget) -> BoxFuture<'static, Reached>;

    /// What the backend offers the scheduler (a container backend: whether it runs, its
    /// images); `None` for a backend without images.
    fn info(&self) -> BoxFuture<'_, Option<ContainerInfo>> {
        Box::pin(std::future::ready(None))
    }
}
