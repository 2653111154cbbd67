//! `berth nodes`: each node's state and use, then each GPU with its free share; `berth nodes
//! drain|undrain NODE` takes a node out of (or back into) scheduling, like `scontrol update
//! nodename=N state=drain` or `kubectl drain`.

use std::process::ExitCode;

use berth_model::api::{DrainRequest, NodeState, NodeView};
use berth_model::{format_bytes, format_gpu_milli};
use clap::{Args, Subcommand};

use crate::client::Client;
use crate::output::{self, OutputArgs};

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct NodesArgs {
    #[command(subcommand)]
    pub command: Option<NodesCommand>,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Subcommand)]
pub enum NodesCommand {
    /// Let the node's running jobs finish and start no new ones there (admin)
    Drain {
        node: String,
        /// Why, shown in `berth nodes` (e.g. "disk replacement")
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Let a drained node take jobs again (admin)
    Undrain {
        node: String,
        #[command(flatten)]
        output: OutputArgs,
    },
}

pub async fn run(args: NodesArgs) -> anyhow::Result<ExitCode> {
    let client = crate::client::from_env()?;
    let (node, output, drain) = match args.command {
        None => return list(&client, &args.output).await,
        Some(NodesCommand::Drain { node, reason, output }) => (node, output, Some(DrainRequest { reason })),
        Some(NodesCommand::Undrain { node, output }) => (node, output, None),
    };
    let draining = drain.is_some();
    let n = client.drain_node(&node, drain.as_ref()).await?;
    if output.json() {
        output::print_json(&n)?;
        return Ok(ExitCode::SUCCESS);
    }
    // Only a drain waits for jobs; after an undrain new jobs may start there at once.
    let running = if draining { n.running_jobs } else { 0 };
    let jobs = match running {
        0 => String::new(),
        1 => ": 1 job still running there".into(),
        j => format!(": {j} jobs still running there"),
    };
    println!("node {} is {}{jobs}", n.name, n.state);
    Ok(ExitCode::SUCCESS)
}

async fn list(client: &Client, out: &OutputArgs) -> anyhow::Result<ExitCode> {
    let nodes = client.nodes().await?;
    if out.json() {
        output::print_json(&nodes)?;
        return Ok(ExitCode::SUCCESS);
    }
    if nodes.is_empty() {
        println!("no nodes: start an agent with `berth agent --manager URL --join-token TOKEN`");
        return Ok(ExitCode::SUCCESS);
    }
    output::print_table(node_table(&nodes));
    if nodes.iter().any(|n| !n.gpus.is_empty()) {
        println!();
        output::print_table(gpu_table(&nodes));
    }
    Ok(ExitCode::SUCCESS)
}

/// The state column: `ready`, `draining (disk swap)`, `ready (disconnected)`, ...
fn state_cell(n: &NodeView) -> String {
    match (&n.drain_reason, n.connected) {
        (Some(r), _) if n.state != NodeState::Lost => format!("{} ({r})", n.state),
        (_, false) if n.state != NodeState::Lost => format!("{} (disconnected)", n.state),
        _ => n.state.to_string(),
    }
}

fn node_table(nodes: &[NodeView]) -> comfy_table::Table {
    let mut t = output::table([
        "NAME",
        "STATE",
        "ADDRESS",
        "QUEUE",
        "FEATURES",
        "CPUS",
        "MEM",
        "GPUS",
        "IN USE",
        "JOBS",
        "HEARTBEAT",
        "VERSION",
    ]);
    for n in nodes {
        let gpu_used: u64 = n.gpus.iter().map(|g| g.used_milli).sum();
        let gpu_total: u64 = n.gpus.iter().map(|g| g.total_milli).sum();
        t.add_row([
            n.name.clone(),
            state_cell(n),
            n.address.clone().unwrap_or_else(|| "-".into()),
            n.queue.clone(),
            features(n),
            format!("{}/{}", n.cpus_used, n.cpus_total),
            format!("{}/{}", format_bytes(n.mem_used), format_bytes(n.mem_total)),
            format!("{}/{}", format_gpu_milli(gpu_used), format_gpu_milli(gpu_total)),
            in_use(n),
            n.running_jobs.to_string(),
            n.last_heartbeat.map(|h| format!("{} ago", output::age(h))).unwrap_or_else(|| "-".into()),
            n.version.clone(),
        ]);
    }
    t
}

/// What the node offers to `--constraint`: its labels, `KEY=VALUE` (a feature is a key, or a
/// whole label: docs/slurm.md); `-` for none.
fn features(n: &NodeView) -> String {
    let labels: Vec<String> = n.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    if labels.is_empty() { "-".into() } else { labels.join(",") }
}

/// What the node's jobs use now, as measured (`1.9 cpu, 210MiB`); `-` before a sample.
fn in_use(n: &NodeView) -> String {
    let mut parts = Vec::new();
    if let Some(c) = n.cpus_busy {
        parts.push(format!("{c:.1} cpu"));
    }
    if let Some(m) = n.mem_in_use {
        parts.push(format_bytes(m));
    }
    if parts.is_empty() { "-".into() } else { parts.join(", ") }
}

fn gpu_table(nodes: &[NodeView]) -> comfy_table::Table {
    let mut t = output::table(["NODE", "GPU", "MODEL", "UUID", "USED", "FREE", "TOTAL", "BUSY"]);
    for n in nodes {
        for g in &n.gpus {
            t.add_row([
                n.name.clone(),
                g.index.to_string(),
                g.model.clone(),
                g.uuid.clone(),
                format_gpu_milli(g.used_milli),
                format_gpu_milli(g.total_milli.saturating_sub(g.used_milli)),
                format_gpu_milli(g.total_milli),
                g.utilization.map(|u| format!("{:.0}%", u * 100.0)).unwrap_or_else(|| "-".into()),
            ]);
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::Topology;
    use berth_model::api::GpuView;

    #[test]
    fn fractions_per_gpu() {
        let n = NodeView {
            name: "n1".into(),
            state: NodeState::Draining,
            drain_reason: Some("disk swap".into()),
            address: Some("10.0.0.1".into()),
            connected: true,
            queue: "default".into(),
            labels: Default::default(),
            version: "0.1.0".into(),
            last_heartbeat: Some(jiff::Timestamp::now()),
            cpus_total: 16,
            cpus_used: 4,
            mem_total: 64 << 30,
            mem_used: 16 << 30,
            cpus_busy: Some(1.94),
            mem_in_use: Some(210 << 20),
            gpus: vec![GpuView {
                index: 0,
                uuid: "GPU-1".into(),
                model: "H100".into(),
                total_milli: 1000,
                used_milli: 500,
                utilization: Some(0.42),
                memory_used_bytes: Some(1 << 30),
            }],
            running_jobs: 1,
            topology: Topology::default(),
            containers: Default::default(),
        };
        let nodes: Vec<String> = node_table(std::slice::from_ref(&n)).lines().collect();
        assert!(nodes[1].contains("4/16") && nodes[1].contains("16GiB/64GiB") && nodes[1].contains("0.5/1"));
        assert!(nodes[1].contains("draining (disk swap)") && nodes[1].contains("10.0.0.1"), "{nodes:?}");
        let gpus: Vec<String> = gpu_table(&[n]).lines().collect();
        assert!(gpus[1].contains("H100") && gpus[1].contains("GPU-1") && gpus[1].contains("42%"), "{gpus:?}");
        assert!(nodes[1].contains("1.9 cpu, 210MiB"), "{nodes:?}");
    }
}
