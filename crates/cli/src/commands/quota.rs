//! `berth quotas` (limits and use: yours and your projects', all for admins) and
//! `berth admin quota set|rm` (like Slurm's `sacctmgr modify ... set GrpTRES=`).

use std::process::ExitCode;

use berth_model::{QuotaKind, QuotaLimits, QuotaView, format_bytes, format_gpu_milli};
use clap::{Args, Subcommand};

use crate::output::{self, OutputArgs};

#[derive(Debug, Args)]
pub struct QuotasArgs {
    #[command(flatten)]
    pub output: OutputArgs,
}

pub async fn list(args: QuotasArgs) -> anyhow::Result<ExitCode> {
    let qs = crate::client::from_env()?.quotas().await?;
    if args.output.json() {
        output::print_json(&qs)?;
    } else if qs.is_empty() {
        println!("no quotas apply to you");
    } else {
        output::print_table(table(&qs));
    }
    Ok(ExitCode::SUCCESS)
}

fn used_of(used: String, limit: Option<String>) -> String {
    match limit {
        Some(l) => format!("{used}/{l}"),
        None => used,
    }
}

/// `used/limit`, and `(+borrow)` when the quota may borrow beyond its limit.
fn with_borrow(cell: String, borrow: Option<u64>) -> String {
    match borrow {
        Some(b) if b > 0 => format!("{cell} (+{})", format_gpu_milli(b)),
        _ => cell,
    }
}

fn table(qs: &[QuotaView]) -> comfy_table::Table {
    let mut t = output::table(["KIND", "NAME", "GPUS", "CPUS", "MEM", "RUNNING", "PENDING", "MAX PRIO"]);
    for q in qs {
        let l = &q.limits;
        t.add_row([
            q.kind.as_str().to_string(),
            q.name.clone(),
            with_borrow(
                used_of(format_gpu_milli(q.used_gpu_milli), l.gpu_milli.map(format_gpu_milli)),
                l.borrow_gpu_milli,
            ),
            with_borrow(
                used_of(format_gpu_milli(q.used_cpu_milli), l.cpu_milli.map(format_gpu_milli)),
                l.borrow_cpu_milli,
            ),
            used_of(format_bytes(q.used_mem_bytes), l.mem_bytes.map(format_bytes)),
            used_of(q.running_jobs.to_string(), l.running_jobs.map(|n| n.to_string())),
            used_of(q.pending_jobs.to_string(), l.pending_jobs.map(|n| n.to_string())),
            l.max_priority.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
        ]);
    }
    t
}

#[derive(Debug, Subcommand)]
pub enum QuotaCommand {
    /// Set the quota of a user or project (replaces it; limits left out are unlimited)
    Set(QuotaSetArgs),
    /// Remove the quota of a user or project
    Rm(QuotaTarget),
}

#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct QuotaTarget {
    #[arg(long, group = "target")]
    pub user: Option<String>,
    #[arg(long, group = "target")]
    pub project: Option<String>,
}

impl QuotaTarget {
    fn split(&self) -> (QuotaKind, &str) {
        match (&self.user, &self.project) {
            (Some(u), _) => (QuotaKind::User, u),
            (None, Some(p)) => (QuotaKind::Project, p),
            // clap requires exactly one of the two
            (None, None) => (QuotaKind::User, ""),
        }
    }
}

#[derive(Debug, Args)]
pub struct QuotaSetArgs {
    #[command(flatten)]
    pub target: QuotaTarget,
    /// GPUs its running jobs may hold (fractions allowed: 0.5)
    #[arg(long, value_parser = parse_gpu_total, value_name = "N")]
    pub gpus: Option<u64>,
    /// CPUs its running jobs may hold
    #[arg(long, value_parser = berth_model::parse_cpus, value_name = "N")]
    pub cpus: Option<u64>,
    /// Memory its running jobs may hold, e.g. 512GiB
    #[arg(long, value_parser = berth_model::parse_mem, value_name = "SIZE")]
    pub mem: Option<u64>,
    /// Jobs running at once
    #[arg(long, value_name = "N")]
    pub running: Option<u32>,
    /// Jobs waiting at once (submits beyond it are refused)
    #[arg(long, value_name = "N")]
    pub pending: Option<u32>,
    /// Highest priority a job may ask for
    #[arg(long, value_name = "P", allow_negative_numbers = true)]
    pub max_priority: Option<i32>,
    /// GPUs its jobs may borrow beyond --gpus while they are idle (borrowed work is
    /// preempted first when a job within its own quota needs the room)
    #[arg(long, value_parser = parse_gpu_total, value_name = "N", requires = "gpus")]
    pub borrow_gpus: Option<u64>,
    /// CPUs its jobs may borrow beyond --cpus while they are idle
    #[arg(long, value_parser = berth_model::parse_cpus, value_name = "N", requires = "cpus")]
    pub borrow_cpus: Option<u64>,
}

/// A GPU total: any number of thousandths, 0 included (no GPUs at all).
fn parse_gpu_total(s: &str) -> Result<u64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (0.0..=1e9).contains(&v) => Ok((v * 1000.0).round() as u64),
        _ => Err(format!("invalid GPU count `{s}`: use a number such as 8 or 0.5")),
    }
}

pub async fn admin(cmd: QuotaCommand) -> anyhow::Result<()> {
    let client = crate::client::from_env()?;
    match cmd {
        QuotaCommand::Set(a) => {
            let limits = QuotaLimits {
                gpu_milli: a.gpus,
                cpu_milli: a.cpus,
                mem_bytes: a.mem,
                running_jobs: a.running,
                pending_jobs: a.pending,
                max_priority: a.max_priority,
                borrow_gpu_milli: a.borrow_gpus,
                borrow_cpu_milli: a.borrow_cpus,
            };
            if limits.is_empty() {
                return Err(crate::UsageError::error(
                    "no limit given: use --gpus, --cpus, --mem, --running, --pending or --max-priority (or `quota rm`)",
                ));
            }
            let (kind, name) = a.target.split();
            client.set_quota(kind, name, Some(&limits)).await?;
            println!("quota of {} {name} set", kind.as_str());
        }
        QuotaCommand::Rm(t) => {
            let (kind, name) = t.split();
            client.set_quota(kind, name, None).await?;
            println!("quota of {} {name} removed", kind.as_str());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_shows_use_limits_and_borrowing() {
        let q = QuotaView {
            kind: QuotaKind::Project,
            name: "vision".into(),
            limits: QuotaLimits {
                gpu_milli: Some(8000),
                borrow_gpu_milli: Some(4000),
                pending_jobs: Some(10),
                ..Default::default()
            },
            used_gpu_milli: 9000,
            used_cpu_milli: 2000,
            used_mem_bytes: 0,
            running_jobs: 3,
            pending_jobs: 2,
        };
        let row = table(&[q]).lines().nth(1).unwrap();
        assert!(row.contains("9/8 (+4)") && row.contains("2/10") && row.contains("vision"), "{row}");
    }
}
