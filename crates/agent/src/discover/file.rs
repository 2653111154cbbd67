//! The `--topology` TOML format: a compact description of a machine that replaces discovery.
//!
//! ```toml
//! # One table per NUMA node, numbered 0, 1, ... in file order.
//! [[numa]]
//! cpus = "0-15"            # Linux list of logical CPU ids
//! smt = 2                  # optional (default 1): consecutive CPUs of the list share a core
//! memory = "64GiB"         # the node's memory (binary or decimal units, see model::parse_mem)
//! package = 0              # optional socket id (default: the node's number)
//! distances = [10, 21]     # optional SLIT row
//! gpus = 4                 # optional number of GPUs attached to this node
//! gpu_model = "NVIDIA H100"  # optional (default "berth fake GPU")
//! gpu_memory = "80GiB"     # required when gpus > 0
//! ```
//!
//! GPUs are numbered across the file in order and named `GPU-fake-<node>-<index>` like
//! `--fake-gpus`. Errors name the line and the field (`line 4, numa[0].memory: ...`).

use berth_model::binding::parse_ranges;
use berth_model::{Cpu, Gpu, NumaNode, Topology, parse_mem};
use serde::Deserialize;
use thiserror::Error;
use toml::Spanned;

/// A topology file that cannot be used; the caller prefixes the file name.
#[derive(Debug, Error)]
pub enum TopologyFileError {
    #[error("line {line}: {message}")]
    Syntax { line: usize, message: String },
    #[error("line {line}, {field}: {message}")]
    Field { line: usize, field: String, message: String },
    #[error("no [[numa]] tables: describe at least one NUMA node")]
    Empty,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    numa: Vec<Spanned<NumaEntry>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NumaEntry {
    cpus: Spanned<String>,
    #[serde(default)]
    smt: Option<Spanned<u32>>,
    memory: Spanned<String>,
    #[serde(default)]
    package: Option<u32>,
    #[serde(default)]
    distances: Vec<u32>,
    #[serde(default)]
    gpus: u32,
    #[serde(default)]
    gpu_model: Option<String>,
    #[serde(default)]
    gpu_memory: Option<Spanned<String>>,
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].bytes().filter(|&b| b == b'\n').count() + 1
}

