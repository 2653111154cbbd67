//! `berth login URL`: stores a manager's URL and your API token in the credentials file, after
//! checking that the token works there. The token is read from standard input (a prompt that
//! does not echo on a terminal), so it never lands in the shell history. It goes into the
//! context named by `--context`/`BERTH_CONTEXT` (created if missing), else the current one
//! (`default` in a file without contexts), and the other contexts stay as they are.

use std::io::{BufRead, IsTerminal};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use crate::client::Client;
use crate::client::credentials::Credentials;

#[derive(Debug, Args)]
pub struct LoginArgs {
    /// The manager, e.g. https://head:7070; several comma-separated for standby managers
    pub url: String,
    /// Read the token from standard input without a prompt (for scripts)
    #[arg(long)]
    pub token_stdin: bool,
    /// PEM certificate(s) to trust the manager by (self-signed setups)
    #[arg(long, env = "BERTH_CA_FILE")]
    pub ca_file: Option<PathBuf>,
}

pub async fn run(args: LoginArgs) -> anyhow::Result<ExitCode> {
    let token = read_token(&args.url, args.token_stdin)?;
    let creds = checked_credentials(&args.url, token, args.ca_file.as_deref())?;
    let url = creds.url.clone();
    let me = Client::new(creds.clone())?.whoami().await.with_context(|| format!("cannot log in to {url}"))?;
    let path = crate::client::credentials::path()?;
    let name = match crate::client::chosen() {
        Some(n) => n.to_string(),
        None => crate::client::credentials::read_all(&path)?.current().to_string(),
    };
    crate::client::credentials::check_context_name(&name)?;
    let path = crate::client::credentials::write_context(&name, &creds)?;
    println!("logged in to {url} as {} ({}); credentials in {} (context {name})", me.user, me.role, path.display());
    Ok(ExitCode::SUCCESS)
}

/// The API token for `url`: a prompt that does not echo on a terminal (unless `no_prompt`),
/// else the first line of standard input. Never from the command line (shell history, `ps`).
pub fn read_token(url: &str, no_prompt: bool) -> anyhow::Result<String> {
    let token = if !no_prompt && std::io::stdin().is_terminal() {
        rpassword::prompt_password(format!("API token for {url}: ")).context("cannot read the token")?
    } else {
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line).context("cannot read the token from standard input")?;
        line
    };
    let token = token.trim().to_string();
    if token.is_empty() {
        return Err(crate::UsageError::error(
            "no token given: paste the token from `berth token create` (or `berth admin user create`)",
        ));
    }
    Ok(token)
}

/// The credentials for a manager at `url` with `token`: the URL without a trailing slash, the
/// CA file as an absolute path (it must exist).
pub fn checked_credentials(url: &str, token: String, ca_file: Option<&Path>) -> anyhow::Result<Credentials> {
    let ca_file = match ca_file {
        Some(p) => Some(p.canonicalize().with_context(|| format!("cannot read CA file {}", p.display()))?),
        None => None,
    };
    let url = url.trim_end_matches('/').to_string();
    berth_client::check_urls(&url)?;
    Ok(Credentials { url, token: Some(token), ca_file, socket: None, data_dir: None })
}
