//! `berth admin backup FILE`: a consistent copy of the manager's store, taken while it runs
//! (`POST /v1/admin/backup`), written to FILE privately (0600, via a temp file renamed into
//! place, so a cut transfer never leaves a half file under FILE's name). `berth admin restore
//! FILE`: puts a backup back while the manager is stopped, after checking it is a whole
//! berth store this version can open.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use futures_util::StreamExt;

use crate::client::Client;

pub async fn backup(client: &Client, file: &Path) -> anyhow::Result<ExitCode> {
    let tmp = file.with_extension("partial");
    let resp = client.backup().await?;
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    let mut body = resp.bytes_stream();
    let mut written = 0u64;
    while let Some(chunk) = body.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                bail!("the backup broke off after {written} bytes: {e}");
            }
        };
        out.write_all(&chunk).with_context(|| format!("cannot write {}", tmp.display()))?;
        written += chunk.len() as u64;
    }
    out.sync_all().with_context(|| format!("cannot write {}", tmp.display()))?;
    drop(out);
    let info = berth_store::sqlite_backup::check_backup(&tmp).await.context("the backup does not check out")?;
    std::fs::rename(&tmp, file).with_context(|| format!("cannot write {}", file.display()))?;
    println!(
        "backed up the store to {} ({} bytes, {} jobs, {} users, schema {})",
        file.display(),
        written,
        info.jobs,
        info.users,
        info.schema_version
    );
    Ok(ExitCode::SUCCESS)
}

pub async fn restore(file: &Path, data_dir: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let data_dir = crate::datadir::resolve(data_dir, crate::datadir::Role::Manager)?;
    let socket = berth_manager::local::socket_path(&data_dir);
    if std::os::unix::net::UnixStream::connect(&socket).is_ok() {
        bail!(
            "a manager is running on {}: stop it first (the store is replaced while it is stopped)",
            data_dir.display()
        );
    }
    let db = data_dir.join("berth.db");
    let info = berth_store::sqlite_backup::restore(file, &db)
        .await
        .with_context(|| format!("cannot restore {}", file.display()))?;
    println!(
        "restored {} into {} ({} jobs, {} users, schema {}); the store before it is {}",
        file.display(),
        db.display(),
        info.jobs,
        info.users,
        info.schema_version,
        db.with_extension("db.before-restore").display()
    );
    Ok(ExitCode::SUCCESS)
}
