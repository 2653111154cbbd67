//! `berth token create|list|revoke`: your API tokens. A token is shown once; the manager keeps
//! only its hash. Revoking one stops it at once.

use std::process::ExitCode;

use berth_model::api::{CreateTokenRequest, TokenView};
use clap::{Args, Subcommand};

use crate::output::{self, OutputArgs};

#[derive(Debug, Args)]
pub struct TokenArgs {
    #[command(subcommand)]
    pub command: TokenCommand,
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token for yourself (shown only once)
    Create {
        /// What it is for, shown in `berth token list` (e.g. laptop, ci)
        #[arg(long)]
        label: Option<String>,
        /// Lifetime, e.g. 30d or 12h (default: until revoked)
        #[arg(long, value_name = "DURATION")]
        expires: Option<String>,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// List your tokens (admins: --all for everyone's)
    List {
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Revoke a token by its id from `berth token list`
    Revoke {
        id: String,
        #[command(flatten)]
        output: OutputArgs,
    },
}

pub async fn run(args: TokenArgs) -> anyhow::Result<ExitCode> {
    let client = crate::client::from_env()?;
    match args.command {
        TokenCommand::Create { label, expires, output } => {
            let t = client.create_token(&CreateTokenRequest { label, expires_in: expires }).await?;
            if output.json() {
                output::print_json(&t)?;
            } else {
                let until = t.expires_at.map(|e| format!(", expires {}", output::local_time(e))).unwrap_or_default();
                println!("token {}{until}: {}", t.id, t.token);
                eprintln!(
                    "note: shown only once; use it with `berth login {} --token-stdin` or BERTH_TOKEN",
                    client.base_url()
                );
            }
        }
        TokenCommand::List { all, output } => {
            let tokens = client.tokens(all).await?;
            if output.json() {
                output::print_json(&tokens)?;
            } else {
                output::print_table(table(&tokens));
            }
        }
        TokenCommand::Revoke { id, output } => {
            let t = client.revoke_token(&id).await?;
            if output.json() {
                output::print_json(&t)?;
            } else {
                println!("token {} ({}) revoked", t.id, t.label);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn table(tokens: &[TokenView]) -> comfy_table::Table {
    let mut t = output::table(["ID", "USER", "LABEL", "CREATED", "EXPIRES", "LAST USED", "STATE"]);
    let now = jiff::Timestamp::now();
    for tok in tokens {
        let state = match (tok.revoked_at, tok.expires_at) {
            (Some(_), _) => "revoked",
            (None, Some(e)) if e <= now => "expired",
            _ if tok.current => "active (this one)",
            _ => "active",
        };
        t.add_row([
            tok.id.clone(),
            tok.user.clone(),
            tok.label.clone(),
            output::local_time(tok.created_at),
            tok.expires_at.map(output::local_time).unwrap_or_else(|| "never".into()),
            tok.last_used_at.map(|u| format!("{} ago", output::age(u))).unwrap_or_else(|| "-".into()),
            state.to_string(),
        ]);
    }
    t
}
