//! `berth folder`: data folders (create, ls, show, rm, share, unshare, quota, usage). Files go
//! in and out with `berth upload` and `berth download` (`transfer/`).

use std::io::IsTerminal;
use std::process::ExitCode;

use berth_model::folder::{CreateFolder, FolderAccess, FolderRef, FolderView, ShareFolder};
use berth_model::format_bytes;
use clap::{Args, Subcommand};

use crate::UsageError;
use crate::output::{self, OutputArgs};

#[derive(Debug, Args)]
pub struct FolderArgs {
    #[command(subcommand)]
    pub command: FolderCommand,
}

#[derive(Debug, Subcommand)]
pub enum FolderCommand {
    /// Make a data folder (yours, or a project's with --project)
    Create {
        name: String,
        /// The project it belongs to: every member may use it
        #[arg(long)]
        project: Option<String>,
        /// The most it may hold, e.g. 100GiB
        #[arg(long, value_parser = parse_size)]
        quota: Option<u64>,
    },
    /// List the folders you may use
    #[command(alias = "list")]
    Ls {
        /// Admins: every folder
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Show one folder: owner, quota, shares, what it holds
    Show {
        /// NAME or PROJECT/NAME
        folder: String,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Remove a folder and everything in it
    Rm {
        /// NAME or PROJECT/NAME
        folder: String,
        /// Do not ask
        #[arg(short, long)]
        yes: bool,
    },
    /// Share a folder with a project's members
    Share {
        /// NAME or PROJECT/NAME
        folder: String,
        #[arg(long)]
        project: String,
        /// Their jobs mount it read-only and they may not upload to it
        #[arg(long)]
        read_only: bool,
    },
    /// End a folder's share with a project
    Unshare {
        folder: String,
        #[arg(long)]
        project: String,
    },
    /// Set a folder's quota (e.g. 100GiB), or `none` to lift it
    Quota { folder: String, size: String },
    /// What each folder (or one) holds against its quota
    Usage {
        folder: Option<String>,
        #[command(flatten)]
        output: OutputArgs,
    },
}

/// A size (`100GiB`) from the command line.
pub fn parse_size(s: &str) -> Result<u64, String> {
    berth_model::parse_mem(s).map_err(|e| format!("{e}: use a size such as 500GiB or 2TiB"))
}

/// A folder reference from the command line.
pub fn reference(s: &str) -> anyhow::Result<FolderRef> {
    s.parse().map_err(|e: berth_model::SpecError| UsageError::error(e.0))
}

pub async fn run(args: FolderArgs) -> anyhow::Result<ExitCode> {
    let c = crate::client::from_env()?;
    match args.command {
        FolderCommand::Create { name, project, quota } => {
            let f = c.create_folder(&CreateFolder { name, project, quota_bytes: quota }).await?;
            println!("created folder {}{}", qualified(&f), quota_note(f.quota_bytes));
        }
        FolderCommand::Ls { all, output } => {
            let list = c.folders(false, all).await?;
            if output.json() {
                output::print_json(&list)?;
            } else {
                print!("{}", render(&list, false));
            }
        }
        FolderCommand::Show { folder, output } => {
            let f = c.folder(&reference(&folder)?).await?;
            if output.json() {
                output::print_json(&f)?;
            } else {
                print!("{}", render_one(&f));
            }
        }
        FolderCommand::Rm { folder, yes } => {
            let r = reference(&folder)?;
            if !yes && !confirm(&format!("remove folder {r} and every file in it?"))? {
                return Ok(ExitCode::from(1));
            }
            c.remove_folder(&r).await?;
            println!("removed folder {r}");
        }
        FolderCommand::Share { folder, project, read_only } => {
            let f = c.share_folder(&reference(&folder)?, &ShareFolder { project: project.clone(), read_only }).await?;
            let how = if read_only { "read-only" } else { "read-write" };
            println!("shared folder {} with project {project} ({how})", qualified(&f));
        }
        FolderCommand::Unshare { folder, project } => {
            let f = c.unshare_folder(&reference(&folder)?, &project).await?;
            println!("folder {} is no longer shared with project {project}", qualified(&f));
        }
        FolderCommand::Quota { folder, size } => {
            let quota = if size == "none" { None } else { Some(parse_size(&size).map_err(UsageError::error)?) };
            let f = c.set_folder_quota(&reference(&folder)?, quota).await?;
            println!("folder {}{}", qualified(&f), quota_note(f.quota_bytes).replace(" with", ":"));
        }
        FolderCommand::Usage { folder, output } => {
            let list = match folder {
                Some(f) => vec![c.folder(&reference(&f)?).await?],
                None => c.folders(true, false).await?,
            };
            if output.json() {
                output::print_json(&list)?;
            } else {
                print!("{}", render(&list, true));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn quota_note(q: Option<u64>) -> String {
    match q {
        Some(q) => format!(" with a quota of {}", format_bytes(q)),
        None => " with no quota".into(),
    }
}

/// Asks on the terminal; without one, says to pass --yes.
fn confirm(question: &str) -> anyhow::Result<bool> {
    if !std::io::stdin().is_terminal() {
        return Err(UsageError::error(format!("{question} Pass --yes to confirm (no terminal to ask on)")));
    }
    eprint!("{question} [y/N] ");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    Ok(matches!(line.trim(), "y" | "Y" | "yes"))
}

fn qualified(f: &FolderView) -> String {
    match &f.project {
        Some(p) => format!("{p}/{}", f.name),
        None => f.name.clone(),
    }
}

fn access(a: FolderAccess) -> &'static str {
    match a {
        FolderAccess::Owner => "owner",
        FolderAccess::ReadWrite => "read-write",
        FolderAccess::ReadOnly => "read-only",
    }
}

fn shares(f: &FolderView) -> String {
    let s: Vec<String> =
        f.shares.iter().map(|s| format!("{}{}", s.project, if s.read_only { " (ro)" } else { "" })).collect();
    if s.is_empty() { "-".into() } else { s.join(",") }
}

fn render(list: &[FolderView], usage: bool) -> String {
    if list.is_empty() {
        return "no folders: make one with `berth folder create NAME`\n".into();
    }
    let mut t = if usage {
        output::table(["FOLDER", "USED", "QUOTA", "USE%", "FILES"])
    } else {
        output::table(["FOLDER", "OWNER", "ACCESS", "QUOTA", "SHARED WITH"])
    };
    for f in list {
        let quota = f.quota_bytes.map(format_bytes).unwrap_or_else(|| "-".into());
        if usage {
            let used = f.used_bytes.unwrap_or(0);
            let pct =
                f.quota_bytes.map(|q| format!("{:.0}%", used as f64 * 100.0 / q as f64)).unwrap_or_else(|| "-".into());
            t.add_row([qualified(f), format_bytes(used), quota, pct, f.files.unwrap_or(0).to_string()]);
        } else {
            t.add_row([qualified(f), f.owner.clone(), access(f.access).into(), quota, shares(f)]);
        }
    }
    output::render_table(t)
}

fn render_one(f: &FolderView) -> String {
    let used = f.used_bytes.map(format_bytes).unwrap_or_else(|| "-".into());
    let quota = match (f.quota_bytes, f.quota_holds_jobs) {
        (Some(q), true) => format!("{} (uploads and jobs' writes)", format_bytes(q)),
        (Some(q), false) => format!("{} (uploads only: the storage cannot hold jobs' writes to it)", format_bytes(q)),
        (None, _) => "none".into(),
    };
    format!(
        "folder:      {}\nowner:       {}\nyour access: {}\nquota:       {quota}\nused:        {used} in {} files\nshared with: {}\ncreated:     {}\nmount it:    berth submit --folder {}[:/data/{}][:ro] ...\n",
        qualified(f),
        f.owner,
        access(f.access),
        f.files.unwrap_or(0),
        shares(f),
        f.created_at,
        qualified(f),
        f.name
    )
}
