//! Runs the shared conformance suite on a SQLite store in a temp dir, plus SQLite specifics.

use berth_store::{SqliteStore, Store, conformance};

async fn fresh() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let s = SqliteStore::open(dir.path().join("berth.db")).await.unwrap();
    (dir, s)
}

macro_rules! conformance_tests {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test]
        async fn $name() {
            let (_dir, s) = fresh().await;
            conformance::$name(&s as &dyn Store).await;
            s.close().await;
        }
    )*};
}

conformance_tests!(
    users_and_tokens,
    jobs_insert_and_list,
    lifecycle_and_history,
    cas_conflict_leaves_store_untouched,
    requeue_bumps_attempt,
    nodes_and_meta,
    queues_and_usage,
    tenancy,
    cache_state,
);

#[tokio::test]
async fn reopen_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("berth.db");
    let s = SqliteStore::open(&path).await.unwrap();
    conformance::fill_before_reopen(&s).await;
    s.close().await;
    drop(s);
    let s = SqliteStore::open(&path).await.unwrap();
    conformance::check_after_reopen(&s).await;
    s.close().await;
}

#[tokio::test]
async fn works_behind_arc_dyn_and_concurrent_writers() {
    let (_dir, s) = fresh().await;
    let s: std::sync::Arc<dyn Store> = std::sync::Arc::new(s);
    let u = s.create_user("u", "user", jiff::Timestamp::now()).await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..25 {
                s.insert_job(u.id, &berth_model::JobSpec::command(["true"]), jiff::Timestamp::now()).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut ids: Vec<_> = s.unfinished_jobs().await.unwrap().iter().map(|j| j.id).collect();
    ids.sort();
    assert_eq!(ids, (1..=200).collect::<Vec<_>>());
}
