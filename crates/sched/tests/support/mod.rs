//! A tiny scenario language for scheduler tests, so that each case reads as data:
//!
//! ```text
//! queue default skip=2          # or `strict` (the default when no queue line is given)
//! queue q backfill ordering=drf scoring=spread preempt=requeue,min=10m default=1h window=2
//! node n1 cpus=8 mem=32GiB gpus=1 numa=2 smt queue=batch down images=busybox:1,pytorch:2.4 mounts=/data
//! job 1 cpus=2 mem=4GiB gpus=0.5 prio=5 nodes=2 numa=require-local queue=batch image=pytorch:2.4
//! job 3 kernels=3 mounts=/data/a,/scratch   # 3 kernels on one node; host paths it mounts
//! job 4 data=n2:5GiB,n3:1GiB    # bytes of its datasets each node's cache holds
//! job 5 constraint=a100&ib exclusive   # node features (`labels=a100=yes,ib=hdr` on a node); whole nodes
//! job 8 folders                 # a process job with data folders (`nofolders` on a node: cannot)
//! job 2 user=alice project=ml limit=30m
//! job 6 est=20m attained=2h at=-3h   # estimate, service so far (device-time), submitted at
//! queue q backfill reservations=2 after=12h ordering=las las=1h,10h   # see `queue_config`
//! run 7 gpus=1 start=-2h limit=3h prio=0 preemptible user=bob   # a running job, placed now
//! usage user alice 100 / usage project ml 50 / weight ml 3         # fair-share input
//! now 1h                        # the pass's clock (durations: 500ms, 30s, 10m, 2h, -1h)
//! pass                          # run schedule(), print it, commit the starts
//! finish 1                      # release job 1's bindings
//! down n1 / up n1               # set_schedulable
//! ```
//!
//! After a pass, preempted jobs are stopped (released) and, with `requeue`, pending again.
//!
//! [`run`] returns the printed passes, for an insta snapshot.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt::Write;

use berth_model::{Binding, Cpu, Gpu, NumaNode, NumaPolicy, ResourceRequest, Topology, format_bytes};
use berth_model::{JobId, format_gpu_milli, parse_cpus, parse_gpus, parse_mem};
use berth_sched::{
    FairShare, HeadOfLine, Millis, NodeLedger, PassInput, PassOutput, PendingJob, PendingSet, PreemptAction,
    Preemption, QueueConfig, RunningJob, RunningSet, schedule, schedule_set,
};

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
    /// Running jobs, with the spec they were submitted with (for requeue).
    pub running: BTreeMap<JobId, (RunningJob, PendingJob)>,
    pub fair_share: FairShare,
    pub now: Millis,
    pub passes: u32,
}

/// `500ms`, `30s`, `10m`, `2h`, `-1h`.
pub fn duration(s: &str) -> Millis {
    let (neg, s) = s.strip_prefix('-').map_or((false, s), |r| (true, r));
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let n: Millis = s[..split].parse().expect("duration");
    let unit = match &s[split..] {
        "ms" => 1,
        "s" | "" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        u => panic!("unknown unit {u}"),
    };
    if neg { -n * unit } else { n * unit }
}

fn queue_config(words: &[&str]) -> QueueConfig {
    let mut q = QueueConfig::new(words[1]);
    for w in &words[2..] {
        let (k, v) = w.split_once('=').unwrap_or((w, ""));
        match k {
            "strict" => q.head_of_line = HeadOfLine::Strict,
            "backfill" => q.head_of_line = HeadOfLine::Backfill,
            "skip" => q.head_of_line = HeadOfLine::SkipAfter(v.parse().unwrap()),
            "ordering" => q.ordering = serde_json::from_value(serde_json::Value::String(v.into())).expect("ordering"),
            "scoring" => q.scoring = serde_json::from_value(serde_json::Value::String(v.into())).expect("scoring"),
            "default" => q.default_time_limit_ms = duration(v),
            "window" => q.backfill_window = v.parse().unwrap(),
            "reservations" => q.reservations = v.parse().unwrap(),
            "after" => q.reserve_after_ms = Some(duration(v)),
            // Thresholds in device-time: `las=1h,10h` is 1 and 10 device-hours.
            "las" => q.las_thresholds = v.split(',').map(|d| (duration(d) / 1000) as u64).collect(),
            "preempt" => {
                let mut p = Preemption { action: PreemptAction::Requeue, min_runtime_ms: 0 };
                for part in v.split(',') {
                    match part.split_once('=') {
                        Some(("min", d)) => p.min_runtime_ms = duration(d),
                        _ if part == "cancel" => p.action = PreemptAction::Cancel,
                        _ if part == "requeue" => p.action = PreemptAction::Requeue,
                        _ => panic!("preempt option {part}"),
                    }
                }
                q.preemption = Some(p);
            }
            _ => panic!("queue option {w}"),
        }
    }
    q
}

