//! Job files (`berth submit job.toml`): a flat TOML file with the same fields as the flags.
//!
//! ```toml
//! name = "train"                      # default: the file name without .toml
//! command = ["python", "train.py"]    # or: script = "..." (run with /bin/sh -c)
//! cpus = 2                            # number or string; 0.5 is half a CPU
//! mem = "16GiB"                       # a unit is required (GiB/G binary, GB decimal)
//! gpus = 0.5                          # below one shares a GPU; 1, 2, ... whole GPUs
//! time_limit = "2h"                   # or a number of seconds
//! priority = 10
//! queue = "gpu"
//! workdir = "runs/a"                  # relative to the job file's directory; default: where
//!                                     # `berth submit` runs (job_dir = true: the job's own)
//! export = "ALL"                      # your environment: ALL, NONE or "NAME[=value],..."
//! nodes = 1
//! kernels = 2                         # containers of the job on its node (needs image)
//! numa = "prefer-local"               # require-local, single-node, interleave, none
//! requeue = true
//! signal = "B:USR1@90"               # SIG 90 s before the time limit (Slurm's --signal)
//! preemptible = true                 # a higher-priority job may stop it (queue's preemption)
//! project = "vision"                 # accounted to this project (you must be a member)
//! shared = true                      # the project's members may see it
//! image = "pytorch:2.4"              # run as containers of this image (Docker)
//! mounts = ["/data/imagenet:/data"]  # host:container[:rw], read-only by default
//! folders = ["imagenet:ro", "runs"]    # data folders: NAME[:/data/PATH][:ro]
//! code = "."                           # run in a fresh copy of this dir (relative to the file)
//! datasets = ["imagenet/train/"]       # prefetched into the node's cache: BUCKET/PREFIX
//! jupyter = true                     # start JupyterLab (the command when none is given)
//! tensorboard = "runs"               # start TensorBoard on these logs
//! tasks_per_node = 4                 # srun's tasks per kernel (Slurm's --ntasks-per-node)
//! launch = "first"                   # only kernel 0 runs the command (default: "every")
//! output_file = "logs/%x-%j.out"     # stdout (and stderr) to this file, not berth's logs
//! error_file = "logs/%x-%j.err"      # stderr to its own file (Slurm's --output, --error)
//! open_mode = "append"               # or "truncate", the default
//! constraint = "a100&ib"             # node features (Slurm's --constraint): labels' keys or KEY=VALUE
//! exclusive = true                   # whole nodes, shared with no other job
//! qos = "high"                       # a qos of the manager's config: sets the priority
//!
//! [env]
//! WANDB_MODE = "offline"
//!
//! [environment]                      # a Python environment built with uv, cached per node
//! python = "3.11"
//! requirements = "requirements.txt"  # or: pyproject = "pyproject.toml" (relative to this file)
//!
//! [apps]                             # web apps the job serves: name = port
//! web = 8000                         # or "8000,strip": the app gets `/...`, without /apps/ID/web
//! ```
//!
//! Unknown keys are errors (a typo such as `gpu = 1` must not silently run a CPU job), and
//! quantities are checked while parsing so that errors point at the line and column.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use berth_model::{NumaPolicy, QuantityError};
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

use crate::specflags::SpecFlags;

/// The file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct JobFile {
    name: Option<String>,
    command: Option<Vec<String>>,
    script: Option<String>,
    #[serde(default, deserialize_with = "de_cpus")]
    cpus: Option<u64>,
    #[serde(default, deserialize_with = "de_mem")]
    mem: Option<u64>,
    #[serde(default, deserialize_with = "de_gpus")]
    gpus: Option<u64>,
    #[serde(default, deserialize_with = "de_duration")]
    time_limit: Option<u64>,
    priority: Option<i32>,
    queue: Option<String>,
    workdir: Option<String>,
    job_dir: Option<bool>,
    export: Option<String>,
    nodes: Option<u32>,
    kernels: Option<u32>,
    numa: Option<NumaPolicy>,
    requeue: Option<bool>,
    preemptible: Option<bool>,
    project: Option<String>,
    shared: Option<bool>,
    dependency: Option<String>,
    array: Option<String>,
    begin: Option<String>,
    signal: Option<String>,
    image: Option<String>,
    #[serde(default)]
    mounts: Vec<String>,
    #[serde(default)]
    folders: Vec<String>,
    #[serde(default)]
    datasets: Vec<String>,
    code: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    jupyter: Option<bool>,
    tensorboard: Option<String>,
    #[serde(default)]
    apps: BTreeMap<String, AppPort>,
    environment: Option<EnvSection>,
    tasks_per_node: Option<u32>,
    launch: Option<berth_model::Launch>,
    #[serde(alias = "output")]
    output_file: Option<String>,
    #[serde(alias = "error")]
    error_file: Option<String>,
    open_mode: Option<String>,
    constraint: Option<String>,
    exclusive: Option<bool>,
    qos: Option<String>,
}

