//! A tiny scenario language for scheduler tests, so that each case reads as data:
//!
//! ```text
//! queue default skip=2          # or `strict` (the default when no queue line is given)
//! node n1 cpus=8 mem=32GiB gpus=1 numa=2 smt queue=batch down
//! job 1 cpus=2 mem=4GiB gpus=0.5 prio=5 nodes=2 numa=require-local queue=batch
//! pass                          # run schedule(), print it, commit the starts
//! finish 1                      # release job 1's bindings
//! down n1 / up n1               # set_schedulable
//! ```
//!
//! [`run`] returns the printed passes, for an insta snapshot.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt::Write;

use berth_model::{Binding, Cpu, Gpu, NumaNode, NumaPolicy, ResourceRequest, Topology, format_bytes};
use berth_model::{JobId, format_gpu_milli, parse_cpus, parse_gpus, parse_mem};
use berth_sched::{HeadOfLine, NO_FAIR_SHARE, NodeLedger, PassInput, PassOutput, PendingJob, QueueConfig, schedule};

/// `cpus` logical CPUs and `mem` bytes split evenly over `numa` nodes; with `smt` two threads
/// per core numbered like Linux (core c has CPUs c and c + cores); `gpus` spread over nodes.
pub fn topology(cpus: u32, mem: u64, gpus: u32, numa: u32, smt: bool) -> Topology {
    let mut t = Topology { mem_bytes: mem, ..Default::default() };
    let threads = if smt { 2 } else { 1 };
    let cores = cpus / threads;
    for c in 0..cores {
        let n = c * numa / cores.max(1);
        for th in 0..threads {
            t.cpus.push(Cpu { id: c + th * cores, core: c, package: n, numa: n });
        }
    }
    for n in 0..numa {
        let ids = t.cpus.iter().filter(|c| c.numa == n).map(|c| c.id).collect();
        t.numa_nodes.push(NumaNode { id: n, cpus: ids, mem_bytes: mem / numa as u64, distances: vec![] });
    }
    for g in 0..gpus {
        t.gpus.push(Gpu {
            uuid: format!("GPU-{g}"),
            index: g,
            model: "test".into(),
            mem_bytes: 16 << 30,
            numa: Some(g * numa / gpus),
        });
    }
    t
}

pub fn numa_policy(s: &str) -> NumaPolicy {
    serde_json::from_value(serde_json::Value::String(s.into())).expect("numa policy")
}

#[derive(Default)]
pub struct Scenario {
    pub queues: Vec<QueueConfig>,
    pub nodes: Vec<NodeLedger>,
    pub pending: Vec<PendingJob>,
    pub running: BTreeMap<JobId, Vec<Binding>>,
    pub passes: u32,
}

impl Scenario {
    pub fn pass(&mut self) -> PassOutput {
        let queues = if self.queues.is_empty() {
            vec![QueueConfig { head_of_line: HeadOfLine::Strict, ..QueueConfig::new("default") }]
        } else {
            self.queues.clone()
        };
        let out = schedule(&PassInput {
            queues: &queues,
            nodes: &self.nodes,
            pending: &self.pending,
            running: &[],
            fair_share: &NO_FAIR_SHARE,
            now: 0,
        });
        self.commit(&out);
        out
    }

    /// What the manager does with a pass: allocate the starts, keep the rest pending with
    /// their new `blocked_passes`.
    pub fn commit(&mut self, out: &PassOutput) {
        for s in &out.starts {
            for b in &s.bindings {
                let l = self.nodes.iter_mut().find(|l| l.name() == b.node).expect("node");
                l.allocate(b).expect("a start must fit its ledger");
            }
            self.running.insert(s.job, s.bindings.clone());
        }
        self.pending.retain(|j| !out.starts.iter().any(|s| s.job == j.id));
        for w in &out.waiting {
            if let Some(j) = self.pending.iter_mut().find(|j| j.id == w.job) {
                j.blocked_passes = w.blocked_passes;
            }
        }
        self.passes += 1;
    }

    pub fn finish(&mut self, job: JobId) {
        for b in self.running.remove(&job).expect("running job") {
            self.nodes.iter_mut().find(|l| l.name() == b.node).expect("node").release(&b);
        }
    }
}

