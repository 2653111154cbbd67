//! The manager ↔ agent protocol (docs/cluster.md): JSON messages over one WebSocket that the
//! agent dials at `/v1/agents/connect` with `Authorization: Bearer <join token>`.
//!
//! Every command carries an id and is idempotent: a StartKernel for a kernel the agent already
//! runs, or a StopKernel for one that already ended, only gets the current state reported again,
//! so the manager may replay commands after a reconnect.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::environment::{EnvEntry, SetupStep};
use crate::{Binding, JobId, JobSpec, KernelUsage, Topology};

/// Bumped on any incompatible change; a manager refuses agents of another version.
/// 2: `fenced` kernel outcome, agent addresses, the heartbeat timeout in `Welcome`.
/// 3: container runtime state (`containers` in `Register`, the `containers` message).
/// 4: several kernels of one job on one node (`kernels` in the spec: an older agent would run
///    them on the host network, where their host names mean nothing), and the mount
///    allow-list in [`ContainerInfo`].
/// 5: a `LaunchFailed` kernel's message is only what failed (the manager adds `launch failed`).
/// 6: measured usage: each running kernel's in `Heartbeat`, a kernel's totals in `Finished`;
///    byte streams into kernels (`OpenStream`).
/// 8: data folders to bind into kernels and code to copy (`folders`, `code` in `StartKernel`).
/// 7: Python environments: a kernel's setup (`Preparing` events, the `setup-failed` outcome,
///    the `setup` log), the node's environment cache (`Envs`, `RemoveEnv`); an older agent
///    would run a job's command without its environment.
/// 9: datasets to prefetch (`datasets` in `StartKernel`, the `datasets` setup step with
///    progress in bytes); an older agent would start the job without them.
/// 10: launch modes (`launch` in the spec: kernels past 0 of a `first` job only hold their
///    node) and variables for `Exec` streams (`srun`); an older agent would run the command
///    in every kernel.
/// 11: output files (`output` in the spec: Slurm's `--output`/`--error`/`--open-mode`) and the
///    signal sent before the time limit (`signal` in the spec); an older agent would write no
///    file, and send no signal.
/// 12: signals sent now (`SignalKernel`, `scancel --signal`) and per-task GPUs in `Exec`
///    streams (`gpus`); an older agent would drop the connection, and give tasks every GPU.
pub const PROTOCOL_VERSION: u32 = 12;

/// In [`ContainerInfo::images`]: the node pulls missing images (`berth agent --pull`), so it
/// takes jobs of any image.
pub const ANY_IMAGE: &str = "*";

/// What a node's container runtime (Docker) offers: whether it runs and its images.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub struct ContainerInfo {
    /// The Docker daemon answered the last look.
    pub docker_ok: bool,
    /// Why it is not usable (`cannot reach the Docker daemon ...`), when it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Image references the node has (`busybox:1`, `pytorch:2.4`), sorted.
    #[serde(default)]
    pub images: Vec<String>,
    /// Host paths containers may mount (`berth agent --allow-mount`), as given and with
    /// symlinks resolved; the manager refuses at submit, and the scheduler keeps away from
    /// the node, jobs whose mounts lie outside them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_mounts: Vec<String>,
}

/// Identifies one kernel run: a requeued job gets a new `attempt`, so late reports of an
/// old run never touch the new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
pub struct KernelKey {
    pub job_id: JobId,
    pub attempt: u32,
    pub index: u32,
}

/// How a kernel ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum KernelOutcome {
    /// Exited with code 0.
    Succeeded,
    /// Exited non-zero or was killed by a signal it did not ask for.
    Failed,
    /// Killed by the agent at its time limit.
    Timeout,
    /// Stopped because the manager asked (cancel).
    Stopped,
    /// Killed by the kernel's OOM killer inside its memory limit.
    OutOfMemory,
    /// Never started: bad binding, missing program, cgroup error, ... The `Finished` message
    /// says what failed (`cannot run ...`), without a `launch failed` prefix: the outcome
    /// itself says that.
    LaunchFailed,
    /// Stopped by the agent itself because it lost contact with the manager for half the
    /// heartbeat timeout (so the manager may requeue the job elsewhere without it running twice).
    Fenced,
    /// Its setup failed (the environment did not build); the message is the tool's own error.
    SetupFailed,
}