/// A pending job from the words of a `job` line after its id (`cpus=2 limit=1h`).
pub fn parse_job(id: JobId, words: &str) -> PendingJob {
    let o = words
        .split_whitespace()
        .map(|w| {
            let (k, v) = w.split_once('=').unwrap_or((w, ""));
            (k.to_string(), v.to_string())
        })
        .collect();
    job_spec(id, &o)
}

fn job_spec(id: JobId, o: &BTreeMap<String, String>) -> PendingJob {
    let get = |k: &str, d: &str| o.get(k).cloned().unwrap_or_else(|| d.to_string());
    let user = get("user", "u");
    PendingJob {
        id,
        priority: get("prio", "0").parse().unwrap(),
        queue: get("queue", "default").into(),
        request: ResourceRequest {
            cpu_milli: parse_cpus(&get("cpus", "1")).unwrap(),
            mem_bytes: parse_mem(&get("mem", "1GiB")).unwrap(),
            gpu_milli: parse_gpus(&get("gpus", "0")).unwrap(),
        },
        nodes: get("nodes", "1").parse().unwrap(),
        numa: numa_policy(&get("numa", "prefer-local")),
        blocked_passes: 0,
        project: get("project", &user),
        user,
        submitted_at: o.get("at").map_or(0, |d| duration(d)),
        time_limit_ms: o.get("limit").map(|d| duration(d)),
        estimate_ms: o.get("est").map(|d| duration(d)),
        attained: o.get("attained").map_or(0, |a| (duration(a) / 1000) as u64),
        image: o.get("image").map(|i| berth_model::job::image_key(i)),
        kernels: get("kernels", "1").parse().unwrap(),
        mounts: o.get("mounts").map_or(Vec::new(), |m| m.split(',').map(String::from).collect()),
        avoid: o.get("avoid").map_or(Vec::new(), |a| a.split(',').map(String::from).collect()),
        data_on: o.get("data").map_or(Vec::new(), |d| {
            d.split(',')
                .map(|e| {
                    let (n, b) = e.split_once(':').expect("data=NODE:SIZE,...");
                    (n.to_string(), parse_mem(b).unwrap())
                })
                .collect()
        }),
        constraint: o.get("constraint").map(|c| c.parse().expect("constraint")),
        exclusive: o.contains_key("exclusive"),
        folders: o.contains_key("folders"),
    }
}

pub fn running_job(spec: &PendingJob, bindings: Vec<Binding>, started_at: Millis, preemptible: bool) -> RunningJob {
    RunningJob {
        borrowed: false,
        id: spec.id,
        queue: spec.queue.to_string(),
        priority: spec.priority,
        user: spec.user.clone(),
        project: spec.project.clone(),
        bindings,
        submitted_at: spec.submitted_at,
        started_at,
        time_limit_ms: spec.time_limit_ms,
        estimate_ms: spec.estimate_ms,
        attained: spec.attained,
        preemptible,
    }
}