fn kv(words: &[&str]) -> BTreeMap<String, String> {
    words
        .iter()
        .map(|w| w.split_once('=').map_or((w.to_string(), String::new()), |(k, v)| (k.into(), v.into())))
        .collect()
}

/// Runs a scenario script and prints every pass.
pub fn run(script: &str) -> String {
    let mut sc = Scenario::default();
    let mut out = String::new();
    for line in script.lines().map(|l| l.split('#').next().unwrap().trim()).filter(|l| !l.is_empty()) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words[0] {
            "queue" => {
                let hol = match words.get(2).copied() {
                    None | Some("strict") => HeadOfLine::Strict,
                    Some(s) => HeadOfLine::SkipAfter(s.strip_prefix("skip=").expect("skip=N").parse().unwrap()),
                };
                sc.queues.push(QueueConfig { head_of_line: hol, ..QueueConfig::new(words[1]) });
            }
            "node" => {
                let o = kv(&words[2..]);
                let get = |k: &str, d: &str| o.get(k).cloned().unwrap_or_else(|| d.to_string());
                let t = topology(
                    get("cpus", "8").parse().unwrap(),
                    parse_mem(&get("mem", "32GiB")).unwrap(),
                    get("gpus", "0").parse().unwrap(),
                    get("numa", "1").parse().unwrap(),
                    o.contains_key("smt"),
                );
                let mut l = NodeLedger::new(words[1], get("queue", "default"), t);
                l.set_schedulable(!o.contains_key("down"));
                sc.nodes.push(l);
            }
            "job" => {
                let o = kv(&words[2..]);
                let get = |k: &str, d: &str| o.get(k).cloned().unwrap_or_else(|| d.to_string());
                sc.pending.push(PendingJob {
                    id: words[1].parse().unwrap(),
                    priority: get("prio", "0").parse().unwrap(),
                    queue: get("queue", "default"),
                    request: ResourceRequest {
                        cpu_milli: parse_cpus(&get("cpus", "1")).unwrap(),
                        mem_bytes: parse_mem(&get("mem", "1GiB")).unwrap(),
                        gpu_milli: parse_gpus(&get("gpus", "0")).unwrap(),
                    },
                    nodes: get("nodes", "1").parse().unwrap(),
                    numa: numa_policy(&get("numa", "prefer-local")),
                    blocked_passes: 0,
                    user: "u".into(),
                    project: "u".into(),
                    submitted_at: 0,
                    time_limit_ms: None,
                });
            }
            "pass" => {
                let p = sc.pass();
                writeln!(out, "pass {}", sc.passes).unwrap();
                out.push_str(&render(&p));
            }
            "finish" => {
                let id = words[1].parse().unwrap();
                sc.finish(id);
                writeln!(out, "finish {id}").unwrap();
            }
            "down" | "up" => {
                let l = sc.nodes.iter_mut().find(|l| l.name() == words[1]).expect("node");
                l.set_schedulable(words[0] == "up");
                writeln!(out, "{line}").unwrap();
            }
            other => panic!("unknown scenario command `{other}`"),
        }
    }
    out
}

pub fn render_binding(b: &Binding) -> String {
    let mut s = format!("{} cpus={} mems={} mem={}", b.node, b.cpuset(), b.memset(), format_bytes(b.mem_bytes));
    if !b.gpus.is_empty() {
        let g: Vec<String> = b.gpus.iter().map(|g| format!("{}:{}", g.index, format_gpu_milli(g.milli))).collect();
        write!(s, " gpus={}", g.join(",")).unwrap();
    }
    s
}

/// One line per start (one per kernel for gangs) and per waiting job.
pub fn render(p: &PassOutput) -> String {
    let mut out = String::new();
    for s in &p.starts {
        if let [b] = s.bindings.as_slice() {
            writeln!(out, "  start {} {}", s.job, render_binding(b)).unwrap();
        } else {
            writeln!(out, "  start {}", s.job).unwrap();
            for (i, b) in s.bindings.iter().enumerate() {
                writeln!(out, "    kernel {i} {}", render_binding(b)).unwrap();
            }
        }
    }
    for w in &p.waiting {
        write!(out, "  wait {} #{} {:?} \"{}\"", w.job, w.position, w.reason.kind, w.reason.message).unwrap();
        if w.blocked_passes > 0 {
            write!(out, " blocked={}", w.blocked_passes).unwrap();
        }
        out.push('\n');
    }
    out
}
