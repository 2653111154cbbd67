//! `squeue`: the unfinished jobs in Slurm's columns, `-o` (`%.18i %.9P ...`) and `-O`
//! (`JobID,Name:30`) formats, filtered by `-j`, `-u`, `--me`, `-t`, `-p`, `-n`, `-A`, `-M`,
//! sorted by `-S` (Slurm's keys), an array's pending part on one line or, with `-r`, a line
//! per task.

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
#[command(name = "squeue", disable_help_flag = true, version = crate::SLURM_VERSION, display_name = "slurm", infer_long_args = true)]
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
    /// A line per array task, pending ones too
    #[arg(short = 'r', long = "array")]
    array: bool,
    /// Sort by these keys (`P,t,-p` by default: partition, state, priority highest first;
    /// `-` before a key: descending)
    #[arg(short = 'S', long = "sort", value_name = "KEYS", allow_hyphen_values = true)]
    sort: Option<String>,
    /// Only these clusters' jobs: `all`, or this cluster's name (berth)
    #[arg(short = 'M', long = "clusters", visible_alias = "cluster", value_name = "CLUSTERS")]
    clusters: Option<String>,
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
    crate::check_clusters(args.clusters.as_deref())?;
    let sort = sort_keys(args.sort.as_deref().unwrap_or(DEFAULT_SORT)).map_err(Error::Failed)?;
    let client = connect()?;
    let mut fields = api_fields(&items);
    for f in sort.iter().flat_map(|(code, _)| reads(*code)) {
        if !fields.contains(f) {
            fields.push(f);
        }
    }
    let mut jobs = list(&client, &args, fields).await?;
    if args.array {
        jobs = jobs.into_iter().flat_map(each_task).collect();
    }
    let now = jiff::Timestamp::now();
    jobs.sort_by(|a, b| compare(&sort, a, b, now));
    if args.clusters.is_some() && !args.noheader {
        writeln!(out, "CLUSTER: {}", crate::scontrol_config::CLUSTER_NAME)?;
    }
    if !args.noheader {
        if args.long {
            // Slurm's long listing starts with the time it was taken.
            writeln!(out, "{}", jiff::Zoned::now().strftime("%a %b %e %H:%M:%S %Y"))?;
        }
        writeln!(out, "{}", format::render(&items, |c| header(c).map(str::to_string)))?;
    }
    for j in &jobs {
        writeln!(out, "{}", format::render_keeping(&items, |c| value(c, j, now), |c| "MlL".contains(c)))?;
    }
    Ok(())
}

/// Slurm's default order: by partition, then state (pending first), then priority, highest
/// first (then by id, as berth breaks ties).
const DEFAULT_SORT: &str = "P,t,-p";

/// `-S` keys: `i,-t,+P`: the format code to sort by and whether descending.
fn sort_keys(spec: &str) -> Result<Vec<(char, bool)>, String> {
    let mut keys = Vec::new();
    for key in spec.split(',').map(str::trim).filter(|k| !k.is_empty()) {
        let (desc, code) = match key.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, key.trim_start_matches('+')),
        };
        let mut chars = code.chars();
        let (Some(c), None) = (chars.next(), chars.next()) else {
            return Err(format!(
                "invalid sort key `{key}`: use a format letter (i, P, t, u, N, p...), `-` before it to reverse"
            ));
        };
        // `p` (priority as a fraction) sorts as `Q` does.
        let c = if c == 'p' { 'Q' } else { c };
        if !SORT_CODES.contains(c) {
            return Err(format!(
                "invalid sort key `{key}`: berth sorts by i, A, j, u, P, t, T, M, l, D, C, N, Q, p, V, S, e, a, r"
            ));
        }
        keys.push((c, desc));
    }
    Ok(keys)
}

/// The codes [`sort_value`] knows.
const SORT_CODES: &str = "iAtTMlDCQVSejuPNar";

/// What key `code` sorts job `j` by: numbers as numbers, the rest as text.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum SortValue {
    Num(i128),
    Text(String),
}

fn sort_value(code: char, j: &JobView, now: jiff::Timestamp) -> Option<SortValue> {
    use SortValue::{Num, Text};
    let secs = |t: Option<jiff::Timestamp>| Num(t.map_or(0, |t| i128::from(t.as_second())));
    Some(match code {
        'i' | 'A' => Num(i128::from(j.array_task.map_or(j.id, |t| t.array_id)) << 32
            | i128::from(j.array_task.map_or(0, |t| t.index))),
        // Pending sorts before running, as in Slurm's state order.
        't' | 'T' => Num(state_rank(j)),
        'M' => Num(i128::from(jobfields::elapsed_secs(j, now).unwrap_or(0))),
        'l' => Num(j.time_limit_secs.map_or(i128::MAX, i128::from)),
        'D' => Num(i128::from(jobfields::node_count(j))),
        'C' => Num(i128::from(jobfields::cpus(j))),
        'Q' => Num(i128::from(j.priority)),
        'V' => secs(Some(j.submitted_at)),
        'S' => secs(j.started_at.or(j.expected_start)),
        'e' => secs(end(j)),
        'j' | 'u' | 'P' | 'N' | 'a' | 'r' => Text(value(code, j, now)?),
        _ => return None,
    })
}

/// Slurm's job state order: pending, running, suspended, then the ended ones.
fn state_rank(j: &JobView) -> i128 {
    match states::job_state(j).0 {
        "PD" => 0,
        "R" => 1,
        "CF" => 1,
        "CG" => 2,
        _ => 3,
    }
}

