//! The job flags shared by `berth submit`, job files and `#BERTH` script directives: one clap
//! definition, so a directive is read exactly like the same flag on the command line.
//!
//! Every field is optional so that sources can be layered (job file or `#SBATCH`, then
//! `#BERTH`, then the command line) and only what the user gave overrides what is below.

use std::collections::BTreeMap;
use std::path::Path;

use berth_model::app::{AppKind, AppSpec};
use berth_model::{JobSpec, NumaPolicy, ResourceRequest};
use clap::{Args, ValueEnum};

/// Resource and scheduling flags of a job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Args)]
pub struct SpecFlags {
    /// CPUs per node, e.g. 2 or 0.5 [default: 1]
    #[arg(long, allow_hyphen_values = true, value_name = "N", value_parser = berth_model::parse_cpus, help_heading = "Resources")]
    pub cpus: Option<u64>,

    /// Memory per node [default: 1GiB]. A unit is required: 4GiB, 4Gi and 4G (as in Slurm) mean
    /// 4×2^30 bytes; 4GB means 4×10^9 bytes; also B, KiB/K, MiB/M, TiB/T, kB, MB, TB
    #[arg(long, allow_hyphen_values = true, value_name = "SIZE", value_parser = berth_model::parse_mem, help_heading = "Resources")]
    pub mem: Option<u64>,

    /// GPUs per node: a fraction below one shares a GPU (0.5), otherwise whole GPUs (1, 2)
    #[arg(long, allow_hyphen_values = true, value_name = "N", value_parser = berth_model::parse_gpus, help_heading = "Resources")]
    pub gpus: Option<u64>,

    /// Nodes the job spans, one kernel per node [default: 1]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), help_heading = "Resources")]
    pub nodes: Option<u32>,

    /// Kernels on the node, each with the resources above: containers of one job (needs
    /// --image) on a private network, reaching each other as main, sub1, ... [default: 1]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=berth_model::job::MAX_KERNELS as i64), help_heading = "Resources")]
    pub kernels: Option<u32>,

    /// How CPUs and memory sit relative to NUMA nodes [default: prefer-local]
    #[arg(long, value_name = "POLICY", value_enum, help_heading = "Resources")]
    pub numa: Option<NumaArg>,

    /// Wall-clock limit: 90s, 30m, 2h, 1d, 1h30m, HH:MM:SS or D-HH:MM:SS (a bare number is seconds)
    #[arg(long, allow_hyphen_values = true, value_name = "DURATION", value_parser = berth_model::parse_duration, help_heading = "Scheduling")]
    pub time_limit: Option<u64>,

    /// Job name shown by `berth ps` [default: the program or script name]
    #[arg(long, value_name = "NAME", help_heading = "Scheduling")]
    pub name: Option<String>,

    /// Priority: higher runs first; negative values are allowed [default: 0]
    #[arg(long, value_name = "P", allow_negative_numbers = true, help_heading = "Scheduling")]
    pub priority: Option<i32>,

    /// Queue to submit to [default: default]
    #[arg(long, value_name = "QUEUE", help_heading = "Scheduling")]
    pub queue: Option<String>,

    /// Put the job back in the queue if its node is lost
    #[arg(long, help_heading = "Scheduling")]
    pub requeue: bool,

    /// Let a higher-priority job stop this one when the queue has preemption on (the job is
    /// then requeued or cancelled, per the queue)
    #[arg(long, help_heading = "Scheduling")]
    pub preemptible: bool,

    /// A job array: one task per index, each a job of its own with SLURM_ARRAY_TASK_ID, as in
    /// Slurm: 0-99, 1-100:2, 1,5,9; %N runs at most N at once (0-999%10)
    #[arg(long, value_name = "INDICES[%N]", value_parser = parse_array, help_heading = "Scheduling")]
    pub array: Option<berth_model::ArraySpec>,

    /// Start only once other jobs got where this says, in Slurm's syntax: afterok:ID[:ID...],
    /// afterany:ID, afternotok:ID, after:ID[+MINUTES], singleton; `,` needs all, `?` any one;
    /// an ID of ARRAY_INDEX (12_7) names one task of a job array
    #[arg(long, value_name = "DEPENDENCY", value_parser = parse_dependency, help_heading = "Scheduling")]
    pub dependency: Option<berth_model::Dependency>,

