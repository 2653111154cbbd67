//! The `SLURM_*` variables a kernel gets beside berth's own (`cluster_env.rs`), so that batch
//! scripts written for Slurm find what they read: the job (`SLURM_JOB_ID`, name, user,
//! partition, account), its shape (`SLURM_NNODES`, `SLURM_NTASKS`, `SLURM_TASKS_PER_NODE` in
//! Slurm's `4(x2)` form, `SLURM_JOB_NODELIST` as a Slurm host list, `n[1-3,5]`,
//! `berth_model::hostlist`), and the
//! kernel's own node (`SLURM_NODEID`, `SLURMD_NODENAME`, `SLURM_CPUS_ON_NODE`, `SLURM_GPUS_ON_NODE`,
//! `SLURM_JOB_GPUS`), as Slurm 22.05 defines them (man sbatch, "OUTPUT ENVIRONMENT
//! VARIABLES"): `SLURM_MEM_PER_NODE` is the memory asked for (`--mem`, MiB), not the node's;
//! `SLURM_JOB_CPUS_PER_NODE` the job's CPUs on each node (`4(x2)`); `SLURM_CPUS_PER_TASK` is
//! sbatch's (`-c`, passed in the job's own variables), never made up here. The Unix user
//! (`SLURM_JOB_USER`, `SLURM_JOB_UID`, `SLURM_JOB_GID`) is the agent's to say, since it picks
//! the account the kernel runs as; here `SLURM_JOB_USER` is the berth user until it does.
//! `SLURM_TASK_PID` is not set: no process of berth's knows the task's pid before it runs.
//!
//! A kernel is one Slurm node: a job with several kernels on one machine (`--kernels`) lists
//! their roles (`main`, `sub1`, ...) as its nodes, as `BERTH_CLUSTER_HOSTS` does, so that
//! `SLURM_NODEID` always indexes `SLURM_JOB_NODELIST`; the list keeps kernel order for the
//! same reason (Slurm sorts it, and numbers its nodes in that order).
//!
//! The batch step's task variables: a `launch = first` job's command is Slurm's batch step,
//! task 0 (`SLURM_PROCID` and `SLURM_LOCALID` 0); in a `launch = every` job each kernel's
//! command is one task of the job, its rank the kernel's index. `srun` sets its tasks' own.

use std::collections::BTreeMap;

use berth_model::Launch;

use crate::state::Job;

