//! `scontrol show node [NAME]` and `show partition [NAME]`: berth's nodes and queues in
//! Slurm's `Key=Value` layout, briefly (what `sinfo` reads, one record per node or queue).

use std::io::Write;

use berth_client::Client;
use berth_model::api::NodeView;

use crate::{Error, Result};

/// Prints the nodes (all, or the one named), a blank line between records.
pub async fn show_nodes(client: &Client, name: Option<&str>, oneliner: bool, out: &mut dyn Write) -> Result<()> {
    let nodes: Vec<NodeView> = client.nodes().await?.into_iter().filter(|n| name.is_none_or(|w| n.name == w)).collect();
    if let (Some(w), true) = (name, nodes.is_empty()) {
        return Err(Error::failed(format!("Node {w} not found")));
    }
    let records: Vec<String> = nodes.iter().map(|n| layout(&node_lines(n), oneliner)).collect();
    writeln!(out, "{}", records.join(if oneliner { "\n" } else { "\n\n" }))?;
    Ok(())
}

/// Prints the queues (all, or the one named) as partitions.
pub async fn show_partitions(client: &Client, name: Option<&str>, oneliner: bool, out: &mut dyn Write) -> Result<()> {
    let queues: Vec<_> = client.queues().await?.into_iter().filter(|q| name.is_none_or(|w| q.name == w)).collect();
    if let (Some(w), true) = (name, queues.is_empty()) {
        return Err(Error::failed(format!("Partition {w} not found")));
    }
    let nodes = client.nodes().await?;
    let records: Vec<String> = queues
        .iter()
        .map(|q| {
            let names: Vec<String> = nodes.iter().filter(|n| n.queue == q.name).map(|n| n.name.clone()).collect();
            let cpus: u32 = nodes.iter().filter(|n| n.queue == q.name).map(|n| n.cpus_total).sum();
            let nodelist = if names.is_empty() { "(null)".into() } else { crate::format::hostlist(&names) };
            let lines = vec![
                vec![format!("PartitionName={}", q.name)],
                vec![format!("Nodes={nodelist}")],
                vec!["State=UP".into(), format!("TotalCPUs={cpus}"), format!("TotalNodes={}", q.nodes)],
                vec![format!("PendingJobs={}", q.pending), format!("RunningJobs={}", q.running)],
            ];
            layout(&lines, oneliner)
        })
        .collect();
    writeln!(out, "{}", records.join(if oneliner { "\n" } else { "\n\n" }))?;
    Ok(())
}

fn node_lines(n: &NodeView) -> Vec<Vec<String>> {
    let gpus = n.gpus.len();
    let gres = if gpus > 0 { format!("gpu:{gpus}") } else { "(null)".into() };
    let (_, state) = crate::states::node_state(n);
    let mut lines = vec![
        vec![format!("NodeName={}", n.name)],
        vec![format!("NodeAddr={}", n.address.as_deref().unwrap_or(&n.name))],
        vec![format!("CPUAlloc={}", n.cpus_used), format!("CPUTot={}", n.cpus_total)],
        vec![format!("RealMemory={}", n.mem_total >> 20), format!("AllocMem={}", n.mem_used >> 20)],
        vec![format!("Gres={gres}")],
        vec![format!("State={}", state.to_ascii_uppercase()), format!("Partitions={}", n.queue)],
        vec![format!("Version={}", n.version)],
    ];
    if let Some(r) = &n.drain_reason {
        lines.push(vec![format!("Reason={r}")]);
    }
    lines
}

/// Records as `scontrol` prints them: the first line, then the others indented, or all on
/// one line.
pub fn layout(lines: &[Vec<String>], oneliner: bool) -> String {
    if oneliner {
        return lines.iter().flatten().cloned().collect::<Vec<_>>().join(" ");
    }
    let mut out = lines.first().map(|l| l.join(" ")).unwrap_or_default();
    for l in lines.iter().skip(1) {
        out.push_str("\n   ");
        out.push_str(&l.join(" "));
    }
    out
}
