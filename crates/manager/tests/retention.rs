//! Retention in the manager (issue 18): started with a retention period, it archives at once
//! the finished jobs that ended longer ago, and only those; an archived job answers 404 saying
//! so and what the archive keeps; `GET /v1/usage` counts it as before; `POST
//! /v1/admin/store/purge` runs a pass by hand (admins only) and `berth_jobs_archived_total`
//! counts what moved.

mod common;

use std::time::Duration;

use berth_model::{EndCause, JobSpec, JobState};
use berth_store::{Change, SqliteStore, Store};
use common::{Client, eventually};
use jiff::{SignedDuration, Timestamp};

/// A job of `user` that ran from `start` to `end` (before now) and succeeded.
async fn finished(s: &SqliteStore, user: i64, start: Timestamp, end: Timestamp) -> i64 {
    let mut spec = JobSpec::command(["true"]);
    spec.resources.cpu_milli = 2000;
    let id = s.insert_job(user, &spec, None, start).await.unwrap();
    let tr = |from, to, at, end: Option<EndCause>| Change::Transition {
        job_id: id,
        from,
        to,
        at,
        reason: "test".into(),
        exit_code: end.map(|_| 0),
        end,
        end_signal: None,
    };
    s.apply(&[
        tr(JobState::Pending, JobState::Scheduled, start, None),
        tr(JobState::Scheduled, JobState::Running, start, None),
        tr(JobState::Running, JobState::Succeeded, end, Some(EndCause::Exited)),
    ])
    .await
    .unwrap();
    id
}

#[tokio::test]
async fn a_manager_with_a_retention_period_archives_old_finished_jobs_and_keeps_their_usage() {
    let dir = tempfile::tempdir().unwrap();
    let now = Timestamp::now();
    let ago = |h: i64| now - SignedDuration::from_hours(h);
    let (old, recent) = {
        let s = SqliteStore::open(dir.path().join("berth.db")).await.unwrap();
        let u = s.create_user("olga", "user", ago(100)).await.unwrap();
        let old = finished(&s, u.id, ago(72), ago(48)).await;
        let recent = finished(&s, u.id, ago(3), ago(1)).await;
        s.close().await;
        (old, recent)
    };
    let mut config = common::config(dir.path(), Duration::from_secs(60));
    config.retain = Some(Duration::from_secs(86_400));
    let m = berth_manager::start(config).await.unwrap();
    let admin = Client::new(&m.url, &m.bootstrap.clone().unwrap().token);

    let msg = eventually("the old job to be archived", || {
        let admin = admin.clone();
        async move {
            let (status, v) = admin.get(&format!("/v1/jobs/{old}")).await;
            (status == 404 && v["error"].as_str()?.contains("archived"))
                .then(|| v["error"].as_str().unwrap().to_string())
        }
    })
    .await;
    assert!(msg.starts_with(&format!("job {old} was archived (SUCCEEDED, exit code 0, ended ")), "{msg}");
    assert!(msg.contains("finished jobs are kept 1d") && msg.contains("usage is kept in the accounting"), "{msg}");
    assert_eq!(admin.state(recent).await, "SUCCEEDED", "a job within the period stays");
    let (_, list) = admin.get("/v1/jobs?all=true").await;
    let ids: Vec<i64> = list.as_array().unwrap().iter().map(|j| j["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, vec![recent], "lists show only the hot jobs");

    // The accounting: both jobs, 24 h + 2 h at 2 CPUs.
    let (status, usage) = admin.get("/v1/usage?since=7d").await;
    assert_eq!(status, 200, "{usage}");
    let olga = usage.as_array().unwrap().iter().find(|l| l["name"] == "olga").expect("olga's line");
    assert_eq!((olga["jobs"].as_u64(), olga["succeeded"].as_u64()), (Some(2), Some(2)), "{olga}");
    assert!((olga["cpu_hours"].as_f64().unwrap() - 2.0 * 26.0).abs() < 1e-6, "{olga}");

    // By hand: the recent one too; nonsense is refused.
    let (status, v) = admin.post("/v1/admin/store/purge", serde_json::json!({"older_than": "0s"})).await;
    assert_eq!(status, 400, "{v}");
    let (status, v) = admin.post("/v1/admin/store/purge", serde_json::json!({"older_than": "30m"})).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!((v["archived"].as_u64(), v["archive_total"].as_u64()), (Some(1), Some(2)), "{v}");
    let (status, v) = admin.post("/v1/admin/store/purge", serde_json::json!({"older_than": "30m"})).await;
    assert_eq!((status, v["archived"].as_u64()), (200, Some(0)), "a second pass is a no-op: {v}");
    let (_, again) = admin.get("/v1/usage?since=7d").await;
    assert_eq!(again, usage, "the usage report is the same before and after");
    let metrics = reqwest::get(format!("{}/metrics", m.url)).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("berth_jobs_archived_total 2"), "{metrics}");

    // New ids count on past the archived ones.
    let next = admin.submit_ok(&JobSpec::command(["true"])).await;
    assert!(next > recent, "{next}");
    m.shutdown().await;
}
