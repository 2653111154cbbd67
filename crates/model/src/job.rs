//! Job specs as users submit them; the states a job moves through are `job_state`'s.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;
use utoipa::ToSchema;

pub use crate::job_state::JobState;

/// Jobs are numbered from 1 in submit order, like Slurm job ids.
pub type JobId = i64;

/// How CPUs and memory are placed relative to NUMA nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum NumaPolicy {
    /// Take CPUs and memory from one NUMA node (the GPUs' node first) when one fits; spill otherwise.
    #[default]
    PreferLocal,
    /// Only place when everything fits on one NUMA node.
    RequireLocal,
    /// Like `require-local`, and the GPUs must sit on that node too.
    SingleNode,
    /// Spread CPUs and memory evenly across NUMA nodes.
    Interleave,
    /// Any CPUs, any memory node.
    None,
}

/// What one kernel asks for. `gpu_milli` below 1000 is a fraction of one device; 1000 or more
/// must be whole devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ResourceRequest {
    pub cpu_milli: u64,
    pub mem_bytes: u64,
    #[serde(default)]
    pub gpu_milli: u64,
}

impl Default for ResourceRequest {
    fn default() -> Self {
        Self { cpu_milli: 1000, mem_bytes: 1 << 30, gpu_milli: 0 }
    }
}

impl ResourceRequest {
    /// Whole CPUs the kernel gets in its cpuset (a fraction rounds up to one CPU).
    pub fn whole_cpus(&self) -> u32 {
        self.cpu_milli.div_ceil(1000) as u32
    }
}