/// Adds the `SLURM_*` variables of kernel `index` of `job`, whose nodes (one per kernel, in
/// kernel order) are `hosts`.
pub fn add(env: &mut BTreeMap<String, String>, job: &Job, index: u32, hosts: &[String]) {
    let spec = &job.spec;
    let mut set = |k: &str, v: String| {
        env.insert(k.to_string(), v);
    };
    let nodes = hosts.len().max(1) as u32;
    let tasks = spec.tasks_per_node.max(1);
    set("SLURM_CLUSTER_NAME", "berth".into());
    set("SLURM_JOB_ID", job.id.to_string());
    set("SLURM_JOBID", job.id.to_string());
    set("SLURM_JOB_NAME", spec.name.clone().unwrap_or_else(|| format!("job-{}", job.id)));
    set("SLURM_JOB_USER", job.owner.name.clone());
    set("SLURM_JOB_PARTITION", job.queue.clone());
    set("SLURM_JOB_ACCOUNT", spec.project.clone().unwrap_or_else(|| job.owner.name.clone()));
    // Slurm's default QOS is `normal`; berth's are the manager's `[qos.NAME]`.
    set("SLURM_JOB_QOS", spec.qos.clone().unwrap_or_else(|| "normal".into()));
    if let Some(d) = &spec.dependency {
        set("SLURM_JOB_DEPENDENCY", d.to_string());
    }
    set("SLURM_NNODES", nodes.to_string());
    set("SLURM_JOB_NUM_NODES", nodes.to_string());
    let list = berth_model::hostlist::compress(hosts);
    set("SLURM_JOB_NODELIST", list.clone());
    set("SLURM_NODELIST", list);
    let ntasks = (nodes as u64 * tasks as u64).to_string();
    set("SLURM_NTASKS", ntasks.clone());
    set("SLURM_NPROCS", ntasks);
    set("SLURM_NTASKS_PER_NODE", tasks.to_string());
    set("SLURM_TASKS_PER_NODE", tasks_per_node_form(tasks, nodes));
    set("SLURM_NODEID", index.to_string());
    // The kernel's own entry of the node list (its node, or its role among a one-machine
    // job's kernels), which scripts log and compare against `SLURM_JOB_NODELIST`.
    if let Some(me) = hosts.get(index as usize).or_else(|| job.attempt.bindings.get(index as usize).map(|b| &b.node)) {
        set("SLURMD_NODENAME", me.clone());
    }
    let procid = match spec.launch {
        Launch::First => 0,
        Launch::Every => index,
    };
    set("SLURM_PROCID", procid.to_string());
    // The global ids of the tasks on this node: the batch step's one task.
    set("SLURM_GTIDS", procid.to_string());
    set("SLURM_LOCALID", "0".into());
    // Older specs have no submit_dir: their working directory was where they were submitted.
    if let Some(d) = spec.submit_dir.as_ref().or(spec.workdir.as_ref()) {
        set("SLURM_SUBMIT_DIR", d.clone());
    }
    // How often the job was requeued: attempts count from 0, as Slurm's restarts do.
    set("SLURM_RESTART_COUNT", job.attempt.number.to_string());
    if let Some(secs) = spec.time_limit_secs {
        // Minutes, as Slurm gives time limits.
        set("SLURM_TIMELIMIT", secs.div_ceil(60).to_string());
    }
    let cpus_of = |b: &berth_model::Binding| {
        if b.cpus.is_empty() { b.cpu_milli.div_ceil(1000).max(1) } else { b.cpus.len() as u64 }
    };
    if !job.attempt.bindings.is_empty() {
        let per_node: Vec<u64> = job.attempt.bindings.iter().map(cpus_of).collect();
        set("SLURM_JOB_CPUS_PER_NODE", berth_model::hostlist::counts(&per_node));
    }
    if let Some(b) = job.attempt.bindings.get(index as usize) {
        set("SLURM_CPUS_ON_NODE", cpus_of(b).to_string());
        // What was asked (`--mem`), in MiB as Slurm gives MB; a request of 0 (all of the
        // node's memory, as in Slurm) is what the node gave.
        let mem = if spec.resources.mem_bytes > 0 { spec.resources.mem_bytes } else { b.mem_bytes };
        set("SLURM_MEM_PER_NODE", (mem >> 20).to_string());
        let whole = b.gpus.iter().filter(|g| g.milli >= 1000).count();
        set("SLURM_GPUS_ON_NODE", whole.to_string());
        if !b.gpus.is_empty() {
            // The node's GPU indices, not the positions CUDA_VISIBLE_DEVICES gives them.
            let ids: Vec<String> = b.gpus.iter().map(|g| g.index.to_string()).collect();
            set("SLURM_JOB_GPUS", ids.join(","));
        }
    }
    if let Some(g) = spec.gpus_per_task {
        // srun's default for --gpus-per-task, as in Slurm.
        set("SLURM_GPUS_PER_TASK", g.to_string());
    }
    add_array(env, job);
}

/// A job array task's variables: Slurm's (`SLURM_ARRAY_JOB_ID`, `SLURM_ARRAY_TASK_ID`, its
/// `_MIN`, `_MAX`, `_COUNT`) and berth's (`BERTH_ARRAY_JOB_ID`, `BERTH_ARRAY_TASK_ID`).
fn add_array(env: &mut BTreeMap<String, String>, job: &Job) {
    let Some(t) = job.spec.array_task else { return };
    for (k, v) in [
        ("SLURM_ARRAY_JOB_ID", t.array_id.to_string()),
        ("SLURM_ARRAY_TASK_ID", t.index.to_string()),
        ("SLURM_ARRAY_TASK_MIN", t.min.to_string()),
        ("SLURM_ARRAY_TASK_MAX", t.max.to_string()),
        ("SLURM_ARRAY_TASK_COUNT", t.count.to_string()),
        ("SLURM_ARRAY_TASK_STEP", array_step(t.min, t.max, t.count).to_string()),
        ("BERTH_ARRAY_JOB_ID", t.array_id.to_string()),
        ("BERTH_ARRAY_TASK_ID", t.index.to_string()),
    ] {
        env.insert(k.to_string(), v);
    }
}

