//! `sshare`: the shares and usage of associations, as tools read them (Snakemake's
//! `sshare -U --format Account%256 --noheader` to find the caller's accounts), answered from
//! berth's users and projects (`assoc.rs`) and their usage over the last 30 days
//! (`/v1/usage`, CPU-seconds as Slurm's `RawUsage`). Every association has one share
//! (`RawShares` 1, `NormShares` 1/n among its account's users); `EffectvUsage` is the row's
//! usage over the cluster's and `FairShare` Slurm's classic `2^(-EffectvUsage/NormShares)`.
//! berth's usage is per user and per project, not per user within a project: a user's row
//! has the user's whole usage.
//!
//! Without `-a`, `-u` or `-A`: the caller's own associations. `-U`: user rows only (else each
//! account's row comes before its users', as in Slurm's tree).

use std::collections::HashMap;
use std::io::Write;

use berth_model::api::UsageQuery;
use clap::Parser;

use crate::assoc::{self, UserAccounts};
use crate::{Connect, Result, names};

#[derive(Debug, Parser)]
#[command(name = "sshare", about = "Show the shares and usage of berth's users and projects", infer_long_args = true)]
pub struct Args {
    /// Only these accounts (projects, or users' personal accounts)
    #[arg(short = 'A', long = "accounts", value_name = "ACCOUNTS")]
    pub accounts: Option<String>,
    /// Every user's associations
    #[arg(short = 'a', long)]
    pub all: bool,
    /// Only these users
    #[arg(short = 'u', long = "users", value_name = "USERS")]
    pub users: Option<String>,
    /// Only the users' rows, not their accounts'
    #[arg(short = 'U', long = "Users")]
    pub users_only: bool,
    /// Fields: Account, User, RawShares, NormShares, RawUsage, EffectvUsage, FairShare
    #[arg(short = 'o', long = "format", value_name = "FIELDS")]
    pub format: Option<String>,
    #[command(flatten)]
    pub table: assoc::TableFlags,
    /// Accepted: berth has one cluster
    #[arg(short = 'M', long = "clusters", value_name = "CLUSTERS")]
    pub clusters: Option<String>,
    /// Accepted
    #[arg(short = 'l', long)]
    pub long: bool,
    /// Accepted
    #[arg(short = 'v', long, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Print the version
    #[arg(short = 'V', long)]
    pub version: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Account,
    User,
    RawShares,
    NormShares,
    RawUsage,
    EffectvUsage,
    FairShare,
}

const FIELDS: [(&str, &str, i32, Field); 7] = [
    ("Account", "Account", -20, Field::Account),
    ("User", "User", 10, Field::User),
    ("RawShares", "RawShares", 10, Field::RawShares),
    ("NormShares", "NormShares", 11, Field::NormShares),
    ("RawUsage", "RawUsage", 11, Field::RawUsage),
    ("EffectvUsage", "EffectvUsage", 13, Field::EffectvUsage),
    ("FairShare", "FairShare", 10, Field::FairShare),
];

const DEFAULT_FORMAT: &str = "Account,User,RawShares,NormShares,RawUsage,EffectvUsage,FairShare";

/// One row: an account (`user` none) or a user in it, with the numbers.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    account: String,
    user: Option<String>,
    norm_shares: f64,
    /// CPU-seconds.
    raw_usage: u64,
    effective: f64,
}

pub async fn run(args: Args, connect: &dyn Connect, out: &mut dyn Write) -> Result<()> {
    if args.version {
        writeln!(out, "{}", crate::version_line())?;
        return Ok(());
    }
    let columns = assoc::columns(args.format.as_deref().unwrap_or(DEFAULT_FORMAT), &FIELDS)?;
    let client = connect()?;
    let wanted = names(&args.users);
    let only_me = wanted.is_empty() && !args.all && args.accounts.is_none();
    let users = assoc::asked(&client, (!only_me).then_some(wanted.as_slice())).await?;
    let usage = |by: &str| {
        let q = UsageQuery { by: Some(by.into()), since: None };
        let client = client.clone();
        async move { client.usage(&q).await }
    };
    let seconds = |lines: Vec<berth_model::api::UsageLine>| -> HashMap<String, u64> {
        lines.into_iter().map(|l| (l.name, (l.cpu_hours * 3600.0).round() as u64)).collect()
    };
    let by_user = seconds(usage("user").await?);
    let by_project = seconds(usage("project").await?);
    let rows = rows(&users, &names(&args.accounts), &by_user, &by_project, args.users_only);
    let table = assoc::render(&columns, &rows, value, args.table.layout(), args.table.noheader);
    out.write_all(table.as_bytes())?;
    Ok(())
}

