//! CPUs, NUMA nodes and memory from sysfs.
//!
//! Reads `devices/system/cpu/online`, each CPU's `topology/{core_id,physical_package_id}`, and
//! `devices/system/node/nodeN/{cpulist,meminfo,distance}`. A machine (or container) without node
//! directories gets a single node 0 holding every online CPU and `/proc/meminfo`'s MemTotal;
//! `/proc` is found next to the sysfs root (`<sysfs_root>/../proc`) so fixture trees can carry
//! their own.

use std::path::{Path, PathBuf};

use berth_model::binding::parse_ranges;
use berth_model::{Cpu, NumaNode, Topology};
use thiserror::Error;

/// A sysfs tree that cannot be read as a topology.
#[derive(Debug, Error)]
pub enum SysfsError {
    #[error("cannot read `{path}`: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("cannot parse `{path}`: unexpected content `{content}`")]
    Parse { path: PathBuf, content: String },
}

fn read(path: &Path) -> Result<String, SysfsError> {
    std::fs::read_to_string(path).map_err(|source| SysfsError::Read { path: path.to_path_buf(), source })
}

fn read_list(path: &Path) -> Result<Vec<u32>, SysfsError> {
    let s = read(path)?;
    parse_ranges(&s).ok_or_else(|| SysfsError::Parse { path: path.to_path_buf(), content: s.trim().to_string() })
}

/// A small number file, or `None` when missing or unreadable (older kernels lack some).
fn read_u32(path: &Path) -> Option<u32> {
    read(path).ok()?.trim().parse::<i64>().ok().and_then(|v| u32::try_from(v).ok())
}

/// The `MemTotal` line of a meminfo file (`MemTotal: 123 kB` or `Node 0 MemTotal: 123 kB`) in bytes.
fn mem_total(path: &Path) -> Result<u64, SysfsError> {
    let s = read(path)?;
    let bad = || SysfsError::Parse { path: path.to_path_buf(), content: "no MemTotal line".into() };
    let line = s.lines().find(|l| l.contains("MemTotal:")).ok_or_else(bad)?;
    let kb: u64 = line.split_whitespace().rev().nth(1).and_then(|v| v.parse().ok()).ok_or_else(bad)?;
    Ok(kb * 1024)
}

/// Reads the topology (without GPUs) from the sysfs tree at `root`.
pub fn discover_sysfs(root: &Path) -> Result<Topology, SysfsError> {
    let cpu_dir = root.join("devices/system/cpu");
    let online = read_list(&cpu_dir.join("online"))?;

    let mut numa_nodes = Vec::new();
    let node_dir = root.join("devices/system/node");
    let mut node_ids: Vec<u32> = match std::fs::read_dir(&node_dir) {
        Ok(entries) => {
            entries.filter_map(|e| e.ok()?.file_name().to_str()?.strip_prefix("node")?.parse().ok()).collect()
        }
        Err(_) => Vec::new(),
    };
    node_ids.sort_unstable();
    for id in node_ids {
        let dir = node_dir.join(format!("node{id}"));
        // Offline CPUs are listed in a node's cpulist too; the node only offers the online ones.
        let cpus: Vec<u32> = read_list(&dir.join("cpulist"))?.into_iter().filter(|c| online.contains(c)).collect();
        let mem_bytes = mem_total(&dir.join("meminfo"))?;
        let distances = read(&dir.join("distance"))
            .map(|s| s.split_whitespace().filter_map(|d| d.parse().ok()).collect())
            .unwrap_or_default();
        numa_nodes.push(NumaNode { id, cpus, mem_bytes, distances });
    }
    if numa_nodes.is_empty() {
        let meminfo = root.join("../proc/meminfo");
        numa_nodes.push(NumaNode { id: 0, cpus: online.clone(), mem_bytes: mem_total(&meminfo)?, distances: vec![] });
    }

    let cpus = online
        .iter()
        .map(|&id| {
            let topo = cpu_dir.join(format!("cpu{id}/topology"));
            Cpu {
                id,
                // Without topology files every CPU is its own core in package 0.
                core: read_u32(&topo.join("core_id")).unwrap_or(id),
                package: read_u32(&topo.join("physical_package_id")).unwrap_or(0),
                numa: numa_nodes.iter().find(|n| n.cpus.contains(&id)).map_or(0, |n| n.id),
            }
        })
        .collect();
    let mem_bytes = numa_nodes.iter().map(|n| n.mem_bytes).sum();
    Ok(Topology { cpus, numa_nodes, mem_bytes, gpus: Vec::new() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name).join("sys")
    }

    #[test]
    fn two_numa_nodes_with_smt() {
        let t = discover_sysfs(&fixture("2numa-smt")).unwrap();
        assert_eq!(t.cpus.len(), 8);
        assert_eq!(t.numa_nodes.len(), 2);
        assert_eq!(t.numa_nodes[0].cpus, vec![0, 1, 4, 5]);
        assert_eq!(t.numa_nodes[1].cpus, vec![2, 3, 6, 7]);
        assert_eq!(t.numa_nodes[0].mem_bytes, 8 << 30);
        assert_eq!(t.numa_nodes[1].distances, vec![21, 10]);
        assert_eq!(t.mem_bytes, 16 << 30);
        // cpu4 is cpu0's SMT sibling: same core and package, same node.
        let c4 = t.cpus.iter().find(|c| c.id == 4).unwrap();
        assert_eq!((c4.core, c4.package, c4.numa), (0, 0, 0));
        let c6 = t.cpus.iter().find(|c| c.id == 6).unwrap();
        assert_eq!((c6.core, c6.package, c6.numa), (2, 1, 1));
    }

    #[test]
    fn machine_without_numa_info_is_one_node() {
        let t = discover_sysfs(&fixture("no-numa")).unwrap();
        assert_eq!(t.numa_nodes.len(), 1);
        assert_eq!(t.numa_nodes[0].cpus, vec![0, 1, 2]);
        assert_eq!(t.mem_bytes, 4 << 30);
        assert!(t.cpus.iter().all(|c| c.numa == 0 && c.package == 0));
        assert_eq!(t.cpus[2].core, 2);
    }

    #[test]
    fn missing_online_file_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let e = discover_sysfs(dir.path()).unwrap_err().to_string();
        assert!(e.starts_with("cannot read `") && e.contains("cpu/online"), "{e}");
    }

    #[test]
    fn this_machine() {
        let t = discover_sysfs(Path::new("/sys")).unwrap();
        assert!(!t.cpus.is_empty() && t.mem_bytes > 0);
    }
}
