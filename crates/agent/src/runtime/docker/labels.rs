//! The labels the agent puts on its containers and job networks (docs/containers.md), so that a
//! restarted agent finds and re-adopts its own ones and never touches those of other agents.

/// Label holding the agent's scope (node + data dir hash): containers of other agents on
/// the same Docker daemon are never touched.
pub const LABEL_SCOPE: &str = "berth.scope";
/// `<job>.<attempt>.<index>`.
pub const LABEL_KERNEL: &str = "berth.kernel";
pub const LABEL_JOB: &str = "berth.job";
/// The binding as JSON, so a restarted agent re-adopts the container with its devices.
pub const LABEL_BINDING: &str = "berth.binding";
/// Unix milliseconds at which the time limit ends (absent: no limit).
pub const LABEL_DEADLINE: &str = "berth.deadline-ms";
/// The job's time limit in seconds (for the `time limit ... exceeded` message).
pub const LABEL_LIMIT: &str = "berth.time-limit-minutes";
/// The job network the container is on (jobs with several kernels on the node).
pub const LABEL_NETWORK: &str = "berth.network";
/// `<listen address> <loopback address>` of the kernel's dataset cache forwarder (the
/// `cache_forward` module), so a restarted agent binds it again.
pub const LABEL_CACHE_FORWARD: &str = "berth.cache-forward";
