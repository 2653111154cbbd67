//! Runs the shared conformance suite on a SQLite store in a temp dir, plus SQLite specifics.

use berth_store::{CacheState, SqliteStore, Store, conformance};

async fn fresh() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let s = SqliteStore::open(dir.path().join("berth.db")).await.unwrap();
    (dir, s)
}

berth_store::conformance_tests!(fresh_for);

async fn fresh_for(_test: &str) -> Option<(tempfile::TempDir, SqliteStore)> {
    Some(fresh().await)
}

/// A SQLite database at `path` with the migrations before `version` applied, as an older
/// release left it.
async fn migrated_before(path: &std::path::Path, version: i64) -> sqlx::SqliteConnection {
    use sqlx::migrate::Migrate;
    let opts = sqlx::sqlite::SqliteConnectOptions::new().filename(path).create_if_missing(true);
    let mut conn = sqlx::ConnectOptions::connect(&opts).await.unwrap();
    let migrator = sqlx::migrate!("./migrations/sqlite");
    conn.ensure_migrations_table().await.unwrap();
    for m in migrator.iter().filter(|m| m.version < version) {
        conn.apply(m).await.unwrap();
    }
    conn
}

/// A database from before migration 0008 (cache nodes without weights or seq): the members
/// known get 1, 2, ... in node-name order, and new ones count on from there.
#[tokio::test]
async fn cache_members_known_before_the_seq_migration_are_numbered_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("berth.db");
    {
        let mut conn = migrated_before(&path, 8).await;
        for (node, url) in [("zeta", "http://z:7171"), ("alpha", "http://a:7171")] {
            sqlx::query("INSERT INTO cache_nodes (node, url, updated_at) VALUES (?, ?, 0)")
                .bind(node)
                .bind(url)
                .execute(&mut conn)
                .await
                .unwrap();
        }
    }
    let s = SqliteStore::open(&path).await.unwrap();
    let rows = s.cache_nodes().await.unwrap();
    let view: Vec<_> = rows.iter().map(|r| (r.node.as_str(), r.seq, r.effective_weight(), r.removed)).collect();
    assert_eq!(view, vec![("alpha", 1, 1, false), ("zeta", 2, 1, false)]);
    assert_eq!(s.put_cache_node("new", "http://n:7171", 1, jiff::Timestamp::now()).await.unwrap().seq, 3);
    s.close().await;
}

/// Buckets from before migration 0017 read as spread, without an origin; a placement this
/// berth does not know is an error, not a silent default.
#[tokio::test]
async fn buckets_known_before_the_origin_migration_are_spread_and_an_unknown_placement_is_refused() {
    use berth_model::api::BucketPlacement;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("berth.db");
    let opts = sqlx::sqlite::SqliteConnectOptions::new().filename(&path);
    {
        let mut conn = migrated_before(&path, 17).await;
        sqlx::query(
            "INSERT INTO cache_buckets (name, public, quota, projects, updated_at) VALUES ('old', 1, NULL, '[]', 0)",
        )
        .execute(&mut conn)
        .await
        .unwrap();
    }
    let s = SqliteStore::open(&path).await.unwrap();
    let b = &s.cache_buckets().await.unwrap()[0];
    assert_eq!((b.name.as_str(), b.origin.as_deref(), b.placement), ("old", None, BucketPlacement::Spread));
    s.close().await;
    {
        let mut conn = sqlx::ConnectOptions::connect(&opts).await.unwrap();
        sqlx::query("UPDATE cache_buckets SET placement = 'everywhere'").execute(&mut conn).await.unwrap();
    }
    let s = SqliteStore::open(&path).await.unwrap();
    let e = s.cache_buckets().await.unwrap_err();
    assert!(e.to_string().contains("everywhere"), "{e}");
    s.close().await;
}

/// An endpoint's replica count or revision that does not fit its type, or an unknown rollout,
/// is an error naming the endpoint, never a wrapped or default value.
#[tokio::test]
async fn endpoint_counts_out_of_range_are_corrupt() {
    use berth_store::{Endpoints, StoreError};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("berth.db");
    let opts = sqlx::sqlite::SqliteConnectOptions::new().filename(&path);
    let s = SqliteStore::open(&path).await.unwrap();
    let ann = s.create_user("ann", "user", jiff::Timestamp::now()).await.unwrap();
    let spec = conformance::endpoint_spec("chat");
    s.create_endpoint("chat", ann.id, None, &spec, 1, jiff::Timestamp::now()).await.unwrap();
    s.close().await;
    for set in ["desired = -1", "desired = 4294967296", "revision = -1", "rollout = 'sideways'"] {
        {
            let mut conn = sqlx::ConnectOptions::connect(&opts).await.unwrap();
            sqlx::query(&format!("UPDATE endpoints SET desired = 1, revision = 1, rollout = 'done', {set}"))
                .execute(&mut conn)
                .await
                .unwrap();
        }
        let s = SqliteStore::open(&path).await.unwrap();
        let e = s.endpoint("chat").await.unwrap_err();
        assert!(matches!(e, StoreError::Corrupt(_)), "{set}: {e}");
        assert!(e.to_string().contains("endpoint chat"), "{set}: {e}");
        s.close().await;
    }
}

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
    conformance::concurrent_writers(std::sync::Arc::new(s)).await;
}
