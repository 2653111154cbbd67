//! `berth ui`: a one-time link that logs a browser in to the web dashboard, so nobody pastes
//! a token into a browser. The link works once and for two minutes; the session it starts is
//! a token of its own (`berth token list` shows it, `berth token revoke` ends it).
//!
//! It is printed, not handed to a browser launcher: the code in it is a secret, and a
//! launcher's command line is readable by every local user.

use std::process::ExitCode;

use clap::Args;

use crate::output::{self, OutputArgs};

#[derive(Debug, Args)]
pub struct UiArgs {
    #[command(flatten)]
    pub output: OutputArgs,
}

pub async fn run(args: UiArgs) -> anyhow::Result<ExitCode> {
    let client = crate::client::from_env()?;
    let link = client.login_link().await?;
    // Over the unix socket the client's URL (`http://localhost`) is no address a browser can
    // open: the manager says where its HTTP listener is.
    let url = match (client.socket(), link.url) {
        (Some(_), Some(url)) => url,
        _ => format!("{}{}", client.base_url(), link.path),
    };
    if args.output.json() {
        output::print_json(&serde_json::json!({ "url": url, "expires_in_secs": link.expires_in_secs }))?;
    } else {
        println!("{url}");
        eprintln!("open it in your browser within {} s; it works once", link.expires_in_secs);
    }
    Ok(ExitCode::SUCCESS)
}
