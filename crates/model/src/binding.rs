//! A binding: the exact devices the manager chose for one kernel (ARCHITECTURE.md).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A share of one GPU: the whole device (`milli == 1000`) or a fraction of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct GpuShare {
    pub uuid: String,
    pub index: u32,
    /// Thousandths of the device given to the kernel.
    pub milli: u64,
}

/// The devices of one kernel on one node. The agent checks it against its own ledger and
/// enforces it (cpuset, memory nodes, memory limit, visible GPUs).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub struct Binding {
    pub node: String,
    /// Logical CPU ids reserved exclusively for the kernel.
    pub cpus: Vec<u32>,
    /// The CPU the request asked for, in millicores (may be less than `cpus.len() * 1000`).
    pub cpu_milli: u64,
    /// NUMA memory nodes the kernel may allocate from.
    pub mems: Vec<u32>,
    pub mem_bytes: u64,
    #[serde(default)]
    pub gpus: Vec<GpuShare>,
    /// A TCP port on the node reserved for the kernel: `MASTER_PORT` of a multi-node job's
    /// main kernel (chosen by the manager so two jobs never rendezvous on one port).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
}

impl Binding {
    /// The cpuset as the kernel writes it (`0-3,8`).
    pub fn cpuset(&self) -> String {
        list_to_ranges(&self.cpus)
    }

    /// The memory nodes as the kernel writes them (`0`).
    pub fn memset(&self) -> String {
        list_to_ranges(&self.mems)
    }
}

/// Formats sorted ids as a Linux list (`0-3,8`).
pub fn list_to_ranges(ids: &[u32]) -> String {
    let mut v = ids.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut out = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let start = v[i];
        let mut end = start;
        while i + 1 < v.len() && v[i + 1] == end + 1 {
            i += 1;
            end = v[i];
        }
        out.push(if start == end { start.to_string() } else { format!("{start}-{end}") });
        i += 1;
    }
    out.join(",")
}

/// Parses a Linux list (`0-3,8`) into ids; `None` if malformed.
pub fn parse_ranges(s: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
                if a > b {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_round_trip() {
        assert_eq!(list_to_ranges(&[3, 0, 1, 2, 8]), "0-3,8");
        assert_eq!(parse_ranges("0-3,8").unwrap(), vec![0, 1, 2, 3, 8]);
        assert_eq!(parse_ranges("").unwrap(), Vec::<u32>::new());
        assert!(parse_ranges("3-1").is_none());
        assert!(parse_ranges("a").is_none());
    }
}