/// What happened to a kernel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum KernelEvent {
    /// The kernel is being set up before it runs (PREPARING): `done` of `total` of `step`.
    Preparing {
        step: SetupStep,
        done: u64,
        total: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
        /// When its setup began.
        since: jiff::Timestamp,
    },
    /// The program is running.
    Started { pid: u32, at: jiff::Timestamp },
    /// The kernel is over; `exit_code` is the process's code (128+signal when killed), `usage`
    /// what it used in all (none where the node cannot measure).
    Finished {
        outcome: KernelOutcome,
        exit_code: Option<i32>,
        message: String,
        at: jiff::Timestamp,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<KernelUsage>,
        /// The signal that ended it, when one did (an older agent sends none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
    },
}

/// A kernel the agent knows about, reported on (re)connect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct KernelReport {
    pub key: KernelKey,
    /// The last event: `Preparing` while it is set up, `Started` while it runs, `Finished`
    /// once it ended.
    pub last: KernelEvent,
}

/// One running kernel's usage at a heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct KernelSample {
    pub key: KernelKey,
    pub usage: KernelUsage,
}

/// One GPU's use at a heartbeat (whoever uses it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct GpuUse {
    pub uuid: String,
    /// Busy fraction, 0 to 1.
    pub utilization: f64,
    pub memory_used_bytes: u64,
}

/// Which log of a kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum LogStream {
    #[default]
    Stdout,
    Stderr,
    /// What the kernel's setup did (`setup.log`: environment built or reused, uv's output).
    Setup,
}

impl LogStream {
    /// The name in URLs and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            LogStream::Stdout => "stdout",
            LogStream::Stderr => "stderr",
            LogStream::Setup => "setup",
        }
    }
}

/// Agent → manager. `Register` is much larger than the others and sent once per connection;
/// boxing it would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum AgentMessage {
    /// First message on every connection.
    Register {
        protocol_version: u32,
        node: String,
        agent_version: String,
        queue: String,
        topology: Topology,
        kernels: Vec<KernelReport>,
        /// Where other nodes reach this one (`MASTER_ADDR` of multi-node jobs); `None` lets
        /// the manager use the address the connection came from.
        #[serde(default)]
        address: Option<String>,
        /// The node's container runtime; sent again as `Containers` when it changes.
        #[serde(default)]
        containers: ContainerInfo,
        /// Labels an admin gave the agent (`--label gpu=a100`); queues may select nodes by them.
        #[serde(default)]
        labels: BTreeMap<String, String>,
        /// The dataset cache node on this machine (`berth agent --cache-url`), which the
        /// manager makes a member of the cache and hands to the kernels it runs here.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cache_url: Option<String>,
        /// Its relative weight in the cache's routing (`berth agent --cache-weight`, 1 to
        /// [`crate::cache_api::MAX_CACHE_WEIGHT`]); none: 1. An admin's `berth cache member set`
        /// wins over it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cache_weight: Option<u32>,
        /// Whether process kernels here get data folders (`--folder`): that needs a private
        /// mount namespace, so an agent that is not root (a user's `berth up`) cannot. The
        /// manager refuses such jobs at submit when no node of their queue can, and places
        /// them only where one can. Absent (an older agent): true, as before.
        #[serde(default = "folder_mounts_default")]
        folder_mounts: bool,
    },
    /// The node's container runtime changed (an image pulled or removed, Docker down or up).
    Containers {
        info: ContainerInfo,
    },
    /// Sent every heartbeat interval, with what each running kernel used so far and how busy
    /// each GPU is (NVML; none without it).
    Heartbeat {
        at: jiff::Timestamp,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        usage: Vec<KernelSample>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        gpus: Vec<GpuUse>,
    },
    Kernel {
        key: KernelKey,
        event: KernelEvent,
    },
    /// Answer to a command the agent could not carry out at all (e.g. a binding that clashes
    /// with its ledger).
    CommandFailed {
        cmd_id: u64,
        key: KernelKey,
        error: String,
    },
    /// The node's environment cache, sent after `Welcome` and whenever it changes (a build,
    /// a kernel starting or ending with one, an eviction, a removal).
    Envs {
        envs: Vec<EnvEntry>,
    },
    /// Answer to `FetchLogs`; `data` is base64.
    LogData {
        req_id: u64,
        data: String,
        next_offset: u64,
        found: bool,
    },
}

