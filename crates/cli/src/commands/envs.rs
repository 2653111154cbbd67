//! `berth env ls` and `berth env rm KEY`: the Python environments each node has built and
//! cached for jobs (docs/environments.md), and removing one (admins; refused while in use).

use std::process::ExitCode;

use berth_model::environment::NodeEnvs;
use clap::{Args, Subcommand};

use crate::output::{self, OutputArgs};

#[derive(Debug, Args)]
pub struct EnvArgs {
    #[command(subcommand)]
    command: EnvCommand,
}

#[derive(Debug, Subcommand)]
enum EnvCommand {
    /// List each node's cached environments: key, Python, size, last use, kernels using it
    Ls(LsArgs),
    /// Delete a cached environment on every node that has it (admins); refused while a kernel
    /// uses it. The next job that needs it builds it again
    Rm(RmArgs),
}

#[derive(Debug, Args)]
struct LsArgs {
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Debug, Args)]
struct RmArgs {
    /// The environment's key, or its first digits (at least 4) as `berth env ls` shows them
    key: String,
}

pub async fn run(args: EnvArgs) -> anyhow::Result<ExitCode> {
    let client = crate::client::from_env()?;
    match args.command {
        EnvCommand::Ls(a) => {
            let envs = client.envs().await?;
            if a.output.json() {
                output::print_json(&envs)?;
            } else {
                print!("{}", render(&envs));
            }
        }
        EnvCommand::Rm(a) => {
            let removed = client.remove_env(&a.key.to_ascii_lowercase()).await?;
            println!("removed environment {} on {}", short(&removed.key), removed.nodes.join(", "));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn short(key: &str) -> &str {
    key.get(..12).unwrap_or(key)
}

fn render(nodes: &[NodeEnvs]) -> String {
    if nodes.iter().all(|n| n.envs.is_empty()) {
        return "no environments cached on any ready node: jobs with an [environment] build them\n".into();
    }
    let mut t = output::table(["NODE", "KEY", "PYTHON", "FROM", "SIZE", "LAST USED", "IN USE"]);
    for n in nodes {
        for e in &n.envs {
            t.add_row([
                n.node.clone(),
                short(&e.key).to_string(),
                e.python.clone(),
                e.kind.file_name().to_string(),
                berth_model::format_bytes(e.size_bytes),
                format!("{} ago", output::age(e.last_used)),
                e.in_use.to_string(),
            ]);
        }
    }
    output::render_table(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::environment::{EnvEntry, EnvKind};

    #[test]
    fn the_table_shows_short_keys_per_node() {
        let e = EnvEntry {
            key: "5c0b730af7d75db9188a2fec21bdb879c7f518b91c04a324daf2f0b6165b663d".into(),
            python: "3.11".into(),
            kind: EnvKind::Requirements,
            size_bytes: 3 << 20,
            last_used: jiff::Timestamp::now(),
            in_use: 1,
        };
        let s = render(&[NodeEnvs { node: "n1".into(), envs: vec![e] }]);
        assert!(s.contains("5c0b730af7d7 ") && !s.contains("5c0b730af7d75"), "{s}");
        assert!(s.contains("requirements.txt") && s.contains("3MiB") && s.contains("n1"), "{s}");
        assert!(render(&[]).starts_with("no environments cached"));
    }
}
