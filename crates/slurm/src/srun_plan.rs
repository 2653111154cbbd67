//! How `srun` lays out a step (`srun.rs`): how many tasks go to which of the job's kernels
//! (Slurm's block distribution), which of srun's variables the tasks get (`--export`), and
//! each task's own variables (`SLURM_PROCID`, `SLURM_GTIDS`, `RANK`, ...).

use std::collections::BTreeMap;

use crate::srun_io::TaskInfo;

/// Variables srun does not pass on to its tasks: berth's own and those that describe the
/// kernel srun runs in rather than the job (each task's kernel has its own).
const NODE_LOCAL: [&str; 13] = [
    "SLURM_NODEID",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_CPUS_ON_NODE",
    "SLURM_GPUS_ON_NODE",
    "SLURM_MEM_PER_NODE",
    "RANK",
    "LOCAL_RANK",
    "NODE_RANK",
    "PWD",
    "OLDPWD",
    "HOSTNAME",
    "PFIO_HTTP_BEARER_TOKEN_PATH",
];

/// How many tasks go to each of the step's nodes (kernels 0, 1, ...), in block order: the
/// job's `kernels` at most, `per_node` each unless `-n` says otherwise, then spread as evenly
/// as Slurm's block distribution does (the first nodes take one more when it does not divide).
pub fn layout(
    kernels: u32,
    default_per_node: u32,
    ntasks: Option<u32>,
    nodes: Option<u32>,
    per_node: Option<u32>,
) -> Result<Vec<u32>, String> {
    let kernels = kernels.max(1);
    let per = per_node.unwrap_or(default_per_node).max(1);
    let nodes = match (nodes, ntasks) {
        (Some(n), _) => n,
        (None, Some(t)) => t.div_ceil(per).min(kernels),
        (None, None) => kernels,
    };
    if nodes > kernels {
        return Err(format!("-N {nodes}: the job has {kernels} node(s); srun runs within the job's allocation"));
    }
    let total = match ntasks {
        Some(t) => t,
        None => nodes.checked_mul(per).ok_or("too many tasks")?,
    };
    if total < nodes {
        return Err(format!("-n {total} is fewer tasks than -N {nodes}: give each node at least one task"));
    }
    const MAX_TASKS: u32 = 1 << 16;
    if total > MAX_TASKS {
        return Err(format!("{total} tasks in one step: at most {MAX_TASKS}"));
    }
    let (base, extra) = (total / nodes, total % nodes);
    Ok((0..nodes).map(|i| base + u32::from(i < extra)).collect())
}

/// The variables srun passes on (`--export`), before the task's own.
pub fn exported(
    export: Option<&str>,
    vars: impl Iterator<Item = (String, String)>,
) -> Result<BTreeMap<String, String>, String> {
    let ours: BTreeMap<String, String> = vars
        .filter(|(k, _)| !k.starts_with("BERTH_") && !NODE_LOCAL.contains(&k.as_str()) && k != "_" && k != "SHLVL")
        .collect();
    let spec = export.unwrap_or("ALL");
    let mut items = spec.split(',').filter(|i| !i.is_empty()).peekable();
    let mut out = match items.peek().map(|i| i.to_ascii_uppercase()) {
        Some(first) if first == "ALL" => {
            items.next();
            ours.clone()
        }
        Some(first) if first == "NONE" => {
            items.next();
            BTreeMap::new()
        }
        _ => BTreeMap::new(),
    };
    for item in items {
        match item.split_once('=') {
            Some((k, v)) if !k.is_empty() => {
                out.insert(k.to_string(), v.to_string());
            }
            Some(_) => return Err(format!("--export item `{item}` has an empty name: use NAME or NAME=value")),
            None => {
                if let Some(v) = ours.get(item) {
                    out.insert(item.to_string(), v.clone());
                }
            }
        }
    }
    Ok(out)
}

