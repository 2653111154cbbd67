//! `sinfo`: berth's queues as Slurm partitions and its nodes, partition-oriented by default
//! (a line per partition and node state), summarized with `-s` (a line per partition) or
//! node-oriented with `-N` (a line per node), long with `-l`, in Slurm's `%` formats
//! ([`crate::format`]) and default layouts.

use std::io::Write;

use berth_model::api::{NodeState, NodeView, QueueView};
use clap::Parser;

use crate::format::{self, Item};
use crate::states::node_state;
use crate::when::squeue_duration;
use crate::{Connect, Result};

/// Slurm's defaults; `#` is the widest partition name or node list, at least 9 (as Slurm
/// prints them: `-N` right-justifies the partition).
const DEFAULT: &str = "%#P %.5a %.10l %.6D %.6t %N";
const NODES: &str = "%#N %.6D %.#P %6t";
/// `-s`: a line per partition, its nodes counted by state.
const SUMMARIZE: &str = "%#P %.5a %.10l %.16F  %N";
/// `-l` and `-N -l`.
const LONG: &str = "%#P %.5a %.10l %.10s %.4r %.8h %.10g %.6D %.11T %N";
const NODES_LONG: &str = "%#N %.6D %#P %.11T %.4c %.8z %.6m %.8d %.6w %.8f %20E";

/// view information about berth nodes and partitions (Slurm's sinfo)
#[derive(Debug, Parser)]
#[command(name = "sinfo", disable_help_flag = true, version = crate::SLURM_VERSION, display_name = "slurm", infer_long_args = true)]
pub struct Args {
    /// A line per node
    #[arg(short = 'N', long = "Node")]
    node: bool,
    /// Do not print a header
    #[arg(short = 'h', long = "noheader")]
    noheader: bool,
    /// Format: `%[.][width]code` fields and text, e.g. "%N %t"
    #[arg(short = 'o', long = "format", env = "SINFO_FORMAT", value_name = "FORMAT")]
    format: Option<String>,
    /// Only these partitions (berth queues, comma-separated)
    #[arg(short = 'p', long = "partition", value_name = "PARTITIONS")]
    partitions: Option<String>,
    /// Only these nodes (comma-separated)
    #[arg(short = 'n', long = "nodes", value_name = "NODES")]
    nodes: Option<String>,
    /// Only nodes in these states (idle, mix, alloc, drain, down, ...)
    #[arg(short = 't', long = "states", value_name = "STATES")]
    states: Option<String>,
    /// Only nodes that respond
    #[arg(short = 'r', long = "responding")]
    responding: bool,
    /// A line per partition, its nodes counted by state (allocated/idle/other/total)
    #[arg(short = 's', long = "summarize")]
    summarize: bool,
    /// More columns: job sizes, oversubscription, groups; with -N, sockets, memory, features
    #[arg(short = 'l', long = "long")]
    long: bool,
    /// Print help
    #[arg(long = "help", action = clap::ArgAction::Help)]
    help: Option<bool>,
}

/// A line: a partition and the nodes it shows.
struct Row<'a> {
    queue: Option<&'a QueueView>,
    partition: String,
    nodes: Vec<&'a NodeView>,
}

/// Prints the lines `args` ask for to `out`.
pub async fn run(args: Args, connect: &dyn Connect, out: &mut dyn Write) -> Result<()> {
    let spec = args.format.as_deref().unwrap_or(match (args.summarize, args.node, args.long) {
        (true, _, _) => SUMMARIZE,
        (false, true, true) => NODES_LONG,
        (false, true, false) => NODES,
        (false, false, true) => LONG,
        (false, false, false) => DEFAULT,
    });
    let mut items = format::parse(&unhash(spec));
    for c in format::unknown_codes(&items, |c| header(c).is_some()) {
        eprintln!("sinfo: error: Invalid node format specification: {c}");
    }
    let client = connect()?;
    let (queues, nodes) = (client.queues().await?, client.nodes().await?);
    let shows_state = items.iter().any(|i| matches!(i, Item::Field { code: 't' | 'T', .. }));
    let by_state = !args.summarize && (shows_state || args.node);
    let rows = rows(&args, &queues, &nodes, by_state);
    widen(spec, &mut items, &rows);
    if args.long && !args.noheader {
        // Slurm's long listing starts with the time it was taken.
        writeln!(out, "{}", jiff::Zoned::now().strftime("%a %b %e %H:%M:%S %Y"))?;
    }
    if !args.noheader {
        writeln!(out, "{}", format::render(&items, |c| header(c).map(str::to_string)))?;
    }
    for r in &rows {
        writeln!(out, "{}", format::render(&items, |c| value(c, r)))?;
    }
    Ok(())
}

