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

/// The password comes from PGPASSFILE (never the URL on a command line); a wrong one is
/// refused with a message that says where the password belongs.
#[tokio::test]
async fn the_password_comes_from_pgpassfile_and_a_wrong_one_says_where_it_belongs() {
    let Some(pg) = PgCluster::start("the_password_comes_from_pgpassfile") else { return };
    pg.create_db("berth").await;
    pg.add_password_user("berth", "right-one", "berth").await;
    let dir = tempfile::tempdir().unwrap();
    let pgpass = dir.path().join("pgpass");
    let url = format!("postgres://berth@127.0.0.1:{}/berth", pg.port());
    let write = |pw: &str| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(&pgpass, format!("127.0.0.1:{}:berth:berth:{pw}\n", pg.port())).unwrap();
        std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o600)).unwrap();
    };
    // SAFETY: each test runs in a process of its own (nextest), so no thread reads the
    // environment meanwhile.
    unsafe { std::env::set_var("PGPASSFILE", &pgpass) };
    write("wrong-one");
    let e = PgStore::open(&url).await.err().unwrap().to_string();
    assert!(e.contains("refused the login") && e.contains("~/.pgpass"), "{e}");
    assert!(!e.contains("wrong-one"), "{e}");
    write("right-one");
    let s = PgStore::open(&url).await.unwrap();
    assert_eq!(s.job_count().await.unwrap(), 0);
    s.close().await;
}

/// Regression: the fence check took a share lock on the lease row, so under a 500-agent swarm
/// the leader's renewal waited behind its own long scheduling batch and the lease was lost.
/// A write in flight must hold up a takeover, never a renewal.
#[tokio::test]
async fn a_write_in_flight_holds_up_a_takeover_but_not_a_renewal() {
    use berth_store::LeaderLease;
    use sqlx::{Connection, Executor};
    use std::time::Duration;
    let Some(pg) = PgCluster::start("a_write_in_flight_holds_up_a_takeover_but_not_a_renewal") else { return };
    let url = pg.create_db("berth").await;
    let (leader, standby) = (PgStore::open(&url).await.unwrap(), PgStore::open(&url).await.unwrap());
    let e1 = leader.lease_acquire("a", "http://a", Duration::from_secs(60), None).await.unwrap().unwrap();
    // a fenced write transaction of the leader, still open: the check's lock, then nothing
    let mut inflight = sqlx::PgConnection::connect(&url).await.unwrap();
    inflight.execute("BEGIN").await.unwrap();
    inflight.execute("SELECT epoch FROM leader_lease WHERE id = 1 FOR KEY SHARE").await.unwrap();
    let guard = Duration::from_secs(20);
    let renewed = tokio::time::timeout(guard, leader.lease_renew("a", e1, Duration::from_millis(1))).await;
    assert!(renewed.expect("a renewal never waits for a write in flight").unwrap());
    tokio::time::sleep(Duration::from_millis(50)).await;
    // the lease ran out: the takeover waits until the write in flight ends
    let takeover = tokio::spawn(async move {
        let e = standby.lease_acquire("b", "http://b", Duration::from_secs(60), None).await.unwrap();
        standby.close().await;
        e
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!takeover.is_finished(), "a takeover waits for the old leader's write in flight");
    inflight.execute("COMMIT").await.unwrap();
    assert!(tokio::time::timeout(guard, takeover).await.unwrap().unwrap().unwrap() > e1);
    leader.close().await;
}
