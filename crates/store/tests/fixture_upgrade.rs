//! A data dir written by an earlier release opens with today's code and keeps every job: the
//! fixture `fixtures/datadir-v1/berth.db` was made by the release of 2026-11-25 with
//! `fixtures/make-datadir-v1.sh` (one job in each state worth converting; `ps.txt` beside it is
//! what that release's `berth ps -a` said). The migration must type who cancelled, who
//! preempted and how jobs ended from what their reasons said.

use berth_model::api::NodeState;
use berth_model::{EndCause, JobState, PreemptAction, StopCause};
use berth_store::{JobFilter, SqliteStore, Store};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/datadir-v1/berth.db");

async fn open_copy() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("berth.db");
    std::fs::copy(FIXTURE, &path).unwrap();
    let s = SqliteStore::open(&path).await.expect("the old data dir opens and migrates");
    (dir, s)
}

#[tokio::test]
async fn a_data_dir_of_the_previous_release_keeps_every_job_and_gets_typed_causes() {
    let (_dir, s) = open_copy().await;
    let mut jobs = s.jobs(&JobFilter::default()).await.unwrap();
    jobs.sort_by_key(|j| j.id);
    let seen: Vec<_> = jobs
        .iter()
        .map(|j| (j.id, j.spec.name.clone().unwrap_or_default(), j.state, j.stop.clone(), j.end_cause))
        .collect();
    let cancelled = |by: &str| Some(StopCause::Cancelled { by: by.into() });
    let preempted = Some(StopCause::Preempted { by_job: 6, action: PreemptAction::Requeue });
    let want = vec![
        (1, "ok".to_string(), JobState::Succeeded, None, Some(EndCause::Exited)),
        (2, "exit3".into(), JobState::Failed, None, Some(EndCause::Exited)),
        (3, "nolaunch".into(), JobState::Failed, None, Some(EndCause::LaunchFailed)),
        (4, "victim".into(), JobState::Terminating, preempted, None),
        (5, "stubborn".into(), JobState::Terminating, cancelled("admin"), None),
        (6, "boss".into(), JobState::Pending, None, None),
        (7, "waiting".into(), JobState::Pending, None, None),
        (8, "cancelled-while-pending".into(), JobState::Cancelled, cancelled("admin"), Some(EndCause::Cancelled)),
    ];
    assert_eq!(seen, want);
    // The rest of each job is as it was: exit codes, reasons, history.
    assert_eq!(jobs[1].exit_code, Some(3));
    assert_eq!(jobs[3].reason.as_deref(), Some("preempted by job 6 (priority 10)"));
    assert!(s.transitions(4).await.unwrap().len() >= 4, "history kept");
    assert_eq!(s.kernels(4).await.unwrap().len(), 1, "bindings kept");
    assert_eq!(s.unfinished_jobs().await.unwrap().len(), 4);
    let nodes = s.nodes().await.unwrap();
    assert_eq!(
        nodes.iter().map(|n| (n.name.as_str(), n.state)).collect::<Vec<_>>(),
        [("fixture-node", NodeState::Ready)]
    );
    assert!(s.user_by_name("admin").await.unwrap().is_some());
    s.close().await;
}

/// Reopening runs no migration twice and changes nothing.
#[tokio::test]
async fn an_upgraded_data_dir_reopens_unchanged() {
    let (dir, s) = open_copy().await;
    let before = s.jobs(&JobFilter::default()).await.unwrap();
    s.close().await;
    let s = SqliteStore::open(dir.path().join("berth.db")).await.unwrap();
    assert_eq!(s.jobs(&JobFilter::default()).await.unwrap(), before);
    s.close().await;
}