/// `[environment]`: the job's Python environment (docs/environments.md).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct EnvSection {
    python: Option<String>,
    requirements: Option<String>,
    pyproject: Option<String>,
}

/// What a job file contributes: flags (to be overridden by the command line) and, unless the
/// command line gives one after `--`, the command.
#[derive(Debug)]
pub struct Loaded {
    pub flags: SpecFlags,
    pub command: Option<Vec<String>>,
}

/// Reads and parses the job file at `path`.
pub fn load(path: &Path) -> anyhow::Result<Loaded> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read job file {}", path.display()))?;
    let dir = std::path::absolute(path)
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| std::path::PathBuf::from("/"));
    parse(&text, path, &dir)
}

/// Parses a job file's text; `path` names it in errors and `dir` anchors a relative workdir.
pub fn parse(text: &str, path: &Path, dir: &Path) -> anyhow::Result<Loaded> {
    let f: JobFile = toml::from_str(text).with_context(|| format!("invalid job file {}", path.display()))?;
    finish(f, path, dir)
}

/// Parses the job keys of a file that has others too (a service file, `servefile.rs`): the
/// caller takes its own keys out of `table` and leaves the rest to be read as a job file is;
/// `kind` names the file in errors ("service").
pub fn parse_table(table: toml::Table, kind: &str, path: &Path, dir: &Path) -> anyhow::Result<Loaded> {
    let f: JobFile =
        toml::Value::Table(table).try_into().with_context(|| format!("invalid {kind} file {}", path.display()))?;
    finish(f, path, dir)
}

fn finish(f: JobFile, path: &Path, dir: &Path) -> anyhow::Result<Loaded> {
    let bad = |m: &str| anyhow::anyhow!("invalid job file {}: {m}", path.display());
    let command = match (f.command, f.script) {
        (Some(_), Some(_)) => return Err(bad("give either `command` or `script`, not both")),
        (Some(c), None) => {
            if c.is_empty() {
                return Err(bad(
                    "`command` is empty: give the program and its arguments, e.g. [\"python\", \"train.py\"]",
                ));
            }
            Some(c)
        }
        (None, Some(s)) => {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            Some(vec!["/bin/sh".into(), "-c".into(), s, name])
        }
        (None, None) => None,
    };
    let name = f.name.or_else(|| path.file_stem().map(|s| s.to_string_lossy().into_owned()));
    let env = f.environment.unwrap_or_default();
    if env.requirements.is_some() && env.pyproject.is_some() {
        return Err(bad("[environment] takes `requirements` or `pyproject`, not both"));
    }
    let mut flags = SpecFlags {
        cpus: f.cpus,
        mem: f.mem,
        gpus: f.gpus,
        nodes: f.nodes,
        kernels: f.kernels,
        numa: f.numa.map(Into::into),
        time_limit: f.time_limit,
        name,
        priority: f.priority,
        queue: f.queue,
        requeue: f.requeue.unwrap_or(false),
        preemptible: f.preemptible.unwrap_or(false),
        project: f.project,
        dependency: f.dependency.map(|d| d.parse()).transpose().map_err(|e: berth_model::SpecError| bad(&e.0))?,
        array: f.array.map(|a| a.parse()).transpose().map_err(|e: berth_model::SpecError| bad(&e.0))?,
        begin: f.begin.map(|b| crate::when::parse_begin(&b)).transpose().map_err(|e| bad(&e))?,
        // Held or not is the submit's choice (`--hold`), not the file's.
        hold: false,
        signal: f.signal.map(|s| crate::specflags::parse_signal(&s)).transpose().map_err(|e| bad(&e))?,
        share: f.shared.unwrap_or(false),
        env: f.env.into_iter().collect(),
        export: f.export.map(|e| e.parse()).transpose().map_err(|e: String| bad(&e))?,
        workdir: f.workdir,
        job_dir: f.job_dir.unwrap_or(false),
        image: f.image,
        mounts: f
            .mounts
            .iter()
            .map(|m| crate::specflags::parse_mount(m))
            .collect::<Result<_, _>>()
            .map_err(|e| bad(&e))?,
        code: f.code,
        folders: f
            .folders
            .iter()
            .map(|m| crate::specflags::parse_folder(m))
            .collect::<Result<_, _>>()
            .map_err(|e| bad(&e))?,
        datasets: f
            .datasets
            .iter()
            .map(|d| crate::specflags::parse_dataset(d))
            .collect::<Result<_, _>>()
            .map_err(|e| bad(&e))?,
        apps: f
            .apps
            .iter()
            .map(|(name, port)| match port {
                AppPort::Port(p) => berth_model::app::parse_app(&format!("{name}={p}")),
                AppPort::WithOptions(p) => berth_model::app::parse_app(&format!("{name}={p}")),
            })
            .collect::<Result<_, _>>()
            .map_err(|e| bad(&e))?,
        jupyter: f.jupyter.unwrap_or(false),
        tensorboard: f.tensorboard,
        python: env.python,
        requirements: env.requirements,
        pyproject: env.pyproject,
        tasks_per_node: f.tasks_per_node,
        gpus_per_task: None,
        launch: f.launch.map(Into::into),
        output_file: f.output_file.map(|o| crate::specflags::parse_output_file(&o)).transpose().map_err(|e| bad(&e))?,
        error_file: f.error_file.map(|o| crate::specflags::parse_output_file(&o)).transpose().map_err(|e| bad(&e))?,
        open_mode: f.open_mode.map(|m| crate::specflags::parse_open_mode(&m)).transpose().map_err(|e| bad(&e))?,
        placement: crate::placement::PlacementFlags {
            constraint: f
                .constraint
                .map(|c| crate::placement::parse_constraint(&c))
                .transpose()
                .map_err(|e| bad(&e))?,
            exclusive: f.exclusive.unwrap_or(false),
            qos: f.qos,
        },
    };
    flags.resolve_workdir(dir);
    Ok(Loaded { flags, command })
}

