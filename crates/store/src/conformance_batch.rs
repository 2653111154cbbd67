//! The conformance checks of large [`crate::Store::apply`] batches (a scheduling pass, a report
//! batch: PostgreSQL writes them kind by kind in multi-row statements, `pg_batch.rs`), part of
//! [`crate::conformance`] and run on every adapter through
//! [`conformance_tests!`](crate::conformance_tests).

use super::{at, tr};
use crate::{Change, NewJob, Store, StoreError, UsageRow};
use berth_model::{EndCause, JobSpec, JobState, KernelUsage, PendingKind, PendingReason, StopCause};

fn usage(name: &str, value: f64, secs: i64) -> Change {
    Change::Usage(UsageRow { kind: "user".into(), name: name.into(), value, at: at(secs) })
}

/// One batch of hundreds of jobs and every kind of change, several for the same job in a row
/// (scheduled, its kernels, started, ended, measured): each job ends as if its changes had been
/// applied one at a time in the batch's order, with its history in that order.
pub async fn a_batch_of_many_jobs_and_mixed_changes_applies_in_order(s: &dyn Store) {
    let u = s.create_user("gus", "user", at(0)).await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..300 {
        ids.push(s.insert_job(u.id, &JobSpec::command(["x"]), None, at(0)).await.unwrap());
    }
    let waiting = PendingReason::new(PendingKind::Resources, "resources: needs 1 GPU");
    let used = KernelUsage { cpu_seconds: Some(1.5), memory_peak_bytes: Some(100), ..Default::default() };
    let mut batch = Vec::new();
    for (n, &id) in ids.iter().enumerate() {
        match n % 3 {
            // started and finished within the batch, measured
            0 => batch.extend([
                tr(id, JobState::Pending, JobState::Scheduled, 1, "scheduled on n1"),
                Change::SetKernels { job_id: id, attempt: 0, bindings: vec![super::binding("n1")] },
                tr(id, JobState::Scheduled, JobState::Running, 2, "started"),
                Change::KernelExit { job_id: id, attempt: 0, index: 0, exit_code: Some(0), usage: Some(used) },
                Change::Transition {
                    job_id: id,
                    from: JobState::Running,
                    to: JobState::Succeeded,
                    at: at(3),
                    reason: "exit code 0".into(),
                    exit_code: Some(0),
                    end: Some(EndCause::Exited),
                    end_signal: None,
                },
            ]),
            // still waiting, with a reason
            1 => batch.push(Change::PendingReason { job_id: id, reason: Some(waiting.clone()) }),
            // cancelled before it ran
            _ => batch.extend([
                Change::Transition {
                    job_id: id,
                    from: JobState::Pending,
                    to: JobState::Cancelled,
                    at: at(2),
                    reason: "cancelled by gus".into(),
                    exit_code: None,
                    end: Some(EndCause::Cancelled),
                    end_signal: None,
                },
                Change::Stop { job_id: id, cause: StopCause::Cancelled { by: "gus".into() } },
            ]),
        }
    }
    // a figure written twice in one batch keeps the later value
    batch.extend([usage("gus", 1.0, 1), usage("gus", 2.0, 2)]);
    s.apply(&batch).await.unwrap();

    for (n, &id) in ids.iter().enumerate() {
        let j = s.job(id).await.unwrap().unwrap();
        let history: Vec<JobState> = s.transitions(id).await.unwrap().iter().map(|t| t.to).collect();
        match n % 3 {
            0 => {
                assert_eq!(
                    (j.state, j.started_at, j.ended_at, j.exit_code),
                    (JobState::Succeeded, Some(at(2)), Some(at(3)), Some(0))
                );
                assert_eq!((j.nodes.as_slice(), j.end_cause), (&["n1".to_string()][..], Some(EndCause::Exited)));
                assert_eq!(j.used.and_then(|u| u.cpu_seconds), Some(1.5), "job {id}");
                let want = vec![JobState::Pending, JobState::Scheduled, JobState::Running, JobState::Succeeded];
                assert_eq!(history, want, "job {id}: history in the batch's order");
                assert_eq!(s.kernels(id).await.unwrap()[0].exit_code, Some(0));
            }
            1 => {
                assert_eq!((j.state, j.pending_reason.as_ref()), (JobState::Pending, Some(&waiting)));
                assert_eq!(history, vec![JobState::Pending]);
            }
            _ => {
                assert_eq!((j.state, j.end_cause), (JobState::Cancelled, Some(EndCause::Cancelled)));
                assert_eq!(j.stop, Some(StopCause::Cancelled { by: "gus".into() }));
                assert_eq!(history, vec![JobState::Pending, JobState::Cancelled]);
            }
        }
    }
    let figures = s.usage().await.unwrap();
    assert_eq!(figures.iter().map(|u| (u.name.as_str(), u.value)).collect::<Vec<_>>(), vec![("gus", 2.0)]);
}

