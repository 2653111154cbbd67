//! `berth usage`: GPU-hours, CPU-hours, jobs by final state and mean wait per user or project
//! over a period, as a table, JSON, or CSV for billing.

use std::process::ExitCode;

use berth_model::api::{UsageLine, UsageQuery};
use clap::{Args, ValueEnum};

use crate::output;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum UsageFormat {
    Table,
    Json,
    Csv,
}

#[derive(Debug, Args)]
pub struct UsageArgs {
    /// Group by user or project
    #[arg(long, value_parser = ["user", "project"], default_value = "user")]
    pub by: String,
    /// Period: from this long ago until now, e.g. 7d, 12h
    #[arg(long, default_value = "30d", value_name = "DURATION")]
    pub since: String,
    /// Output format: table, json, or csv (one header line, then one line per user or project)
    #[arg(short = 'o', long = "output", value_enum, default_value_t = UsageFormat::Table)]
    pub format: UsageFormat,
}

pub async fn run(args: UsageArgs) -> anyhow::Result<ExitCode> {
    let q = UsageQuery { by: Some(args.by.clone()), since: Some(args.since.clone()) };
    let lines = crate::client::from_env()?.usage(&q).await?;
    match args.format {
        UsageFormat::Json => output::print_json(&lines)?,
        UsageFormat::Csv => print!("{}", csv(&args.by, &lines)?),
        UsageFormat::Table if lines.is_empty() => println!("no jobs in the last {}", args.since),
        UsageFormat::Table => output::print_table(table(&args.by, &lines)),
    }
    Ok(ExitCode::SUCCESS)
}

const COLUMNS: [&str; 13] = [
    "jobs",
    "succeeded",
    "failed",
    "cancelled",
    "timeout",
    "lost",
    "unfinished",
    "gpu_hours",
    "cpu_hours",
    "gpu_hours_used",
    "cpu_hours_used",
    "mean_wait_secs",
    "",
];

/// The cells of one line; hours with `decimals` digits (CSV keeps more for billing).
fn cells(l: &UsageLine, decimals: usize) -> Vec<String> {
    vec![
        l.name.clone(),
        l.jobs.to_string(),
        l.succeeded.to_string(),
        l.failed.to_string(),
        l.cancelled.to_string(),
        l.timeout.to_string(),
        l.lost.to_string(),
        l.unfinished.to_string(),
        format!("{:.decimals$}", l.gpu_hours),
        format!("{:.decimals$}", l.cpu_hours),
        l.gpu_hours_used.map(|h| format!("{h:.decimals$}")).unwrap_or_default(),
        l.cpu_hours_used.map(|h| format!("{h:.decimals$}")).unwrap_or_default(),
        l.mean_wait_secs.map(|w| format!("{w:.0}")).unwrap_or_default(),
    ]
}

fn csv(by: &str, lines: &[UsageLine]) -> anyhow::Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let mut header = vec![by];
    header.extend(COLUMNS.iter().filter(|c| !c.is_empty()));
    w.write_record(&header)?;
    for l in lines {
        w.write_record(cells(l, 6))?;
    }
    Ok(String::from_utf8(w.into_inner()?)?)
}

fn table(by: &str, lines: &[UsageLine]) -> comfy_table::Table {
    let mut t = output::table([
        by.to_uppercase().as_str(),
        "JOBS",
        "OK",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "LOST",
        "UNFINISHED",
        "GPU-H",
        "CPU-H",
        "GPU-H USED",
        "CPU-H USED",
        "MEAN WAIT",
    ]);
    for l in lines {
        let mut c = cells(l, 2);
        for used in &mut c[10..12] {
            if used.is_empty() {
                "-".clone_into(used);
            }
        }
        c[12] = l.mean_wait_secs.map(|w| output::age_secs(w as i64)).unwrap_or_else(|| "-".into());
        t.add_row(c);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_what_needs_it() {
        let l = UsageLine {
            name: "a,b".into(),
            jobs: 2,
            succeeded: 1,
            failed: 1,
            cancelled: 0,
            timeout: 0,
            lost: 0,
            unfinished: 0,
            gpu_hours: 1.5,
            cpu_hours: 3.0,
            gpu_hours_used: None,
            cpu_hours_used: Some(0.25),
            mean_wait_secs: Some(12.4),
        };
        let out = csv("project", &[l]).unwrap();
        let mut lines = out.lines();
        assert_eq!(
            lines.next(),
            Some(
                "project,jobs,succeeded,failed,cancelled,timeout,lost,unfinished,gpu_hours,cpu_hours,\
                 gpu_hours_used,cpu_hours_used,mean_wait_secs"
            )
        );
        assert_eq!(lines.next(), Some("\"a,b\",2,1,1,0,0,0,0,1.500000,3.000000,,0.250000,12"));
    }
}