    /// Do not start before this time: 2026-12-01T09:00, 2026-12-01, 16:00 (today, or tomorrow
    /// once past), now+2hours, tomorrow, midnight, noon
    #[arg(long, value_name = "TIME", value_parser = crate::when::parse_begin, help_heading = "Scheduling")]
    pub begin: Option<jiff::Timestamp>,

    /// Submit the job held: it waits, not scheduled, until `berth release JOB` (Slurm's
    /// sbatch --hold)
    #[arg(long, help_heading = "Scheduling")]
    pub hold: bool,

    /// Send signal SIG TIME seconds (default 60) before the time limit, as Slurm does: to the
    /// job's steps (what srun runs), or with B: to the batch shell only; e.g. USR2@90, B:USR1
    #[arg(long, value_name = "[B:]SIG[@TIME]", value_parser = parse_signal, help_heading = "Scheduling")]
    pub signal: Option<berth_model::SignalSpec>,

    /// Project the job is accounted to (quotas, fair share, usage); you must be a member
    /// [default: your own account]
    #[arg(long, value_name = "PROJECT", help_heading = "Scheduling")]
    pub project: Option<String>,

    /// Let the members of the job's project see it (ps, show, logs)
    #[arg(long, requires = "project", help_heading = "Scheduling")]
    pub share: bool,