/// Parses a topology file; `node` names the fake GPUs.
pub fn parse_topology_file(text: &str, node: &str) -> Result<Topology, TopologyFileError> {
    let file: File = toml::from_str(text).map_err(|e| TopologyFileError::Syntax {
        line: e.span().map_or(1, |s| line_of(text, s.start)),
        message: e.message().trim().to_string(),
    })?;
    if file.numa.is_empty() {
        return Err(TopologyFileError::Empty);
    }
    let field = |span: std::ops::Range<usize>, name: String, message: String| TopologyFileError::Field {
        line: line_of(text, span.start),
        field: name,
        message,
    };

    let mut t = Topology::default();
    let mut next_core = 0u32;
    for (i, entry) in file.numa.iter().enumerate() {
        let id = i as u32;
        let span = entry.span();
        let e = entry.get_ref();
        let cpus = parse_ranges(e.cpus.get_ref()).filter(|c| !c.is_empty()).ok_or_else(|| {
            field(
                e.cpus.span(),
                format!("numa[{i}].cpus"),
                format!("invalid CPU list `{}`: use a Linux list such as 0-15 or 0-7,16-23", e.cpus.get_ref()),
            )
        })?;
        if let Some(dup) = cpus.iter().find(|c| t.cpus.iter().any(|o: &Cpu| o.id == **c)) {
            return Err(field(
                e.cpus.span(),
                format!("numa[{i}].cpus"),
                format!("CPU {dup} is already in another NUMA node"),
            ));
        }
        let smt = match &e.smt {
            Some(s) if *s.get_ref() == 0 => {
                return Err(field(s.span(), format!("numa[{i}].smt"), "must be at least 1".into()));
            }
            Some(s) => *s.get_ref(),
            None => 1,
        };
        let mem_bytes = parse_mem(e.memory.get_ref())
            .map_err(|err| field(e.memory.span(), format!("numa[{i}].memory"), err.to_string()))?;
        let package = e.package.unwrap_or(id);
        for (k, &cpu) in cpus.iter().enumerate() {
            t.cpus.push(Cpu { id: cpu, core: next_core + k as u32 / smt, package, numa: id });
        }
        next_core += (cpus.len() as u32).div_ceil(smt);
        if e.gpus > 0 {
            let gm = e.gpu_memory.as_ref().ok_or_else(|| {
                field(
                    span.clone(),
                    format!("numa[{i}].gpu_memory"),
                    "required when gpus is set, e.g. gpu_memory = \"80GiB\"".into(),
                )
            })?;
            let gpu_mem = parse_mem(gm.get_ref())
                .map_err(|err| field(gm.span(), format!("numa[{i}].gpu_memory"), err.to_string()))?;
            for _ in 0..e.gpus {
                let index = t.gpus.len() as u32;
                t.gpus.push(Gpu {
                    uuid: format!("GPU-fake-{node}-{index}"),
                    index,
                    model: e.gpu_model.clone().unwrap_or_else(|| "berth fake GPU".into()),
                    mem_bytes: gpu_mem,
                    numa: Some(id),
                });
            }
        }
        t.numa_nodes.push(NumaNode { id, cpus, mem_bytes, distances: e.distances.clone() });
    }
    t.mem_bytes = t.numa_nodes.iter().map(|n| n.mem_bytes).sum();
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_file_parses() {
        let text = include_str!("../../examples/topology-2numa-4gpu.toml");
        let t = parse_topology_file(text, "n1").unwrap();
        assert_eq!(t.numa_nodes.len(), 2);
        assert_eq!(t.cpus.len(), 32);
        assert_eq!(t.mem_bytes, 128 << 30);
        assert_eq!(t.gpus.len(), 4);
        assert_eq!(t.gpus[3].uuid, "GPU-fake-n1-3");
        assert_eq!(t.gpus[3].numa, Some(1));
        assert_eq!(t.gpus[0].model, "NVIDIA H100");
        assert_eq!(t.gpus[0].mem_bytes, 80 << 30);
        // smt = 2: CPUs 0 and 1 share a core, 2 starts the next; node 1 continues the numbering.
        assert_eq!(t.cpus[0].core, t.cpus[1].core);
        assert_ne!(t.cpus[1].core, t.cpus[2].core);
        assert_eq!(t.cpus[16].numa, 1);
        assert_eq!(t.cpus[16].package, 1);
        assert!(t.cpus[16].core > t.cpus[15].core);
        assert_eq!(t.numa_nodes[0].distances, vec![10, 21]);
    }

    #[test]
    fn minimal_file_without_gpus() {
        let t = parse_topology_file("[[numa]]\ncpus = \"0-1\"\nmemory = \"2GiB\"\n", "n").unwrap();
        assert_eq!(t.cpus.len(), 2);
        assert!(t.gpus.is_empty());
        assert_eq!(t.cpus[1].core, 1);
    }

    fn err(text: &str) -> String {
        parse_topology_file(text, "n").unwrap_err().to_string()
    }

    #[test]
    fn bad_files_name_line_and_field() {
        let e = err("[[numa]]\ncpus = \"0-3\"\nmemory = \"64\"\n");
        assert!(e.starts_with("line 3, numa[0].memory: invalid memory size `64`"), "{e}");
        let e = err("[[numa]]\ncpus = \"3-1\"\nmemory = \"1GiB\"\n");
        assert!(e.starts_with("line 2, numa[0].cpus: invalid CPU list `3-1`"), "{e}");
        let e = err("[[numa]]\ncpus = \"0\"\nmemory = \"1GiB\"\ngpus = 1\n");
        assert!(e.contains("numa[0].gpu_memory: required"), "{e}");
        let e = err("[[numa]]\ncpus = \"0\"\nmemory = \"1GiB\"\ncpu = 2\n");
        assert!(e.starts_with("line 4: unknown field `cpu`"), "{e}");
        let e = err("[[numa]]\nmemory = \"1GiB\"\n");
        assert!(e.contains("missing field `cpus`"), "{e}");
        let e = err("[[numa]]\ncpus = \"0-1\"\nmemory = \"1GiB\"\n[[numa]]\ncpus = \"1\"\nmemory = \"1GiB\"\n");
        assert!(e.starts_with("line 5, numa[1].cpus: CPU 1 is already"), "{e}");
        let e = err("[[numa]]\ncpus = \"0\"\nmemory = \"1GiB\"\nsmt = 0\n");
        assert!(e.starts_with("line 4, numa[0].smt"), "{e}");
        assert!(err("").contains("no [[numa]] tables"));
        assert!(err("[[numa]\n").starts_with("line 1:"));
    }
}
