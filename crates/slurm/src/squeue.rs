//! `squeue`: the unfinished jobs in Slurm's columns, `-o` (`%.18i %.9P ...`) and `-O`
//! (`JobID,Name:30`) formats, filtered by `-j`, `-u`, `--me`, `-t`, `-p`, `-n`, `-A`.

use std::io::Write;

use berth_client::Client;
use berth_model::JobState;
use berth_model::api::JobView;
use clap::Parser;

use crate::format;
use crate::jobfields;
use crate::states;
use crate::when::{slurm_time, squeue_duration};
use crate::{Connect, Error, Result};

/// Slurm's default format, byte for byte.
const DEFAULT: &str = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R";
/// `-l`.
const LONG: &str = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R";

/// view information about jobs located in the berth scheduling queue (Slurm's squeue)
#[derive(Debug, Parser)]
#[command(name = "squeue", disable_help_flag = true, version)]
pub struct Args {
    /// Do not print a header
    #[arg(short = 'h', long = "noheader")]
    noheader: bool,
    /// Format: `%[.][width]code` fields and text, e.g. "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
    #[arg(short = 'o', long = "format", env = "SQUEUE_FORMAT", value_name = "FORMAT")]
    format: Option<String>,
    /// Fields by name, e.g. "JobID,Name:30,State"
    #[arg(short = 'O', long = "Format", env = "SQUEUE_FORMAT2", value_name = "FIELDS")]
    long_format: Option<String>,
    /// Only these jobs (comma-separated ids; may be given more than once)
    #[arg(short = 'j', long = "jobs", value_name = "IDS")]
    jobs: Vec<String>,
    /// Only these users' jobs (comma-separated)
    #[arg(short = 'u', long = "user", value_name = "USERS")]
    users: Option<String>,
    /// Only your own jobs
    #[arg(long = "me")]
    me: bool,
    /// Only jobs in these states (PD,R,CG,... or names; `all` for every state)
    #[arg(short = 't', long = "states", value_name = "STATES")]
    states: Option<String>,
    /// Only jobs of these partitions (berth queues)
    #[arg(short = 'p', long = "partition", value_name = "PARTITIONS")]
    partitions: Option<String>,
    /// Only jobs with these names
    #[arg(short = 'n', long = "name", value_name = "NAMES")]
    names: Option<String>,
    /// Only jobs of these accounts (berth projects)
    #[arg(short = 'A', long = "account", value_name = "ACCOUNTS")]
    accounts: Option<String>,
    /// Every partition (berth always shows them all)
    #[arg(short = 'a', long = "all")]
    all: bool,
    /// The long format: state names and time limits
    #[arg(short = 'l', long = "long")]
    long: bool,
    /// Print help
    #[arg(long = "help", action = clap::ArgAction::Help)]
    help: Option<bool>,
}

/// Prints the jobs `args` ask for to `out`.
pub async fn run(args: Args, connect: &dyn Connect, out: &mut dyn Write) -> Result<()> {
    let items = match (&args.long_format, &args.format) {
        (Some(f), _) => format::parse_long(f, long_name).map_err(Error::Failed)?,
        (None, Some(f)) => format::parse(f),
        (None, None) => format::parse(if args.long { LONG } else { DEFAULT }),
    };
    for c in format::unknown_codes(&items, |c| header(c).is_some()) {
        eprintln!("squeue: error: Invalid job format specification: {c}");
    }
    let client = connect()?;
    let jobs = list(&client, &args, api_fields(&items)).await?;
    let now = jiff::Timestamp::now();
    if !args.noheader {
        if args.long {
            // Slurm's long listing starts with the time it was taken.
            writeln!(out, "{}", jiff::Zoned::now().strftime("%a %b %e %H:%M:%S %Y"))?;
        }
        writeln!(out, "{}", format::render(&items, |c| header(c).map(str::to_string)))?;
    }
    for j in &jobs {
        writeln!(out, "{}", format::render(&items, |c| value(c, j, now)))?;
    }
    Ok(())
}

/// The jobs the filters select, in squeue's order: by partition, then state (pending
/// first), then priority, highest first.
async fn list(client: &Client, args: &Args, fields: Vec<&'static str>) -> Result<Vec<JobView>> {
    let states = match &args.states {
        Some(s) => states::parse_states(s).map_err(Error::Failed)?,
        None => None,
    };
    // `-j` may come several times (submitit gives one per job), each a list.
    let ids = if args.jobs.is_empty() { None } else { Some(crate::job_list(client, &args.jobs.join(",")).await?) };
    let mut users = crate::names(&args.users);
    if args.me {
        users = vec![client.whoami().await?.user];
    }
    let wanted = crate::Wanted {
        // `-t all` and named jobs show finished ones too, as long as the manager keeps them.
        all: args.states.is_some() && states.as_ref().is_none_or(|s| s.iter().any(|s| s.is_terminal()))
            || ids.is_some(),
        ids,
        states,
        users,
        partitions: crate::names(&args.partitions),
        names: crate::names(&args.names),
        accounts: crate::names(&args.accounts),
        fields: Some(fields),
        ..Default::default()
    };
    let mut jobs = wanted.fetch(client).await?;
    jobs.sort_by(|a, b| {
        (&a.queue, states::job_state(a).0, -a.priority, a.id).cmp(&(
            &b.queue,
            states::job_state(b).0,
            -b.priority,
            b.id,
        ))
    });
    Ok(jobs)
}