    /// Set an environment variable for the job (repeatable); it beats the exported one
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = parse_env, help_heading = "Environment")]
    pub env: Vec<(String, String)>,

    /// Which of your environment variables the job gets, as in Slurm: ALL, NONE, or
    /// NAME[=value],... (only those; after ALL, added to everything). berth's own (BERTH_*,
    /// your token) never go. Container jobs get only the names listed [default: ALL]
    #[arg(long, value_name = "ALL|NONE|NAME[=VALUE],...", value_parser = parse_export, help_heading = "Environment")]
    pub export: Option<crate::export::Export>,

    /// Working directory on the node (a relative one is taken from the current directory)
    /// [default: the directory you submit from; container jobs: the image's]
    #[arg(long, value_name = "DIR", alias = "chdir", conflicts_with = "job_dir", help_heading = "Environment")]
    pub workdir: Option<String>,

    /// Run in a fresh directory of the job's own on the node instead of where you submit
    /// from (for directories the nodes cannot see)
    #[arg(long, help_heading = "Environment")]
    pub job_dir: bool,

    /// Python version of the job's environment, built with uv on each node and reused by every
    /// job with the same inputs (process jobs only), e.g. 3.11
    #[arg(long, value_name = "VERSION", help_heading = "Python environment")]
    pub python: Option<String>,

    /// A pip requirements file the environment installs (read at submit; a relative path is
    /// taken from the current directory, in a job file from the file's)
    #[arg(
        long,
        value_name = "FILE",
        requires = "python",
        conflicts_with = "pyproject",
        help_heading = "Python environment"
    )]
    pub requirements: Option<String>,

    /// A pyproject.toml whose dependencies the environment installs (instead of --requirements)
    #[arg(long, value_name = "FILE", requires = "python", help_heading = "Python environment")]
    pub pyproject: Option<String>,

    /// Run the job as containers of this image through Docker (e.g. pytorch:2.4); the job
    /// waits until a node has the image (`berth images`)
    #[arg(long, value_name = "IMAGE", help_heading = "Containers")]
    pub image: Option<String>,

    /// Mount a host path into the container, read-only unless `:rw` (repeatable); the node's
    /// admin allows paths with `berth agent --allow-mount`
    #[arg(long = "mount", value_name = "HOST:CONTAINER[:rw]", value_parser = parse_mount, help_heading = "Containers")]
    pub mounts: Vec<berth_model::Mount>,

    /// Mount a data folder (`berth folder`) at PATH [default: /data/NAME], read-only with
    /// `:ro` (repeatable); NAME may be PROJECT/NAME
    #[arg(long = "folder", value_name = "NAME[:PATH][:ro]", value_parser = parse_folder, help_heading = "Data")]
    pub folders: Vec<berth_model::folder::FolderMount>,

    /// Prefetch the files under PREFIX of BUCKET's origin into the node's dataset cache before
    /// the job runs (repeatable); the job gets BERTH_DATASET_PATH and BERTH_DATASET_HTTP_CACHE
    /// for PFIO
    #[arg(long = "dataset", value_name = "BUCKET/PREFIX", value_parser = parse_dataset, help_heading = "Data")]
    pub datasets: Vec<berth_model::dataset::DatasetRef>,

    /// Run the job in a fresh copy of DIR (honouring .gitignore and .berthignore), sent to
    /// the cluster by content: files it already has are not sent again
    #[arg(long, value_name = "DIR", help_heading = "Data")]
    pub code: Option<String>,

    /// Serve a web app listening on PORT in the job's main kernel through the app proxy
    /// (repeatable); `berth open ID NAME` opens it. It gets `/apps/ID/NAME/...` paths (its base
    /// URL is in $BERTH_APP_<NAME>_BASE_URL); `,strip`: `/...`, for a server that knows no base URL
    #[arg(long = "app", value_name = "NAME=PORT[,strip]", value_parser = berth_model::app::parse_app, help_heading = "Apps")]
    pub apps: Vec<AppSpec>,

    /// Start JupyterLab in the job (as its command when none is given); `berth open ID jupyter`
    /// opens it, berth does the login
    #[arg(long, help_heading = "Apps")]
    pub jupyter: bool,

    /// Start TensorBoard on the logs in DIR in the job; `berth open ID tensorboard` opens it
    #[arg(long, value_name = "DIR", help_heading = "Apps")]
    pub tensorboard: Option<String>,

    /// Tasks per node (Slurm's --ntasks-per-node): how many `srun` starts in each kernel by
    /// default; the kernel's resources are for all of them [default: 1]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=berth_model::job::MAX_TASKS_PER_NODE as i64), help_heading = "Tasks")]
    pub tasks_per_node: Option<u32>,

    /// GPUs of its own for each srun task (Slurm's --gpus-per-task): whole GPUs, at most the
    /// kernel's (--gpus) over its tasks
    #[arg(long, value_name = "G", value_parser = clap::value_parser!(u32).range(1..=1024), help_heading = "Tasks")]
    pub gpus_per_task: Option<u32>,

    /// Which kernels run the command: every one (each with its rank), or only the first, the
    /// others holding their nodes for `srun` (a Slurm batch script; the default for scripts
    /// with #SBATCH lines) [default: every]
    #[arg(long, value_name = "MODE", value_enum, help_heading = "Tasks")]
    pub launch: Option<LaunchArg>,

    /// Write the job's stdout, and its stderr unless --error-file, to FILE instead of berth's
    /// logs (Slurm's --output), e.g. 'logs/%x-%j.out'
    ///
    /// Relative to the job's working directory. Slurm's patterns are expanded on the node: %j
    /// job id, %A array's job id, %a array index, %x job name, %u user, %N node, %% a %, with a
    /// zero-padding width (%5a). The job's user opens it, on the node; its directory must exist
    #[arg(long, value_name = "FILE", value_parser = parse_output_file, help_heading = "Output")]
    pub output_file: Option<String>,

    /// Write the job's stderr to FILE (Slurm's --error), with --output-file's patterns
    #[arg(long, value_name = "FILE", value_parser = parse_output_file, help_heading = "Output")]
    pub error_file: Option<String>,

    /// Empty the output files first (truncate, Slurm's default) or add to them (append)
    #[arg(long, value_name = "append|truncate", value_parser = parse_open_mode, help_heading = "Output")]
    pub open_mode: Option<berth_model::output::OpenMode>,

    /// `--constraint`, `--exclusive`, `--qos`.
    #[command(flatten)]
    pub placement: crate::placement::PlacementFlags,
}

/// `--output-file`/`--error-file`: a path template whose patterns berth knows.
pub fn parse_output_file(s: &str) -> Result<String, String> {
    berth_model::output::Template::parse(s).map(|_| s.to_string()).map_err(|e| e.0)
}

