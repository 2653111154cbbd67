//! `berth admin store copy`: moves an installation's store from one database to another
//! (`berth_store::copy`), run on the manager's host with the manager stopped, no REST call.
//! `berth admin store purge --older-than 180d`: one retention pass on the running manager
//! (`POST /v1/admin/store/purge`), what `berth manager --retain` does hourly.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use berth_model::api::{PurgeRequest, PurgeResult};
use berth_store::StoreUrl;
use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Copy every row (jobs and their history, users, tokens, projects, quotas, usage, queues,
    /// join tokens, cache members and buckets) into a new, empty store. Stop the manager first
    Copy {
        /// The store to copy: sqlite:PATH or postgres://USER@HOST[:PORT]/DATABASE
        #[arg(long, value_name = "URL", required_unless_present = "from_file", conflicts_with = "from_file")]
        from: Option<String>,
        /// A file (mode 0600) holding the source URL, for a URL with a password
        #[arg(long, value_name = "PATH")]
        from_file: Option<PathBuf>,
        /// The empty store to fill (its password from ~/.pgpass or PGPASSFILE)
        #[arg(long, value_name = "URL", required_unless_present = "to_file", conflicts_with = "to_file")]
        to: Option<String>,
        /// A file (mode 0600) holding the target URL, for a URL with a password
        #[arg(long, value_name = "PATH")]
        to_file: Option<PathBuf>,
    },
    /// Archive the finished jobs that ended longer ago than --older-than, now (the manager's
    /// --retain does it hourly): they leave `ps -a` and `show`, their usage stays in `berth usage`
    Purge {
        /// e.g. 180d, 12h (more than zero)
        #[arg(long, value_name = "DURATION", value_parser = berth_model::parse_duration)]
        older_than: u64,
        #[command(flatten)]
        output: crate::output::OutputArgs,
    },
}

pub async fn run(command: StoreCommand) -> anyhow::Result<ExitCode> {
    match command {
        StoreCommand::Copy { from, from_file, to, to_file } => {
            let from = url("--from", from.as_deref(), from_file.as_deref())?.context("--from is required")?;
            let to = url("--to", to.as_deref(), to_file.as_deref())?.context("--to is required")?;
            let report = berth_store::copy(&from, &to).await.with_context(|| format!("cannot copy {from} to {to}"))?;
            for (table, rows) in &report.tables {
                println!("{table:<24} {rows:>9}");
            }
            println!("copied {} rows from {from} to {to}", report.rows());
            Ok(ExitCode::SUCCESS)
        }
        StoreCommand::Purge { older_than, output } => {
            let client = crate::client::from_env()?;
            let req = PurgeRequest { older_than: format!("{older_than}s") };
            let done: PurgeResult = client.purge_store(&req).await?;
            if output.json() {
                crate::output::print_json(&done)?;
            } else {
                println!(
                    "archived {} finished jobs that ended before {} ({} archived in all); their usage stays in \
                     berth usage",
                    done.archived, done.before, done.archive_total
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// A store URL given as `flag URL` (never with a password: `ps` shows it to every local user)
/// or as `flag-file PATH` (a private file); `None`: neither.
pub fn url(flag: &str, url: Option<&str>, file: Option<&Path>) -> anyhow::Result<Option<StoreUrl>> {
    if let Some(f) = file {
        return Ok(Some(StoreUrl::from_file(f)?));
    }
    let Some(url) = url else { return Ok(None) };
    let url = StoreUrl::parse(url).with_context(|| flag.to_string())?;
    if url.has_password() {
        anyhow::bail!(
            "{flag} {url}: a password on the command line is visible to every local user: put it in ~/.pgpass (or \
             PGPASSFILE), or the URL in a 0600 file given with {flag}-file"
        );
    }
    Ok(Some(url))
}
