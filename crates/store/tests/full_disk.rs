//! The SQLite store on a full disk (issue 13): a write either commits or fails, never "succeeds"
//! into a transaction that stays open, and the store works again once space is back.
//!
//! Each test mounts a small tmpfs of its own (root only; `CI=true` without root fails).

use std::path::{Path, PathBuf};
use std::process::Command;

use berth_model::JobSpec;
use berth_store::{SqliteStore, Store, StoreError};

/// A tmpfs mounted on a temp dir for the test's life.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    /// `None` (after a SKIPPED line) when this process may not mount.
    fn mount(size: &str, test: &str) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().unwrap();
        let ok = is_root()
            && Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "tmpfs"])
                .arg(dir.path())
                .status()
                .is_ok_and(|s| s.success());
        if !ok {
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{test}: cannot mount a tmpfs (needs root)");
            eprintln!("SKIPPED: {test}: cannot mount a tmpfs (needs root)");
            return None;
        }
        Some(SmallDisk { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills what is left with one file; returns its path (remove it to free the space).
    fn fill(&self) -> PathBuf {
        use std::io::Write;
        let p = self.path().join("filler");
        let mut f = std::fs::File::create(&p).unwrap();
        let chunk = vec![0u8; 64 << 10];
        loop {
            match f.write(&chunk) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        // Byte-sized leftovers too: the database must not find room in a partial block.
        while f.write(&[0u8]).is_ok_and(|n| n == 1) {}
        p
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A spec big enough that a few of them need new pages.
fn big_spec(i: usize) -> JobSpec {
    let mut s: JobSpec = serde_json::from_value(serde_json::json!({"command": ["true"]})).unwrap();
    s.env.insert("PAD".into(), format!("{i}-{}", "x".repeat(32 << 10)));
    s
}

fn is_full(e: &StoreError) -> bool {
    e.is_disk_full()
}

/// Regression (issue 13): submits on a full disk got ids 2, 3, 4... and were never stored, the
/// writer connection stayed inside a transaction (`BEGIN IMMEDIATE` elsewhere: `database is
/// locked`), and after a restart the ids were given out again.
#[tokio::test]
async fn writes_on_a_full_disk_fail_and_never_leave_a_transaction_open() {
    let Some(disk) = SmallDisk::mount("4m", "writes_on_a_full_disk_fail_and_never_leave_a_transaction_open") else {
        return;
    };
    let db = disk.path().join("berth.db");
    let store = SqliteStore::open(&db).await.unwrap();
    let user = store.create_user("alice", "user", jiff::Timestamp::now()).await.unwrap();
    let filler = disk.fill();

    let mut acknowledged = Vec::new();
    let mut failures = 0;
    for i in 0..40 {
        match store.insert_job(user.id, &big_spec(i), None, jiff::Timestamp::now()).await {
            Ok(id) => acknowledged.push(id),
            Err(e) => {
                assert!(is_full(&e), "a full disk reads as such, not {e}");
                failures += 1;
            }
        }
    }
    assert!(failures > 0, "the disk never filled up: the test proves nothing");
    // Every acknowledged id is readable through another connection: it was committed.
    for id in &acknowledged {
        assert!(store.job(*id).await.unwrap().is_some(), "job {id} was acknowledged but is not in the store");
    }
    // No transaction stays open: another connection can take the write lock.
    let other = rusqlite_like_begin_immediate(&db).await;
    assert!(other.is_ok(), "another connection cannot write: {other:?}");

    // Space back: writes work again without reopening, and ids go on from the last one.
    std::fs::remove_file(&filler).unwrap();
    let id = store.insert_job(user.id, &big_spec(999), None, jiff::Timestamp::now()).await.unwrap();
    assert!(acknowledged.iter().all(|a| *a < id), "id {id} was given out before: {acknowledged:?}");
    store.close().await;

    // After a restart everything acknowledged is still there.
    let store = SqliteStore::open(&db).await.unwrap();
    for a in acknowledged.iter().chain([&id]) {
        assert!(store.job(*a).await.unwrap().is_some(), "job {a} lost across a restart");
    }
    let next = store.insert_job(user.id, &big_spec(1000), None, jiff::Timestamp::now()).await.unwrap();
    assert!(next > id, "id {next} reused after a restart");
    store.close().await;
}

/// Opens a separate connection and tries `BEGIN IMMEDIATE` (what `sqlite3 berth.db` did).
async fn rusqlite_like_begin_immediate(db: &Path) -> Result<(), sqlx::Error> {
    use sqlx::Connection;
    let opts =
        sqlx::sqlite::SqliteConnectOptions::new().filename(db).busy_timeout(std::time::Duration::from_millis(500));
    let mut c = sqlx::SqliteConnection::connect_with(&opts).await?;
    sqlx::query("BEGIN IMMEDIATE").execute(&mut c).await?;
    sqlx::query("ROLLBACK").execute(&mut c).await?;
    c.close().await
}

/// Regression (issue 13): `admin user create` on a full disk printed a token that never
/// worked: the user's `INSERT ... RETURNING` handed its row out and the failed commit after it
/// went unseen, so the token's row then failed its foreign key.
#[tokio::test]
async fn a_created_user_or_project_on_a_full_disk_exists_or_is_an_error() {
    use berth_store::Tenancy;
    let Some(disk) = SmallDisk::mount("4m", "a_created_user_or_project_on_a_full_disk_exists_or_is_an_error") else {
        return;
    };
    let db = disk.path().join("berth.db");
    let store = SqliteStore::open(&db).await.unwrap();
    let pad = "x".repeat(48);
    let filler = disk.fill();
    let (mut failures, mut made) = (0, Vec::new());
    for i in 0..400 {
        let name = format!("u{i}{pad}");
        match store.create_user(&name, "user", jiff::Timestamp::now()).await {
            Ok(_) => made.push(name),
            Err(e) => {
                assert!(e.is_disk_full(), "a full disk reads as such, not {e}");
                failures += 1;
            }
        }
        if let Err(e) = store.create_project(&format!("p{i}{pad}"), jiff::Timestamp::now()).await {
            assert!(e.is_disk_full(), "a full disk reads as such, not {e}");
        }
    }
    assert!(failures > 0, "the disk never filled up: the test proves nothing");
    for name in &made {
        assert!(store.user_by_name(name).await.unwrap().is_some(), "user {name} was created but is not stored");
    }
    std::fs::remove_file(&filler).unwrap();
    let u = store.create_user("after", "user", jiff::Timestamp::now()).await.unwrap();
    store.add_api_token(u.id, "hash", "t", jiff::Timestamp::now()).await.unwrap();
    store.close().await;
}
