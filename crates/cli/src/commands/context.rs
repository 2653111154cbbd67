//! `berth context add|use|ls|current|rm`: several clusters in one credentials file, like
//! kubectl's contexts. Each context is a manager's URL, your token there and, for a manager
//! serving TLS with its own CA, the CA file; `use` picks the one commands talk to, and the
//! global `--context NAME` (or `BERTH_CONTEXT`) one for a single command. Tokens are read from
//! standard input, never from the command line, and never printed. The file format and the
//! choice of a context: `credentials.rs`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use serde::Serialize;

use crate::client::Client;
use crate::client::credentials::{self, DEFAULT_CONTEXT, Entry};
use crate::output::{self, OutputArgs};

#[derive(Debug, Subcommand)]
pub enum ContextCommand {
    /// Add a cluster: its URL and your token there (read from stdin, never from the command line)
    Add(AddArgs),
    /// Make a context the current one: later commands talk to its cluster
    Use {
        /// The context, as `berth context ls` lists it
        name: String,
    },
    /// List the contexts (* marks the current one); tokens are never shown
    #[command(alias = "list")]
    Ls {
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Print the name of the context in use (--context, BERTH_CONTEXT, else the current one)
    Current,
    /// Remove a context and the token stored for it
    #[command(alias = "remove")]
    Rm {
        /// The context, as `berth context ls` lists it
        name: String,
    },
}

#[derive(Debug, Args)]
pub struct AddArgs {
    /// A name for it: letters, digits, `.`, `_` and `-` (`default` is the file's first one)
    pub name: String,
    /// The manager, e.g. https://head:7070; several comma-separated for standby managers
    #[arg(long)]
    pub url: String,
    /// PEM certificate(s) to trust the manager by (self-signed setups)
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// Read the token from standard input without a prompt (for scripts)
    #[arg(long)]
    pub token_stdin: bool,
    /// Store it without asking the manager whether the token works (it may be offline)
    #[arg(long)]
    pub no_verify: bool,
}

/// A context as `ls -o json` prints it: no token, only whether there is one.
#[derive(Debug, Serialize)]
struct ContextView {
    name: String,
    current: bool,
    url: Option<String>,
    has_token: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    ca_file: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    socket: Option<PathBuf>,
}

pub async fn run(cmd: ContextCommand) -> anyhow::Result<ExitCode> {
    let path = credentials::path()?;
    let mut file = credentials::read_all(&path)?;
    match cmd {
        ContextCommand::Add(a) => {
            credentials::check_context_name(&a.name)?;
            if file.get(&a.name).is_some() {
                return Err(crate::UsageError::error(format!(
                    "context `{}` exists: remove it first (`berth context rm {}`), or log in again with `berth --context {} login URL`",
                    a.name, a.name, a.name
                )));
            }
            let token = crate::commands::login::read_token(&a.url, a.token_stdin)?;
            let creds = crate::commands::login::checked_credentials(&a.url, token, a.ca_file.as_deref())?;
            let who = if a.no_verify {
                String::new()
            } else {
                let me = Client::new(creds.clone())?.whoami().await.with_context(|| {
                    format!("cannot add context `{}`: {} does not accept the token", a.name, creds.url)
                })?;
                format!(" as {} ({})", me.user, me.role)
            };
            // The first cluster of a file that had none becomes the current one.
            let first = file.names().is_empty() && file.current_context.is_none();
            let url = creds.url.clone();
            file.set(&a.name, creds.into());
            if first {
                file.current_context = Some(a.name.clone()).filter(|n| n != DEFAULT_CONTEXT);
            }
            credentials::write_all(&path, &file)?;
            let then = if first {
                "; it is the current context".to_string()
            } else {
                format!("; switch to it with `berth context use {}`", a.name)
            };
            println!("added context {}: {url}{who}{then}", a.name);
        }
        ContextCommand::Use { name } => {
            let (name, e) = file.select(Some(&name))?;
            file.current_context = Some(name.clone()).filter(|n| n != DEFAULT_CONTEXT);
            credentials::write_all(&path, &file)?;
            println!("switched to context {name} ({})", shown(&e));
        }
        ContextCommand::Ls { output } => {
            let current = crate::client::chosen().unwrap_or(file.current()).to_string();
            let views: Vec<ContextView> = file
                .names()
                .into_iter()
                .filter_map(|n| file.get(&n).map(|e| (n, e)))
                .map(|(name, e)| ContextView {
                    current: name == current,
                    name,
                    url: e.url,
                    has_token: e.token.is_some(),
                    ca_file: e.ca_file,
                    socket: e.socket,
                })
                .collect();
            if output.json() {
                output::print_json(&views)?;
            } else if views.is_empty() {
                eprintln!(
                    "no contexts: add one with `berth context add NAME --url URL` (or `berth up`, `berth login`)"
                );
            } else {
                let mut t = output::table(["CURRENT", "NAME", "URL", "TOKEN", "CA FILE"]);
                for v in views {
                    t.add_row([
                        if v.current { "*" } else { "" }.to_string(),
                        v.name,
                        output::or_dash(v.url.unwrap_or_default()),
                        if v.has_token { "yes" } else { "no" }.to_string(),
                        output::or_dash(v.ca_file.map(|p| p.display().to_string()).unwrap_or_default()),
                    ]);
                }
                output::print_table(t);
            }
        }
        ContextCommand::Current => {
            let (name, _) = file.select(crate::client::chosen())?;
            if file.get(&name).is_none() {
                anyhow::bail!(
                    "no context: add one with `berth context add NAME --url URL` (or `berth up`, `berth login`)"
                );
            }
            println!("{name}");
        }
        ContextCommand::Rm { name } => {
            let (name, _) = file.select(Some(&name))?;
            file.remove(&name);
            let was_current = file.current() == name;
            if was_current {
                file.current_context = None;
            }
            credentials::write_all(&path, &file)?;
            let now = match (was_current, file.get(DEFAULT_CONTEXT)) {
                (false, _) => String::new(),
                (true, Some(_)) => format!("; the current context is now {DEFAULT_CONTEXT}"),
                (true, None) => "; no context is current now: `berth context use NAME`".to_string(),
            };
            println!("removed context {name}{now}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Where a context leads, for messages.
fn shown(e: &Entry) -> String {
    e.url.clone().or_else(|| e.socket.as_ref().map(|s| format!("unix socket {}", s.display()))).unwrap_or_default()
}
