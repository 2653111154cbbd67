//! `berth managers`: every configured manager (`BERTH_URL` or the credentials file, several
//! comma-separated for standby managers), asked directly what it is: the leader, a standby
//! (and whom it follows), or down. Like `patronictl list` for a PostgreSQL cluster.

use std::process::ExitCode;
use std::time::Duration;

use berth_model::api::LeaderView;
use clap::Args;
use serde::Serialize;

use crate::client::Client;
use crate::output::{self, OutputArgs};

#[derive(Debug, Args)]
pub struct ManagersArgs {
    #[command(flatten)]
    pub output: OutputArgs,
}

/// One configured manager, as it answered.
#[derive(Debug, Serialize)]
struct ManagerState {
    url: String,
    /// `leader`, `standby` or `down`.
    role: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    leader: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    epoch: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

pub async fn run(args: ManagersArgs) -> anyhow::Result<ExitCode> {
    let client = crate::client::from_env()?;
    let asks = client.manager_urls().iter().map(|url| ask(&client, url.clone()));
    let states = futures_util::future::join_all(asks).await;
    if args.output.json() {
        output::print_json(&states)?;
    } else {
        let mut t = output::table(["MANAGER", "ROLE", "LEADER", "EPOCH"]);
        for s in &states {
            let role = match &s.error {
                Some(e) => format!("{} ({e})", s.role),
                None => s.role.clone(),
            };
            let epoch = s.epoch.map(|e| e.to_string()).unwrap_or_else(|| "-".into());
            t.add_row([s.url.clone(), role, s.leader.clone().unwrap_or_else(|| "-".into()), epoch]);
        }
        output::print_table(t);
    }
    // Nobody leading is worth a non-zero exit for scripts (a takeover under way, or worse).
    Ok(if states.iter().any(|s| s.role == "leader") { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

async fn ask(client: &Client, url: String) -> ManagerState {
    let down =
        |url: String, e: String| ManagerState { url, role: "down".into(), leader: None, epoch: None, error: Some(e) };
    let asked = tokio::time::timeout(Duration::from_secs(3), client.leader_at(&url)).await;
    match asked {
        Ok(Ok(LeaderView { role, leader, epoch, .. })) => {
            ManagerState { url, role, leader, epoch: Some(epoch), error: None }
        }
        Ok(Err(e)) => down(url, format!("{e:#}")),
        Err(_) => down(url, "no answer in 3s".into()),
    }
}