/// `-O` names (any case) and their `%` codes.
const LONG_NAMES: &[(&str, char)] = &[
    ("jobid", 'i'),
    ("arrayjobid", 'F'),
    ("arraytaskid", 'K'),
    ("name", 'j'),
    ("username", 'u'),
    ("userid", 'u'),
    ("statecompact", 't'),
    ("state", 'T'),
    ("timeused", 'M'),
    ("timelimit", 'l'),
    ("timeleft", 'L'),
    ("numnodes", 'D'),
    ("reasonlist", 'R'),
    ("nodelist", 'N'),
    ("partition", 'P'),
    ("account", 'a'),
    ("numcpus", 'C'),
    ("tres-per-node", 'b'),
    ("minmemory", 'm'),
    ("submittime", 'V'),
    ("starttime", 'S'),
    ("endtime", 'e'),
    ("reason", 'r'),
    ("priority", 'Q'),
    ("prioritylong", 'Q'),
    ("workdir", 'Z'),
    ("qos", 'q'),
];

fn long_name(name: &str) -> Option<char> {
    LONG_NAMES.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, c)| *c)
}

/// A code's header, as Slurm prints it; `None`: a code berth does not know.
fn header(code: char) -> Option<&'static str> {
    Some(match code {
        'i' | 'A' => "JOBID",
        'F' => "ARRAY_JOB_ID",
        'K' => "ARRAY_TASK_ID",
        'j' => "NAME",
        'u' => "USER",
        't' => "ST",
        'T' => "STATE",
        'M' => "TIME",
        'l' => "TIME_LIMIT",
        'L' => "TIME_LEFT",
        'D' => "NODES",
        'R' => "NODELIST(REASON)",
        'N' => "NODELIST",
        'P' => "PARTITION",
        'a' => "ACCOUNT",
        'C' => "CPUS",
        'b' => "TRES_PER_NODE",
        'm' => "MIN_MEMORY",
        'V' => "SUBMIT_TIME",
        'S' => "START_TIME",
        'e' => "END_TIME",
        'r' => "REASON",
        'Q' => "PRIORITY",
        'Z' => "WORK_DIR",
        'q' => "QOS",
        _ => return None,
    })
}

/// A code's value for job `j`; `None` for a code berth does not know.
fn value(code: char, j: &JobView, now: jiff::Timestamp) -> Option<String> {
    let elapsed = jobfields::elapsed_secs(j, now);
    let limit = |f: &dyn Fn(u64) -> String| j.time_limit_secs.map_or("UNLIMITED".to_string(), f);
    Some(match code {
        'i' => jobfields::display_id(j),
        'A' => j.id.to_string(),
        'F' => j.array_task.map_or(j.id, |t| t.array_id).to_string(),
        'K' => match (&j.array_task, &j.array) {
            (Some(t), _) => t.index.to_string(),
            (None, Some(rest)) => rest.trim_start_matches('[').trim_end_matches(']').to_string(),
            _ => "N/A".into(),
        },
        'j' => j.name.clone().unwrap_or_default(),
        'u' => j.user.clone(),
        't' => states::job_state(j).0.into(),
        'T' => states::job_state(j).1.into(),
        'M' => squeue_duration(elapsed.unwrap_or(0)),
        'l' => limit(&squeue_duration),
        'L' => limit(&|l| squeue_duration(l.saturating_sub(elapsed.unwrap_or(0)))),
        'D' => jobfields::node_count(j).to_string(),
        'R' => states::nodes_or_reason(j),
        'N' => format::hostlist(&j.nodes),
        'P' => j.queue.clone(),
        'a' => j.project.clone().unwrap_or_else(|| "(null)".into()),
        'C' => jobfields::cpus(j).to_string(),
        'b' if j.gpu_milli == 0 => "N/A".into(),
        'b' => format!("gres/gpu:{}", berth_model::format_gpu_milli(j.gpu_milli)),
        'm' => jobfields::slurm_mem(j.mem_bytes),
        'V' => slurm_time(Some(j.submitted_at)),
        'S' => j.started_at.or(j.expected_start).map_or("N/A".into(), |t| slurm_time(Some(t))),
        'e' => end(j).map_or("N/A".into(), |t| slurm_time(Some(t))),
        'r' => j.pending_reason.as_ref().map_or("None", |r| states::reason_word(r.kind)).into(),
        'Q' => j.priority.to_string(),
        'Z' => j.workdir.clone().unwrap_or_else(|| "(null)".into()),
        'q' => "normal".into(),
        _ => return None,
    })
}