/// A batch where one job among hundreds is not in its transition's `from` state (or is not
/// there at all): the whole batch fails with that job's error and nothing of it is stored.
pub async fn one_wrong_from_in_a_large_batch_rolls_back_all_of_it(s: &dyn Store) {
    let u = s.create_user("hal", "user", at(0)).await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..200 {
        ids.push(s.insert_job(u.id, &JobSpec::command(["x"]), None, at(0)).await.unwrap());
    }
    let start = |id| {
        [
            tr(id, JobState::Pending, JobState::Scheduled, 1, "scheduled on n1"),
            Change::SetKernels { job_id: id, attempt: 0, bindings: vec![super::binding("n1")] },
        ]
    };
    let before: Vec<_> = {
        let mut v = Vec::new();
        for &id in &ids {
            v.push(s.job(id).await.unwrap());
        }
        v
    };
    let wrong = ids[150];
    let mut batch: Vec<Change> = ids.iter().flat_map(|&id| start(id)).collect();
    // job `wrong` is PENDING, not RUNNING: its second move must fail the whole batch
    batch.push(tr(wrong, JobState::Running, JobState::Succeeded, 2, "done"));
    batch.push(usage("hal", 5.0, 2));
    let err = s.apply(&batch).await.unwrap_err();
    match err {
        StoreError::Conflict { job_id, expected, actual } => {
            assert_eq!((job_id, expected, actual.as_str()), (wrong, JobState::Running, "SCHEDULED"));
        }
        e => panic!("expected a conflict, got {e:?}"),
    }
    for (n, &id) in ids.iter().enumerate() {
        assert_eq!(s.job(id).await.unwrap(), before[n], "job {id} rolled back");
        assert!(s.kernels(id).await.unwrap().is_empty(), "job {id}: no kernels");
        assert_eq!(s.transitions(id).await.unwrap().len(), 1, "job {id}: only its submit");
    }
    assert!(s.usage().await.unwrap().is_empty(), "the usage figure rolled back");

    // A job that does not exist, among many that do: NotFound, nothing stored.
    let mut batch: Vec<Change> = ids.iter().flat_map(|&id| start(id)).collect();
    batch.insert(100, tr(99_999, JobState::Pending, JobState::Scheduled, 1, "scheduled on n1"));
    let err = s.apply(&batch).await.unwrap_err();
    assert!(matches!(&err, StoreError::NotFound(what) if what == "job 99999"), "{err:?}");
    assert!(s.kernels(ids[0]).await.unwrap().is_empty());
    // The first failure in the batch's order is the one reported.
    let mut batch: Vec<Change> = ids.iter().flat_map(|&id| start(id)).collect();
    batch.insert(10, Change::PendingReason { job_id: 88_888, reason: None });
    batch.push(tr(ids[3], JobState::Running, JobState::Succeeded, 2, "done"));
    let err = s.apply(&batch).await.unwrap_err();
    assert!(matches!(&err, StoreError::NotFound(what) if what == "job 88888"), "{err:?}");
    assert_eq!(s.job(ids[0]).await.unwrap().unwrap().state, JobState::Pending);
}

