//! `berth admin store copy` and `berth manager --store` through the real binary: a copy into
//! a throwaway PostgreSQL, a target that is not empty, and store URLs that must be refused
//! before anything is opened (a password on the command line, a readable store file).

use std::path::Path;
use std::process::{Command, Output};

use berth_store::test_support::PgCluster;
use berth_store::{SqliteStore, Store};

/// A `berth` command with a clean environment under `home`.
fn berth(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_berth"))
        .env_clear()
        .env("HOME", home)
        .env("XDG_DATA_HOME", home.join("data"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(home)
        .args(args)
        .output()
        .expect("run berth")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[tokio::test]
async fn copy_fills_an_empty_postgres_and_refuses_a_full_one() {
    let Some(pg) = PgCluster::start("copy_fills_an_empty_postgres_and_refuses_a_full_one") else { return };
    let home = tempfile::tempdir().unwrap();
    let db = home.path().join("berth.db");
    let s = SqliteStore::open(&db).await.unwrap();
    let u = s.create_user_with_token("ann", "admin", "aa11", "first", jiff::Timestamp::now()).await.unwrap();
    s.insert_job(u.id, &berth_model::JobSpec::command(["true"]), None, jiff::Timestamp::now()).await.unwrap();
    s.close().await;
    let to = pg.create_db("berth").await;
    let from = format!("sqlite:{}", db.display());
    let o = berth(home.path(), &["admin", "store", "copy", "--from", &from, "--to", &to]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("copied 4 rows from sqlite:"), "{}", text(&o));
    let o = berth(home.path(), &["admin", "store", "copy", "--from", &from, "--to", &to]);
    assert!(!o.status.success());
    assert!(text(&o).contains("is not empty"), "{}", text(&o));
    let s = berth_store::PgStore::open(&to).await.unwrap();
    assert_eq!(s.user_by_token_hash("aa11").await.unwrap().unwrap().name, "ann");
    assert_eq!(s.job_count().await.unwrap(), 1);
    s.close().await;
    manager_comes_up_on(home.path(), &to);
}

/// `berth manager --store URL` starts on that store (and makes no SQLite file), then stops on
/// SIGTERM.
fn manager_comes_up_on(home: &Path, url: &str) {
    use std::io::BufRead;
    let data = home.join("manager");
    let mut child = Command::new(env!("CARGO_BIN_EXE_berth"))
        .env_clear()
        .env("HOME", home)
        .env("XDG_DATA_HOME", home.join("data"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .args(["manager", "--store", url, "--listen", "127.0.0.1:0", "--data-dir", data.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let up = std::iter::from_fn(|| rx.recv_timeout(std::time::Duration::from_secs(30)).ok())
        .any(|l| l.starts_with("berth manager is up: "));
    // SAFETY: kill signals the manager this test started, by its pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    child.wait().unwrap();
    assert!(up, "the manager did not come up on {url}");
    assert!(!data.join("berth.db").exists(), "no SQLite store beside a PostgreSQL one");
}

#[test]
fn passwords_on_the_command_line_and_readable_store_files_are_refused() {
    use std::os::unix::fs::PermissionsExt;
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let o = berth(h, &["admin", "store", "copy", "--from", "sqlite:a.db", "--to", "postgres://b:hunter2@db/b"]);
    assert!(!o.status.success());
    let t = text(&o);
    assert!(t.contains("--to postgres://b:***@db/b: a password on the command line"), "{t}");
    assert!(t.contains("--to-file"), "{t}");
    let file = h.join("store-url");
    std::fs::write(&file, "postgres://b:hunter2@db/b\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let f = file.to_str().unwrap();
    let o = berth(h, &["manager", "--store-file", f, "--data-dir", h.join("d").to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(text(&o).contains("chmod 600"), "{}", text(&o));
    let o = berth(h, &["manager", "--store", "mysql://db/b", "--data-dir", h.join("d").to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(text(&o).contains("write sqlite:PATH or postgres://"), "{}", text(&o));
    assert!(!h.join("d").exists(), "refused before the data dir is made");
}
