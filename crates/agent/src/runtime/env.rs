//! The environment of a kernel: a clean base, the submitter's exported environment, the job's
//! and the manager's variables, and the variables that carry the binding (visible GPUs, GPU
//! sharing limits, cpuset).
//!
//! Order matters: the agent's device variables come last so a job cannot widen its own GPU
//! set, while `OMP_NUM_THREADS` is only a default the job may override. The exported
//! environment (Slurm's `--export=ALL`) replaces the base (a virtualenv's `PATH` wins), but
//! not who the kernel runs as: `USER`, `LOGNAME` and `HOME` are the run user's.

use std::collections::{BTreeMap, HashMap};

use berth_model::{Binding, JobSpec};

use super::user::RunUser;

/// PATH given to kernels of a root agent (the agent's own PATH may hold root-only tools).
const SAFE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The variables that carry a kernel's binding: a command started in the kernel (`berth exec`,
/// `srun`) keeps the kernel's values whatever its request says, so a task never takes another
/// node's devices along.
pub const DEVICE_VARS: [&str; 7] = [
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "BERTH_CPUS",
    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
    "CUDA_DEVICE_SM_LIMIT",
    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
    "CUDA_DEVICE_MEMORY_LIMIT",
];

/// `extra` without the [`DEVICE_VARS`]: what a command started in a kernel may set.
pub fn exec_vars(extra: &BTreeMap<String, String>) -> impl Iterator<Item = (&String, &String)> {
    extra.iter().filter(|(k, _)| !DEVICE_VARS.contains(&k.as_str()))
}

/// The kernel's `CUDA_VISIBLE_DEVICES` (`visible`, its binding) narrowed to the GPUs at
/// `positions`, in that order: a command started in the kernel may take fewer of its GPUs,
/// never one it does not have.
pub fn narrow_gpus(visible: &str, positions: &[u32]) -> Result<String, NotTheKernelsGpu> {
    let gpus: Vec<&str> = visible.split(',').filter(|g| !g.is_empty()).collect();
    let mut out = Vec::with_capacity(positions.len());
    for p in positions {
        match gpus.get(*p as usize) {
            Some(g) => out.push(*g),
            None => return Err(NotTheKernelsGpu { position: *p, has: gpus.len() }),
        }
    }
    Ok(out.join(","))
}

/// A GPU position (`srun --gpus-per-task`) past the kernel's GPUs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("GPU {position} is not the kernel's: {}", match has {
    0 => "it has no GPU".to_string(),
    n => format!("it has {n} GPU(s), positions 0 to {}; ask for fewer GPUs per task", n - 1),
})]
pub struct NotTheKernelsGpu {
    pub position: u32,
    /// How many GPUs the kernel has.
    pub has: usize,
}

