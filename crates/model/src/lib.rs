//! Plain data shared by every berth crate: resource quantities, node topology, job specs and
//! states, device bindings, pending reasons, REST bodies and agent-protocol messages.
//!
//! Nothing here does I/O. Quantities are fixed-point integers (millicores, bytes, thousandths
//! of a GPU) so that sums and comparisons are exact everywhere (ARCHITECTURE.md).

pub mod api;
pub mod app;
pub mod array;
pub mod binding;
mod cache_api;
pub mod cause;
pub mod code;
pub mod constraint;
pub mod dataset;
pub mod dependency;
pub mod endpoint;
pub mod environment;
mod error_api;
pub mod folder;
pub mod gpu_type;
mod hold_api;
pub mod hostlist;
pub mod job;
mod job_state;
pub mod measured;
pub mod names;
pub mod output;
pub mod protocol;
pub mod quantity;
pub mod quota;
pub mod reason;
pub mod replica;
pub mod signal;
pub mod stream;
mod tenancy_api;
pub mod topology;

pub use array::{ArraySpec, ArrayTask};
pub use binding::{Binding, GpuShare};
pub use cause::{EndCause, PreemptAction, StopCause};
pub use constraint::Constraint;
pub use dependency::{Condition, Dependency, JobRef};
pub use environment::{EnvKind, EnvSpec, SetupProgress, SetupStep};
pub use job::{
    DEFAULT_UID_RANGE, JobId, JobSpec, JobState, Launch, Mount, NumaPolicy, ResourceRequest, SpecError, UnixId,
    valid_name,
};
pub use measured::{Efficiency, JobUsage, KernelUsage};
pub use quantity::{
    MAX_DURATION_SECS, MAX_MEM_BYTES, MAX_MILLI, QuantityError, format_bytes, format_duration, format_gpu_milli,
    parse_cpus, parse_duration, parse_gpus, parse_mem,
};
pub use quota::{QuotaKind, QuotaLimits, QuotaView};
pub use reason::{Hold, PendingKind, PendingReason};
pub use signal::SignalSpec;
pub use topology::{Cpu, Gpu, NumaNode, Topology};

/// The name of the queue jobs go to when they name none, and the queue nodes join by default.
pub const DEFAULT_QUEUE: &str = "default";