/// `--open-mode append|truncate`.
pub fn parse_open_mode(s: &str) -> Result<berth_model::output::OpenMode, String> {
    s.parse().map_err(|e: berth_model::SpecError| e.0)
}

/// `--launch` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LaunchArg {
    /// Every kernel runs the command
    Every,
    /// Only kernel 0 runs it; the others hold their nodes for srun
    First,
}

impl From<LaunchArg> for berth_model::Launch {
    fn from(l: LaunchArg) -> Self {
        match l {
            LaunchArg::Every => berth_model::Launch::Every,
            LaunchArg::First => berth_model::Launch::First,
        }
    }
}

impl From<berth_model::Launch> for LaunchArg {
    fn from(l: berth_model::Launch) -> Self {
        match l {
            berth_model::Launch::Every => LaunchArg::Every,
            berth_model::Launch::First => LaunchArg::First,
        }
    }
}

/// `--mount SRC:DST[:ro|:rw]`.
fn parse_array(s: &str) -> Result<berth_model::ArraySpec, String> {
    s.parse().map_err(|e: berth_model::SpecError| e.0)
}

fn parse_dependency(s: &str) -> Result<berth_model::Dependency, String> {
    s.parse().map_err(|e: berth_model::SpecError| e.0)
}

/// `--signal [{R|B}:]SIG[@TIME]`.
pub fn parse_signal(s: &str) -> Result<berth_model::SignalSpec, String> {
    s.parse().map_err(|e: berth_model::SpecError| e.0)
}

pub fn parse_mount(s: &str) -> Result<berth_model::Mount, String> {
    s.parse().map_err(|e: berth_model::SpecError| e.0)
}

/// `--folder NAME[:PATH][:ro|:rw]`.
pub fn parse_folder(s: &str) -> Result<berth_model::folder::FolderMount, String> {
    s.parse().map_err(|e: berth_model::SpecError| e.0)
}

/// `--dataset BUCKET/PREFIX`.
pub fn parse_dataset(s: &str) -> Result<berth_model::dataset::DatasetRef, String> {
    s.parse().map_err(|e: berth_model::SpecError| e.0)
}

/// `--export ALL|NONE|NAME[=value],...`.
pub fn parse_export(s: &str) -> Result<crate::export::Export, String> {
    s.parse()
}

/// `--numa` values, named as in job files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum NumaArg {
    /// One NUMA node (the GPUs' node first) when it fits, spill otherwise
    PreferLocal,
    /// Only place when everything fits on one NUMA node
    RequireLocal,
    /// Like require-local, and the GPUs must sit on that node too
    SingleNode,
    /// Spread CPUs and memory evenly across NUMA nodes
    Interleave,
    /// Any CPUs, any memory node
    None,
}

impl From<NumaArg> for NumaPolicy {
    fn from(n: NumaArg) -> Self {
        match n {
            NumaArg::PreferLocal => NumaPolicy::PreferLocal,
            NumaArg::RequireLocal => NumaPolicy::RequireLocal,
            NumaArg::SingleNode => NumaPolicy::SingleNode,
            NumaArg::Interleave => NumaPolicy::Interleave,
            NumaArg::None => NumaPolicy::None,
        }
    }
}

impl From<NumaPolicy> for NumaArg {
    fn from(n: NumaPolicy) -> Self {
        match n {
            NumaPolicy::PreferLocal => NumaArg::PreferLocal,
            NumaPolicy::RequireLocal => NumaArg::RequireLocal,
            NumaPolicy::SingleNode => NumaArg::SingleNode,
            NumaPolicy::Interleave => NumaArg::Interleave,
            NumaPolicy::None => NumaArg::None,
        }
    }
}

/// `--env NAME=VALUE`. The value may itself contain `=`; only the first one splits.
pub fn parse_env(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        Some(_) => Err(format!("`{s}` has an empty name: use NAME=value")),
        None => Err(format!("`{s}` has no `=`: use NAME=value")),
    }
}