/// Many submits in one [`Store::insert_jobs`] (a group commit): each job gets its own row with
/// its spec, time and submitter, PENDING with its `submitted` history; the ids are unique,
/// after every id before, and ascending in the batch's order. One job that cannot be inserted
/// (an array task already stored) among them fails the whole call and stores nothing of it;
/// the batch without it then goes in, and ids stay unique.
pub async fn a_batch_of_submits_is_inserted_in_order_or_not_at_all(s: &dyn Store) {
    let u = s.create_user("ida", "user", at(0)).await.unwrap();
    let first = s.insert_job(u.id, &JobSpec::command(["before"]), None, at(0)).await.unwrap();
    let specs: Vec<JobSpec> = (0..700).map(|i| JobSpec::command([format!("job-{i}")])).collect();
    let who = berth_model::UnixId { uid: 1000, gid: 100 };
    let batch: Vec<NewJob<'_>> = specs
        .iter()
        .enumerate()
        .map(|(i, spec)| NewJob { user_id: u.id, spec, submitter: (i == 3).then_some(who), at: at(i as i64) })
        .collect();
    // 700 jobs: more than one multi-row statement's worth
    let ids = s.insert_jobs(&batch).await.unwrap();
    assert_eq!(ids.len(), specs.len());
    assert!(ids[0] > first && ids.windows(2).all(|w| w[0] < w[1]), "ids ascending in the batch's order: {ids:?}");
    for (i, &id) in ids.iter().enumerate() {
        let j = s.job(id).await.unwrap().unwrap();
        assert_eq!((&j.spec, j.submitted_at, j.state), (&specs[i], at(i as i64), JobState::Pending), "job {id}");
        assert_eq!(j.submitter, (i == 3).then_some(who), "job {id}");
        let history = s.transitions(id).await.unwrap();
        assert_eq!(history.len(), 1);
        assert_eq!(
            (history[0].to, history[0].at, history[0].reason.as_str()),
            (JobState::Pending, at(i as i64), "submitted")
        );
    }
    assert_eq!(s.insert_jobs(&[]).await.unwrap(), Vec::<i64>::new());

    // An array task that is already stored, among fresh jobs: nothing of the batch is stored.
    let mut task = JobSpec::command(["task"]);
    task.array_task = Some(berth_model::ArrayTask { array_id: first, index: 0, min: 0, max: 1, count: 2 });
    s.insert_job(u.id, &task, None, at(1)).await.unwrap();
    let count = s.job_count().await.unwrap();
    let fresh: Vec<JobSpec> = (0..5).map(|i| JobSpec::command([format!("more-{i}")])).collect();
    let mut batch: Vec<NewJob<'_>> =
        fresh.iter().map(|spec| NewJob { user_id: u.id, spec, submitter: None, at: at(9) }).collect();
    batch.insert(2, NewJob { user_id: u.id, spec: &task, submitter: None, at: at(9) });
    let err = s.insert_jobs(&batch).await.unwrap_err();
    assert!(matches!(err, StoreError::Duplicate(_)), "{err:?}");
    assert_eq!(s.job_count().await.unwrap(), count, "nothing of the failed batch stored");
    batch.remove(2);
    let more = s.insert_jobs(&batch).await.unwrap();
    assert!(more[0] > ids[ids.len() - 1] && more.windows(2).all(|w| w[0] < w[1]), "{more:?}");
    assert_eq!(s.job_count().await.unwrap(), count + 5);
}

/// A pending job's hold (issue 48) and a killed job's signal (issue 43): a hold is stored only
/// while PENDING (a batch with a hold and a start holds and starts in order: the start after a
/// release), a job submitted held is held by its user until released, and a released one stays
/// released; the signal is kept with the final state, also from a multi-row batch.
pub async fn holds_and_end_signals(s: &dyn Store) {
    use berth_model::Hold;
    let u = s.create_user("hal", "user", at(0)).await.unwrap();
    let mut held = JobSpec::command(["x"]);
    held.hold = true;
    let a = s.insert_job(u.id, &held, None, at(0)).await.unwrap();
    let b = s.insert_job(u.id, &JobSpec::command(["x"]), None, at(0)).await.unwrap();
    let hold = |id| async move { s.job(id).await.unwrap().unwrap().hold };
    assert_eq!(hold(a).await, Some(Hold::User), "submitted held: its user's hold");
    assert_eq!(hold(b).await, None);
    s.apply(&[Change::Hold { job_id: b, hold: Some(Hold::Admin) }]).await.unwrap();
    assert_eq!(hold(b).await, Some(Hold::Admin));
    s.apply(&[Change::Hold { job_id: a, hold: None }, tr(a, JobState::Pending, JobState::Scheduled, 1, "placed")])
        .await
        .unwrap();
    assert_eq!(hold(a).await, None, "released, not back to as submitted");
    let late = s.apply(&[Change::Hold { job_id: a, hold: Some(Hold::User) }]).await;
    assert!(matches!(late, Err(StoreError::Conflict { .. })), "only a pending job is held: {late:?}");
    let end = |id, from| Change::Transition {
        job_id: id,
        from,
        to: JobState::Cancelled,
        at: at(3),
        reason: "cancelled by hal".into(),
        exit_code: Some(143),
        end_signal: Some(15),
        end: Some(EndCause::Cancelled),
    };
    s.apply(&[tr(a, JobState::Scheduled, JobState::Running, 2, "started"), end(a, JobState::Running)]).await.unwrap();
    s.apply(&[end(b, JobState::Pending)]).await.unwrap();
    for id in [a, b] {
        let j = s.job(id).await.unwrap().unwrap();
        assert_eq!((j.exit_code, j.end_signal), (Some(143), Some(15)), "job {id}");
    }
}