/// The step between an array's indices (`0-10:2` → 2) from its bounds and count: the one of
/// a range, and 1 for one index or a list that is no range.
fn array_step(min: u32, max: u32, count: u64) -> u64 {
    let span = u64::from(max.saturating_sub(min));
    match count {
        0 | 1 => 1,
        n if span % (n - 1) == 0 => (span / (n - 1)).max(1),
        _ => 1,
    }
}

/// Slurm's `SLURM_TASKS_PER_NODE`: `4` on one node, `4(x2)` for the same count on two.
pub fn tasks_per_node_form(tasks: u32, nodes: u32) -> String {
    if nodes > 1 { format!("{tasks}(x{nodes})") } else { tasks.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_jobs_kernels_get_slurms_variables() {
        use berth_model::{Binding, GpuShare, JobSpec, JobState};
        let mut spec = JobSpec::command(["sh"]);
        spec.name = Some("train".into());
        spec.nodes = 2;
        spec.tasks_per_node = 4;
        spec.launch = Launch::First;
        spec.queue = Some("gpu".into());
        spec.project = Some("vision".into());
        spec.workdir = Some("/home/alice/run".into());
        spec.time_limit_secs = Some(90);
        spec.resources.mem_bytes = 500 << 20;
        spec.dependency = Some("afterok:7:8".parse().unwrap());
        let mut job = crate::state::fixture::job(42, JobState::Running);
        job.queue = "gpu".into();
        job.spec = std::sync::Arc::new(spec);
        let gpu = |i: u32, milli| GpuShare { uuid: format!("GPU-{i}"), index: i, milli };
        let b = |node: &str, gpus| Binding {
            node: node.into(),
            cpus: vec![0, 1, 2, 3],
            cpu_milli: 4000,
            mem_bytes: 8 << 30,
            gpus,
            ..Default::default()
        };
        job.attempt.bindings = vec![b("gpu01", vec![gpu(0, 1000), gpu(1, 1000)]), b("gpu02", vec![gpu(0, 500)])];
        let hosts = vec!["gpu01".to_string(), "gpu02".to_string()];
        let env_of = |job: &Job, index| {
            let mut env = BTreeMap::new();
            add(&mut env, job, index, &hosts);
            env
        };
        let e0 = env_of(&job, 0);
        let get = |k: &str| e0.get(k).map(String::as_str).unwrap_or_else(|| panic!("no {k}"));
        for (k, v) in [
            ("SLURM_JOB_ID", "42"),
            ("SLURM_JOBID", "42"),
            ("SLURM_JOB_NAME", "train"),
            ("SLURM_JOB_USER", "alice"),
            ("SLURM_JOB_PARTITION", "gpu"),
            ("SLURM_JOB_ACCOUNT", "vision"),
            ("SLURM_NNODES", "2"),
            ("SLURM_JOB_NUM_NODES", "2"),
            ("SLURM_JOB_NODELIST", "gpu[01-02]"),
            ("SLURM_NODELIST", "gpu[01-02]"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_NPROCS", "8"),
            ("SLURM_NTASKS_PER_NODE", "4"),
            ("SLURM_TASKS_PER_NODE", "4(x2)"),
            ("SLURM_NODEID", "0"),
            ("SLURMD_NODENAME", "gpu01"),
            ("SLURM_PROCID", "0"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_CPUS_ON_NODE", "4"),
            ("SLURM_MEM_PER_NODE", "500"),
            ("SLURM_JOB_CPUS_PER_NODE", "4(x2)"),
            ("SLURM_GPUS_ON_NODE", "2"),
            ("SLURM_JOB_GPUS", "0,1"),
            ("SLURM_JOB_QOS", "normal"),
            ("SLURM_JOB_DEPENDENCY", "afterok:7,afterok:8"),
            ("SLURM_GTIDS", "0"),
            ("SLURM_SUBMIT_DIR", "/home/alice/run"),
            ("SLURM_RESTART_COUNT", "0"),
            ("SLURM_TIMELIMIT", "2"),
            ("SLURM_CLUSTER_NAME", "berth"),
        ] {
            assert_eq!(get(k), v, "{k}");
        }
        assert!(!e0.contains_key("SLURM_CPUS_PER_TASK"), "only sbatch -c sets it, as in Slurm");
        assert!(!e0.contains_key("SLURM_ARRAY_TASK_STEP"), "no array");
        let e1 = env_of(&job, 1);
        assert_eq!(e1["SLURM_JOB_GPUS"], "0", "the node's GPU index");
        assert_eq!((e1["SLURM_NODEID"].as_str(), e1["SLURMD_NODENAME"].as_str()), ("1", "gpu02"));
        assert_eq!(e1["SLURM_PROCID"], "0", "a first job's kernels are the batch step's");
        assert_eq!(e1["SLURM_GPUS_ON_NODE"], "0", "a GPU fraction is no whole GPU");
        // An `every` job's kernels are its tasks.
        let mut every = (*job.spec).clone();
        every.launch = Launch::Every;
        job.spec = std::sync::Arc::new(every);
        assert_eq!(env_of(&job, 1)["SLURM_PROCID"], "1");
        // Submitted from elsewhere with --chdir: the submit dir is the submitter's.
        let mut moved = (*job.spec).clone();
        moved.submit_dir = Some("/home/alice".into());
        job.spec = std::sync::Arc::new(moved);
        job.attempt.number = 2;
        assert_eq!(env_of(&job, 0)["SLURM_SUBMIT_DIR"], "/home/alice");
        assert_eq!(env_of(&job, 0)["SLURM_RESTART_COUNT"], "2");
    }

    #[test]
    fn slurm_mem_per_node_is_what_was_asked_not_the_nodes_memory() {
        let mut job = crate::state::fixture::job(3, berth_model::JobState::Running);
        job.attempt.bindings = vec![berth_model::Binding {
            node: "n1".into(),
            cpu_milli: 2000,
            mem_bytes: 12506 << 20,
            ..Default::default()
        }];
        let mut spec = (*job.spec).clone();
        spec.resources.mem_bytes = 500 << 20;
        job.spec = std::sync::Arc::new(spec);
        let mut env = BTreeMap::new();
        add(&mut env, &job, 0, &[]);
        assert_eq!(env["SLURM_MEM_PER_NODE"], "500");
        assert_eq!((env["SLURM_JOB_CPUS_PER_NODE"].as_str(), env["SLURMD_NODENAME"].as_str()), ("2", "n1"));
        assert!(!env.contains_key("SLURM_JOB_GPUS"), "no GPU, no list");
        assert!(!env.contains_key("SLURM_JOB_DEPENDENCY"));
    }

    #[test]
    fn array_tasks_get_their_step() {
        assert_eq!(array_step(0, 10, 6), 2, "0-10:2");
        assert_eq!(array_step(1, 5, 5), 1);
        assert_eq!(array_step(3, 3, 1), 1);
        assert_eq!(array_step(1, 7, 3), 3, "1,4,7 reads as 1-7:3");
        assert_eq!(array_step(1, 9, 3), 4);
        assert_eq!(array_step(1, 8, 3), 1, "a list that is no range");
        let mut job = crate::state::fixture::job(3, berth_model::JobState::Running);
        let mut spec = (*job.spec).clone();
        spec.array_task = Some(berth_model::ArrayTask { array_id: 2, index: 4, min: 0, max: 10, count: 6 });
        job.spec = std::sync::Arc::new(spec);
        let mut env = BTreeMap::new();
        add(&mut env, &job, 0, &[]);
        assert_eq!((env["SLURM_ARRAY_TASK_ID"].as_str(), env["SLURM_ARRAY_TASK_STEP"].as_str()), ("4", "2"));
    }

    #[test]
    fn tasks_per_node_forms() {
        assert_eq!(tasks_per_node_form(4, 2), "4(x2)");
        assert_eq!(tasks_per_node_form(1, 1), "1");
        assert_eq!(tasks_per_node_form(8, 1), "8");
    }
}