impl SpecFlags {
    /// `self` with every flag given in `over` replacing it. Environment variables merge, the
    /// upper layer winning per name; `requeue` and `preemptible` are set when either layer sets them.
    pub fn overlay(self, over: SpecFlags) -> SpecFlags {
        let mut env = self.env;
        env.extend(over.env);
        // The upper layer's choice of directory wins whichever way it goes.
        let job_dir = over.job_dir || (self.job_dir && over.workdir.is_none());
        let env_file = over.requirements.is_some() || over.pyproject.is_some();
        SpecFlags {
            cpus: over.cpus.or(self.cpus),
            mem: over.mem.or(self.mem),
            gpus: over.gpus.or(self.gpus),
            nodes: over.nodes.or(self.nodes),
            kernels: over.kernels.or(self.kernels),
            numa: over.numa.or(self.numa),
            time_limit: over.time_limit.or(self.time_limit),
            name: over.name.or(self.name),
            priority: over.priority.or(self.priority),
            queue: over.queue.or(self.queue),
            requeue: over.requeue || self.requeue,
            preemptible: over.preemptible || self.preemptible,
            project: over.project.or(self.project),
            dependency: over.dependency.or(self.dependency),
            array: over.array.or(self.array),
            begin: over.begin.or(self.begin),
            hold: over.hold || self.hold,
            signal: over.signal.or(self.signal),
            share: over.share || self.share,
            env,
            export: over.export.or(self.export),
            workdir: if over.job_dir { None } else { over.workdir.or(self.workdir) },
            job_dir,
            python: over.python.or(self.python),
            // One file or the other: the upper layer's choice replaces both.
            requirements: if env_file { over.requirements } else { self.requirements },
            pyproject: if env_file { over.pyproject } else { self.pyproject },
            image: over.image.or(self.image),
            mounts: if over.mounts.is_empty() { self.mounts } else { over.mounts },
            folders: if over.folders.is_empty() { self.folders } else { over.folders },
            datasets: if over.datasets.is_empty() { self.datasets } else { over.datasets },
            code: over.code.or(self.code),
            apps: if over.apps.is_empty() { self.apps } else { over.apps },
            jupyter: over.jupyter || self.jupyter,
            tensorboard: over.tensorboard.or(self.tensorboard),
            tasks_per_node: over.tasks_per_node.or(self.tasks_per_node),
            gpus_per_task: over.gpus_per_task.or(self.gpus_per_task),
            launch: over.launch.or(self.launch),
            output_file: over.output_file.or(self.output_file),
            error_file: over.error_file.or(self.error_file),
            open_mode: over.open_mode.or(self.open_mode),
            placement: self.placement.overlay(over.placement),
        }
    }

    /// Makes a relative `workdir` absolute against `base` (the current directory for flags,
    /// the file's directory for job files), since the node cannot know where we stood.
    /// Relative environment files are resolved against `base` too.
    pub fn resolve_workdir(&mut self, base: &Path) {
        if let Some(c) = self.code.as_ref().filter(|c| !Path::new(c).is_absolute()) {
            self.code = Some(base.join(c).to_string_lossy().into_owned());
        }
        for file in [&mut self.requirements, &mut self.pyproject].into_iter().flatten() {
            if !Path::new(file).is_absolute() {
                *file = base.join(&file).to_string_lossy().into_owned();
            }
        }
        if self.image.is_some() {
            // A path inside the container, not on the submitting machine.
            return;
        }
        let relative = self.workdir.as_ref().filter(|w| !Path::new(w).is_absolute());
        if let Some(abs) = relative.map(|w| base.join(w).to_string_lossy().into_owned()) {
            self.workdir = Some(abs);
        }
    }

