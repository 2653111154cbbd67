//! The conformance checks of [`crate::Retention`] (archiving finished jobs), part of
//! [`crate::conformance`] and run on every adapter through
//! [`conformance_tests!`](crate::conformance_tests).

use berth_model::{EndCause, JobId, JobSpec, JobState, KernelUsage};
use jiff::Timestamp;

use crate::{Change, JobFilter, JobRow, Store};

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + secs).unwrap()
}

fn tr(job_id: JobId, from: JobState, to: JobState, secs: i64) -> Change {
    Change::Transition {
        job_id,
        from,
        to,
        at: at(secs),
        reason: format!("{to}"),
        exit_code: None,
        end: None,
        end_signal: None,
    }
}

/// A job of `user` submitted at `secs`, run on `node` from `secs + 10` and, with `end`, ended
/// then in that state with exit code 3 and measured usage.
async fn job(s: &dyn Store, user: i64, secs: i64, end: Option<(i64, JobState)>) -> JobId {
    let mut spec = JobSpec::command(["train", "--epochs", "3"]);
    spec.name = Some(format!("job-{secs}"));
    spec.project = Some("vision".into());
    spec.shared = true;
    spec.nodes = 2;
    spec.kernels = 2;
    spec.resources.cpu_milli = 4000;
    spec.resources.gpu_milli = 1500;
    spec.resources.mem_bytes = 8 << 30;
    let id = s.insert_job(user, &spec, None, at(secs)).await.unwrap();
    let Some((ended, state)) = end else { return id };
    s.apply(&[
        tr(id, JobState::Pending, JobState::Scheduled, secs + 5),
        Change::SetKernels {
            job_id: id,
            attempt: 0,
            bindings: vec![crate::conformance::binding("n1"), crate::conformance::binding("n2")],
        },
        tr(id, JobState::Scheduled, JobState::Running, secs + 10),
    ])
    .await
    .unwrap();
    let usage = KernelUsage {
        cpu_seconds: Some(60.0),
        memory_peak_bytes: Some(1 << 20),
        gpu_seconds: Some(30.0),
        ..Default::default()
    };
    s.apply(&[
        Change::KernelExit { job_id: id, attempt: 0, index: 0, exit_code: Some(3), usage: Some(usage) },
        Change::KernelExit { job_id: id, attempt: 0, index: 1, exit_code: Some(0), usage: Some(usage) },
        Change::Transition {
            job_id: id,
            from: JobState::Running,
            to: state,
            at: at(ended),
            reason: "exited with 3".into(),
            exit_code: Some(3),
            end: Some(EndCause::Exited),
            end_signal: None,
        },
    ])
    .await
    .unwrap();
    id
}

/// What the accounting reads of a job, the same before and after archiving.
fn accounted(j: &JobRow) -> impl PartialEq + std::fmt::Debug {
    (
        (j.id, j.user_id, j.user.clone(), j.state, j.attempt, j.exit_code, j.end_cause, j.reason.clone()),
        (j.submitted_at, j.started_at, j.ended_at, j.used, j.nodes.clone()),
        (j.spec.name.clone(), j.spec.project.clone(), j.spec.shared, j.spec.queue_name().to_string()),
        (j.spec.kernel_count(), j.spec.resources),
    )
}