impl Scenario {
    pub fn pass(&mut self) -> PassOutput {
        let queues = if self.queues.is_empty() {
            vec![QueueConfig { head_of_line: HeadOfLine::Strict, ..QueueConfig::new("default") }]
        } else {
            self.queues.clone()
        };
        let running: Vec<RunningJob> = self.running.values().map(|(r, _)| r.clone()).collect();
        let input = PassInput {
            queues: &queues,
            nodes: &self.nodes,
            pending: &self.pending,
            running: &running,
            fair_share: &self.fair_share,
            quotas: &berth_sched::NO_QUOTAS,
            now: self.now,
        };
        let out = schedule(&input);
        // Every scenario also checks the incremental pass: the same decisions from the jobs
        // kept in a `PendingSet` and a `RunningSet`.
        let set: PendingSet = self.pending.iter().cloned().collect();
        let run_set: RunningSet = running.iter().cloned().collect();
        let inc = schedule_set(&PassInput { pending: &[], running: &[], ..input }, &set, &run_set);
        assert_eq!((&out.starts, &out.waiting, &out.preemptions), (&inc.starts, &inc.waiting, &inc.preemptions));
        assert_eq!(out.untried_jobs().collect::<Vec<_>>(), set.untried_jobs(&inc));
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
            let spec = self.pending.iter().find(|j| j.id == s.job).expect("pending").clone();
            let preemptible = self.running.get(&s.job).is_some_and(|(r, _)| r.preemptible);
            self.running.insert(s.job, (running_job(&spec, s.bindings.clone(), self.now, preemptible), spec));
        }
        self.pending.retain(|j| !out.starts.iter().any(|s| s.job == j.id));
        for p in &out.preemptions {
            if let Some((run, mut spec)) = self.running.get(&p.victim).cloned() {
                self.finish(p.victim);
                if p.action == PreemptAction::Requeue {
                    // It keeps the service it got (`las`).
                    let size = berth_sched::size_milli(&spec.request, spec.nodes, spec.kernels);
                    spec.attained = run.attained + berth_sched::service(size, self.now - run.started_at);
                    self.pending.push(spec);
                }
            }
        }
        for w in &out.waiting {
            if let Some(j) = self.pending.iter_mut().find(|j| j.id == w.job) {
                j.blocked_passes = w.blocked_passes;
            }
        }
        self.passes += 1;
    }

    pub fn finish(&mut self, job: JobId) {
        for b in self.running.remove(&job).expect("running job").0.bindings {
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
            "queue" => sc.queues.push(queue_config(&words)),
            "now" => sc.now = duration(words[1]),
            "usage" => {
                let map = if words[1] == "user" {
                    &mut sc.fair_share.usage_by_user
                } else {
                    &mut sc.fair_share.usage_by_project
                };
                map.insert(words[2].into(), words[3].parse().unwrap());
            }
            "weight" => {
                sc.fair_share.project_weights.insert(words[1].into(), words[2].parse().unwrap());
            }
            "run" => {
                let o = kv(&words[2..]);
                let spec = job_spec(words[1].parse().unwrap(), &o);
                let mut bindings = Vec::new();
                let mut names: Vec<String> =
                    sc.nodes.iter().filter(|l| l.queue() == &*spec.queue).map(|l| l.name().to_string()).collect();
                names.sort();
                if let Some(on) = o.get("on") {
                    names = on.split(',').map(String::from).collect();
                }
                for name in names {
                    if bindings.len() == spec.nodes.max(1) as usize {
                        break;
                    }
                    let l = sc.nodes.iter_mut().find(|l| l.name() == name).expect("node");
                    if let Ok(b) = l.try_bind(&spec.request, spec.numa) {
                        l.allocate(&b).unwrap();
                        bindings.push(b);
                    }
                }
                assert_eq!(bindings.len(), spec.nodes.max(1) as usize, "running job {} does not fit", spec.id);
                let start = o.get("start").map_or(sc.now, |d| sc.now + duration(d));
                let r = running_job(&spec, bindings, start, o.contains_key("preemptible"));
                sc.running.insert(spec.id, (r, spec));
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
                if let Some(images) = o.get("images") {
                    l.set_images(images.split(',').map(berth_model::job::image_key));
                }
                // `mounts=/data,/scratch` (`mounts=` for none); absent: not reported.
                if let Some(m) = o.get("mounts") {
                    l.set_allowed_mounts(Some(m.split(',').filter(|p| !p.is_empty()).map(String::from).collect()));
                }
                // `nofolders`: its agent said it cannot mount data folders (not root).
                l.set_folder_mounts(o.contains_key("nofolders").then_some(false));
                // `labels=a100=yes,zone=b`: the node's labels, which are its features.
                if let Some(labels) = o.get("labels") {
                    let pair = |l: &str| l.split_once('=').map(|(k, v)| (k.to_string(), v.to_string()));
                    l.set_labels(labels.split(',').map(|l| pair(l).expect("labels=KEY=VALUE,...")).collect());
                }
                sc.nodes.push(l);
            }
            "job" => {
                let o = kv(&words[2..]);
                sc.pending.push(job_spec(words[1].parse().unwrap(), &o));
            }
            "pass" => {
                let p = sc.pass();
                writeln!(out, "pass {}", sc.passes).unwrap();
                out.push_str(&render(&p, sc.now));
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
pub fn render(p: &PassOutput, now: Millis) -> String {
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
        if let Some(t) = w.expected_start {
            write!(out, " expect=+{}s", (t - now) / 1000).unwrap();
        }
        out.push('\n');
    }
    for (job, position, reason) in p.untried_jobs() {
        writeln!(out, "  wait {job} #{position} {:?} \"{}\"", reason.kind, reason.message).unwrap();
    }
    for x in &p.preemptions {
        writeln!(out, "  preempt {} for {} {:?}", x.victim, x.for_job, x.action).unwrap();
    }
    out
}