/// A job as submitted: what to run and what it needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct JobSpec {
    #[serde(default)]
    pub name: Option<String>,
    /// Program and arguments; run directly, not through a shell.
    pub command: Vec<String>,
    #[serde(default)]
    pub resources: ResourceRequest,
    /// Nodes the job spans (one kernel per node, unless `kernels` says more).
    #[serde(default = "one")]
    pub nodes: u32,
    /// Kernels on the node (`--kernels N`): containers of one job on one node, each with the
    /// full `resources`, on a private network where they are `main`, `sub1`, ...
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub kernels: u32,
    #[serde(default)]
    pub time_limit_secs: Option<u64>,
    /// Higher runs first. Bands are compared before arrival order.
    #[serde(default)]
    pub priority: i32,
    #[serde(default)]
    pub queue: Option<String>,
    /// Variables the job sets (`--env`, `[env]`): above `submit_env`, below berth's own.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The submitter's environment as exported at submit (Slurm's `--export`, default all
    /// but berth's own variables): the base a process kernel starts from, before `env`.
    /// Shown to the job's owner and admins only (it may hold secrets).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub submit_env: BTreeMap<String, String>,
    /// Absolute working directory on the node; `None`: the kernel's own fresh work dir.
    #[serde(default)]
    pub workdir: Option<String>,
    /// The absolute directory the job was submitted from (Slurm's `SLURM_SUBMIT_DIR`, which
    /// stays the submitter's even with `--chdir`); `None` in specs from older clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submit_dir: Option<String>,
    #[serde(default)]
    pub numa: NumaPolicy,
    /// Put the job back in the queue when its node is lost.
    #[serde(default)]
    pub requeue: bool,
    /// The job may be stopped (requeued or cancelled, per its queue) for a higher-priority job
    /// when its queue has preemption on.
    #[serde(default)]
    pub preemptible: bool,
    /// The project the job is accounted to (quotas, fair share, usage); the submitter must be
    /// a member. `None`: the user's own account.
    #[serde(default)]
    pub project: Option<String>,
    /// Members of the job's project may see it (`ps`, `show`, `logs`); only its owner and
    /// admins may cancel it.
    #[serde(default)]
    pub shared: bool,
    /// Container image: the kernels run as containers in the agent's `docker` runtime
    /// (docs/node.md); `None` runs them as plain processes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Host paths mounted into the containers (only with `image`); each node allows only the
    /// paths its admin listed (`berth agent --allow-mount`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<Mount>,
    /// Data folders mounted into every kernel (`--folder`, `folders = [...]`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub folders: Vec<crate::folder::FolderMount>,
    /// The code the job runs in: a fresh copy of a snapshot (`--code DIR`), its work dir.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<crate::code::CodeSnapshot>,
    /// Datasets prefetched into the node's cache before the job runs (`--dataset`,
    /// `datasets = [...]`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<String>, example = json!(["imagenet/train/"]))]
    pub datasets: Vec<crate::dataset::DatasetRef>,
    /// Web apps the main kernel serves, reached through the app proxy (`--app`, `--jupyter`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub apps: Vec<crate::app::AppSpec>,
    /// The main kernel (kernel 0) runs with its standard input, output and error on a
    /// pseudo-terminal that `berth run -t` and `berth attach` connect to (the agent holds the
    /// master and copies its output to the stdout log too).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tty: bool,
    /// The main kernel's standard input comes from attached clients (`berth run -i`); without
    /// `tty` its output goes through the agent as pipes (and on to the logs).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stdin: bool,
    /// The Python environment of a process job, built with uv on each node (`[environment]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<crate::environment::EnvSpec>,
    /// Other jobs this one waits for (Slurm's `--dependency`): it is not scheduled until they
    /// are met, and is cancelled (or kept, per the manager) when they can never be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependency: Option<crate::dependency::Dependency>,
    /// Not scheduled before this time (Slurm's `--begin`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub begin_at: Option<jiff::Timestamp>,
    /// Submitted held by its user (Slurm's `sbatch --hold`): not scheduled until released
    /// (`berth release`, `scontrol release`). The job's hold since is its own (`Hold`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hold: bool,
    /// A job array (`--array`): this job stands for its tasks, each made as a job of its own
    /// when its turn comes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<crate::array::ArraySpec>,
    /// Which array task this job is (set by the manager, never by a submit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_task: Option<crate::array::ArrayTask>,
    /// Tasks per kernel (Slurm's `--ntasks-per-node`): how many processes `srun` starts in
    /// each kernel by default, and `SLURM_NTASKS`. The kernel's resources are for all of them.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub tasks_per_node: u32,
    /// GPUs of its own for each `srun` task (Slurm's `--gpus-per-task`): task L of a kernel
    /// gets the kernel's GPUs L×G to L×G+G-1. Whole GPUs; at most the kernel's over its tasks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus_per_task: Option<u32>,
    /// Where the command runs: in every kernel (torchrun style), or only in kernel 0 while
    /// the others hold their nodes for `srun` (a Slurm batch script).
    #[serde(default, skip_serializing_if = "Launch::is_every")]
    pub launch: Launch,
    /// Files the command's standard output and error go to instead of the agent's logs
    /// (Slurm's `--output`, `--error`, `--open-mode`): path templates expanded on the node.
    #[serde(default, skip_serializing_if = "crate::output::OutputFiles::is_empty")]
    pub output: crate::output::OutputFiles,
    /// A warning signal before the time limit (Slurm's `--signal`): to the job's steps, or
    /// with `batch_only` to its batch shell. Needs a time limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<crate::signal::SignalSpec>,
    /// Node features every node of the job must offer (Slurm's `--constraint`): its labels,
    /// by the rule of [`crate::constraint`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, example = "a100&ib")]
    pub constraint: Option<crate::constraint::Constraint>,
    /// Whole nodes (Slurm's `--exclusive`): each kernel is bound to all of its node's CPUs,
    /// memory and GPUs, on a node where nothing else runs while it does.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exclusive: bool,
    /// The quality of service the job asked for (Slurm's `--qos`): a name from the manager's
    /// config, which sets the job's priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<String>,
    /// The serving endpoint this job is a replica of (set by the manager; refused at submit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_of: Option<crate::replica::ReplicaOf>,
}

/// Which kernels of a job run its command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Launch {
    /// Every kernel runs the command (each on its node, with its rank).
    #[default]
    Every,
    /// Only kernel 0 runs it, like Slurm's batch step; the other kernels hold their node's
    /// allocation, running nothing, until the job ends, so that `srun` can start tasks there.
    First,
}

impl Launch {
    pub fn is_every(&self) -> bool {
        *self == Launch::Every
    }
}

