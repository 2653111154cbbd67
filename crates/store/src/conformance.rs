//! The conformance suite every [`Store`] adapter must pass. Written against `&dyn Store` so
//! the SQLite adapter's tests (`tests/sqlite.rs`) and the PostgreSQL adapter's
//! (`tests/postgres.rs`) run the same checks, every one of them through
//! [`conformance_tests!`](crate::conformance_tests). Each check panics with a message on
//! failure, like a test.

use berth_model::api::NodeState;
use berth_model::{
    Binding, EndCause, JobSpec, JobState, KernelUsage, PendingKind, PendingReason, PreemptAction, StopCause,
};
use jiff::Timestamp;

use crate::{Change, JobFilter, NewJob, NodeRow, Store, StoreError};

#[path = "conformance_batch.rs"]
mod batch;
pub use batch::{
    a_batch_of_many_jobs_and_mixed_changes_applies_in_order, a_batch_of_submits_is_inserted_in_order_or_not_at_all,
    holds_and_end_signals, one_wrong_from_in_a_large_batch_rolls_back_all_of_it,
};
#[path = "conformance_cache.rs"]
mod cache;
pub use cache::{cache_members, cache_state};
#[path = "conformance_endpoints.rs"]
mod endpoints;
pub use endpoints::{endpoint_spec, endpoints};
#[path = "conformance_folders.rs"]
mod folders;
pub use folders::folders;
#[path = "conformance_tenancy.rs"]
mod tenancy;
pub use tenancy::{tenancy, users_and_tokens};
#[path = "conformance_retention.rs"]
mod retention;
pub use retention::{archive_moves_only_old_finished_jobs, archived_ids_are_never_reused};

/// One `#[tokio::test]` per check of this suite, each on a store from `$fresh`: an async fn
/// taking the test's name and returning `Option<(guard, store)>` (`None`: skipped; the guard
/// lives until the store is closed). One list, so no adapter misses a check.
#[macro_export]
macro_rules! conformance_tests {
    ($fresh:path) => {
        $crate::conformance_tests!(@each $fresh; users_and_tokens, jobs_insert_and_list, lifecycle_and_history,
            measured_usage_adds_up, cas_conflict_leaves_store_untouched, requeue_bumps_attempt, nodes_and_meta,
            queues_and_usage, tenancy, cache_state, cache_members, leader_lease,
            idempotent_submits, array_tasks, folders, endpoints, archive_moves_only_old_finished_jobs,
            archived_ids_are_never_reused, a_batch_of_many_jobs_and_mixed_changes_applies_in_order,
            one_wrong_from_in_a_large_batch_rolls_back_all_of_it, a_batch_of_submits_is_inserted_in_order_or_not_at_all,
            holds_and_end_signals);
    };
    (@each $fresh:path; $($name:ident),* $(,)?) => {$(
        #[tokio::test]
        async fn $name() {
            let Some((_guard, s)) = $fresh(stringify!($name)).await else { return };
            $crate::conformance::$name(&s as &dyn $crate::Store).await;
            $crate::Store::close(&s).await;
        }
    )*};
}

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + secs).unwrap()
}

/// A binding of two CPUs, one memory node and 1 GiB on `node`.
pub fn binding(node: &str) -> Binding {
    Binding {
        node: node.into(),
        cpus: vec![0, 1],
        cpu_milli: 1500,
        mems: vec![0],
        mem_bytes: 1 << 30,
        gpus: vec![],
        port: None,
    }
}

/// A node row with every field set (a ready node of a synthetic machine, reachable at 10.0.0.1).
pub fn node(name: &str) -> NodeRow {
    NodeRow {
        name: name.into(),
        queue: "default".into(),
        topology: berth_model::Topology::synthetic(1, 4, 8 << 30, 1),
        version: "0.1.0".into(),
        state: NodeState::Ready,
        last_heartbeat: Some(at(1)),
        address: Some("10.0.0.1".into()),
        drain_reason: None,
    }
}

/// A queue policy with every field set, ordered by `ordering`.
pub fn policy(ordering: &str) -> berth_model::api::QueuePolicy {
    berth_model::api::QueuePolicy {
        ordering: ordering.into(),
        head_of_line: "backfill".into(),
        backfill_window: 500,
        scoring: "spread".into(),
        default_time_limit_secs: 3600,
        preemption: "requeue".into(),
        preempt_min_runtime_secs: 600,
        projects: vec!["vision".into()],
        max_time_limit_secs: Some(86_400),
        nodes: vec!["n1".into()],
        node_labels: [("gpu".to_string(), "a100".to_string())].into(),
        idle_timeout_secs: Some(900),
        max_session_secs: Some(8 * 3600),
        reservations: 3,
        reserve_after_secs: Some(12 * 3600),
        las_thresholds_secs: vec![3600, 36_000],
    }
}

fn tr(job_id: i64, from: JobState, to: JobState, secs: i64, reason: &str) -> Change {
    Change::Transition {
        job_id,
        from,
        to,
        at: at(secs),
        reason: reason.into(),
        exit_code: None,
        end: None,
        end_signal: None,
    }
}