/// An agent that does not say whether it can mount folders (older than the field) is taken
/// at its word of old: it tried, and failed the job at launch if it could not.
fn folder_mounts_default() -> bool {
    true
}

/// Manager → agent. `StartKernel` is much larger than the others; messages are short-lived,
/// so boxing it would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum ManagerMessage {
    /// Answer to `Register`.
    Welcome {
        heartbeat_interval_ms: u64,
        /// The manager declares a node lost after this long without a heartbeat. The agent
        /// fences itself (stops its kernels) after half of it without word from the manager,
        /// so a partitioned node never runs a kernel the manager has requeued elsewhere.
        /// 0: no fencing.
        #[serde(default)]
        heartbeat_timeout_ms: u64,
    },
    /// Refusal (bad version, duplicate node name, ...); the manager closes after it.
    Refused {
        reason: String,
    },
    StartKernel {
        cmd_id: u64,
        key: KernelKey,
        spec: JobSpec,
        binding: Binding,
        /// Variables the manager adds (`BERTH_JOB_ID`, cluster variables, ...).
        env: BTreeMap<String, String>,
        /// The Unix user who submitted the job on the manager's host, when the kernel there
        /// vouched for it (a submit over the manager's unix socket); the agent's user map
        /// decides whether kernels run as it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        submitter: Option<crate::UnixId>,
        /// The job's data folders, resolved to their directories on the storage backend.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        folders: Vec<crate::folder::FolderBind>,
        /// The job's code to copy into the kernel's work dir.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<crate::code::CodeCopy>,
        /// The job's datasets with their buckets' origins, prefetched before it runs.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        datasets: Vec<crate::dataset::DatasetFetch>,
    },
    StopKernel {
        cmd_id: u64,
        key: KernelKey,
        reason: String,
        grace_ms: u64,
    },
    /// The manager has recorded the kernel's end; the agent may forget it (logs stay on disk).
    Forget {
        key: KernelKey,
    },
    FetchLogs {
        req_id: u64,
        key: KernelKey,
        stream: LogStream,
        offset: u64,
        max_bytes: u64,
    },
    /// Send `signal` now to a running kernel's processes (`scancel --signal`); nothing to
    /// answer (the agent logs what it reached), and nothing for a kernel not running.
    SignalKernel {
        key: KernelKey,
        signal: u8,
        target: crate::signal::SignalTarget,
    },
    /// Delete a cached environment (`berth env rm`); the agent keeps one a live kernel uses,
    /// and reports its cache again either way.
    RemoveEnv {
        key: String,
    },
    /// A user's stream into a running kernel: the agent dials
    /// `/v1/agents/streams/{stream}` with the join token and `secret` (header
    /// [`STREAM_SECRET_HEADER`]), then serves `open` on it (`crate::stream` has the framing).
    OpenStream {
        stream: u64,
        secret: String,
        key: KernelKey,
        open: StreamOpen,
    },
}

