//! `berth history`: the jobs that ran or waited in a time window, finished or not (berth's
//! sacct), as a table of chosen fields (`-o id,name,state,elapsed`) or JSON. The fields are
//! [`crate::jobfields`]', shared with `sacct`.

use std::process::ExitCode;

use berth_model::JobState;
use berth_model::api::{JobListQuery, JobView};
use clap::Args;

use crate::UsageError;
use crate::jobfields::{self, FieldInfo, Style};
use crate::output;
use crate::when::parse_time;

const DEFAULT_FIELDS: &str = "id,name,user,queue,state,exit,submitted,started,ended,elapsed,nodes";

#[derive(Debug, Args)]
#[command(after_help = "\
Times: 2h, 30m, 1d (that long ago), 2026-11-20, 2026-11-20T10:00, now, now-3hours, today.

Fields: id, name, user, project, queue, state, exit, submitted, started, ended, elapsed,
elapsed-secs, nodes, node-count, cpus, mem, gpus, tres, time-limit, time-limit-minutes, reason,
priority.

Examples:
  berth history --since 2h
  berth history --since 2026-11-20 --until 2026-11-21 --state FAILED -o id,name,exit,reason")]
pub struct HistoryArgs {
    /// Jobs that had not ended before this time (default: 1d, a day ago)
    #[arg(long, value_name = "TIME", default_value = "1d")]
    pub since: String,

    /// Jobs submitted before this time (default: now)
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,

    /// Only this user's jobs
    #[arg(short, long, value_name = "USER")]
    pub user: Option<String>,

    /// Only jobs in these states (comma-separated: FAILED,TIMEOUT)
    #[arg(long, value_name = "STATES", value_delimiter = ',', value_parser = super::ps::parse_state)]
    pub state: Vec<JobState>,

    /// Only jobs of this queue
    #[arg(short, long, value_name = "QUEUE")]
    pub queue: Option<String>,

    /// Only jobs whose name contains this text
    #[arg(short, long, value_name = "TEXT")]
    pub name: Option<String>,

    /// The columns, comma-separated (see below)
    #[arg(short = 'o', long = "fields", value_name = "FIELDS", default_value = DEFAULT_FIELDS)]
    pub fields: String,

    /// Print the jobs as JSON (the API objects) instead of a table
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: HistoryArgs) -> anyhow::Result<ExitCode> {
    let fields = fields(&args.fields)?;
    let now = jiff::Zoned::now();
    let time = |flag: &str, t: &str| parse_time(t, &now).map_err(|e| UsageError::error(format!("{flag}: {e}")));
    let since = time("--since", &args.since)?;
    let until = args.until.as_deref().map(|t| time("--until", t)).transpose()?;
    let client = crate::client::from_env()?;
    let q = JobListQuery {
        all: true,
        state: (!args.state.is_empty()).then(|| args.state.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(",")),
        user: args.user,
        queue: args.queue,
        name: args.name,
        since: Some(since.to_string()),
        until: until.map(|t| t.to_string()),
        // A table needs only its columns' fields (and the ids to sort by); JSON gets all.
        fields: (!args.json).then(|| jobfields::api_fields(fields.iter().map(|f| &f.field)).join(",")),
        ..Default::default()
    };
    let mut jobs = client.jobs(&q).await?;
    jobs.sort_by_key(|j| j.id);
    if args.json {
        output::print_json(&jobs)?;
    } else {
        output::print_table(table(&jobs, &fields, now.timestamp()));
    }
    Ok(ExitCode::SUCCESS)
}

/// `id,name,...`: the fields, in berth's names.
fn fields(list: &str) -> anyhow::Result<Vec<&'static FieldInfo>> {
    list.split(',')
        .map(str::trim)
        .filter(|f| !f.is_empty())
        .map(|f| {
            jobfields::by_berth_name(f).ok_or_else(|| {
                let all: Vec<&str> = jobfields::FIELDS.iter().map(|i| i.berth).collect();
                UsageError::error(format!("unknown field `{f}`: use {}", all.join(", ")))
            })
        })
        .collect()
}

fn table(jobs: &[JobView], fields: &[&FieldInfo], now: jiff::Timestamp) -> comfy_table::Table {
    let mut t = output::table(fields.iter().map(|f| f.berth.to_uppercase()));
    for j in jobs {
        t.add_row(fields.iter().map(|f| jobfields::value(f.field, j, now, &Berth)).collect::<Vec<_>>());
    }
    t
}

/// berth's own words: local times, `1h30m`, berth's states, `-` for nothing.
struct Berth;

impl Style for Berth {
    fn time(&self, t: Option<jiff::Timestamp>) -> String {
        t.map_or("-".into(), output::local_time)
    }

    fn duration(&self, secs: Option<u64>) -> String {
        secs.map_or("-".into(), output::duration)
    }

    fn state(&self, j: &JobView) -> String {
        berth_model::cause::state_label(j.state, j.end_cause).to_string()
    }

    fn exit(&self, j: &JobView) -> String {
        j.exit_code.map_or("-".into(), |c| c.to_string())
    }

    fn nodes(&self, j: &JobView) -> String {
        output::or_dash(j.nodes.join(","))
    }

    fn reason(&self, j: &JobView) -> String {
        output::or_dash(j.pending_reason.as_ref().map(|r| r.message.clone()).or(j.reason.clone()).unwrap_or_default())
    }

    fn empty(&self) -> String {
        "-".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_by_name_and_a_table() {
        let f = fields("id, state,exit").unwrap();
        assert_eq!(f.iter().map(|i| i.berth).collect::<Vec<_>>(), ["id", "state", "exit"]);
        let e = fields("id,bogus").unwrap_err();
        assert!(e.downcast_ref::<UsageError>().is_some() && e.to_string().contains("unknown field `bogus`: use id,"));
        let j: JobView = serde_json::from_value(serde_json::json!({
            "id": 7, "name": null, "user": "u", "state": "FAILED", "queue": "default", "priority": 0,
            "position": null, "pending_reason": null, "nodes": ["n1"], "cpu_milli": 1000,
            "mem_bytes": 1073741824u64, "gpu_milli": 0, "submitted_at": "2026-11-20T10:00:00Z",
            "started_at": "2026-11-20T10:00:00Z", "ended_at": "2026-11-20T11:30:00Z", "exit_code": 3, "reason": null
        }))
        .unwrap();
        let f = fields("id,name,state,exit,elapsed,nodes").unwrap();
        let lines: Vec<String> = table(&[j], &f, jiff::Timestamp::now()).lines().collect();
        assert!(lines[0].contains("ID") && lines[0].contains("ELAPSED"), "{lines:?}");
        let cells: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(cells, ["7", "-", "FAILED", "3", "1h30m", "n1"]);
    }

    /// Every field prints the same in berth's words from the fields it asks for as from the
    /// whole job (sacct's test checks Slurm's words).
    #[test]
    fn each_field_prints_the_same_from_the_fields_it_asks_for() {
        jobfields::assert_fields_declare_what_they_read(&Berth);
    }
}