/// Accepts a TOML integer, float or string and runs the model's parser on its text, so that
/// `cpus = 2`, `cpus = 0.5` and `cpus = "0.5"` all work and errors keep their position.
fn de_quantity<'de, D>(d: D, parse: fn(&str) -> Result<u64, QuantityError>) -> Result<Option<u64>, D::Error>
where
    D: Deserializer<'de>,
{
    struct Text;
    impl Visitor<'_> for Text {
        type Value = String;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a number or a string")
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_string())
        }
    }
    let text = d.deserialize_any(Text)?;
    parse(&text).map(Some).map_err(de::Error::custom)
}

fn de_cpus<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    de_quantity(d, berth_model::parse_cpus)
}

fn de_mem<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    de_quantity(d, berth_model::parse_mem)
}

fn de_gpus<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    de_quantity(d, berth_model::parse_gpus)
}

pub(crate) fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    de_quantity(d, berth_model::parse_duration)
}

/// An `[apps]` entry: a port, or a port with options as `--app` takes them (`"8000,strip"`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum AppPort {
    Port(u16),
    WithOptions(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::specflags::NumaArg;
    use berth_model::EnvKind;

    fn p(text: &str) -> anyhow::Result<Loaded> {
        parse(text, Path::new("job.toml"), Path::new("/work/jobs"))
    }

    #[test]
    fn a_full_file() {
        let l = p(r#"
name = "train"
command = ["python", "train.py", "--epochs", "3"]
cpus = 2
mem = "16GiB"
gpus = 0.5
time_limit = "2h"
priority = -3
queue = "gpu"
workdir = "runs/a"
nodes = 2
numa = "single-node"
requeue = true
preemptible = true

[env]
WANDB_MODE = "offline"
"#)
        .unwrap();
        let f = &l.flags;
        assert_eq!(l.command.as_deref().unwrap()[1], "train.py");
        assert_eq!(f.name.as_deref(), Some("train"));
        assert_eq!((f.cpus, f.mem, f.gpus, f.time_limit), (Some(2000), Some(16 << 30), Some(500), Some(7200)));
        assert_eq!((f.priority, f.nodes), (Some(-3), Some(2)));
        assert_eq!(f.queue.as_deref(), Some("gpu"));
        assert_eq!(f.workdir.as_deref(), Some("/work/jobs/runs/a"));
        assert_eq!(f.numa, Some(NumaArg::SingleNode));
        assert!(f.requeue);
        assert!(f.preemptible);
        assert_eq!(f.env, vec![("WANDB_MODE".to_string(), "offline".to_string())]);
    }

    #[test]
    fn apps_take_a_port_or_a_port_with_options() {
        let l = p("command = [\"x\"]\n[apps]\nweb = 8000\nfiles = \"8001,strip\"\n").unwrap();
        let apps = &l.flags.apps;
        assert_eq!((apps[0].name.as_str(), apps[0].path), ("files", berth_model::app::AppPath::Strip));
        assert_eq!((apps[1].name.as_str(), apps[1].path), ("web", berth_model::app::AppPath::Keep));
        let e = format!("{:#}", p("command = [\"x\"]\n[apps]\nweb = \"8000,nope\"\n").unwrap_err());
        assert!(e.contains("`strip`"), "{e}");
    }

    #[test]
    fn an_environment_reads_its_file_relative_to_the_job_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("req.txt"), "six==1.16.0\n").unwrap();
        let text = "command = [\"python\"]\n[environment]\npython = \"3.11\"\nrequirements = \"req.txt\"\n";
        let l = parse(text, Path::new("job.toml"), dir.path()).unwrap();
        let env = l.flags.environment().unwrap().unwrap();
        assert_eq!(
            (env.python.as_str(), env.kind, env.contents.as_str()),
            ("3.11", EnvKind::Requirements, "six==1.16.0\n")
        );
        let both = "[environment]\npython = \"3.11\"\nrequirements = \"a\"\npyproject = \"b\"\n";
        assert!(p(both).unwrap_err().to_string().contains("not both"));
        let e = format!("{:#}", p("[environment]\npthon = \"3\"").unwrap_err());
        assert!(e.contains("unknown field `pthon`"), "{e}");
        // a file that is not there says which
        let l = p("[environment]\npython = \"3.11\"\npyproject = \"nope.toml\"").unwrap();
        let e = l.flags.environment().unwrap_err().to_string();
        assert!(e.contains("cannot read the environment's pyproject.toml: /work/jobs/nope.toml"), "{e}");
        // a version alone: an empty environment of that Python
        assert!(
            p("[environment]\npython = \"3.12\"").unwrap().flags.environment().unwrap().unwrap().contents.is_empty()
        );
    }

    #[test]
    fn tasks_and_launch_keys() {
        let l = p("tasks_per_node = 4\nlaunch = \"first\"\nnodes = 2\ncommand = [\"sh\"]").unwrap();
        let spec = l.flags.to_spec(l.command.unwrap());
        assert_eq!((spec.tasks_per_node, spec.launch, spec.nodes), (4, berth_model::Launch::First, 2));
        let e = format!("{:#}", p("launch = \"sometimes\"\ncommand = [\"sh\"]").unwrap_err());
        assert!(e.contains("every") && e.contains("first"), "{e}");
        let l = p("tasks_per_node = 0\ncommand = [\"sh\"]").unwrap();
        assert!(l.flags.to_spec(l.command.unwrap()).validate().unwrap_err().0.contains("tasks per node"));
    }

    #[test]
    fn output_file_keys() {
        let l = p("output_file = \"o-%j\"\nerror = \"e-%j\"\nopen_mode = \"append\"\ncommand = [\"sh\"]").unwrap();
        let spec = l.flags.to_spec(l.command.unwrap());
        assert_eq!((spec.output.stdout.as_deref(), spec.output.stderr.as_deref()), (Some("o-%j"), Some("e-%j")));
        assert_eq!(spec.output.open_mode, berth_model::output::OpenMode::Append);
        let e = format!("{:#}", p("output = \"o-%q\"").unwrap_err());
        assert!(e.contains("invalid job file job.toml") && e.contains("`%q`"), "{e}");
        let e = format!("{:#}", p("open_mode = \"often\"").unwrap_err());
        assert!(e.contains("append or truncate"), "{e}");
    }

    #[test]
    fn a_signal_key() {
        let l = p("signal = \"B:USR1@90\"\ncommand = [\"sh\"]").unwrap();
        assert_eq!(l.flags.to_spec(l.command.unwrap()).signal, Some("B:USR1@90".parse().unwrap()));
        let e = format!("{:#}", p("signal = \"USR1@soon\"\ncommand = [\"sh\"]").unwrap_err());
        assert!(e.contains("TIME `soon`"), "{e}");
    }

    #[test]
    fn placement_keys() {
        let l = p("constraint = \"a100&ib\"\nexclusive = true\nqos = \"high\"\ncommand = [\"sh\"]").unwrap();
        let spec = l.flags.to_spec(l.command.unwrap());
        assert_eq!(spec.constraint.map(|c| c.to_string()).as_deref(), Some("a100&ib"));
        assert_eq!((spec.exclusive, spec.qos.as_deref()), (true, Some("high")));
        let e = p("constraint = \"[a|b]\"\ncommand = [\"sh\"]").unwrap_err().to_string();
        assert!(e.contains("matching OR"), "{e}");
    }

    #[test]
    fn kernels_of_a_container_job() {
        let l = p("image = \"busybox\"\nkernels = 3\ncommand = [\"sh\"]").unwrap();
        assert_eq!(l.flags.kernels, Some(3));
        let spec = l.flags.to_spec(l.command.unwrap());
        assert_eq!((spec.kernels, spec.nodes), (3, 1));
        assert!(spec.validate().is_ok());
    }

    #[test]
    fn quantities_in_any_shape() {
        let l = p("cpus = \"0.5\"\ngpus = 1\ntime_limit = 90\nmem = \"4GB\"").unwrap();
        assert_eq!((l.flags.cpus, l.flags.gpus, l.flags.time_limit), (Some(500), Some(1000), Some(90)));
        assert_eq!(l.flags.mem, Some(4_000_000_000));
        assert!(l.command.is_none());
        assert_eq!(l.flags.name.as_deref(), Some("job"), "the name defaults to the file stem");
    }

    #[test]
    fn a_script_runs_through_sh() {
        let l = p("script = \"echo hi\\nsleep 1\\n\"").unwrap();
        assert_eq!(l.command.unwrap(), vec!["/bin/sh", "-c", "echo hi\nsleep 1\n", "job.toml"]);
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = format!("{:#}", p("command = [\"x\"]\ngpu = 1").unwrap_err());
        assert!(e.contains("invalid job file job.toml"), "{e}");
        assert!(e.contains("unknown field `gpu`"), "{e}");
        assert!(e.contains("line 2"), "{e}");
    }

    #[test]
    fn malformed_toml_shows_the_position() {
        let e = format!("{:#}", p("command = [\"x\"\ncpus = 2").unwrap_err());
        assert!(e.contains("invalid job file job.toml"), "{e}");
        assert!(e.contains("line") && e.contains("column"), "{e}");
    }

    #[test]
    fn bad_quantities_point_at_their_line() {
        let e = format!("{:#}", p("command = [\"x\"]\n\nmem = \"4\"").unwrap_err());
        assert!(e.contains("line 3") && e.contains("add a unit"), "{e}");
        let e = format!("{:#}", p("gpus = 1.5").unwrap_err());
        assert!(e.contains("whole number"), "{e}");
        let e = format!("{:#}", p("numa = \"sometimes\"").unwrap_err());
        assert!(e.contains("prefer-local"), "{e}");
    }

    #[test]
    fn command_and_script_conflict() {
        let e = p("command = [\"x\"]\nscript = \"y\"").unwrap_err().to_string();
        assert!(e.contains("not both"), "{e}");
        assert!(p("command = []").unwrap_err().to_string().contains("`command` is empty"));
    }

    #[test]
    fn where_and_with_what_it_runs() {
        let dir = Path::new("/work/jobs");
        let f = parse("command = [\"x\"]\nexport = \"NONE\"\njob_dir = true\n", Path::new("j.toml"), dir).unwrap();
        assert_eq!((f.flags.export, f.flags.job_dir), (Some(crate::export::Export::None), true));
        let e = parse("command = [\"x\"]\nexport = \"A,,B\"\n", Path::new("j.toml"), dir).unwrap_err();
        assert!(format!("{e:#}").contains("invalid --export"), "{e:#}");
    }

    #[test]
    fn image_and_mounts() {
        let p = Path::new("/work/jobs/c.toml");
        let text = "command = [\"python\"]\nimage = \"pytorch:2.4\"\nworkdir = \"/workspace\"\nmounts = [\"/data:/data\", \"/scratch:/s:rw\"]\n";
        let l = parse(text, p, Path::new("/work/jobs")).unwrap();
        let spec = l.flags.to_spec(l.command.unwrap());
        assert_eq!(spec.image.as_deref(), Some("pytorch:2.4"));
        assert_eq!((spec.mounts[0].rw, spec.mounts[1].rw), (false, true));
        assert_eq!(spec.workdir.as_deref(), Some("/workspace"));
        let e = parse("command = [\"x\"]\nmounts = [\"data\"]\n", p, Path::new("/")).unwrap_err();
        assert!(e.to_string().contains("HOST_PATH:CONTAINER_PATH"), "{e}");
    }
}