/// The rows of `users` in `accounts` (all when empty): each account's, then its users'
/// (only the users' with `users_only`); a personal account's usage is its user's, a
/// project's the project's.
fn rows(
    users: &[UserAccounts],
    accounts: &[String],
    by_user: &HashMap<String, u64>,
    by_project: &HashMap<String, u64>,
    users_only: bool,
) -> Vec<Row> {
    let total = (by_user.values().sum::<u64>()).max(1) as f64;
    let mut names: Vec<&String> = users.iter().flat_map(|u| &u.accounts).collect();
    names.sort();
    names.dedup();
    let mut out = Vec::new();
    for a in names.into_iter().filter(|a| accounts.is_empty() || accounts.contains(a)) {
        let members: Vec<&UserAccounts> = users.iter().filter(|u| u.accounts.contains(a)).collect();
        let personal = members.iter().any(|u| u.user == *a);
        let account_usage = if personal { by_user.get(a) } else { by_project.get(a) }.copied().unwrap_or(0);
        if !users_only {
            let effective = account_usage as f64 / total;
            out.push(Row { account: a.clone(), user: None, norm_shares: 1.0, raw_usage: account_usage, effective });
        }
        let n = members.len().max(1) as f64;
        for u in members {
            let raw = by_user.get(&u.user).copied().unwrap_or(0);
            let effective = raw as f64 / total;
            out.push(Row {
                account: a.clone(),
                user: Some(u.shown.clone()),
                norm_shares: 1.0 / n,
                raw_usage: raw,
                effective,
            });
        }
    }
    out
}

fn value(field: Field, r: &Row) -> String {
    match field {
        Field::Account => r.account.clone(),
        Field::User => r.user.clone().unwrap_or_default(),
        Field::RawShares => "1".into(),
        Field::NormShares => format!("{:.6}", r.norm_shares),
        Field::RawUsage => r.raw_usage.to_string(),
        Field::EffectvUsage => format!("{:.6}", r.effective),
        Field::FairShare => format!("{:.6}", 2f64.powf(-r.effective / r.norm_shares.max(f64::MIN_POSITIVE))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assoc::Layout;

    fn user(name: &str, projects: &[&str]) -> UserAccounts {
        assoc::test_user(name, projects)
    }

    #[test]
    fn snakemakes_account_list_is_one_account_per_line() {
        let users = [user("alice", &["vision"])];
        let none = HashMap::new();
        let rows = rows(&users, &[], &none, &none, true);
        let columns = assoc::columns("Account%256", &FIELDS).unwrap();
        let out = assoc::render(&columns, &rows, value, Layout::Columns, true);
        let accounts: Vec<&str> = out.lines().map(str::trim).collect();
        assert_eq!(accounts, ["alice", "vision"]);
    }

    #[test]
    fn shares_and_usage_per_association() {
        let users = [user("alice", &["vision"]), user("bob", &["vision"])];
        let by_user = HashMap::from([("alice".to_string(), 300), ("bob".to_string(), 100)]);
        let by_project = HashMap::from([("vision".to_string(), 400)]);
        let rows = rows(&users, &["vision".to_string()], &by_user, &by_project, false);
        let columns = assoc::columns(DEFAULT_FORMAT, &FIELDS).unwrap();
        let out = assoc::render(&columns, &rows, value, Layout::Parsable { trailing: false }, false);
        assert_eq!(
            out,
            "Account|User|RawShares|NormShares|RawUsage|EffectvUsage|FairShare\n\
             vision||1|1.000000|400|1.000000|0.500000\n\
             vision|alice|1|0.500000|300|0.750000|0.353553\n\
             vision|bob|1|0.500000|100|0.250000|0.707107\n"
        );
    }
}
