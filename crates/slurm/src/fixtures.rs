//! Jobs as the manager lists them, in every state and with every field set: for tests of
//! what the Slurm commands print (here and in the CLI, with the `test-support` feature).

use berth_model::JobState;
use berth_model::api::JobView;

/// A job in `state` with the fewest fields set.
pub fn job(state: JobState) -> JobView {
    serde_json::from_value(serde_json::json!({
        "id": 1, "name": "x", "user": "u", "state": state, "queue": "default", "priority": 0,
        "position": null, "pending_reason": null, "nodes": [], "cpu_milli": 1000,
        "mem_bytes": 1073741824u64, "gpu_milli": 0, "submitted_at": "2026-11-20T10:00:00Z",
        "started_at": null, "ended_at": null, "exit_code": null, "reason": null
    }))
    .unwrap()
}

/// Jobs in every state with every field set, array tasks and arrays: for checking that
/// each printed field declares what it reads.
pub fn varied() -> Vec<JobView> {
    let mut jobs = Vec::new();
    for state in JobState::ALL {
        let mut j = job(state);
        j.id = 12;
        j.name = Some("train".into());
        j.user = "alice".into();
        j.project = Some("vision".into());
        j.nodes = vec!["n1".into(), "n2".into()];
        j.nodes_requested = 2;
        (j.cpu_milli, j.mem_bytes, j.gpu_milli) = (2500, 3 << 30, 500);
        j.started_at = Some(j.submitted_at + jiff::SignedDuration::from_secs(60));
        j.ended_at = state.is_terminal().then(|| j.submitted_at + jiff::SignedDuration::from_secs(3600));
        j.time_limit_secs = Some(7200);
        j.priority = 5;
        j.exit_code = Some(137);
        j.reason = Some("killed by signal 9".into());
        j.end_signal = Some(9);
        j.stop = Some(berth_model::StopCause::Cancelled { by: "bob".into() });
        j.end_cause = Some(berth_model::EndCause::OutOfMemory);
        j.usage = Some(berth_model::JobUsage {
            total: berth_model::KernelUsage {
                cpu_seconds: Some(75.25),
                memory_peak_bytes: Some(300 << 20),
                ..Default::default()
            },
            cpu_percent: None,
        });
        j.pending_reason =
            Some(berth_model::PendingReason::new(berth_model::PendingKind::Resources, "waits for resources"));
        j.array_task = Some(berth_model::array::ArrayTask { array_id: 9, index: 3, min: 1, max: 9, count: 9 });
        jobs.push(j.clone());
        j.array_task = None;
        j.array = Some("[4-9%2]".into());
        jobs.push(j.clone());
        // Not placed (yet, or ever): where squeue and sacct print the reason instead.
        (j.array, j.nodes, j.started_at, j.project) = (None, Vec::new(), None, None);
        j.workdir = Some("/home/alice/run".into());
        j.expected_start = Some(j.submitted_at + jiff::SignedDuration::from_secs(900));
        jobs.push(j);
    }
    jobs
}

/// `j` as a listing with `fields=` (a comma list) brings it back: those fields, the rest
/// defaults.
pub fn lean(j: &JobView, fields: &str) -> JobView {
    use berth_model::api::{job_view_fields, job_view_partial};
    let fields = job_view_fields(fields).unwrap();
    serde_json::from_value(serde_json::to_value(job_view_partial(j, &fields)).unwrap()).unwrap()
}