/// The lines: per partition, its nodes grouped by state (a node per line with `-N`).
fn rows<'a>(args: &Args, queues: &'a [QueueView], nodes: &'a [NodeView], by_state: bool) -> Vec<Row<'a>> {
    let (want_parts, want_nodes) = (crate::names(&args.partitions), crate::names(&args.nodes));
    let want_states = crate::names(&args.states);
    let shown = |n: &NodeView| {
        (want_nodes.is_empty() || want_nodes.contains(&n.name))
            && (!args.responding || n.connected)
            && (want_states.is_empty() || want_states.iter().any(|s| state_matches(s, n)))
    };
    let mut rows = Vec::new();
    for q in queues.iter().filter(|q| want_parts.is_empty() || want_parts.contains(&q.name)) {
        let partition = if q.name == berth_model::DEFAULT_QUEUE { format!("{}*", q.name) } else { q.name.clone() };
        let mut members: Vec<&NodeView> = nodes.iter().filter(|n| n.queue == q.name && shown(n)).collect();
        members.sort_by(|a, b| a.name.cmp(&b.name));
        if args.node {
            rows.extend(members.into_iter().map(|n| Row {
                queue: Some(q),
                partition: partition.clone(),
                nodes: vec![n],
            }));
        } else if by_state && !members.is_empty() {
            let mut groups: Vec<(String, Vec<&NodeView>)> = Vec::new();
            for n in members {
                let s = node_state(n).0;
                match groups.iter_mut().find(|(g, _)| *g == s) {
                    Some((_, v)) => v.push(n),
                    None => groups.push((s, vec![n])),
                }
            }
            rows.extend(groups.into_iter().map(|(_, nodes)| Row {
                queue: Some(q),
                partition: partition.clone(),
                nodes,
            }));
        } else if want_nodes.is_empty() && want_states.is_empty() || !members.is_empty() {
            rows.push(Row { queue: Some(q), partition, nodes: members });
        }
    }
    if args.node {
        // Nodes of no known queue still show, as Slurm shows nodes in no partition.
        for n in nodes.iter().filter(|n| !queues.iter().any(|q| q.name == n.queue) && shown(n)) {
            rows.push(Row { queue: None, partition: n.queue.clone(), nodes: vec![n] });
        }
    }
    rows
}

/// Whether node `n` is in the state named `s` (sinfo's words, any case; `drain` is both
/// draining and drained).
fn state_matches(s: &str, n: &NodeView) -> bool {
    let (short, long) = node_state(n);
    let (short, long) = (short.trim_end_matches('*'), long.trim_end_matches('*'));
    let s = s.to_ascii_lowercase();
    s == short || s == long || (s == "drain" && matches!(n.state, NodeState::Draining | NodeState::Drained))
}

/// The format without its `#` widths, for [`format::parse`] (as width 0, for [`widen`]).
fn unhash(spec: &str) -> String {
    spec.replace("%#", "%").replace("%.#", "%.")
}

/// Gives `%#P` and `%#N` (which `parse` read as width 0) the widest value's width, at
/// least 9.
fn widen(spec: &str, items: &mut [Item], rows: &[Row]) {
    let hashed: Vec<char> = spec
        .match_indices('#')
        .filter(|(i, _)| spec[..*i].ends_with('%') || spec[..*i].ends_with("%."))
        .filter_map(|(i, _)| spec[i + 1..].chars().next())
        .collect();
    for item in items.iter_mut() {
        if let Item::Field { code, width, .. } = item
            && *width == 0
            && hashed.contains(code)
        {
            let widest = rows.iter().filter_map(|r| value(*code, r)).map(|v| v.chars().count()).max().unwrap_or(0);
            *width = widest.max(9);
        }
    }
}

