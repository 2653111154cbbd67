//! `berth whoami` and the admin commands: creating users (their token is shown once) and join
//! tokens for new agents.

use std::process::ExitCode;

use berth_model::api::CreateUserRequest;
use clap::{Args, Subcommand};

use crate::client::Client;
use crate::output::{self, OutputArgs};

#[derive(Debug, Args)]
pub struct WhoamiArgs {
    #[command(flatten)]
    pub output: OutputArgs,
}

pub async fn whoami(args: WhoamiArgs) -> anyhow::Result<ExitCode> {
    let client = Client::from_env()?;
    let me = client.whoami().await?;
    if args.output.json() {
        output::print_json(&me)?;
    } else {
        println!("{} ({}) at {}", me.user, me.role, client.base_url());
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub struct AdminArgs {
    #[command(subcommand)]
    pub command: AdminCommand,
}

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Manage users
    User {
        #[command(subcommand)]
        command: UserCommand,
    },
    /// Manage join tokens for agents
    JoinToken {
        #[command(subcommand)]
        command: JoinTokenCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Create a user and print their first API token (shown only once)
    Create {
        /// The user's name
        name: String,
        /// The user's role
        #[arg(long, default_value = "user", value_parser = ["admin", "user"])]
        role: String,
        #[command(flatten)]
        output: OutputArgs,
    },
}

#[derive(Debug, Subcommand)]
pub enum JoinTokenCommand {
    /// Create a token with which an agent joins the cluster
    Create {
        #[command(flatten)]
        output: OutputArgs,
    },
}

pub async fn run(args: AdminArgs) -> anyhow::Result<ExitCode> {
    let client = Client::from_env()?;
    match args.command {
        AdminCommand::User { command: UserCommand::Create { name, role, output } } => {
            let u = client.create_user(&CreateUserRequest { name, role: Some(role) }).await?;
            if output.json() {
                output::print_json(&u)?;
            } else {
                println!("created user {} ({})", u.user, u.role);
                println!("token: {}", u.token);
                eprintln!(
                    "note: this token is shown only once; give it to {} privately: they set BERTH_URL={} and \
                     BERTH_TOKEN=<token>, or put both in ~/.config/berth/credentials",
                    u.user,
                    client.base_url()
                );
            }
        }
        AdminCommand::JoinToken { command: JoinTokenCommand::Create { output } } => {
            let t = client.create_join_token().await?;
            if output.json() {
                output::print_json(&t)?;
            } else {
                println!("join token: {}", t.token);
                eprintln!(
                    "note: on each new node run `berth agent --manager {} --join-token <token>`",
                    client.base_url()
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
