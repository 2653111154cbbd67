//! Runs the shared conformance suite on a real, throwaway PostgreSQL (one cluster per test,
//! see `berth_store::test_support`), plus what only PostgreSQL needs checked.

use berth_store::test_support::PgCluster;
use berth_store::{PgStore, Store, StoreError, conformance};

/// A cluster with a fresh database `berth`, and the store on it.
async fn fresh(test: &str) -> Option<(PgCluster, PgStore)> {
    let pg = PgCluster::start(test)?;
    let url = pg.create_db("berth").await;
    let s = PgStore::open(&url).await.unwrap();
    Some((pg, s))
}

berth_store::conformance_tests!(fresh);

#[tokio::test]
async fn reopen_keeps_everything() {
    let Some(pg) = PgCluster::start("reopen_keeps_everything") else { return };
    let url = pg.create_db("berth").await;
    let s = PgStore::open(&url).await.unwrap();
    conformance::fill_before_reopen(&s).await;
    s.close().await;
    let s = PgStore::open(&url).await.unwrap();
    conformance::check_after_reopen(&s).await;
    s.close().await;
}

#[tokio::test]
async fn concurrent_writers() {
    let Some((_pg, s)) = fresh("concurrent_writers").await else { return };
    conformance::concurrent_writers(std::sync::Arc::new(s)).await;
}

#[tokio::test]
async fn unreachable_server_and_missing_database_say_what_to_fix() {
    let Some(pg) = PgCluster::start("unreachable_server_and_missing_database_say_what_to_fix") else { return };
    let e = PgStore::open(&pg.url("nosuchdb")).await.err().unwrap().to_string();
    assert!(e.contains("createdb"), "{e}");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let e = PgStore::open(&format!("postgres://berth@127.0.0.1:{closed}/berth")).await.err().unwrap().to_string();
    assert!(e.contains("cannot reach PostgreSQL at 127.0.0.1"), "{e}");
    assert!(e.contains("is the server running"), "{e}");
    let e = PgStore::open("postgres://berth@127.0.0.1:notaport/berth").await.err().unwrap().to_string();
    assert!(e.contains("bad PostgreSQL URL"), "{e}");
}

/// A database a newer berth migrated: a clear error, and nothing changed.
#[tokio::test]
async fn a_schema_from_a_newer_berth_is_refused() {
    let Some((pg, s)) = fresh("a_schema_from_a_newer_berth_is_refused").await else { return };
    s.close().await;
    let url = pg.url("berth");
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&url).await.unwrap();
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (9999, 'from the future', TRUE, '\\x00', 0)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let e = PgStore::open(&url).await.err().unwrap();
    assert!(matches!(e, StoreError::NewerSchema { applied: 9999, .. }), "{e}");
    assert!(e.to_string().contains("upgrade berth"), "{e}");
}