impl JobSpec {
    /// At most [`crate::folder::MAX_FOLDER_MOUNTS`] folders, each well formed, at distinct
    /// paths; a process job's only under `/data` or `/mnt`.
    fn validate_folders(&self) -> Result<(), SpecError> {
        use crate::folder::MAX_FOLDER_MOUNTS;
        if self.folders.len() > MAX_FOLDER_MOUNTS {
            return Err(SpecError(format!("a job may mount at most {MAX_FOLDER_MOUNTS} folders")));
        }
        let mut targets = std::collections::BTreeSet::new();
        for f in &self.folders {
            f.validate()?;
            let t = f.target();
            if self.image.is_none() && !f.process_target_allowed() {
                return Err(SpecError(format!(
                    "folder mount path `{t}` is not allowed for a process job: use a path under /data or /mnt \
                     (e.g. {}:/data/{}), or run the job in a container (--image)",
                    f.folder,
                    f.folder.rsplit('/').next().unwrap_or("NAME")
                )));
            }
            if let Some(clash) = targets.iter().find(|o: &&String| {
                std::path::Path::new(&t).starts_with(o.as_str()) || std::path::Path::new(o.as_str()).starts_with(&t)
            }) {
                return Err(SpecError(format!(
                    "folder mount paths `{clash}` and `{t}` overlap: give each folder its own path (NAME:/data/PATH)"
                )));
            }
            targets.insert(t);
        }
        Ok(())
    }
}

/// A host path mounted into a job's containers, read-only unless `rw`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Mount {
    pub source: String,
    pub target: String,
    #[serde(default)]
    pub rw: bool,
}

impl std::str::FromStr for Mount {
    type Err = SpecError;

    /// `SOURCE:TARGET[:ro|:rw]` (the `docker run -v` shape; read-only by default).
    fn from_str(s: &str) -> Result<Mount, SpecError> {
        let parts: Vec<&str> = s.split(':').collect();
        let (source, target, rw) = match parts.as_slice() {
            [src, dst] => (*src, *dst, false),
            [src, dst, "ro"] => (*src, *dst, false),
            [src, dst, "rw"] => (*src, *dst, true),
            _ => {
                return Err(SpecError(format!(
                    "invalid mount `{s}`: use HOST_PATH:CONTAINER_PATH[:ro|:rw], e.g. /data/imagenet:/data"
                )));
            }
        };
        let m = Mount { source: source.into(), target: target.into(), rw };
        m.validate()?;
        Ok(m)
    }
}

impl Mount {
    /// Both paths absolute, without `..` (a mount must not escape the allowed host paths).
    pub fn validate(&self) -> Result<(), SpecError> {
        for (what, p) in [("host", &self.source), ("container", &self.target)] {
            if !p.starts_with('/') || p.split('/').any(|c| c == "..") || p.contains('\0') || p.contains(',') {
                return Err(SpecError(format!(
                    "mount {what} path `{p}` must be absolute, without `..` or `,`: e.g. /data/imagenet:/data"
                )));
            }
        }
        Ok(())
    }
}

/// Checks an image reference (`pytorch:2.4`, `registry:5000/team/img@sha256:...`).
pub fn validate_image(image: &str) -> Result<(), SpecError> {
    let ok = !image.is_empty()
        && image.len() <= 255
        && !image.starts_with(['-', ':', '@', '/'])
        && image.chars().all(|c| c.is_ascii_alphanumeric() || "._-/:@".contains(c));
    if ok {
        Ok(())
    } else {
        Err(SpecError(format!(
            "invalid image `{image}`: use an image reference such as pytorch:2.4 or registry.example:5000/team/img:tag"
        )))
    }
}

