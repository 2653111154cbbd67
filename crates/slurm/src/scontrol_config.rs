//! `scontrol show config`: the keys tools read from Slurm's configuration, in its
//! `Key = value` layout (the key padded to 23 columns). Snakemake's slurm executor reads
//! `MaxArraySize` to size its arrays, scripts read `ClusterName` and `SLURM_VERSION`, web
//! portals `MailProg`. Each value is berth's own where berth has one (its array limits, its
//! default memory per CPU, its cluster name), else what berth does in Slurm's words
//! (`select/cons_tres`: CPUs, memory and GPUs are all scheduled); keys berth has no
//! counterpart for are left out rather than made up.

use berth_model::array::{MAX_ARRAY_INDEX, MAX_ARRAY_TASKS};

/// The name jobs see in `SLURM_CLUSTER_NAME` (the manager sets it), and that `sacct -M` and
/// `squeue -M` accept besides `all`.
pub const CLUSTER_NAME: &str = "berth";

/// The keys and their values, in Slurm's (alphabetical) order.
pub fn entries() -> Vec<(&'static str, String)> {
    let default = berth_model::ResourceRequest::default();
    let mem_per_cpu_mb = default.mem_bytes / (1 << 20) / default.cpu_milli.div_ceil(1000).max(1);
    // Slurm's MaxArraySize bounds both an index (below it) and a task count; berth's bounds
    // are an index up to MAX_ARRAY_INDEX and MAX_ARRAY_TASKS tasks: the smaller keeps both.
    let max_array = MAX_ARRAY_TASKS.min(u64::from(MAX_ARRAY_INDEX) + 1);
    vec![
        // berth keeps every job's record: sacct answers as with slurmdbd.
        ("AccountingStorageTRES", "cpu,mem,energy,node,billing,gres/gpu".into()),
        ("AccountingStorageType", "accounting_storage/slurmdbd".into()),
        ("ClusterName", CLUSTER_NAME.into()),
        ("DefMemPerCPU", mem_per_cpu_mb.to_string()),
        ("GresTypes", "gpu".into()),
        ("JobAcctGatherType", "jobacct_gather/cgroup".into()),
        // berth takes --mail-type and --mail-user but sends no mail.
        ("MailProg", "(null)".into()),
        ("MaxArraySize", max_array.to_string()),
        ("MaxMemPerNode", "UNLIMITED".into()),
        ("PriorityType", "priority/multifactor".into()),
        ("ProctrackType", "proctrack/cgroup".into()),
        ("SchedulerType", "sched/backfill".into()),
        ("SelectType", "select/cons_tres".into()),
        ("SelectTypeParameters", "CR_CPU_MEMORY".into()),
        ("SLURM_VERSION", crate::SLURM_VERSION.into()),
    ]
}

/// The whole answer, as Slurm prints it: a dated first line, then a key per line.
pub fn render(now: jiff::Timestamp) -> String {
    let mut s = format!("Configuration data as of {}\n", crate::when::slurm_time(Some(now)));
    for (key, value) in entries() {
        s.push_str(&format!("{key:<23} = {value}\n"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_tools_read_in_slurms_layout() {
        let text = render(jiff::Timestamp::UNIX_EPOCH);
        assert!(text.starts_with("Configuration data as of "), "{text}");
        assert!(text.contains("\nClusterName             = berth\n"), "{text}");
        assert!(text.contains("\nSLURM_VERSION           = 22.05.8\n"), "{text}");
        assert!(text.contains("\nDefMemPerCPU            = 1024\n"), "{text}");
        // Snakemake: `re.search(r"MaxArraySize\s*=?\s*(\d+)", out)`, less one for the last index.
        assert!(text.contains("\nMaxArraySize            = 100000\n"), "{text}");
        let longest = entries().iter().map(|(k, _)| k.len()).max().unwrap();
        assert!(longest <= 23, "a key past Slurm's column: {longest}");
    }
}