fn header(code: char) -> Option<&'static str> {
    Some(match code {
        'P' | 'R' => "PARTITION",
        'a' => "AVAIL",
        'l' => "TIMELIMIT",
        'L' => "DEFAULTTIME",
        'D' => "NODES",
        't' | 'T' => "STATE",
        'N' => "NODELIST",
        'n' => "HOSTNAMES",
        'o' => "NODE_ADDR",
        'c' => "CPUS",
        'm' => "MEMORY",
        'G' => "GRES",
        'C' => "CPUS(A/I/O/T)",
        'F' => "NODES(A/I/O/T)",
        'A' => "NODES(A/I)",
        'O' => "CPU_LOAD",
        'e' => "FREE_MEM",
        'E' => "REASON",
        'v' => "VERSION",
        's' => "JOB_SIZE",
        'r' => "ROOT",
        'h' => "OVERSUBS",
        'g' => "GROUPS",
        'z' => "S:C:T",
        'd' => "TMP_DISK",
        'w' => "WEIGHT",
        'f' => "AVAIL_FEATURES",
        _ => return None,
    })
}

/// Whether a node takes no jobs now (Slurm's "other": down or drained).
fn other(n: &NodeView) -> bool {
    matches!(n.state, NodeState::Lost | NodeState::Drained)
}

/// The same value for every node, or the smallest followed by `+` (Slurm's `4+`).
fn per_node(nodes: &[&NodeView], f: impl Fn(&NodeView) -> u64) -> String {
    let vals: Vec<u64> = nodes.iter().map(|n| f(n)).collect();
    match (vals.iter().min(), vals.iter().max()) {
        (Some(a), Some(b)) if a == b => a.to_string(),
        (Some(a), Some(_)) => format!("{a}+"),
        _ => "0".into(),
    }
}