/// The name Docker lists an image under, for comparing a job's image with what nodes have:
/// `busybox` is `busybox:latest`, and Docker Hub's `docker.io/library/` prefix is dropped.
pub fn image_key(image: &str) -> String {
    if image == crate::protocol::ANY_IMAGE {
        return image.to_string();
    }
    let s = image.strip_prefix("docker.io/").unwrap_or(image);
    let s = s.strip_prefix("library/").unwrap_or(s);
    let last = s.rsplit('/').next().unwrap_or(s);
    if s.contains('@') || last.contains(':') { s.to_string() } else { format!("{s}:latest") }
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

/// The most bytes of environment (`NAME=value\0` for `env` and `submit_env` together) a job
/// may carry: far more than a login shell's, far less than the kernel's `ARG_MAX`.
pub const MAX_ENV_BYTES: usize = 256 * 1024;

/// The uids a node gives berth users without an Unix account there, by default (agents'
/// `--user-map submitter` and `range`): the first, and how many. Agents use it, and the
/// manager and the CLI say from it which uid a job will run as.
pub const DEFAULT_UID_RANGE: (u32, u32) = (200_000, 100_000);

/// The Unix identity that submitted a job, vouched for by the manager's host kernel
/// (`SO_PEERCRED` on the manager's unix socket), never taken from what a client says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
pub struct UnixId {
    pub uid: u32,
    pub gid: u32,
}

/// The most kernels one job may run on one node.
pub const MAX_KERNELS: u32 = 64;

/// The most tasks per kernel (`tasks_per_node`).
pub const MAX_TASKS_PER_NODE: u32 = 1024;

impl JobSpec {
    /// A spec running `command` with default resources.
    pub fn command<S: Into<String>>(command: impl IntoIterator<Item = S>) -> Self {
        Self {
            name: None,
            command: command.into_iter().map(Into::into).collect(),
            resources: ResourceRequest::default(),
            nodes: 1,
            kernels: 1,
            time_limit_secs: None,
            priority: 0,
            queue: None,
            env: BTreeMap::new(),
            submit_env: BTreeMap::new(),
            workdir: None,
            submit_dir: None,
            numa: NumaPolicy::default(),
            requeue: false,
            preemptible: false,
            project: None,
            shared: false,
            image: None,
            mounts: Vec::new(),
            folders: Vec::new(),
            code: None,
            datasets: Vec::new(),
            apps: Vec::new(),
            tty: false,
            stdin: false,
            environment: None,
            dependency: None,
            begin_at: None,
            hold: false,
            array: None,
            array_task: None,
            tasks_per_node: 1,
            gpus_per_task: None,
            launch: Launch::Every,
            output: crate::output::OutputFiles::default(),
            signal: None,
            constraint: None,
            exclusive: false,
            qos: None,
            replica_of: None,
        }
    }

    /// Whether kernel `index` only holds its node (a [`Launch::First`] job's kernels past 0).
    pub fn holds_only(&self, index: u32) -> bool {
        self.launch == Launch::First && index > 0
    }

    /// Whether the main kernel's input and output go through the agent (`tty` or `stdin`),
    /// so that clients can attach to it.
    pub fn interactive(&self) -> bool {
        self.tty || self.stdin
    }

    /// An interactive session (it serves apps, or clients attach to it: `berth run -i/-t`):
    /// its queue's `idle_timeout` and `max_session` apply to it.
    pub fn is_session(&self) -> bool {
        self.replica_of.is_none() && (!self.apps.is_empty() || self.interactive())
    }

    /// Whether the job waits for something besides resources: a begin time or other jobs.
    pub fn has_start_conditions(&self) -> bool {
        self.dependency.is_some() || self.begin_at.is_some() || self.array.is_some()
    }

    /// Kernels of the job in all: nodes × kernels per node.
    pub fn kernel_count(&self) -> u32 {
        self.nodes.max(1).saturating_mul(self.kernels.max(1))
    }

    /// The queue the job goes to.
    pub fn queue_name(&self) -> &str {
        self.queue.as_deref().unwrap_or(crate::DEFAULT_QUEUE)
    }

    /// Checks what can be checked without knowing the cluster.
    pub fn validate(&self) -> Result<(), SpecError> {
        let bad = |m: &str| Err(SpecError(m.to_string()));
        if self.command.is_empty() || self.command[0].trim().is_empty() {
            return bad("empty command: give the program to run after `--`, e.g. `berth submit -- python train.py`");
        }
        if self.command.iter().any(|a| a.contains('\0')) {
            return bad("command arguments must not contain NUL bytes");
        }
        let r = &self.resources;
        if r.cpu_milli == 0 {
            return bad("cpus must be greater than zero");
        }
        if r.mem_bytes == 0 {
            return bad("memory must be greater than zero");
        }
        // The same maxima as the parsers, for specs that come as JSON: a value past them
        // would wrap in the conversions downstream (milliseconds in i64, sums over kernels).
        use crate::quantity::{MAX_DURATION_SECS, MAX_MEM_BYTES, MAX_MILLI};
        if r.cpu_milli > MAX_MILLI || r.gpu_milli > MAX_MILLI {
            return bad(&format!("cpus and gpus must be at most {} (in thousandths: {MAX_MILLI})", MAX_MILLI / 1000));
        }
        if r.mem_bytes > MAX_MEM_BYTES {
            return bad(&format!("memory must be at most {MAX_MEM_BYTES} bytes (1 EiB)"));
        }
        if self.time_limit_secs.is_some_and(|t| t > MAX_DURATION_SECS) {
            return bad(&format!("time limit must be at most {MAX_DURATION_SECS}s (36500d, 100 years)"));
        }
        if r.gpu_milli > 1000 && !r.gpu_milli.is_multiple_of(1000) {
            return bad("a request above one GPU must be a whole number of GPUs (fractions share a single GPU)");
        }
        if self.nodes == 0 {
            return bad("nodes must be at least 1");
        }
        if self.kernels == 0 || self.kernels > MAX_KERNELS {
            return bad(&format!("kernels must be between 1 and {MAX_KERNELS}"));
        }
        if self.kernels > 1 && self.nodes > 1 {
            return bad("--kernels N runs N kernels on one node and cannot be combined with --nodes M yet: \
                 use --nodes 1 --kernels N (containers on one node), or --nodes M (one kernel per node)");
        }
        if self.kernels > 1 && self.image.is_none() {
            return bad("--kernels needs --image: several kernels of one node run as containers on a private network \
                 where they reach each other as main, sub1, ...; add --image IMAGE, or use --nodes N for one \
                 process kernel per node");
        }
        if self.exclusive && self.kernels > 1 {
            return bad("--exclusive gives each kernel a whole node: drop --kernels (or --exclusive)");
        }
        if let Some(q) = &self.qos
            && !valid_name(q)
        {
            return bad(&format!("invalid qos name `{q}`: use 1-64 letters, digits, `-`, `_` or `.`"));
        }
        if self.tasks_per_node == 0 || self.tasks_per_node > MAX_TASKS_PER_NODE {
            return bad(&format!("tasks per node must be between 1 and {MAX_TASKS_PER_NODE}"));
        }
        if self.time_limit_secs == Some(0) {
            return bad("time limit must be greater than zero");
        }
        if let Some(n) = &self.name
            && (n.len() > 200 || n.chars().any(|c| c.is_control()))
        {
            return bad("name must be at most 200 characters with no control characters");
        }
        for (k, v) in self.env.iter().chain(&self.submit_env) {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return bad(&format!("invalid environment variable name `{k}`: use NAME=value"));
            }
            if v.contains('\0') {
                return bad(&format!("environment variable `{k}` holds a NUL byte"));
            }
        }
        self.validate_folders()?;
        crate::dataset::validate(&self.datasets)?;
        if let Some(d) = &self.dependency {
            d.validate()?;
        }
        if let Some(a) = &self.array {
            a.validate()?;
            if self.is_session() {
                return bad("an array's tasks run unattended: drop --array, or -i/-t/--app/--jupyter");
            }
        }
        if let Some(g) = self.gpus_per_task {
            let whole = if self.resources.gpu_milli >= 1000 { self.resources.gpu_milli / 1000 } else { 0 };
            if g == 0 || u64::from(g) * u64::from(self.tasks_per_node) > whole {
                return bad(&format!(
                    "--gpus-per-task {g} with {} task(s) per node needs {} whole GPUs per kernel, and the job asks \
                     for {}: ask for --gpus {} or fewer GPUs per task",
                    self.tasks_per_node,
                    u64::from(g) * u64::from(self.tasks_per_node),
                    crate::quantity::format_gpu_milli(self.resources.gpu_milli),
                    u64::from(g) * u64::from(self.tasks_per_node)
                ));
            }
        }
        if let Some(s) = &self.signal {
            s.validate()?;
            if self.image.is_some() {
                return bad(
                    "--signal is for process jobs: berth cannot signal a container's steps yet; drop --signal \
                     (or --image)",
                );
            }
        }
        if let Some(c) = &self.code {
            c.validate()?;
            if self.workdir.is_some() {
                return bad("a job with code runs in a fresh copy of it: drop --workdir (or --code)");
            }
            if self.image.is_some() {
                return bad("--code is for process jobs: put the code in the image, or upload it to a folder \
                     (berth upload) and mount that (--folder)");
            }
        }
        let env_bytes: usize = self.env.iter().chain(&self.submit_env).map(|(k, v)| k.len() + v.len() + 2).sum();
        if env_bytes > MAX_ENV_BYTES {
            return bad(&format!(
                "the job's environment is {} KiB, over the limit of {} KiB: export fewer variables \
                 (`--export NONE`, or `--export NAME,...` for the ones the job needs)",
                env_bytes.div_ceil(1024),
                MAX_ENV_BYTES / 1024
            ));
        }
        if let Some(q) = &self.queue
            && (q.is_empty() || !q.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        {
            return bad("queue names use letters, digits, `-` and `_`");
        }
        if let Some(w) = &self.workdir
            && !w.starts_with('/')
        {
            return bad("workdir must be an absolute path");
        }
        if let Some(d) = &self.submit_dir
            && !d.starts_with('/')
        {
            return bad("submit_dir must be an absolute path (the directory the job was submitted from)");
        }
        if let Some(p) = &self.project
            && !valid_name(p)
        {
            return bad(&format!("invalid project name `{p}`: use 1-64 letters, digits, `-`, `_` or `.`"));
        }
        if self.shared && self.project.is_none() {
            return bad("a shared job needs a project: add --project NAME (the project whose members may see it)");
        }
        if let Some(image) = &self.image {
            validate_image(image)?;
        }
        if !self.mounts.is_empty() && self.image.is_none() {
            return bad("mounts need an image (--image): a process job sees the node's file system already");
        }
        for m in &self.mounts {
            m.validate()?;
        }
        crate::app::check_apps(&self.apps).map_err(SpecError)?;
        self.output.validate()?;
        if self.output.has_files() && self.interactive() {
            return bad("output files are for batch jobs: drop --output-file/--error-file, or -i/-t (whose output \
                 goes to the terminal)");
        }
        if let Some(env) = &self.environment {
            if self.image.is_some() {
                return bad("a job with an image cannot have an environment: install the packages in the image \
                     (or drop --image to run with the environment as a process job)");
            }
            env.validate().map_err(|e| SpecError(e.0))?;
        }
        Ok(())
    }
}

/// The role of kernel `index` of a job: `main` for 0, `sub1`, `sub2`, ... for the others
/// (`BERTH_CLUSTER_ROLE`, and the host name of a container on its job's network).
pub fn kernel_role(index: u32) -> String {
    if index == 0 { "main".into() } else { format!("sub{index}") }
}

/// Whether `s` is a valid user or project name: 1-64 letters, digits, `-`, `_` or `.`.
pub fn valid_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// A spec that can never be valid, with the reason and the fix.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{0}")]
pub struct SpecError(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_and_launch_default_and_are_checked() {
        let s: JobSpec = serde_json::from_str(r#"{"command":["x"]}"#).unwrap();
        assert_eq!((s.tasks_per_node, s.launch), (1, Launch::Every));
        assert!(!s.holds_only(1));
        let s: JobSpec =
            serde_json::from_str(r#"{"command":["x"],"nodes":2,"tasks_per_node":4,"launch":"first"}"#).unwrap();
        assert_eq!((s.tasks_per_node, s.launch), (4, Launch::First));
        assert!(!s.holds_only(0) && s.holds_only(1), "kernel 0 runs the command, the others hold");
        assert!(s.validate().is_ok());
        for bad in [0, MAX_TASKS_PER_NODE + 1] {
            let mut b = s.clone();
            b.tasks_per_node = bad;
            assert!(b.validate().unwrap_err().0.contains("tasks per node must be between 1 and 1024"));
        }
        assert!(serde_json::from_str::<JobSpec>(r#"{"command":["x"],"launch":"some"}"#).is_err());
    }

    #[test]
    fn output_files_are_checked_and_left_out_when_unset() {
        let mut s = JobSpec::command(["x"]);
        assert!(!serde_json::to_string(&s).unwrap().contains("output"), "unset: not sent");
        s.output.stdout = Some("out/%x-%j.out".into());
        assert!(s.validate().is_ok());
        let back: JobSpec = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back.output, s.output);
        s.output.stderr = Some("err-%q".into());
        assert!(s.validate().unwrap_err().0.contains("unknown pattern `%q`"));
        s.output.stderr = None;
        s.tty = true;
        assert!(s.validate().unwrap_err().0.contains("output files are for batch jobs"));
    }

    #[test]
    fn gpus_per_task_needs_whole_gpus_for_every_task() {
        let mut s = JobSpec::command(["true"]);
        s.resources.gpu_milli = 2000;
        s.tasks_per_node = 2;
        s.gpus_per_task = Some(1);
        assert!(s.validate().is_ok());
        s.gpus_per_task = Some(2);
        assert!(s.validate().unwrap_err().0.contains("needs 4 whole GPUs per kernel"));
        s.resources.gpu_milli = 500;
        s.gpus_per_task = Some(1);
        s.tasks_per_node = 1;
        assert!(s.validate().is_err(), "a fraction is no GPU of its own");
    }

    #[test]
    fn validate_rejects_bad_specs_with_a_fix() {
        assert!(JobSpec::command(["true"]).validate().is_ok());
        let e = JobSpec::command(Vec::<String>::new()).validate().unwrap_err();
        assert!(e.0.contains("empty command"));
        let mut s = JobSpec::command(["x"]);
        s.resources.gpu_milli = 1500;
        assert!(s.validate().is_err());
        let mut s = JobSpec::command(["x"]);
        s.workdir = Some("rel".into());
        assert!(s.validate().unwrap_err().0.contains("absolute"));
    }

    #[test]
    fn a_json_spec_past_the_parsers_maxima_is_refused() {
        let mut s = JobSpec::command(["x"]);
        s.time_limit_secs = Some(u64::MAX);
        assert!(s.validate().unwrap_err().0.contains("at most"));
        s.time_limit_secs = Some(crate::MAX_DURATION_SECS);
        assert!(s.validate().is_ok());
        s.resources.mem_bytes = u64::MAX;
        assert!(s.validate().unwrap_err().0.contains("memory must be at most"));
        let mut s = JobSpec::command(["x"]);
        s.resources.cpu_milli = u64::MAX;
        assert!(s.validate().unwrap_err().0.contains("cpus and gpus must be at most"));
    }

    #[test]
    fn images_and_mounts() {
        let mut s = JobSpec::command(["python", "train.py"]);
        s.image = Some("registry.example:5000/team/pytorch:2.4".into());
        s.mounts.push("/data/imagenet:/data".parse().unwrap());
        assert!(s.validate().is_ok());
        assert!(!s.mounts[0].rw, "read-only by default");
        assert!("/scratch:/scratch:rw".parse::<Mount>().unwrap().rw);
        assert!("/a:/b:xx".parse::<Mount>().unwrap_err().0.contains("HOST_PATH:CONTAINER_PATH"));
        assert!("data:/data".parse::<Mount>().unwrap_err().0.contains("absolute"));
        assert!("/data/../etc:/x".parse::<Mount>().is_err());
        assert_eq!(image_key("busybox"), "busybox:latest");
        assert_eq!(image_key("docker.io/library/busybox:1"), "busybox:1");
        assert_eq!(image_key("reg:5000/team/img"), "reg:5000/team/img:latest");
        assert_eq!(image_key("img@sha256:ab"), "img@sha256:ab");
        s.image = Some("bad image".into());
        assert!(s.validate().unwrap_err().0.contains("invalid image"));
        s.image = None;
        assert!(s.validate().unwrap_err().0.contains("need an image"));
    }

    #[test]
    fn kernels_need_an_image_and_one_node() {
        let mut s = JobSpec::command(["python", "train.py"]);
        s.kernels = 3;
        assert!(s.validate().unwrap_err().0.starts_with("--kernels needs --image: "));
        s.image = Some("pytorch:2.4".into());
        assert!(s.validate().is_ok());
        assert_eq!(s.kernel_count(), 3);
        s.nodes = 2;
        assert!(s.validate().unwrap_err().0.contains("cannot be combined with --nodes"));
        s.nodes = 1;
        s.kernels = 0;
        assert!(s.validate().is_err());
        // Old rows and clients without the field mean one kernel per node.
        let spec: JobSpec = serde_json::from_str(r#"{"command":["x"]}"#).unwrap();
        assert_eq!(spec.kernels, 1);
        assert!(!serde_json::to_string(&spec).unwrap().contains("kernels"));
    }

    #[test]
    fn lifecycle_edges() {
        use JobState::*;
        assert!(Pending.can_become(Scheduled));
        assert!(Pending.can_become(Cancelled));
        assert!(!Pending.can_become(Running));
        assert!(Pending.can_become(Failed), "a job array ends with its tasks");
        assert!(!Pending.can_become(Timeout));
        assert!(Running.can_become(Succeeded));
        assert!(Running.can_become(Timeout));
        assert!(Scheduled.can_become(Pending));
        assert!(Running.can_become(Pending), "requeue on node loss");
        assert!(!Succeeded.can_become(Running));
        assert!(!Cancelled.can_become(Cancelled));
        assert_eq!("running".parse::<JobState>().unwrap(), Running);
    }
}
