//! A manager on PostgreSQL (`ManagerConfig::store`): it bootstraps once, serves jobs, and a
//! restart on the same database finds everything; a server it cannot use stops the start with
//! a clear error.

mod common;

use std::time::Duration;

use berth_model::JobSpec;
use berth_store::StoreUrl;
use berth_store::test_support::PgCluster;
use common::Client;

#[tokio::test]
async fn a_manager_on_postgres_keeps_its_state_across_restarts() {
    let Some(pg) = PgCluster::start("a_manager_on_postgres_keeps_its_state_across_restarts") else { return };
    let url = StoreUrl::Postgres(pg.create_db("berth").await);
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path(), Duration::from_secs(60));
    config.store = Some(url.clone());
    let m = berth_manager::start(config.clone()).await.unwrap();
    let token = m.bootstrap.clone().expect("first start bootstraps").token;
    let admin = Client::new(&m.url, &token);
    let id = admin.submit_ok(&JobSpec::command(["true"])).await;
    m.shutdown().await;
    assert!(!dir.path().join("berth.db").exists(), "the SQLite file must not be made");

    let m = berth_manager::start(config).await.unwrap();
    assert!(m.bootstrap.is_none(), "a second start on the same database does not bootstrap again");
    let admin = Client::new(&m.url, &token);
    assert_eq!(admin.state(id).await, "PENDING");
    m.shutdown().await;
}

#[tokio::test]
async fn a_store_that_cannot_be_opened_stops_the_start_with_what_to_fix() {
    let dir = tempfile::tempdir().unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut config = common::config(dir.path(), Duration::from_secs(60));
    config.store = Some(StoreUrl::Postgres(format!("postgres://berth@127.0.0.1:{closed}/berth")));
    let e = format!("{:#}", berth_manager::start(config).await.err().unwrap());
    assert!(e.contains("cannot open the store postgres://berth@127.0.0.1"), "{e}");
    assert!(e.contains("is the server running"), "{e}");
}