/// Archiving moves exactly the finished jobs that ended before the cut, out of every hot
/// table; unfinished and recent jobs stay; the usage reports read them all as before; a second
/// run moves nothing; batches go oldest first.
pub async fn archive_moves_only_old_finished_jobs(s: &dyn Store) {
    let u = s.create_user("erin", "user", at(0)).await.unwrap();
    let old = job(s, u.id, 0, Some((100, JobState::Failed))).await;
    let older = job(s, u.id, 1, Some((50, JobState::Succeeded))).await;
    let recent = job(s, u.id, 2, Some((500, JobState::Succeeded))).await;
    let running = job(s, u.id, 3, None).await;
    s.apply(&[
        tr(running, JobState::Pending, JobState::Scheduled, 4),
        tr(running, JobState::Scheduled, JobState::Running, 5),
    ])
    .await
    .unwrap();
    let pending = job(s, u.id, 4, None).await;
    let never_ran = s.insert_job(u.id, &JobSpec::command(["x"]), None, at(5)).await.unwrap();
    s.apply(&[Change::Transition {
        job_id: never_ran,
        from: JobState::Pending,
        to: JobState::Cancelled,
        at: at(60),
        reason: "cancelled by erin".into(),
        exit_code: None,
        end: Some(EndCause::Cancelled),
        end_signal: None,
    }])
    .await
    .unwrap();
    let before: Vec<_> = s.jobs_active_since(at(0)).await.unwrap();
    assert_eq!(before.len(), 6);

    // Oldest end first, in batches: `older` (ended at 50), then the never-run job (60) and `old` (100).
    assert_eq!(s.archive_finished(at(200), 1).await.unwrap(), 1);
    assert!(s.job(older).await.unwrap().is_none(), "the job that ended first goes first");
    assert_eq!(s.archive_finished(at(200), 1000).await.unwrap(), 2);
    assert_eq!(s.archive_finished(at(200), 1000).await.unwrap(), 0, "a second run is a no-op");
    assert_eq!(s.archived_count().await.unwrap(), 3);

    for id in [old, older, never_ran] {
        assert!(s.job(id).await.unwrap().is_none(), "job {id} left the jobs table");
        assert!(s.job_history(id).await.unwrap().is_none());
        assert!(s.transitions(id).await.unwrap().is_empty(), "job {id}'s history went with it");
        assert!(s.kernels(id).await.unwrap().is_empty(), "job {id}'s kernels went with it");
    }
    let hot: Vec<_> = s.jobs(&JobFilter::default()).await.unwrap().iter().map(|j| j.id).collect();
    assert_eq!(hot, vec![pending, running, recent], "unfinished and recent jobs stay");
    assert_eq!(s.job_count().await.unwrap(), 3);
    assert_eq!(s.unfinished_jobs().await.unwrap().len(), 2);
    assert_eq!(s.transitions(recent).await.unwrap().len(), 4);

    let a = s.archived_job(old).await.unwrap().expect("archived");
    assert_eq!((a.state, a.exit_code, a.end_cause), (JobState::Failed, Some(3), Some(EndCause::Exited)));
    assert_eq!(a.spec.command, Vec::<String>::new(), "the command is not kept");
    assert!(s.archived_job(recent).await.unwrap().is_none());
    assert!(s.archived_job(999).await.unwrap().is_none());

    // The usage reports see the same jobs, with the same figures.
    let after = s.jobs_active_since(at(0)).await.unwrap();
    assert_eq!(after.iter().map(accounted).collect::<Vec<_>>(), before.iter().map(accounted).collect::<Vec<_>>());
    let late: Vec<_> = s.jobs_active_since(at(90)).await.unwrap().iter().map(|j| j.id).collect();
    assert_eq!(late, vec![old, recent, running, pending], "archived jobs are found by their end too");
    assert_eq!(s.archive_finished(at(200), 0).await.unwrap(), 0);
}

/// A job id is never given again once its job is archived, not even the newest one.
pub async fn archived_ids_are_never_reused(s: &dyn Store) {
    let u = s.create_user("fay", "user", at(0)).await.unwrap();
    let first = job(s, u.id, 0, Some((10, JobState::Succeeded))).await;
    let last = job(s, u.id, 1, Some((11, JobState::Succeeded))).await;
    assert_eq!(s.archive_finished(at(100), 1000).await.unwrap(), 2);
    assert_eq!(s.job_count().await.unwrap(), 0);
    let next = s.insert_job(u.id, &JobSpec::command(["x"]), None, at(200)).await.unwrap();
    assert!(next > last && last > first, "new job {next} after archived {first}..{last}");
    assert!(s.archived_job(next).await.unwrap().is_none());
}