fn value(code: char, r: &Row) -> Option<String> {
    let ns = &r.nodes;
    let first = ns.first();
    let names = || format::hostlist(&ns.iter().map(|n| n.name.clone()).collect::<Vec<_>>());
    let alloc = |n: &&&NodeView| !other(n) && node_state(n).0.trim_end_matches('*') != "idle";
    Some(match code {
        'P' => r.partition.clone(),
        'R' => r.partition.trim_end_matches('*').to_string(),
        'a' => "up".into(),
        'l' => r.queue.and_then(|q| q.policy.max_time_limit_secs).map_or("infinite".into(), squeue_duration),
        'L' => r.queue.map_or("n/a".into(), |q| squeue_duration(q.policy.default_time_limit_secs)),
        'D' => ns.len().to_string(),
        't' => first.map_or("n/a".into(), |n| node_state(n).0),
        'T' => first.map_or("n/a".into(), |n| node_state(n).1),
        'N' | 'n' => names(),
        'o' => ns.iter().map(|n| n.address.clone().unwrap_or_else(|| n.name.clone())).collect::<Vec<_>>().join(","),
        'c' => per_node(ns, |n| u64::from(n.cpus_total)),
        'm' => per_node(ns, |n| n.mem_total >> 20),
        'G' => match per_node(ns, |n| n.gpus.len() as u64).as_str() {
            "0" => "(null)".into(),
            g => format!("gpu:{g}"),
        },
        'C' => {
            let sum = |f: &dyn Fn(&NodeView) -> u64| ns.iter().map(|n| f(n)).sum::<u64>();
            let total = sum(&|n| u64::from(n.cpus_total));
            let a = sum(&|n| if other(n) { 0 } else { u64::from(n.cpus_used) });
            let o = sum(&|n| if other(n) { u64::from(n.cpus_total) } else { 0 });
            format!("{a}/{}/{o}/{total}", total - a - o)
        }
        'F' | 'A' => {
            let a = ns.iter().filter(alloc).count();
            let o = ns.iter().filter(|n| other(n)).count();
            let i = ns.len() - a - o;
            if code == 'A' { format!("{a}/{i}") } else { format!("{a}/{i}/{o}/{}", ns.len()) }
        }
        'O' => first.and_then(|n| n.cpus_busy).map_or("N/A".into(), |b| format!("{b:.2}")),
        'e' => first
            .and_then(|n| n.mem_in_use.map(|u| (n.mem_total.saturating_sub(u) >> 20).to_string()))
            .unwrap_or("N/A".into()),
        'E' => first.and_then(|n| n.drain_reason.clone()).unwrap_or_else(|| "none".into()),
        'v' => first.map_or("N/A".into(), |n| n.version.clone()),
        // What berth does not limit or configure, in Slurm's words for "no limit".
        's' => "1-infinite".into(),
        'r' => "no".into(),
        'h' => "NO".into(),
        'g' => "all".into(),
        'd' => "0".into(),
        'w' => "1".into(),
        'z' => first.map_or("N/A".into(), |n| format!("1:{}:1", n.cpus_total)),
        // A node's labels are what `-C/--constraint` matches.
        'f' => match first.map(|n| n.labels.keys().cloned().collect::<Vec<_>>().join(",")) {
            Some(l) if !l.is_empty() => l,
            _ => "(null)".into(),
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    /// The expected lines are real Slurm's, with its node names.
    fn default_layouts_byte_for_byte() {
        let rows: Vec<Row> = Vec::new();
        let mut items = format::parse(&unhash(DEFAULT));
        widen(DEFAULT, &mut items, &rows);
        let head = format::render(&items, |c| header(c).map(str::to_string));
        assert_eq!(head, "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST");
        let mut items = format::parse(&unhash(NODES));
        widen(NODES, &mut items, &rows);
        let head = format::render(&items, |c| header(c).map(str::to_string));
        assert_eq!(head, "NODELIST   NODES PARTITION STATE ");
        let node = |name: &str, cpus_used: u32| -> NodeView {
            serde_json::from_value(serde_json::json!({
                "name": name, "state": "ready", "connected": true, "queue": "default", "version": "1",
                "last_heartbeat": null, "cpus_total": 4, "cpus_used": cpus_used, "mem_total": 8589934592u64,
                "mem_used": 0, "gpus": [], "running_jobs": 0,
                "topology": berth_model::Topology::default()
            }))
            .unwrap()
        };
        let (n1, n2) = (node("b3", 0), node("b4", 4));
        let rows = vec![
            Row { queue: None, partition: "debug*".into(), nodes: vec![&n1] },
            Row { queue: None, partition: "debug*".into(), nodes: vec![&n2] },
        ];
        let lines: Vec<String> = rows.iter().map(|r| format::render(&items, |c| value(c, r))).collect();
        assert_eq!(lines, ["b3             1    debug* idle  ", "b4             1    debug* alloc "]);
        let mut items = format::parse(&unhash(DEFAULT));
        widen(DEFAULT, &mut items, &rows);
        let row = Row { queue: None, partition: "normal*".into(), nodes: vec![&n1, &n2] };
        assert_eq!(format::render(&items, |c| value(c, &row)), "normal*      up   infinite      2   idle b[3-4]");
        // -s and -l, headers as Slurm 22.05 prints them.
        for (spec, head, line) in [
            (
                SUMMARIZE,
                "PARTITION AVAIL  TIMELIMIT   NODES(A/I/O/T)  NODELIST",
                "normal*      up   infinite          1/1/0/2  b[3-4]",
            ),
            (
                LONG,
                "PARTITION AVAIL  TIMELIMIT   JOB_SIZE ROOT OVERSUBS     GROUPS  NODES       STATE NODELIST",
                "normal*      up   infinite 1-infinite   no       NO        all      2        idle b[3-4]",
            ),
        ] {
            let mut items = format::parse(&unhash(spec));
            widen(spec, &mut items, &[]);
            assert_eq!(format::render(&items, |c| header(c).map(str::to_string)), head);
            assert_eq!(format::render(&items, |c| value(c, &row)), line);
        }
    }
}