impl ManagerMessage {
    /// The message's name, for logs.
    pub fn kind(&self) -> &'static str {
        match self {
            ManagerMessage::Welcome { .. } => "welcome",
            ManagerMessage::Refused { .. } => "refused",
            ManagerMessage::StartKernel { .. } => "start-kernel",
            ManagerMessage::StopKernel { .. } => "stop-kernel",
            ManagerMessage::Forget { .. } => "forget",
            ManagerMessage::FetchLogs { .. } => "fetch-logs",
            ManagerMessage::OpenStream { .. } => "open-stream",
            ManagerMessage::RemoveEnv { .. } => "remove-env",
            ManagerMessage::SignalKernel { .. } => "signal-kernel",
        }
    }
}

/// Every manager → agent frame: a message and the epoch of the manager that sent it (the
/// leader lease's, which grows at every takeover; 0 from a manager without one). An agent
/// follows the highest epoch it has seen and refuses commands of an older one, so a deposed
/// leader that wakes up can never act on a node (docs/ha.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    #[serde(default)]
    pub epoch: u64,
    #[serde(flatten)]
    pub msg: ManagerMessage,
}

/// The header that carries an agent's stream secret when it dials a stream back.
pub const STREAM_SECRET_HEADER: &str = "x-berth-stream-secret";

/// What a stream into a kernel is for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum StreamOpen {
    /// Run a command inside the kernel: its cgroups, mounts, user, directory and environment
    /// (containers: `docker exec`).
    Exec {
        command: Vec<String>,
        stdin: bool,
        /// On a pseudo-terminal (`berth exec -t`): output comes as one stream, window sizes
        /// arrive as `crate::stream::RESIZE`.
        #[serde(default)]
        tty: bool,
        /// Variables over the kernel's environment (checked by the manager; the agent keeps
        /// the kernel's device variables whatever they say).
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        env: BTreeMap<String, String>,
        /// Only these of the kernel's GPUs, by position (`srun --gpus-per-task`); the agent
        /// refuses a position the kernel does not have.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        gpus: Option<Vec<u32>>,
    },
    /// Connect to the kernel's own input and output (`berth run -i/-t`, `berth attach`):
    /// output from now on (on the first attach, what it wrote before as well), input in;
    /// closing the stream detaches, the kernel runs on.
    Attach,
    /// A TCP connection to a port inside the kernel (`berth port-forward`, the app proxy):
    /// the agent connects from the kernel's network namespace, answers with an `OPENED`
    /// frame, then relays bytes (`STDIN` in, `STDOUT` out, `STDIN_EOF` half-closes).
    Forward { target: ForwardTarget },
}

/// Where a forwarded connection goes inside a kernel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ForwardTarget {
    /// A port on the kernel's loopback.
    Port(u16),
    /// The port of the job's app of this name (the agent reads it from the kernel's
    /// environment, where it picked it), with the app's token when it has one.
    App(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_tagged_json() {
        let m = AgentMessage::Heartbeat { at: jiff::Timestamp::UNIX_EPOCH, usage: Vec::new(), gpus: Vec::new() };
        let s = serde_json::to_string(&m).unwrap();
        assert!(s.contains("\"type\":\"heartbeat\""), "{s}");
        let back: AgentMessage = serde_json::from_str(&s).unwrap();
        assert_eq!(back, m);
    }

    #[test]
    fn an_envelope_carries_the_epoch_beside_the_message() {
        let e =
            Envelope { epoch: 7, msg: ManagerMessage::Forget { key: KernelKey { job_id: 3, attempt: 0, index: 0 } } };
        let s = serde_json::to_string(&e).unwrap();
        assert!(s.contains("\"epoch\":7") && s.contains("\"type\":\"forget\""), "{s}");
        assert_eq!(serde_json::from_str::<Envelope>(&s).unwrap(), e);
        // a manager without a lease (and an older one) sends no epoch: 0
        let bare = serde_json::to_string(&e.msg).unwrap();
        assert_eq!(serde_json::from_str::<Envelope>(&bare).unwrap(), Envelope { epoch: 0, ..e });
    }
}