/// The `JobView` fields (the API's names) that code `code`'s [`value`] reads.
fn reads(code: char) -> &'static [&'static str] {
    match code {
        'i' => &["id", "array_task", "array"],
        'A' => &["id"],
        'F' => &["id", "array_task"],
        'K' => &["array_task", "array"],
        'j' => &["name"],
        'u' => &["user"],
        't' | 'T' => &["state", "end_cause"],
        'M' => &["started_at", "ended_at"],
        'l' => &["time_limit_secs"],
        'L' => &["time_limit_secs", "started_at", "ended_at"],
        'D' => &["nodes", "nodes_requested"],
        'R' => &["nodes", "pending_reason"],
        'N' => &["nodes"],
        'P' => &["queue"],
        'a' => &["project"],
        'C' => &["cpu_milli", "nodes", "nodes_requested"],
        'b' => &["gpu_milli"],
        'm' => &["mem_bytes"],
        'V' => &["submitted_at"],
        'S' => &["started_at", "expected_start"],
        'e' => &["ended_at", "state", "time_limit_secs", "started_at"],
        'r' => &["pending_reason"],
        'Q' => &["priority"],
        'Z' => &["workdir"],
        _ => &[],
    }
}

/// The API fields that printing `items` in squeue's order reads (`GET /v1/jobs?fields=`):
/// squeue lists many jobs and prints a few of their fields.
fn api_fields(items: &[format::Item]) -> Vec<&'static str> {
    // The order `list` sorts by.
    let mut all = vec!["queue", "state", "end_cause", "priority"];
    let codes = items.iter().filter_map(|i| match i {
        format::Item::Field { code, .. } => Some(*code),
        format::Item::Text(_) => None,
    });
    for f in codes.flat_map(reads) {
        if !all.contains(f) {
            all.push(f);
        }
    }
    all
}

/// When the job ended, or will at the latest (its time limit).
fn end(j: &JobView) -> Option<jiff::Timestamp> {
    if j.ended_at.is_some() || j.state == JobState::Pending {
        return j.ended_at;
    }
    let limit = jiff::SignedDuration::from_secs(j.time_limit_secs? as i64);
    j.started_at?.checked_add(limit).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(spec: &str, j: &JobView) -> String {
        format::render(&format::parse(spec), |c| value(c, j, j.submitted_at + jiff::SignedDuration::from_secs(3723)))
    }

    #[test]
    fn default_format_byte_for_byte() {
        let head = format::render(&format::parse(DEFAULT), |c| header(c).map(str::to_string));
        assert_eq!(head, "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)");
        let mut j = crate::fixtures::job(JobState::Running);
        j.id = 4242;
        j.name = Some("a-very-long-name".into());
        j.user = "alice".into();
        j.started_at = Some(j.submitted_at);
        j.nodes = vec!["n1".into()];
        assert_eq!(line(DEFAULT, &j), "              4242   default a-very-l    alice  R    1:02:03      1 n1");
        let mut p = crate::fixtures::job(JobState::Pending);
        p.pending_reason = Some(berth_model::PendingReason::new(berth_model::PendingKind::Priority, "behind 2 jobs"));
        p.nodes_requested = 2;
        assert_eq!(line(DEFAULT, &p), "                 1   default        x        u PD       0:00      2 (Priority)");
        let head = format::render(&format::parse(LONG), |c| header(c).map(str::to_string));
        assert_eq!(
            head,
            "             JOBID PARTITION     NAME     USER    STATE       TIME TIME_LIMI  NODES NODELIST(REASON)"
        );
        j.time_limit_secs = Some(2 * 86400);
        assert_eq!(line("%l|%L|%T|%C|%m|%b|%a", &j), "2-00:00:00|1-22:57:57|RUNNING|1|1G|N/A|(null)");
    }

    /// Every code prints the same from a lean listing (only what `reads` names) as from the
    /// whole job, and the sort reads nothing else.
    #[test]
    fn each_code_prints_the_same_from_the_fields_it_asks_for() {
        let jobs = crate::fixtures::varied();
        let now = jobs[0].submitted_at + jiff::SignedDuration::from_secs(600);
        for (_, code) in LONG_NAMES {
            let items = format::parse(&format!("%{code}"));
            let fields = api_fields(&items).join(",");
            for j in &jobs {
                let lean = crate::fixtures::lean(j, &fields);
                assert_eq!(value(*code, &lean, now), value(*code, j, now), "%{code} of a {} job", j.state);
                let key = |j: &JobView| (j.queue.clone(), states::job_state(j).0, j.priority, j.id);
                assert_eq!(key(&lean), key(j));
            }
        }
    }
}