/// Job ids start at 1; insert writes the first transition; lists are newest first.
pub async fn jobs_insert_and_list(s: &dyn Store) {
    let u = s.create_user("bob", "user", at(0)).await.unwrap();
    let v = s.create_user("carol", "user", at(0)).await.unwrap();
    let mut spec = JobSpec::command(["echo", "hi"]);
    spec.priority = 5;
    let id1 = s.insert_job(u.id, &spec, None, at(10)).await.unwrap();
    assert_eq!(id1, 1, "job ids start at 1");
    let alice = berth_model::UnixId { uid: 1001, gid: 1002 };
    let id2 = s.insert_job(v.id, &JobSpec::command(["true"]), Some(alice), at(11)).await.unwrap();
    assert_eq!(id2, 2);
    assert_eq!(s.job(id2).await.unwrap().unwrap().submitter, Some(alice), "the vouched submitter is kept");

    let j = s.job(id1).await.unwrap().unwrap();
    assert_eq!(j.user, "bob");
    assert_eq!(j.spec, spec);
    assert_eq!(j.state, JobState::Pending);
    assert_eq!(j.priority, 5);
    assert_eq!(j.queue, "default");
    assert_eq!(j.attempt, 0);
    assert_eq!(j.submitter, None);
    assert_eq!(j.submitted_at, at(10));
    assert!(s.job(99).await.unwrap().is_none());

    let t = s.transitions(id1).await.unwrap();
    assert_eq!(t.len(), 1);
    assert_eq!((t[0].from, t[0].to, t[0].reason.as_str()), (None, JobState::Pending, "submitted"));

    let all = s.jobs(&JobFilter::default()).await.unwrap();
    assert_eq!(all.iter().map(|j| j.id).collect::<Vec<_>>(), vec![2, 1], "newest first");
    let bobs = s.jobs(&JobFilter { user_id: Some(u.id), ..Default::default() }).await.unwrap();
    assert_eq!(bobs.len(), 1);
    let one = s.jobs(&JobFilter { limit: Some(1), ..Default::default() }).await.unwrap();
    assert_eq!(one[0].id, 2);
    let running = s.jobs(&JobFilter { states: Some(vec![JobState::Running]), ..Default::default() }).await.unwrap();
    assert!(running.is_empty());
    let ids = |rows: Vec<crate::JobRow>| rows.iter().map(|j| j.id).collect::<Vec<_>>();
    let by = |f: JobFilter| async move { ids(s.jobs(&f).await.unwrap()) };
    assert_eq!(by(JobFilter { owner: Some("carol".into()), ..Default::default() }).await, vec![2]);
    assert_eq!(by(JobFilter { owner: Some("nobody".into()), ..Default::default() }).await, Vec::<i64>::new());
    assert_eq!(by(JobFilter { queue: Some("default".into()), ..Default::default() }).await, vec![2, 1]);
    assert_eq!(by(JobFilter { queue: Some("gpu".into()), ..Default::default() }).await, Vec::<i64>::new());
    assert_eq!(by(JobFilter { before: Some(2), ..Default::default() }).await, vec![1], "the next page");
    let mut named = JobSpec::command(["true"]);
    named.name = Some("train_50%".into());
    let id3 = s.insert_job(u.id, &named, None, at(12)).await.unwrap();
    assert_eq!(by(JobFilter { name_contains: Some("n_50%".into()), ..Default::default() }).await, vec![id3]);
    assert_eq!(
        by(JobFilter { name_contains: Some("n_5_%".into()), ..Default::default() }).await,
        Vec::<i64>::new(),
        "no wildcards"
    );
    let f = JobFilter {
        name_contains: Some("train".into()),
        owner: Some("bob".into()),
        before: Some(id3),
        ..Default::default()
    };
    assert_eq!(by(f).await, Vec::<i64>::new());
    s.apply(&[Change::Transition {
        job_id: id3,
        from: JobState::Pending,
        to: JobState::Cancelled,
        at: at(13),
        reason: "cancelled".into(),
        exit_code: None,
        end: Some(berth_model::EndCause::Cancelled),
        end_signal: None,
    }])
    .await
    .unwrap();
    assert_eq!(s.unfinished_jobs().await.unwrap().iter().map(|j| j.id).collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(s.job_count().await.unwrap(), 3);
    // ids, and a time window as sacct draws it: submitted at 10, 11, 12; job 3 ended at 13
    assert_eq!(by(JobFilter { ids: Some(vec![id3, 1, 99]), ..Default::default() }).await, vec![id3, 1]);
    assert_eq!(by(JobFilter { ids: Some(vec![]), ..Default::default() }).await, Vec::<i64>::new());
    let window = |since: Option<i64>, until: Option<i64>| JobFilter {
        since: since.map(at),
        until: until.map(at),
        ..Default::default()
    };
    assert_eq!(by(window(Some(13), None)).await, vec![id3, 2, 1], "ended at the window's start: in it");
    assert_eq!(by(window(Some(14), None)).await, vec![2, 1], "ended before it: out");
    assert_eq!(by(window(None, Some(11))).await, vec![1], "submitted at its end: out");
    assert_eq!(by(window(Some(14), Some(12))).await, vec![2, 1]);
    let f = JobFilter { ids: Some(vec![id3]), ..window(Some(12), Some(13)) };
    assert_eq!(by(f).await, vec![id3]);
}

/// A whole life: schedule with kernels, run, finish; history in order; timestamps set.
pub async fn lifecycle_and_history(s: &dyn Store) {
    let u = s.create_user("dave", "user", at(0)).await.unwrap();
    let id = s.insert_job(u.id, &JobSpec::command(["x"]), None, at(0)).await.unwrap();
    let waiting = PendingReason::new(PendingKind::Resources, "resources: needs 1 GPU");
    s.apply(&[Change::PendingReason { job_id: id, reason: Some(waiting.clone()) }]).await.unwrap();
    assert_eq!(s.job(id).await.unwrap().unwrap().pending_reason, Some(waiting));

    s.apply(&[
        tr(id, JobState::Pending, JobState::Scheduled, 1, "scheduled on n1"),
        Change::SetKernels { job_id: id, attempt: 0, bindings: vec![binding("n1")] },
    ])
    .await
    .unwrap();
    let j = s.job(id).await.unwrap().unwrap();
    assert_eq!(j.state, JobState::Scheduled);
    assert_eq!(j.pending_reason, None, "leaving PENDING clears the reason");
    let k = s.kernels(id).await.unwrap();
    assert_eq!(k.len(), 1);
    assert_eq!((k[0].index, k[0].node.as_str(), &k[0].binding), (0, "n1", &binding("n1")));

    s.apply(&[tr(id, JobState::Scheduled, JobState::Running, 2, "started")]).await.unwrap();
    s.apply(&[
        Change::KernelExit { job_id: id, attempt: 0, index: 0, exit_code: Some(3), usage: None },
        Change::Transition {
            job_id: id,
            from: JobState::Running,
            to: JobState::Failed,
            at: at(3),
            reason: "exit code 3".into(),
            exit_code: Some(3),
            end: Some(EndCause::Exited),
            end_signal: None,
        },
    ])
    .await
    .unwrap();
    let j = s.job(id).await.unwrap().unwrap();
    assert_eq!(j.state, JobState::Failed);
    assert_eq!((j.started_at, j.ended_at, j.exit_code), (Some(at(2)), Some(at(3)), Some(3)));
    assert_eq!((j.end_cause, &j.stop), (Some(EndCause::Exited), &None));
    // The row, its kernels and its history, read together.
    let h = s.job_history(id).await.unwrap().expect("the job exists");
    assert_eq!(h.job, j);
    assert_eq!(h.kernels, s.kernels(id).await.unwrap());
    assert_eq!(h.transitions, s.transitions(id).await.unwrap());
    assert_eq!(h.transitions.last().map(|t| t.to), Some(JobState::Failed));
    assert!(s.job_history(id + 1000).await.unwrap().is_none());
    assert_eq!(j.reason.as_deref(), Some("exit code 3"));
    assert_eq!(s.kernels(id).await.unwrap()[0].exit_code, Some(3));
    let t = s.transitions(id).await.unwrap();
    let states: Vec<_> = t.iter().map(|t| t.to).collect();
    assert_eq!(states, vec![JobState::Pending, JobState::Scheduled, JobState::Running, JobState::Failed]);
    assert_eq!(t[1].from, Some(JobState::Pending));
    assert!(t.windows(2).all(|w| w[0].at <= w[1].at));
    assert!(s.unfinished_jobs().await.unwrap().iter().all(|j| j.id != id));
    // A terminal job never moves again.
    let again = s.apply(&[tr(id, JobState::Failed, JobState::Running, 4, "x")]).await;
    assert!(matches!(again, Err(StoreError::InvalidTransition { .. })), "{again:?}");
}

/// Measured usage: each kernel keeps its own; the job adds times over every kernel and
/// attempt and keeps the largest attempt's sum of peaks; unknown figures stay unknown.
pub async fn measured_usage_adds_up(s: &dyn Store) {
    let u = s.create_user("mia", "user", at(0)).await.unwrap();
    let id = s.insert_job(u.id, &JobSpec::command(["x"]), None, at(0)).await.unwrap();
    let used = |cpu: f64, peak: u64| KernelUsage {
        cpu_seconds: Some(cpu),
        memory_peak_bytes: Some(peak),
        ..Default::default()
    };
    let exit = |attempt, index, usage| Change::KernelExit { job_id: id, attempt, index, exit_code: Some(0), usage };
    s.apply(&[
        tr(id, JobState::Pending, JobState::Scheduled, 1, "scheduled on n1, n2"),
        Change::SetKernels { job_id: id, attempt: 0, bindings: vec![binding("n1"), binding("n2")] },
        tr(id, JobState::Scheduled, JobState::Running, 2, "started"),
        exit(0, 1, Some(used(2.0, 300))),
        exit(0, 0, Some(used(4.0, 100))),
    ])
    .await
    .unwrap();
    let j = s.job(id).await.unwrap().unwrap();
    assert_eq!(j.used, Some(KernelUsage { gpu_seconds: None, ..used(6.0, 400) }));
    assert_eq!(s.kernels(id).await.unwrap()[1].usage, Some(used(2.0, 300)));
    // A requeue's attempt adds its time; its smaller peak does not lower the job's.
    s.apply(&[
        tr(id, JobState::Running, JobState::Pending, 3, "requeued: node lost"),
        tr(id, JobState::Pending, JobState::Scheduled, 4, "scheduled on n1"),
        Change::SetKernels { job_id: id, attempt: 1, bindings: vec![binding("n1")] },
        exit(1, 0, Some(used(1.0, 50))),
    ])
    .await
    .unwrap();
    assert_eq!(s.job(id).await.unwrap().unwrap().used, Some(used(7.0, 400)));
    // A kernel nobody measured changes nothing, and a job never measured has no figures.
    let other = s.insert_job(u.id, &JobSpec::command(["y"]), None, at(0)).await.unwrap();
    s.apply(&[
        tr(other, JobState::Pending, JobState::Scheduled, 1, "scheduled on n1"),
        Change::SetKernels { job_id: other, attempt: 0, bindings: vec![binding("n1")] },
        Change::KernelExit { job_id: other, attempt: 0, index: 0, exit_code: Some(0), usage: None },
    ])
    .await
    .unwrap();
    assert_eq!(s.job(other).await.unwrap().unwrap().used, None);
    assert_eq!(s.kernels(other).await.unwrap()[0].usage, None);
}

/// A failed compare-and-set rolls back the whole batch.
pub async fn cas_conflict_leaves_store_untouched(s: &dyn Store) {
    let u = s.create_user("erin", "user", at(0)).await.unwrap();
    let a = s.insert_job(u.id, &JobSpec::command(["a"]), None, at(0)).await.unwrap();
    let b = s.insert_job(u.id, &JobSpec::command(["b"]), None, at(0)).await.unwrap();
    let before_a = s.job(a).await.unwrap();
    let before_b = s.job(b).await.unwrap();
    let err = s
        .apply(&[
            tr(a, JobState::Pending, JobState::Scheduled, 1, "scheduled on n1"),
            Change::SetKernels { job_id: a, attempt: 0, bindings: vec![binding("n1")] },
            Change::PendingReason { job_id: b, reason: Some(PendingReason::new(PendingKind::Priority, "behind 1")) },
            // b is PENDING, not RUNNING: the whole batch must fail.
            tr(b, JobState::Running, JobState::Succeeded, 1, "done"),
        ])
        .await
        .unwrap_err();
    match err {
        StoreError::Conflict { job_id, expected, actual } => {
            assert_eq!((job_id, expected, actual.as_str()), (b, JobState::Running, "PENDING"));
        }
        e => panic!("expected a conflict, got {e:?}"),
    }
    assert_eq!(s.job(a).await.unwrap(), before_a);
    assert_eq!(s.job(b).await.unwrap(), before_b);
    assert!(s.kernels(a).await.unwrap().is_empty());
    assert_eq!(s.transitions(a).await.unwrap().len(), 1);
}

/// Back to PENDING is a requeue: a new attempt, with its own kernels.
pub async fn requeue_bumps_attempt(s: &dyn Store) {
    let u = s.create_user("frank", "user", at(0)).await.unwrap();
    let id = s.insert_job(u.id, &JobSpec::command(["a"]), None, at(0)).await.unwrap();
    s.apply(&[
        tr(id, JobState::Pending, JobState::Scheduled, 1, "scheduled on n1"),
        Change::SetKernels { job_id: id, attempt: 0, bindings: vec![binding("n1")] },
        tr(id, JobState::Scheduled, JobState::Running, 2, "started"),
    ])
    .await
    .unwrap();
    // A preemption: who and what next are kept while the victim stops...
    let preempted = StopCause::Preempted { by_job: 77, action: PreemptAction::Requeue };
    s.apply(&[
        tr(id, JobState::Running, JobState::Terminating, 3, "preempted by job 77 (priority 5)"),
        Change::Stop { job_id: id, cause: preempted.clone() },
    ])
    .await
    .unwrap();
    assert_eq!(s.job(id).await.unwrap().unwrap().stop, Some(preempted));
    // ...and the requeue (a new attempt) clears them.
    s.apply(&[tr(id, JobState::Terminating, JobState::Pending, 3, "requeued: preempted by job 77")]).await.unwrap();
    let j = s.job(id).await.unwrap().unwrap();
    assert_eq!((j.state, j.attempt, j.started_at, j.stop), (JobState::Pending, 1, None, None));
    s.apply(&[
        tr(id, JobState::Pending, JobState::Scheduled, 4, "scheduled on n2"),
        Change::SetKernels { job_id: id, attempt: 1, bindings: vec![binding("n2")] },
    ])
    .await
    .unwrap();
    let k = s.kernels(id).await.unwrap();
    assert_eq!(k.iter().map(|k| (k.attempt, k.node.as_str())).collect::<Vec<_>>(), vec![(0, "n1"), (1, "n2")]);
    // A cancel: the canceller stays with the ended job, beside its end cause.
    let by = StopCause::Cancelled { by: "frank".into() };
    s.apply(&[
        tr(id, JobState::Scheduled, JobState::Terminating, 5, "cancel requested by frank"),
        Change::Stop { job_id: id, cause: by.clone() },
    ])
    .await
    .unwrap();
    s.apply(&[Change::Transition {
        job_id: id,
        from: JobState::Terminating,
        to: JobState::Cancelled,
        at: at(6),
        reason: "cancelled by frank".into(),
        exit_code: None,
        end: Some(EndCause::Cancelled),
        end_signal: None,
    }])
    .await
    .unwrap();
    let j = s.job(id).await.unwrap().unwrap();
    assert_eq!((j.state, j.stop, j.end_cause), (JobState::Cancelled, Some(by), Some(EndCause::Cancelled)));

    // A requeue a user asked for: typed while the job stops (it then gets a new attempt).
    let id = s.insert_job(u.id, &JobSpec::command(["train"]), None, at(7)).await.unwrap();
    let requeued = StopCause::Requeued { by: "grace".into() };
    s.apply(&[
        tr(id, JobState::Pending, JobState::Scheduled, 8, "scheduled on n1"),
        tr(id, JobState::Scheduled, JobState::Running, 8, "started"),
        tr(id, JobState::Running, JobState::Terminating, 9, "requeue requested by grace"),
        Change::Stop { job_id: id, cause: requeued.clone() },
    ])
    .await
    .unwrap();
    let j = s.job(id).await.unwrap().unwrap();
    assert_eq!((j.state, j.stop), (JobState::Terminating, Some(requeued)));

    // An idle session: stopped by the idle checker, typed as such through its end.
    let id = s.insert_job(u.id, &JobSpec::command(["jupyter"]), None, at(7)).await.unwrap();
    let idle = StopCause::Idle { idle_secs: 600 };
    s.apply(&[
        tr(id, JobState::Pending, JobState::Scheduled, 8, "scheduled on n1"),
        tr(id, JobState::Scheduled, JobState::Running, 8, "started"),
        tr(id, JobState::Running, JobState::Terminating, 9, "idle for 10m"),
        Change::Stop { job_id: id, cause: idle.clone() },
    ])
    .await
    .unwrap();
    s.apply(&[Change::Transition {
        job_id: id,
        from: JobState::Terminating,
        to: JobState::Timeout,
        at: at(10),
        reason: "idle: no client attached and no app traffic for 10m".into(),
        exit_code: None,
        end: Some(EndCause::Idle),
        end_signal: None,
    }])
    .await
    .unwrap();
    let j = s.job(id).await.unwrap().unwrap();
    assert_eq!((j.state, j.stop, j.end_cause), (JobState::Timeout, Some(idle), Some(EndCause::Idle)));

    // A serving replica its endpoint no longer wants: typed while it stops (a restarted
    // manager ends it the same way), and its end is no cancel by anyone.
    let id = s.insert_job(u.id, &JobSpec::command(["serve"]), None, at(7)).await.unwrap();
    let scaled = StopCause::ScaledDown { endpoint: "llm".into(), wants: 1 };
    s.apply(&[
        tr(id, JobState::Pending, JobState::Scheduled, 8, "scheduled on n1"),
        tr(id, JobState::Scheduled, JobState::Running, 8, "started"),
        tr(id, JobState::Running, JobState::Terminating, 9, "scaling down: endpoint llm wants 1 replica"),
        Change::Stop { job_id: id, cause: scaled.clone() },
    ])
    .await
    .unwrap();
    assert_eq!(s.job(id).await.unwrap().unwrap().stop, Some(scaled.clone()));
    s.apply(&[Change::Transition {
        job_id: id,
        from: JobState::Terminating,
        to: JobState::Cancelled,
        at: at(10),
        reason: "scaled down (endpoint llm wants 1 replica)".into(),
        exit_code: None,
        end: Some(EndCause::ScaledDown),
        end_signal: None,
    }])
    .await
    .unwrap();
    let j = s.job(id).await.unwrap().unwrap();
    assert_eq!((j.state, j.stop, j.end_cause), (JobState::Cancelled, Some(scaled), Some(EndCause::ScaledDown)));

    // Every end cause the model has can be stored (the column's CHECK follows the enum: a
    // dependency that can never be met once failed to cancel its job here).
    for (k, cause) in EndCause::ALL.into_iter().enumerate() {
        let id = s.insert_job(u.id, &JobSpec::command(["true"]), None, at(11)).await.unwrap();
        let end = Change::Transition {
            job_id: id,
            from: JobState::Pending,
            to: JobState::Cancelled,
            at: at(12 + k as i64),
            reason: format!("ended: {}", cause.as_str()),
            exit_code: None,
            end: Some(cause),
            end_signal: None,
        };
        s.apply(&[end]).await.unwrap_or_else(|e| panic!("end cause {cause:?}: {e}"));
        assert_eq!(s.job(id).await.unwrap().unwrap().end_cause, Some(cause));
    }
}

/// The tasks an array makes are found by the array, and one index is made once.
pub async fn array_tasks(s: &dyn Store) {
    let u = s.create_user("ann", "user", at(0)).await.unwrap();
    let mut spec = JobSpec::command(["train"]);
    spec.array = Some("0-9".parse().unwrap());
    let array = s.insert_job(u.id, &spec, None, at(1)).await.unwrap();
    spec.array = None;
    let mut ids = Vec::new();
    for index in [3, 0] {
        spec.array_task = Some(berth_model::ArrayTask { array_id: array, index, min: 0, max: 9, count: 10 });
        ids.push(s.insert_job(u.id, &spec, None, at(2)).await.unwrap());
    }
    let tasks = s.jobs(&JobFilter { array_id: Some(array), ..Default::default() }).await.unwrap();
    let found: Vec<(i64, Option<u32>)> = tasks.iter().map(|j| (j.id, j.spec.array_task.map(|t| t.index))).collect();
    assert_eq!(found, [(ids[1], Some(0)), (ids[0], Some(3))]);
    let again = s.insert_job(u.id, &spec, None, at(3)).await;
    assert!(matches!(again, Err(StoreError::Duplicate(_))), "task 0 made twice: {again:?}");
    let other = s.jobs(&JobFilter { array_id: Some(ids[0]), ..Default::default() }).await.unwrap();
    assert!(other.is_empty());
    // One task by its index (what `afterok:12_3` looks up once the task has ended).
    let one = s.jobs(&JobFilter { array_id: Some(array), array_index: Some(3), ..Default::default() }).await.unwrap();
    assert_eq!(one.iter().map(|j| j.id).collect::<Vec<_>>(), [ids[0]]);
    let unmade =
        s.jobs(&JobFilter { array_id: Some(array), array_index: Some(7), ..Default::default() }).await.unwrap();
    assert!(unmade.is_empty());
}

/// Nodes and meta values.
pub async fn nodes_and_meta(s: &dyn Store) {
    let mut n = node("n1");
    s.upsert_node(&n).await.unwrap();
    s.set_node_drain("n1", Some("disk swap")).await.unwrap();
    n.version = "0.2.0".into();
    n.address = Some("10.0.0.2".into());
    // A re-registering agent must not undo an admin's drain.
    n.drain_reason = None;
    s.upsert_node(&n).await.unwrap();
    s.set_node_state("n1", NodeState::Lost, None).await.unwrap();
    let nodes = s.nodes().await.unwrap();
    assert_eq!(nodes.len(), 1);
    assert_eq!((nodes[0].version.as_str(), nodes[0].state), ("0.2.0", NodeState::Lost));
    assert_eq!(nodes[0].last_heartbeat, Some(at(1)));
    assert_eq!(nodes[0].topology, n.topology);
    assert_eq!(nodes[0].address.as_deref(), Some("10.0.0.2"));
    assert_eq!(nodes[0].drain_reason.as_deref(), Some("disk swap"));
    s.set_node_drain("n1", None).await.unwrap();
    assert_eq!(s.nodes().await.unwrap()[0].drain_reason, None);
    assert!(matches!(s.set_node_state("zz", NodeState::Lost, None).await, Err(StoreError::NotFound(_))));
    assert!(matches!(s.set_node_drain("zz", Some("x")).await, Err(StoreError::NotFound(_))));

    assert_eq!(s.meta_get("k").await.unwrap(), None);
    s.meta_set("k", "1").await.unwrap();
    s.meta_set("k", "2").await.unwrap();
    assert_eq!(s.meta_get("k").await.unwrap().as_deref(), Some("2"));
}

/// Writes data for [`check_after_reopen`]: call on a fresh store, close, reopen, then check.
pub async fn fill_before_reopen(s: &dyn Store) {
    let u = s.create_user("gina", "admin", at(0)).await.unwrap();
    s.add_api_token(u.id, "h1", "t", at(0)).await.unwrap();
    s.add_join_token("jt", at(0)).await.unwrap();
    for i in 0..3 {
        s.insert_job(u.id, &JobSpec::command([format!("job{i}")]), None, at(i)).await.unwrap();
    }
    s.apply(&[
        tr(1, JobState::Pending, JobState::Scheduled, 5, "scheduled on n1"),
        Change::SetKernels { job_id: 1, attempt: 0, bindings: vec![binding("n1")] },
    ])
    .await
    .unwrap();
    s.apply(&[tr(2, JobState::Pending, JobState::Cancelled, 6, "cancelled by gina")]).await.unwrap();
    s.meta_set("bootstrapped", "1").await.unwrap();
    s.put_cache_node("n1", "http://n1:7171", 1, at(7)).await.unwrap();
    s.put_cache_node("n2", "http://n2:7171", 2, at(7)).await.unwrap();
    s.set_cache_node_removed("n2", true, at(8)).await.unwrap();
    s.set_cache_node_weight("n1", Some(5), at(8)).await.unwrap();
}

/// Everything [`fill_before_reopen`] wrote is still there, and ids keep counting.
pub async fn check_after_reopen(s: &dyn Store) {
    let u = s.user_by_token_hash("h1").await.unwrap().expect("token survives reopen");
    assert_eq!(u.name, "gina");
    assert!(s.join_token_exists("jt").await.unwrap());
    assert_eq!(s.meta_get("bootstrapped").await.unwrap().as_deref(), Some("1"));
    let unfinished: Vec<_> = s.unfinished_jobs().await.unwrap().iter().map(|j| (j.id, j.state)).collect();
    assert_eq!(unfinished, vec![(1, JobState::Scheduled), (3, JobState::Pending)]);
    assert_eq!(s.kernels(1).await.unwrap().len(), 1);
    assert_eq!(s.transitions(2).await.unwrap().last().unwrap().reason, "cancelled by gina");
    let next = s.insert_job(u.id, &JobSpec::command(["again"]), None, at(9)).await.unwrap();
    assert_eq!(next, 4, "ids keep counting after reopen");
    let cache = s.cache_nodes().await.unwrap();
    let view: Vec<_> = cache.iter().map(|r| (r.node.as_str(), r.effective_weight(), r.removed, r.seq)).collect();
    assert_eq!(view, vec![("n1", 5, false, 1), ("n2", 2, true, 2)]);
    let n3 = s.put_cache_node("n3", "http://n3:7171", 1, at(9)).await.unwrap();
    assert_eq!(n3.seq, 3, "seq keeps counting after reopen");
    let back = s.set_cache_node_removed("n2", false, at(9)).await.unwrap().unwrap();
    assert_eq!((back.seq, back.removed), (2, false));
}

/// Queue policies: insert, replace, list by name.
pub async fn queues_and_usage(s: &dyn Store) {
    use crate::{QueueRow, UsageRow};
    assert!(s.queues().await.unwrap().is_empty());
    let gpu = QueueRow { name: "gpu".into(), policy: policy("fifo"), seed: Some("{}".into()), updated_at: at(1) };
    s.put_queue(&gpu).await.unwrap();
    s.put_queue(&QueueRow { name: "cpu".into(), policy: policy("drf"), seed: None, updated_at: at(1) }).await.unwrap();
    let changed = QueueRow { policy: policy("lifo"), seed: None, updated_at: at(2), ..gpu };
    s.put_queue(&changed).await.unwrap();
    let qs = s.queues().await.unwrap();
    assert_eq!(qs.iter().map(|q| q.name.as_str()).collect::<Vec<_>>(), ["cpu", "gpu"]);
    assert_eq!(qs[1], changed);

    assert!(s.usage().await.unwrap().is_empty());
    let u = |name: &str, value: f64, secs: i64| {
        Change::Usage(UsageRow { kind: "user".into(), name: name.into(), value, at: at(secs) })
    };
    s.apply(&[u("bob", 1.5, 1), u("carol", 2.0, 1)]).await.unwrap();
    s.apply(&[u("bob", 3.25, 2)]).await.unwrap();
    let rows = s.usage().await.unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!((rows[0].name.as_str(), rows[0].value, rows[0].at), ("bob", 3.25, at(2)));
    // a usage change in a failed batch is not written either
    let bad = tr(999, JobState::Pending, JobState::Scheduled, 3, "x");
    assert!(s.apply(&[u("bob", 9.0, 3), bad]).await.is_err());
    assert_eq!(s.usage().await.unwrap()[0].value, 3.25);
}

/// One lease, taken by one manager at a time, with an epoch that grows at every takeover; a
/// store fenced with an old epoch writes nothing.
pub async fn leader_lease(s: &dyn Store) {
    use std::time::Duration;
    let l = s.lease().await.unwrap();
    assert_eq!((l.epoch, l.held()), (0, false), "a new store is unled: {l:?}");
    let ttl = Duration::from_secs(60);
    let e1 = s.lease_acquire("a", "http://a:7070", ttl, None).await.unwrap().expect("a free lease is taken");
    assert!(e1 > 1_700_000_000_000, "a new epoch is at least the database's time in ms: {e1}");
    assert_eq!(s.lease_acquire("b", "http://b:7070", ttl, None).await.unwrap(), None, "a held lease is not");
    let l = s.lease().await.unwrap();
    assert_eq!((l.holder.as_str(), l.url.as_str(), l.epoch, l.held()), ("a", "http://a:7070", e1, true));
    assert!(l.remaining > Duration::from_secs(50) && l.remaining <= ttl, "{l:?}");
    assert!(s.lease_renew("a", e1, ttl).await.unwrap());
    assert!(!s.lease_renew("b", e1, ttl).await.unwrap(), "only the holder renews");
    assert!(!s.lease_renew("a", e1 + 1, ttl).await.unwrap(), "with its own epoch");

    s.fence(e1);
    let u = s.create_user("u", "user", at(0)).await.unwrap();
    let id = s.insert_job(u.id, &JobSpec::command(["true"]), None, at(1)).await.expect("the leader writes");
    // a lease that ran out is taken over by the next manager, with the next epoch
    assert!(s.lease_renew("a", e1, Duration::ZERO).await.unwrap());
    assert!(!s.lease().await.unwrap().held());
    let e2 = s.lease_acquire("b", "http://b:7070", ttl, None).await.unwrap().expect("an expired lease is taken over");
    assert!(e2 > e1);
    assert!(!s.lease_renew("a", e1, ttl).await.unwrap(), "the old leader cannot renew");
    let cancel = Change::Transition {
        job_id: id,
        from: JobState::Pending,
        to: JobState::Cancelled,
        at: at(2),
        reason: "late".into(),
        exit_code: None,
        end: None,
        end_signal: None,
    };
    for refused in [
        s.apply(std::slice::from_ref(&cancel)).await,
        s.insert_job(u.id, &JobSpec::command(["true"]), None, at(2)).await.map(|_| ()),
        s.insert_jobs(&[NewJob { user_id: u.id, spec: &JobSpec::command(["true"]), submitter: None, at: at(2) }; 3])
            .await
            .map(|_| ()),
        s.upsert_node(&node("n9")).await,
        s.set_node_state("n9", NodeState::Lost, None).await,
    ] {
        match refused {
            Err(StoreError::Fenced { mine, now }) if mine == e1 && now == e2 => {}
            other => panic!("a write of the old leader must be fenced, got {other:?}"),
        }
    }
    assert_eq!(s.job(id).await.unwrap().unwrap().state, JobState::Pending, "nothing of it was written");
    assert_eq!(s.job_count().await.unwrap(), 1);
    assert!(s.nodes().await.unwrap().is_empty());
    // the new leader writes; a release lets the next one in at once
    s.fence(e2);
    s.apply(&[cancel]).await.expect("the new leader writes");
    let spec = JobSpec::command(["true"]);
    let two = [NewJob { user_id: u.id, spec: &spec, submitter: None, at: at(3) }; 2];
    assert_eq!(s.insert_jobs(&two).await.expect("the new leader writes").len(), 2);
    s.lease_release("a", e1).await.unwrap();
    assert!(s.lease().await.unwrap().held(), "only the holder releases");
    s.lease_release("b", e2).await.unwrap();
    let e3 = s.lease_acquire("c", "http://c:7070", ttl, None).await.unwrap().unwrap();
    assert!(e3 > e2);
    // a holder known to be dead (the same manager's previous run) is replaced at once
    assert_eq!(s.lease_acquire("d", "http://c:7070", ttl, Some("b")).await.unwrap(), None, "not its holder");
    assert!(s.lease_acquire("d", "http://c:7070", ttl, Some("c")).await.unwrap().unwrap() > e3);
}

/// A submit sent again with the same key makes no second job; keys are per user.
pub async fn idempotent_submits(s: &dyn Store) {
    let (a, b) = (s.create_user("a", "user", at(0)).await.unwrap(), s.create_user("b", "user", at(0)).await.unwrap());
    let spec = JobSpec::command(["true"]);
    let (first, new) = s.insert_job_once(a.id, &spec, None, at(1), "k1").await.unwrap();
    assert!(new);
    assert_eq!(s.insert_job_once(a.id, &spec, None, at(2), "k1").await.unwrap(), (first, false), "the same job");
    let (other, new) = s.insert_job_once(b.id, &spec, None, at(3), "k1").await.unwrap();
    assert!(new && other != first, "another user's key is another key");
    assert_eq!(s.job_count().await.unwrap(), 2);
    // a day later the key is forgotten
    let (later, new) = s.insert_job_once(a.id, &spec, None, at(2 + 86_400), "k1").await.unwrap();
    assert!(new && later > other);
}

/// Several writers at once behind `Arc<dyn Store>`: ids are unique and every insert lands; the
/// same compare-and-set from several tasks at once has exactly one winner.
pub async fn concurrent_writers(s: std::sync::Arc<dyn Store>) {
    let u = s.create_user("u", "user", jiff::Timestamp::now()).await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..25 {
                s.insert_job(u.id, &JobSpec::command(["true"]), None, jiff::Timestamp::now()).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut ids: Vec<_> = s.unfinished_jobs().await.unwrap().iter().map(|j| j.id).collect();
    ids.sort();
    assert_eq!(ids, (1..=200).collect::<Vec<_>>());
    // The same compare-and-set from eight connections at once: exactly one wins.
    let mut racers = Vec::new();
    for _ in 0..8 {
        let s = s.clone();
        racers.push(tokio::spawn(async move {
            let c = Change::Transition {
                job_id: 1,
                from: JobState::Pending,
                to: JobState::Cancelled,
                at: jiff::Timestamp::now(),
                reason: "race".into(),
                exit_code: None,
                end: None,
                end_signal: None,
            };
            s.apply(&[c]).await
        }));
    }
    let mut won = 0;
    for r in racers {
        match r.await.unwrap() {
            Ok(()) => won += 1,
            Err(StoreError::Conflict { .. }) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(won, 1);
    assert_eq!(s.transitions(1).await.unwrap().len(), 2);
    s.close().await;
}