    /// The spec to send: these flags over berth's defaults, running `command`. Where it runs
    /// and with which environment comes from the submitter: see [`SpecFlags::submitted_from`].
    pub fn to_spec(&self, command: Vec<String>) -> JobSpec {
        let d = ResourceRequest::default();
        let (apps, presets) = self.apps_and_presets();
        let mut spec = JobSpec::command(berth_model::app::wrap_command(&presets, &command));
        spec.apps = apps;
        spec.name = self.name.clone();
        spec.resources = ResourceRequest {
            cpu_milli: self.cpus.unwrap_or(d.cpu_milli),
            mem_bytes: self.mem.unwrap_or(d.mem_bytes),
            gpu_milli: self.gpus.unwrap_or(d.gpu_milli),
        };
        spec.nodes = self.nodes.unwrap_or(1);
        spec.kernels = self.kernels.unwrap_or(1);
        spec.time_limit_secs = self.time_limit;
        spec.priority = self.priority.unwrap_or(0);
        spec.queue = self.queue.clone();
        spec.env = self.env.iter().cloned().collect::<BTreeMap<_, _>>();
        spec.workdir = self.workdir.clone();
        spec.numa = self.numa.map(Into::into).unwrap_or_default();
        spec.requeue = self.requeue;
        spec.preemptible = self.preemptible;
        spec.project = self.project.clone();
        spec.shared = self.share;
        spec.image = self.image.clone();
        spec.mounts = self.mounts.clone();
        spec.folders = self.folders.clone();
        spec.datasets = self.datasets.clone();
        spec.dependency = self.dependency.clone();
        spec.array = self.array.clone();
        spec.begin_at = self.begin;
        spec.hold = self.hold;
        spec.signal = self.signal;
        spec.tasks_per_node = self.tasks_per_node.unwrap_or(1);
        spec.gpus_per_task = self.gpus_per_task;
        spec.launch = self.launch.map(Into::into).unwrap_or_default();
        spec.output = berth_model::output::OutputFiles {
            stdout: self.output_file.clone(),
            stderr: self.error_file.clone(),
            open_mode: self.open_mode.unwrap_or_default(),
        };
        self.placement.apply(&mut spec);
        spec
    }

    /// The job's Python environment: the version and the contents of its requirements or
    /// pyproject file, read now (the nodes need not see the file).
    pub fn environment(&self) -> anyhow::Result<Option<berth_model::EnvSpec>> {
        use berth_model::EnvKind;
        let Some(python) = &self.python else {
            if self.requirements.is_some() || self.pyproject.is_some() {
                anyhow::bail!(
                    "an environment needs a python version: add --python VERSION (python = \"3.11\" under \
                     [environment] in a job file)"
                );
            }
            return Ok(None);
        };
        let (kind, file) = match (&self.requirements, &self.pyproject) {
            (Some(f), _) => (EnvKind::Requirements, Some(f)),
            (None, Some(f)) => (EnvKind::Pyproject, Some(f)),
            (None, None) => (EnvKind::Requirements, None),
        };
        let contents = match file {
            None => String::new(),
            Some(f) => {
                let max = berth_model::environment::MAX_ENV_FILE_BYTES as u64;
                let len = std::fs::metadata(f).map(|m| m.len()).unwrap_or(0);
                if len > max {
                    anyhow::bail!(
                        "{f} is {} KiB, over the limit of {} KiB for an environment file: list only the \
                         direct requirements",
                        len.div_ceil(1024),
                        max / 1024
                    );
                }
                std::fs::read_to_string(f)
                    .map_err(|e| anyhow::anyhow!("cannot read the environment's {}: {f}: {e}", kind.file_name()))?
            }
        };
        Ok(Some(berth_model::EnvSpec { python: python.clone(), kind, contents }))
    }

    /// The job's apps (`--app` and the presets) and the shell lines that start the presets.
    fn apps_and_presets(&self) -> (Vec<AppSpec>, Vec<String>) {
        let mut apps = self.apps.clone();
        let mut presets = Vec::new();
        let mut preset = |name: &str, kind: AppKind, dir: Option<&str>| {
            let app = AppSpec { kind, ..AppSpec::custom(name, None) };
            presets.extend(berth_model::app::preset_line(&app, dir));
            apps.push(app);
        };
        if self.jupyter {
            preset("jupyter", AppKind::Jupyter, None);
        }
        if let Some(dir) = &self.tensorboard {
            preset("tensorboard", AppKind::Tensorboard, Some(dir));
        }
        (apps, presets)
    }

    /// Whether the flags start an app that can be the job's command.
    pub fn has_preset(&self) -> bool {
        self.jupyter || self.tensorboard.is_some()
    }

