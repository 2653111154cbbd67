//! Quota borrowing in the pass: a project may start work beyond its quota while the capacity
//! is idle, and that work is the first to go when a job within its own quota needs the room.

use berth_model::{NumaPolicy, PendingKind, QuotaLimits, ResourceRequest, Topology};
use berth_sched::{
    NO_FAIR_SHARE, NodeLedger, PassInput, PendingJob, PreemptAction, QueueConfig, QuotaUse, Quotas, RunningJob,
    schedule,
};

fn gpu_job(id: i64, project: &str, priority: i32) -> PendingJob {
    PendingJob {
        id,
        priority,
        queue: "default".into(),
        request: ResourceRequest { cpu_milli: 1000, mem_bytes: 1 << 30, gpu_milli: 1000 },
        nodes: 1,
        numa: NumaPolicy::None,
        blocked_passes: 0,
        user: format!("u-{project}"),
        project: project.into(),
        submitted_at: 0,
        time_limit_ms: None,
        estimate_ms: None,
        attained: 0,
        image: None,
        kernels: 1,
        mounts: Vec::new(),
        data_on: Vec::new(),
        avoid: Vec::new(),
        constraint: None,
        exclusive: false,
        folders: false,
    }
}

fn quotas() -> Quotas {
    let mut q = Quotas::default();
    let one_plus_one = QuotaLimits { gpu_milli: Some(1000), borrow_gpu_milli: Some(1000), ..Default::default() };
    q.projects.insert("a".into(), one_plus_one);
    q.projects.insert("b".into(), QuotaLimits { gpu_milli: Some(1000), ..Default::default() });
    q
}

#[test]
fn idle_capacity_is_borrowed_and_reclaimed_by_a_job_within_its_quota() {
    let queues = [QueueConfig::new("default")];
    let mut node = NodeLedger::new("n1", "default", Topology::synthetic(1, 4, 16 << 30, 2));
    // Pass 1: project a takes both GPUs, the second by borrowing.
    let q = quotas();
    let pending = [gpu_job(1, "a", 0), gpu_job(2, "a", 0)];
    let nodes = [node.clone()];
    let input = PassInput {
        queues: &queues,
        nodes: &nodes,
        pending: &pending,
        running: &[],
        fair_share: &NO_FAIR_SHARE,
        quotas: &q,
        now: 0,
    };
    let out = schedule(&input);
    assert_eq!(out.starts.len(), 2, "{out:?}");
    assert_eq!(out.borrowed, vec![2], "the second start is beyond a's quota");

    // Pass 2: project b (within its quota, lower priority even) needs a GPU: a's borrowed job
    // is preempted, although the queue has no preemption and b's priority is lower.
    let running: Vec<RunningJob> = out
        .starts
        .iter()
        .map(|s| {
            for b in &s.bindings {
                node.allocate(b).unwrap();
            }
            RunningJob {
                borrowed: out.borrowed.contains(&s.job),
                id: s.job,
                queue: "default".into(),
                priority: 0,
                user: "u-a".into(),
                project: "a".into(),
                bindings: s.bindings.clone(),
                started_at: 0,
                time_limit_ms: None,
                estimate_ms: None,
                attained: 0,
                submitted_at: 0,
                preemptible: false,
            }
        })
        .collect();
    let mut q = quotas();
    q.used_by_project
        .insert("a".into(), QuotaUse { gpu_milli: 2000, cpu_milli: 2000, mem_bytes: 2 << 30, running_jobs: 2 });
    let pending = [gpu_job(3, "b", -5), gpu_job(4, "a", 9)];
    let nodes = [node.clone()];
    let input = PassInput {
        queues: &queues,
        nodes: &nodes,
        pending: &pending,
        running: &running,
        fair_share: &NO_FAIR_SHARE,
        quotas: &q,
        now: 1,
    };
    let out = schedule(&input);
    assert_eq!(out.preemptions.len(), 1, "{out:?}");
    assert_eq!((out.preemptions[0].victim, out.preemptions[0].for_job), (2, 3));
    assert_eq!(out.preemptions[0].action, PreemptAction::Requeue);
    // a's new job is over even its borrowing limit: it waits and reclaims nothing.
    let w = out.waiting.iter().find(|w| w.job == 4).unwrap();
    assert_eq!(w.reason.kind, PendingKind::Quota, "{w:?}");
    // The in-quota job 1 of project a is never a victim.
    assert!(out.preemptions.iter().all(|p| p.victim != 1));
}
