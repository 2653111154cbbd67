//! `berth login URL`: stores a manager's URL and your API token in the credentials file, after
//! checking that the token works there. The token is read from standard input (a prompt that
//! does not echo on a terminal), so it never lands in the shell history.

use std::io::{BufRead, IsTerminal};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use crate::client::Client;
use crate::credentials::Credentials;

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
    let token = if !args.token_stdin && std::io::stdin().is_terminal() {
        rpassword::prompt_password(format!("API token for {}: ", args.url)).context("cannot read the token")?
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
    let ca_file = match args.ca_file {
        Some(p) => Some(p.canonicalize().with_context(|| format!("cannot read CA file {}", p.display()))?),
        None => None,
    };
    let url = args.url.trim_end_matches('/').to_string();
    let creds = Credentials { url: url.clone(), token: Some(token), ca_file, socket: None, data_dir: None };
    let me = Client::new(creds.clone())?.whoami().await.with_context(|| format!("cannot log in to {url}"))?;
    let path = crate::credentials::write(&creds)?;
    println!("logged in to {url} as {} ({}); credentials in {}", me.user, me.role, path.display());
    Ok(ExitCode::SUCCESS)
}