/// Orders by `keys` in turn, then by id.
fn compare(keys: &[(char, bool)], a: &JobView, b: &JobView, now: jiff::Timestamp) -> std::cmp::Ordering {
    for (code, desc) in keys {
        let o = sort_value(*code, a, now).cmp(&sort_value(*code, b, now));
        let o = if *desc { o.reverse() } else { o };
        if o.is_ne() {
            return o;
        }
    }
    let id = |j: &JobView| (j.array_task.map_or(j.id, |t| t.array_id), j.array_task.map(|t| t.index));
    id(a).cmp(&id(b))
}

/// `-r`: an array's row of tasks still to be made as a row per task (`23_3`, `23_4`), as
/// Slurm lists them; any other row as it is.
fn each_task(j: JobView) -> Vec<JobView> {
    let Some(rest) = j.array.as_deref().filter(|a| a.starts_with('[') && j.array_task.is_none()) else {
        return vec![j];
    };
    let list = jobfields::pending_tasks(rest);
    let list = list.split('%').next().unwrap_or_default();
    let Ok(spec) = list.parse::<berth_model::ArraySpec>() else { return vec![j] };
    let indices: Vec<u32> = spec.indices().collect();
    let (min, max) = (indices.iter().min().copied().unwrap_or(0), indices.iter().max().copied().unwrap_or(0));
    indices
        .iter()
        .map(|&index| {
            let mut t = j.clone();
            t.array = None;
            t.array_task =
                Some(berth_model::ArrayTask { array_id: j.id, index, min, max, count: indices.len() as u64 });
            t
        })
        .collect()
}

/// The jobs the filters select (sorted by the caller).
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
    Ok(wanted.fetch(client).await?)
}

/// `-O` names (any case) and their `%` codes.
const LONG_NAMES: &[(&str, char)] = &[
    // 22.05: `JobID` is the raw id, `JobArrayID` the `12_7` form.
    ("jobid", 'A'),
    ("jobarrayid", 'i'),
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
            (None, Some(rest)) => jobfields::pending_tasks(rest),
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
        // No project: the user's own account, as the job sees in SLURM_JOB_ACCOUNT.
        'a' => j.project.clone().unwrap_or_else(|| j.user.clone()),
        'C' => jobfields::cpus(j).to_string(),
        'b' if j.gpu_milli == 0 => "N/A".into(),
        'b' => format!("gres:gpu:{}", berth_model::format_gpu_milli(j.gpu_milli)),
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
        'a' => &["project", "user"],
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
        assert_eq!(line("%l|%L|%T|%C|%m|%b|%a", &j), "2-00:00:00|1-22:57:57|RUNNING|1|1G|N/A|alice");
    }

    /// What tools parse, as 22.05 prints it: `-O JobID` the raw id, `%b` `gres:gpu:N`, a
    /// pending array's part as ranges, times never cut in `-l`.
    #[test]
    fn formats_tools_parse_as_slurm_22_05_prints_them() {
        let mut t = crate::fixtures::job(JobState::Running);
        (t.id, t.gpu_milli) = (41, 1000);
        t.array_task = Some(berth_model::ArrayTask { array_id: 40, index: 1, min: 0, max: 4, count: 5 });
        let items = format::parse_long("JobID,JobArrayID,ArrayJobID,ArrayTaskID,tres-per-node", long_name).unwrap();
        let now = t.submitted_at;
        let line = format::render(&items, |c| value(c, &t, now));
        assert_eq!(line.split_whitespace().collect::<Vec<_>>(), ["41", "40_1", "40", "1", "gres:gpu:1"]);
        let mut a = crate::fixtures::job(JobState::Pending);
        (a.id, a.array) = (40, Some("[3,4%2]".into()));
        assert_eq!(line_at("%i|%K", &a, now), "40_[3-4%2]|3-4%2");
        let mut long = crate::fixtures::job(JobState::Running);
        (long.started_at, long.time_limit_secs) = (Some(now), Some(86400));
        let items = format::parse(LONG);
        let row = format::render_keeping(&items, |c| value(c, &long, now), |c| "MlL".contains(c));
        assert!(row.contains(" 1-00:00:00 "), "{row}");
    }

    fn line_at(spec: &str, j: &JobView, now: jiff::Timestamp) -> String {
        format::render(&format::parse(spec), |c| value(c, j, now))
    }

    /// `-S` with Slurm's keys and `-`, and `-r`'s line per pending task.
    #[test]
    fn sorted_by_slurms_keys_and_arrays_task_by_task() {
        let job = |id: i64, user: &str, prio: i32, state: JobState| {
            let mut j = crate::fixtures::job(state);
            (j.id, j.user, j.priority) = (id, user.to_string(), prio);
            j
        };
        let jobs = vec![
            job(3, "bob", 5, JobState::Running),
            job(1, "carl", 9, JobState::Pending),
            job(2, "al", 1, JobState::Pending),
        ];
        let now = jobs[0].submitted_at;
        let order = |spec: &str| {
            let keys = sort_keys(spec).unwrap();
            let mut js = jobs.clone();
            js.sort_by(|a, b| compare(&keys, a, b, now));
            js.iter().map(|j| j.id).collect::<Vec<_>>()
        };
        assert_eq!(order("i"), [1, 2, 3]);
        assert_eq!(order("-i"), [3, 2, 1]);
        assert_eq!(order("u"), [2, 3, 1]);
        assert_eq!(order(DEFAULT_SORT), [1, 2, 3], "pending first, then the higher priority");
        assert_eq!(order("t,-p"), [1, 2, 3]);
        assert!(sort_keys("zz").unwrap_err().contains("invalid sort key `zz`"));
        let mut a = crate::fixtures::job(JobState::Pending);
        (a.id, a.array) = (23, Some("[3-4%2]".into()));
        let shown: Vec<String> = each_task(a).iter().map(jobfields::display_id).collect();
        assert_eq!(shown, ["23_3", "23_4"]);
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