/// A task's environment: `base`, then its place in the step.
pub fn task_env(
    base: &BTreeMap<String, String>,
    task: &TaskInfo,
    local: u32,
    counts: &[u32],
    step: u32,
) -> BTreeMap<String, String> {
    let mut env = base.clone();
    let total: u32 = counts.iter().sum();
    let on_node = counts.get(task.node as usize).copied().unwrap_or(1);
    let mut set = |k: &str, v: String| {
        env.insert(k.to_string(), v);
    };
    set("SLURM_PROCID", task.rank.to_string());
    set("SLURM_LOCALID", local.to_string());
    set("SLURM_NODEID", task.node.to_string());
    // The global ids of the step's tasks on this task's node, as Slurm's PMI reads them.
    let first: u32 = counts.iter().take(task.node as usize).sum();
    let on_this: Vec<String> = (first..first + on_node).map(|r| r.to_string()).collect();
    set("SLURM_GTIDS", on_this.join(","));
    set("SLURM_STEP_ID", step.to_string());
    set("SLURM_STEPID", step.to_string());
    set("SLURM_STEP_NUM_TASKS", total.to_string());
    set("SLURM_STEP_NUM_NODES", counts.len().to_string());
    set("SLURM_STEP_TASKS_PER_NODE", berth_model::hostlist::counts(counts));
    set("SLURM_NTASKS", total.to_string());
    set("SLURM_NPROCS", total.to_string());
    set("RANK", task.rank.to_string());
    set("LOCAL_RANK", local.to_string());
    set("WORLD_SIZE", total.to_string());
    set("LOCAL_WORLD_SIZE", on_node.to_string());
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_go_out_in_blocks() {
        assert_eq!(layout(2, 4, None, None, None).unwrap(), [4, 4]);
        assert_eq!(layout(2, 4, Some(5), None, None).unwrap(), [3, 2]);
        assert_eq!(layout(2, 4, Some(2), None, None).unwrap(), [2], "-n within one node's tasks");
        assert_eq!(layout(3, 1, None, Some(2), None).unwrap(), [1, 1]);
        assert_eq!(layout(2, 1, None, None, Some(3)).unwrap(), [3, 3]);
        assert_eq!(layout(1, 1, Some(4), None, None).unwrap(), [4]);
        assert!(layout(2, 1, None, Some(3), None).unwrap_err().contains("has 2 node(s)"));
        assert!(layout(2, 1, Some(1), Some(2), None).unwrap_err().contains("fewer tasks"));
    }

    #[test]
    fn task_variables() {
        let task = TaskInfo { rank: 5, node: 1, node_name: "n2".into() };
        let base = BTreeMap::from([("A".to_string(), "1".to_string())]);
        let env = task_env(&base, &task, 1, &[4, 4], 2);
        let get = |k: &str| env.get(k).map(String::as_str);
        assert_eq!(get("A"), Some("1"));
        assert_eq!((get("SLURM_PROCID"), get("SLURM_LOCALID"), get("SLURM_NODEID")), (Some("5"), Some("1"), Some("1")));
        assert_eq!((get("SLURM_STEP_ID"), get("SLURM_STEP_NUM_TASKS")), (Some("2"), Some("8")));
        assert_eq!((get("RANK"), get("LOCAL_RANK"), get("WORLD_SIZE")), (Some("5"), Some("1"), Some("8")));
        assert_eq!(get("SLURM_STEP_TASKS_PER_NODE"), Some("4(x2)"));
        assert_eq!(get("SLURM_GTIDS"), Some("4,5,6,7"), "the ranks on task 5's node");
    }

    #[test]
    fn export_selects_variables() {
        let vars = || {
            [("A", "1"), ("B", "2"), ("BERTH_STEP_TOKEN", "t"), ("SLURM_NODEID", "0"), ("SLURM_JOB_ID", "7")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
        };
        let all = exported(None, vars()).unwrap();
        assert_eq!(all.keys().collect::<Vec<_>>(), ["A", "B", "SLURM_JOB_ID"], "not berth's or the node's own");
        assert!(exported(Some("NONE"), vars()).unwrap().is_empty());
        let some = exported(Some("A,C=3"), vars()).unwrap();
        assert_eq!(some, BTreeMap::from([("A".into(), "1".into()), ("C".into(), "3".into())]));
        assert_eq!(exported(Some("ALL,C=3"), vars()).unwrap().len(), 4);
        assert!(exported(Some("=x"), vars()).is_err());
    }
}