/// Builds the full environment of a kernel. `gpu_memory` maps GPU uuids to their memory, for
/// the memory limits of fractional GPUs.
pub fn build_env(
    user: &RunUser,
    spec: &JobSpec,
    binding: &Binding,
    manager_env: &BTreeMap<String, String>,
    gpu_memory: &HashMap<String, u64>,
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    // A non-root agent runs kernels as its own user, whose PATH (pyenv, conda, ...) is the
    // one that user expects; a root agent must not leak root's PATH to `nobody`.
    let path = if user.switch { SAFE_PATH.to_string() } else { std::env::var("PATH").unwrap_or(SAFE_PATH.into()) };
    env.insert("PATH".into(), path);
    env.insert("LANG".into(), std::env::var("LANG").unwrap_or_else(|_| "C.UTF-8".into()));
    let whole_cpus =
        if binding.cpus.is_empty() { binding.cpu_milli.div_ceil(1000).max(1) } else { binding.cpus.len() as u64 };
    env.insert("OMP_NUM_THREADS".into(), whole_cpus.to_string());

    env.extend(spec.submit_env.iter().map(|(k, v)| (k.clone(), v.clone())));
    env.insert("HOME".into(), user.home.clone());
    env.insert("USER".into(), user.name.clone());
    env.insert("LOGNAME".into(), user.name.clone());
    env.extend(spec.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    env.extend(manager_env.iter().map(|(k, v)| (k.clone(), v.clone())));
    if manager_env.contains_key("SLURM_JOB_ID") {
        // Slurm names the Unix user the job runs as (root's jobs: `root`, 0), which only the
        // node knows: the manager's `SLURM_JOB_USER` is the berth user.
        env.insert("SLURM_JOB_USER".into(), user.name.clone());
        env.insert("SLURM_JOB_UID".into(), user.uid.to_string());
        env.insert("SLURM_JOB_GID".into(), user.gid.to_string());
    }
    // A job's Python environment (set by the agent after its setup, `kernels/start.rs`)
    // takes the place of whatever Python environment the submitter had active.
    if let Some(venv) = manager_env.get("VIRTUAL_ENV") {
        python_env_first(&mut env, venv, submitters_venv(spec));
    }

    let visible: Vec<&str> = binding.gpus.iter().map(|g| g.uuid.as_str()).collect();
    env.insert("CUDA_VISIBLE_DEVICES".into(), visible.join(","));
    env.insert("BERTH_CPUS".into(), binding.cpuset());
    for (ordinal, share) in binding.gpus.iter().enumerate() {
        if share.milli >= 1000 {
            continue;
        }
        // One fraction per kernel (a request above one GPU is whole devices), so these
        // process-wide variables describe that one device.
        let percent = (share.milli / 10).max(1);
        env.insert("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".into(), percent.to_string());
        env.insert("CUDA_DEVICE_SM_LIMIT".into(), percent.to_string());
        if let Some(total) = gpu_memory.get(&share.uuid) {
            let mib = (*total as u128 * share.milli as u128 / 1000 / (1 << 20)) as u64;
            // MPS names devices by ordinal among the visible ones; HAMi-core takes MiB with `m`.
            env.insert("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".into(), format!("{ordinal}={mib}M"));
            env.insert("CUDA_DEVICE_MEMORY_LIMIT".into(), format!("{mib}m"));
        }
    }
    add_app_env(&mut env, spec);
    env
}

/// The virtual environment the submitter had active (`VIRTUAL_ENV` exported or given with
/// `--env`), which a job's own Python environment replaces.
fn submitters_venv(spec: &JobSpec) -> Option<&str> {
    spec.env.get("VIRTUAL_ENV").or_else(|| spec.submit_env.get("VIRTUAL_ENV")).map(String::as_str)
}

/// Makes `venv` (the job's Python environment) the Python of `env`, as `activate` would, but
/// over whatever the submitter carried along (issue 41 item 2: with their own venv active, a
/// job ran their python and their package versions). `theirs` (the submitter's venv) leaves
/// `PATH`, `venv/bin` comes first, `PYTHONHOME` goes, and `PYTHONPATH` entries that hold
/// another environment's packages (under `theirs`, or a `site-packages`/`dist-packages`
/// directory) go, so nothing found before the environment's own. Returns what it changed,
/// for the setup log.
fn python_env_first(env: &mut BTreeMap<String, String>, venv: &str, theirs: Option<&str>) -> Vec<String> {
    let mut notes = Vec::new();
    let theirs = theirs.map(|t| t.trim_end_matches('/')).filter(|t| !t.is_empty() && *t != venv.trim_end_matches('/'));
    let ours = format!("{venv}/bin");
    let theirs_bin = theirs.map(|t| format!("{t}/bin"));
    let mut kept = vec![ours.as_str()];
    let path = env.get("PATH").cloned().unwrap_or_default();
    let mut took_theirs = false;
    for dir in path.split(':').filter(|d| !d.is_empty()) {
        let dir_trimmed = dir.trim_end_matches('/');
        if Some(dir_trimmed) == theirs_bin.as_deref() {
            took_theirs = true;
        } else if dir_trimmed != ours {
            kept.push(dir);
        }
    }
    env.insert("PATH".into(), kept.join(":"));
    if let Some(t) = theirs {
        let off = if took_theirs { format!(", `{t}/bin` taken off PATH") } else { String::new() };
        notes.push(format!("the submitter's VIRTUAL_ENV `{t}` gives way to the job's environment{off}"));
    }
    if let Some(home) = env.remove("PYTHONHOME") {
        notes.push(format!("PYTHONHOME `{home}` unset: the environment's python finds its own"));
    }
    if let Some(pp) = env.remove("PYTHONPATH") {
        let foreign = |e: &str| {
            let e = e.trim_end_matches('/');
            theirs.is_some_and(|t| e == t || e.starts_with(&format!("{t}/")))
                || e.ends_with("/site-packages")
                || e.ends_with("/dist-packages")
        };
        let (dropped, kept): (Vec<&str>, Vec<&str>) = pp.split(':').partition(|e| foreign(e));
        if !dropped.is_empty() {
            notes.push(format!(
                "PYTHONPATH entries `{}` dropped: another environment's packages would come before this one's",
                dropped.join(":")
            ));
        }
        if !kept.is_empty() {
            env.insert("PYTHONPATH".into(), kept.join(":"));
        }
    }
    notes
}

/// What [`build_env`] will change for a job's Python environment in what its submitter
/// carried along (their venv, `PYTHONHOME`, `PYTHONPATH`), for the setup log.
pub fn python_env_notes(spec: &JobSpec) -> Vec<String> {
    let mut env: BTreeMap<String, String> = spec.submit_env.clone();
    env.extend(spec.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    python_env_first(&mut env, "/berth-environment", submitters_venv(spec))
}

/// The ports of the job's apps (`BERTH_APP_<NAME>_PORT`, a free one picked here when the
/// spec leaves it to the agent), and for token-authenticated apps (Jupyter) a fresh secret the
/// proxy will send them (`BERTH_APP_TOKEN`, `JUPYTER_TOKEN`); the forward reads both back from
/// the kernel's environment, so they survive an agent restart without being kept anywhere.
fn add_app_env(env: &mut BTreeMap<String, String>, spec: &JobSpec) {
    use berth_model::app::{AppKind, TOKEN_VAR, port_var};
    for app in &spec.apps {
        let port = app.port.or_else(free_port);
        if let Some(port) = port {
            env.insert(port_var(&app.name), port.to_string());
            // A serving replica's server reads its port where most servers look for it.
            if spec.replica_of.is_some() && app.name == berth_model::endpoint::REPLICA_APP {
                env.insert("PORT".into(), port.to_string());
            }
        }
    }
    if spec.apps.iter().any(|a| a.kind == AppKind::Jupyter) {
        let token: String = (0..32).map(|_| format!("{:02x}", rand::random::<u8>())).collect();
        env.insert("JUPYTER_TOKEN".into(), token.clone());
        env.insert(TOKEN_VAR.into(), token);
    }
}

/// A port nothing listens on now (the kernel binds it a moment later; the range the system
/// hands out for `:0` is not the one other services configure).
fn free_port() -> Option<u16> {
    std::net::TcpListener::bind(("127.0.0.1", 0)).and_then(|l| l.local_addr()).map(|a| a.port()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::GpuShare;

    #[test]
    fn a_task_narrows_the_kernels_gpus_and_never_widens_them() {
        assert_eq!(narrow_gpus("GPU-a,GPU-b,GPU-c", &[1]).unwrap(), "GPU-b");
        assert_eq!(narrow_gpus("GPU-a,GPU-b,GPU-c", &[2, 0]).unwrap(), "GPU-c,GPU-a");
        let e = narrow_gpus("GPU-a,GPU-b", &[2]).unwrap_err().to_string();
        assert!(e.contains("GPU 2 is not the kernel's: it has 2 GPU(s), positions 0 to 1"), "{e}");
        assert!(narrow_gpus("", &[0]).unwrap_err().to_string().contains("it has no GPU"));
    }

    fn user() -> RunUser {
        RunUser {
            name: "nobody".into(),
            uid: 65534,
            gid: 65534,
            home: "/nonexistent".into(),
            switch: true,
            groups: vec![],
        }
    }

    fn binding(gpus: Vec<GpuShare>) -> Binding {
        Binding {
            node: "n".into(),
            cpus: vec![2, 3],
            cpu_milli: 1500,
            mems: vec![0],
            mem_bytes: 1 << 30,
            gpus,
            port: None,
        }
    }

    #[test]
    fn base_job_manager_and_devices() {
        let mut spec = JobSpec::command(["true"]);
        spec.env.insert("FOO".into(), "job".into());
        spec.env.insert("CUDA_VISIBLE_DEVICES".into(), "all".into());
        spec.env.insert("OMP_NUM_THREADS".into(), "7".into());
        let mut menv = BTreeMap::new();
        menv.insert("BERTH_JOB_ID".into(), "17".into());
        menv.insert("FOO".into(), "manager".into());
        let env = build_env(&user(), &spec, &binding(vec![]), &menv, &HashMap::new());
        assert_eq!(env["PATH"], SAFE_PATH);
        assert_eq!(env["HOME"], "/nonexistent");
        assert_eq!(env["USER"], "nobody");
        assert_eq!(env["FOO"], "manager");
        assert_eq!(env["BERTH_JOB_ID"], "17");
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "", "the job cannot widen its GPU set");
        assert_eq!(env["BERTH_CPUS"], "2-3");
        assert_eq!(env["OMP_NUM_THREADS"], "7", "the job may choose its thread count");
        assert!(!env.contains_key("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"));
        // Nothing of the agent's own environment leaks beyond the base.
        assert!(env.keys().all(|k| k != "CARGO_MANIFEST_DIR"));
    }

    #[test]
    fn slurm_job_user_is_the_unix_user_the_kernel_runs_as() {
        let spec = JobSpec::command(["true"]);
        let mut menv = BTreeMap::new();
        menv.insert("SLURM_JOB_ID".into(), "17".into());
        menv.insert("SLURM_JOB_USER".into(), "admin".into());
        let root = RunUser { name: "root".into(), uid: 0, gid: 0, home: "/root".into(), switch: false, groups: vec![] };
        let env = build_env(&root, &spec, &binding(vec![]), &menv, &HashMap::new());
        let got = |k: &str| env[k].as_str();
        assert_eq!((got("SLURM_JOB_USER"), got("SLURM_JOB_UID"), got("SLURM_JOB_GID")), ("root", "0", "0"));
        let env = build_env(&user(), &spec, &binding(vec![]), &menv, &HashMap::new());
        assert_eq!((env["SLURM_JOB_USER"].as_str(), env["SLURM_JOB_UID"].as_str()), ("nobody", "65534"));
        // A job without Slurm's variables gets none.
        let env = build_env(&user(), &spec, &binding(vec![]), &BTreeMap::new(), &HashMap::new());
        assert!(!env.contains_key("SLURM_JOB_UID"));
    }

    #[test]
    fn the_exported_environment_is_the_base_but_not_the_identity() {
        let mut spec = JobSpec::command(["true"]);
        for (k, v) in [("PATH", "/home/a/venv/bin:/usr/bin"), ("USER", "a"), ("HOME", "/home/a"), ("FOO", "exported")] {
            spec.submit_env.insert(k.into(), v.into());
        }
        spec.submit_env.insert("CUDA_VISIBLE_DEVICES".into(), "0,1,2,3".into());
        spec.submit_env.insert("BAR".into(), "exported".into());
        spec.env.insert("BAR".into(), "job".into());
        let env = build_env(&user(), &spec, &binding(vec![]), &BTreeMap::new(), &HashMap::new());
        assert_eq!(env["PATH"], "/home/a/venv/bin:/usr/bin", "the submitter's PATH finds their python");
        assert_eq!(env["FOO"], "exported");
        assert_eq!(env["BAR"], "job", "--env beats the exported value");
        assert_eq!((env["USER"].as_str(), env["HOME"].as_str()), ("nobody", "/nonexistent"), "the run user's identity");
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "", "the binding beats the exported value");
    }

    /// Issue 41 item 2: a user with their own venv active submitted a job with a pinned
    /// environment and ran their python, with their package versions.
    #[test]
    fn the_jobs_environment_comes_before_the_submitters_venv() {
        let mut spec = JobSpec::command(["python"]);
        for (k, v) in [
            ("PATH", "/home/a/venv/bin:/usr/bin:/bin"),
            ("VIRTUAL_ENV", "/home/a/venv"),
            ("PYTHONHOME", "/home/a/py"),
            ("PYTHONPATH", "/home/a/src:/home/a/venv/lib/python3.11/site-packages:/opt/x/dist-packages"),
        ] {
            spec.submit_env.insert(k.into(), v.into());
        }
        let menv: BTreeMap<String, String> = [("VIRTUAL_ENV".to_string(), "/d/envs/k".to_string())].into();
        let env = build_env(&user(), &spec, &binding(vec![]), &menv, &HashMap::new());
        assert_eq!(env["PATH"], "/d/envs/k/bin:/usr/bin:/bin", "the submitter's venv left PATH");
        assert_eq!(env["VIRTUAL_ENV"], "/d/envs/k");
        assert!(!env.contains_key("PYTHONHOME"));
        assert_eq!(env["PYTHONPATH"], "/home/a/src", "their sources stay, other environments' packages go");
        let notes = python_env_notes(&spec).join("\n");
        assert!(notes.contains("VIRTUAL_ENV `/home/a/venv` gives way") && notes.contains("taken off PATH"), "{notes}");
        assert!(notes.contains("PYTHONHOME `/home/a/py` unset"), "{notes}");
        assert!(notes.contains("`/home/a/venv/lib/python3.11/site-packages:/opt/x/dist-packages` dropped"), "{notes}");

        // Nothing of the kind: PATH gets the environment first, and nothing to say.
        let plain = JobSpec::command(["python"]);
        let env = build_env(&user(), &plain, &binding(vec![]), &menv, &HashMap::new());
        assert_eq!(env["PATH"], format!("/d/envs/k/bin:{SAFE_PATH}"));
        assert!(python_env_notes(&plain).is_empty());
        // Without an environment of berth's, the submitter's venv is what the job runs.
        let env = build_env(&user(), &spec, &binding(vec![]), &BTreeMap::new(), &HashMap::new());
        assert_eq!(
            (env["PATH"].as_str(), env["VIRTUAL_ENV"].as_str()),
            ("/home/a/venv/bin:/usr/bin:/bin", "/home/a/venv")
        );
    }

    #[test]
    fn whole_and_fractional_gpus() {
        let spec = JobSpec::command(["true"]);
        let whole = vec![
            GpuShare { uuid: "GPU-a".into(), index: 0, milli: 1000 },
            GpuShare { uuid: "GPU-b".into(), index: 1, milli: 1000 },
        ];
        let env = build_env(&user(), &spec, &binding(whole), &BTreeMap::new(), &HashMap::new());
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "GPU-a,GPU-b");
        assert_eq!(env["OMP_NUM_THREADS"], "2");
        assert!(!env.contains_key("CUDA_DEVICE_SM_LIMIT"));

        let mem: HashMap<String, u64> = [("GPU-a".to_string(), 16u64 << 30)].into();
        let half = vec![GpuShare { uuid: "GPU-a".into(), index: 0, milli: 250 }];
        let env = build_env(&user(), &spec, &binding(half), &BTreeMap::new(), &mem);
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "GPU-a");
        assert_eq!(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "25");
        assert_eq!(env["CUDA_DEVICE_SM_LIMIT"], "25");
        assert_eq!(env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=4096M");
        assert_eq!(env["CUDA_DEVICE_MEMORY_LIMIT"], "4096m");
    }
}