    /// Completes `spec` with where and how it was submitted, as `sbatch` does: a process job
    /// runs in `cwd` (unless `--workdir` or `--job-dir` says otherwise) with the variables of
    /// `vars` that `--export` selects; a container job runs where its image says, with only
    /// the variables `--export` names. Returns the names left out for not being UTF-8.
    pub fn submitted_from(
        &self,
        spec: &mut JobSpec,
        cwd: &Path,
        vars: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    ) -> Vec<String> {
        use crate::export::Export;
        let export = match (spec.image.is_some(), self.export.clone().unwrap_or_default()) {
            // A container has its own PATH and libraries: the host's would break it.
            (true, Export::All(items)) => Export::Only(items),
            (_, e) => e,
        };
        if spec.image.is_none() && spec.workdir.is_none() && !self.job_dir && self.code.is_none() {
            spec.workdir = Some(cwd.to_string_lossy().into_owned());
        }
        // Slurm's SLURM_SUBMIT_DIR: where the submitter was, whatever --chdir says.
        spec.submit_dir = Some(cwd.to_string_lossy().into_owned()).filter(|d| d.starts_with('/'));
        let (env, skipped) = export.resolve(vars);
        spec.submit_env = env;
        skipped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    #[command(no_binary_name = true)]
    struct P {
        #[command(flatten)]
        f: SpecFlags,
    }

    fn parse(args: &[&str]) -> Result<SpecFlags, String> {
        P::try_parse_from(args).map(|p| p.f).map_err(|e| e.to_string())
    }

    #[test]
    fn quantity_flags_use_the_model_parsers() {
        let f = parse(&["--cpus", "0.5", "--mem", "4G", "--gpus", "0.5", "--time-limit", "1h30m"]).unwrap();
        assert_eq!((f.cpus, f.mem, f.gpus, f.time_limit), (Some(500), Some(4 << 30), Some(500), Some(5400)));
        assert_eq!(parse(&["--mem", "4GB"]).unwrap().mem, Some(4_000_000_000));
        assert_eq!(parse(&["--mem", "4GiB"]).unwrap().mem, Some(4 << 30));
        assert_eq!(parse(&["--priority", "-5"]).unwrap().priority, Some(-5));
    }

    #[test]
    fn bad_values_name_the_flag() {
        let e = parse(&["--mem", "4X"]).unwrap_err();
        assert!(e.contains("invalid value '4X' for '--mem <SIZE>'"), "{e}");
        assert!(e.contains("unknown unit"), "{e}");
        let e = parse(&["--gpus", "1.5"]).unwrap_err();
        assert!(e.contains("'--gpus <N>'") && e.contains("whole number"), "{e}");
        let e = parse(&["--cpus", "0"]).unwrap_err();
        assert!(e.contains("--cpus"), "{e}");
        let e = parse(&["--time-limit", "soon"]).unwrap_err();
        assert!(e.contains("--time-limit"), "{e}");
        let e = parse(&["--env", "FOO"]).unwrap_err();
        assert!(e.contains("--env") && e.contains("`FOO` has no `=`"), "{e}");
        let e = parse(&["--nodes", "0"]).unwrap_err();
        assert!(e.contains("--nodes"), "{e}");
        let e = parse(&["--numa", "sometimes"]).unwrap_err();
        assert!(e.contains("prefer-local"), "{e}");
        let e = parse(&["--tasks-per-node", "0"]).unwrap_err();
        assert!(e.contains("--tasks-per-node"), "{e}");
        let e = parse(&["--launch", "some"]).unwrap_err();
        assert!(e.contains("every") && e.contains("first"), "{e}");
    }

    #[test]
    fn tasks_and_launch_reach_the_spec() {
        let spec = parse(&["--tasks-per-node", "4", "--launch", "first"]).unwrap().to_spec(vec!["x".into()]);
        assert_eq!((spec.tasks_per_node, spec.launch), (4, berth_model::Launch::First));
        let spec = parse(&[]).unwrap().to_spec(vec!["x".into()]);
        assert_eq!((spec.tasks_per_node, spec.launch), (1, berth_model::Launch::Every));
        let json = serde_json::to_value(&spec).unwrap();
        assert!(json.get("tasks_per_node").is_none() && json.get("launch").is_none(), "defaults are not sent");
    }

    #[test]
    fn output_files_reach_the_spec() {
        use berth_model::output::OpenMode;
        let f = parse(&["--output-file", "logs/%x-%j.out", "--error-file", "e-%5a", "--open-mode", "append"]).unwrap();
        let spec = f.to_spec(vec!["x".into()]);
        assert_eq!(spec.output.stdout.as_deref(), Some("logs/%x-%j.out"));
        assert_eq!((spec.output.stderr.as_deref(), spec.output.open_mode), (Some("e-%5a"), OpenMode::Append));
        assert!(spec.validate().is_ok());
        let e = parse(&["--output-file", "o-%q"]).unwrap_err();
        assert!(e.contains("--output-file") && e.contains("unknown pattern `%q`"), "{e}");
        let e = parse(&["--open-mode", "sometimes"]).unwrap_err();
        assert!(e.contains("append or truncate"), "{e}");
        let over = parse(&["--error-file", "b"]).unwrap();
        let f = parse(&["--output-file", "a", "--error-file", "a2"]).unwrap().overlay(over);
        assert_eq!((f.output_file.as_deref(), f.error_file.as_deref()), (Some("a"), Some("b")));
        let json = serde_json::to_value(parse(&[]).unwrap().to_spec(vec!["x".into()])).unwrap();
        assert!(json.get("output").is_none(), "no files: nothing sent");
    }

    #[test]
    fn env_values_keep_later_equals_signs() {
        assert_eq!(parse_env("A=b=c").unwrap(), ("A".into(), "b=c".into()));
        assert_eq!(parse_env("A=").unwrap(), ("A".into(), "".into()));
        assert!(parse_env("=x").is_err());
    }

    #[test]
    fn overlay_lets_the_upper_layer_win() {
        let file = parse(&["--cpus", "2", "--mem", "8GiB", "--env", "A=1", "--env", "B=1", "--requeue"]).unwrap();
        let cli = parse(&["--cpus", "4", "--env", "B=2"]).unwrap();
        let f = file.overlay(cli);
        assert_eq!(f.cpus, Some(4000));
        assert_eq!(f.mem, Some(8 << 30));
        assert!(f.requeue);
        assert!(!f.preemptible);
        assert!(parse(&["--preemptible"]).unwrap().to_spec(vec!["x".into()]).preemptible);
        let spec = f.to_spec(vec!["x".into()]);
        assert_eq!(spec.env.get("A").map(String::as_str), Some("1"));
        assert_eq!(spec.env.get("B").map(String::as_str), Some("2"));
    }

    #[test]
    fn environment_flags_need_a_version_and_one_file() {
        let e = parse(&["--requirements", "r.txt"]).unwrap_err();
        assert!(e.contains("--python"), "{e}");
        let e = parse(&["--python", "3.11", "--requirements", "r.txt", "--pyproject", "p.toml"]).unwrap_err();
        assert!(e.contains("cannot be used with"), "{e}");
        // a job file's requirements give way to the command line's pyproject
        let file = parse(&["--python", "3.11", "--requirements", "r.txt"]).unwrap();
        let cli = parse(&["--pyproject", "p.toml", "--python", "3.12"]).unwrap_or_default();
        let f = file.overlay(cli);
        assert_eq!((f.requirements, f.pyproject.as_deref()), (None, Some("p.toml")));
        let mut f = parse(&["--python", "3.11", "--requirements", "r.txt"]).unwrap();
        f.resolve_workdir(Path::new("/home/a"));
        assert_eq!(f.requirements.as_deref(), Some("/home/a/r.txt"));
        assert!(parse(&[]).unwrap().environment().unwrap().is_none());
    }

    #[test]
    fn defaults_and_workdir() {
        let mut f = parse(&["--workdir", "out"]).unwrap();
        f.resolve_workdir(Path::new("/home/a"));
        let spec = f.to_spec(vec!["x".into()]);
        assert_eq!(spec.workdir.as_deref(), Some("/home/a/out"));
        assert_eq!(spec.resources, ResourceRequest::default());
        assert_eq!(spec.nodes, 1);
        assert!(spec.env.is_empty());
        assert!(spec.validate().is_ok());
    }
}
