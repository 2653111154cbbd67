//! `sacct`: jobs that ran or waited in a time window, finished or not, in sacct's fixed-width
//! table or `--parsable`/`--parsable2` (`|`-separated) lines. The fields are
//! [`crate::jobfields`]' (shared with `berth history`), in Slurm's words.

use std::io::Write;

use berth_client::Client;
use berth_model::JobState;
use berth_model::api::JobView;
use clap::Parser;

use crate::jobfields::{self, FieldInfo, Style};
use crate::states;
use crate::when::{parse_time, sacct_duration, slurm_time};
use crate::{Connect, Error, Result};

/// Slurm's default fields.
const DEFAULT: &str = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode";
/// `-b`.
const BRIEF: &str = "JobID,State,ExitCode";

/// displays accounting data for berth jobs (Slurm's sacct)
#[derive(Debug, Parser)]
#[command(name = "sacct", version = crate::SLURM_VERSION, display_name = "slurm", infer_long_args = true)]
pub struct Args {
    /// Only these jobs (comma-separated ids; may be given more than once)
    #[arg(short = 'j', long = "jobs", value_name = "IDS")]
    jobs: Vec<String>,
    /// Fields, e.g. JobID,JobName%30,State,ExitCode
    #[arg(short = 'o', long = "format", env = "SACCT_FORMAT", value_name = "FIELDS")]
    format: Option<String>,
    /// JobID, State and ExitCode only
    #[arg(short = 'b', long = "brief")]
    brief: bool,
    /// `|` after every field
    #[arg(short = 'p', long = "parsable")]
    parsable: bool,
    /// `|` between fields
    #[arg(short = 'P', long = "parsable2")]
    parsable2: bool,
    /// The separator of --parsable and --parsable2 instead of `|`
    #[arg(long = "delimiter", value_name = "CHARS")]
    delimiter: Option<String>,
    /// Jobs only, not their steps (berth jobs have no steps: the same output)
    #[arg(short = 'X', long = "allocations")]
    allocations: bool,
    /// Do not print a header
    #[arg(short = 'n', long = "noheader")]
    noheader: bool,
    /// Jobs not ended before this time (default: midnight today; with -j, any time)
    #[arg(short = 'S', long = "starttime", value_name = "TIME")]
    start: Option<String>,
    /// Jobs submitted before this time (default: now)
    #[arg(short = 'E', long = "endtime", value_name = "TIME")]
    end: Option<String>,
    /// Only these users' jobs (comma-separated; default: yours)
    #[arg(short = 'u', long = "user", value_name = "USERS")]
    users: Option<String>,
    /// Every user's jobs (that you may see)
    #[arg(short = 'a', long = "allusers")]
    allusers: bool,
    /// Only jobs in these states (CD,F,CA,... or names)
    #[arg(short = 's', long = "state", value_name = "STATES")]
    states: Option<String>,
    /// Only jobs with these names (comma-separated)
    #[arg(long = "name", value_name = "NAMES")]
    names: Option<String>,
    /// Only jobs of these partitions (berth queues)
    #[arg(short = 'r', long = "partition", value_name = "PARTITIONS")]
    partitions: Option<String>,
    /// List the fields -o takes
    #[arg(short = 'e', long = "helpformat")]
    helpformat: bool,
    /// Only these clusters' jobs: `all`, or this cluster's name (berth)
    #[arg(short = 'M', long = "clusters", visible_alias = "cluster", value_name = "CLUSTERS")]
    clusters: Option<String>,
    /// Every cluster's jobs (berth is one cluster)
    #[arg(short = 'L', long = "allclusters")]
    allclusters: bool,
}

/// A chosen field: what it is, its header and its width (negative: left-justified).
struct Column {
    info: &'static FieldInfo,
    header: &'static str,
    width: i16,
}

/// Prints the jobs (or, with `-e`, the fields) `args` ask for to `out`.
pub async fn run(args: Args, connect: &dyn Connect, out: &mut dyn Write) -> Result<()> {
    if args.helpformat {
        let names: Vec<&str> = jobfields::FIELDS.iter().flat_map(|i| i.slurm.iter().copied()).collect();
        for row in names.chunks(4) {
            writeln!(out, "{}", row.iter().map(|n| format!("{n:<20}")).collect::<String>().trim_end())?;
        }
        return Ok(());
    }
    crate::check_clusters(args.clusters.as_deref())?;
    let spec = args.format.as_deref().unwrap_or(if args.brief { BRIEF } else { DEFAULT });
    let columns = columns(spec).map_err(Error::Failed)?;
    let client = connect()?;
    let fields = jobfields::api_fields(columns.iter().map(|c| &c.info.field));
    let jobs = list(&client, &args, fields).await?;
    let now = jiff::Timestamp::now();
    let sep = args.delimiter.clone().unwrap_or_else(|| "|".into());
    let parsable = match (args.parsable, args.parsable2) {
        (true, _) => Some(true),
        (false, true) => Some(false),
        _ => None,
    };
    let mut text = String::new();
    let mut line = |cells: Vec<String>| {
        text.push_str(&render_line(&columns, &cells, parsable, &sep));
        text.push('\n');
    };
    if !args.noheader {
        line(columns.iter().map(|c| c.header.to_string()).collect());
        if parsable.is_none() {
            line(columns.iter().map(|c| "-".repeat(c.width.unsigned_abs() as usize)).collect());
        }
    }
    for j in &jobs {
        line(columns.iter().map(|c| jobfields::value(c.info.field, j, now, &Sacct)).collect());
    }
    out.write_all(text.as_bytes())?;
    Ok(())
}

/// `JobID,JobName%30,...`: the fields (any case) with their widths.
fn columns(spec: &str) -> Result<Vec<Column>, String> {
    spec.split(',')
        .map(str::trim)
        .filter(|f| !f.is_empty())
        .map(|f| {
            let (name, width) = f.split_once('%').unwrap_or((f, ""));
            let (info, header) =
                jobfields::by_slurm_name(name).ok_or_else(|| format!("Invalid field requested: \"{name}\""))?;
            let width = match width {
                "" => info.width,
                w => {
                    let n: i16 = w.parse().map_err(|_| format!("invalid field width: {f}"))?;
                    // A width keeps the field's side, as in Slurm.
                    if info.width < 0 { -n.abs() } else { n.abs() }
                }
            };
            Ok(Column { info, header, width })
        })
        .collect()
}

/// One line: `|`-separated (`Some(true)`: with a trailing one, never cut), or sacct's
/// columns, each cut to its width and followed by a space.
fn render_line(columns: &[Column], cells: &[String], parsable: Option<bool>, sep: &str) -> String {
    match parsable {
        Some(trailing) => {
            let mut s = cells.join(sep);
            if trailing {
                s.push_str(sep);
            }
            s
        }
        None => columns
            .iter()
            .zip(cells)
            .map(|(c, v)| {
                let w = c.width.unsigned_abs() as usize;
                crate::format::pad(&cut(v, w), w, c.width > 0) + " "
            })
            .collect(),
    }
}

/// A value longer than its column ends in `+` where sacct cuts it (`CANCELLED+`).
fn cut(v: &str, width: usize) -> String {
    if width == 0 || v.chars().count() <= width {
        return v.to_string();
    }
    v.chars().take(width - 1).chain(['+']).collect()
}

/// The jobs the options select, oldest first.
async fn list(client: &Client, args: &Args, fields: Vec<&'static str>) -> Result<Vec<JobView>> {
    let now = jiff::Zoned::now();
    // `-j` may come several times (submitit gives one per job), each a list.
    let ids = if args.jobs.is_empty() { None } else { Some(crate::job_list(client, &args.jobs.join(",")).await?) };
    let time = |t: &str| parse_time(t, &now).map_err(Error::Failed);
    // Without -j or -S, sacct shows the jobs since midnight.
    let since = match (&args.start, &ids) {
        (Some(t), _) => Some(time(t)?),
        (None, Some(_)) => None,
        (None, None) => Some(time("midnight")?),
    };
    let until = args.end.as_deref().map(time).transpose()?;
    let mut states = match &args.states {
        Some(s) => states::parse_states(s).map_err(Error::Failed)?,
        None => None,
    };
    // sacct prints jobs being set up as RUNNING (`states::sacct_state`): `-s R` finds them.
    if let Some(s) = states.as_mut().filter(|s| s.contains(&JobState::Running)) {
        s.extend([JobState::Scheduled, JobState::Preparing]);
    }
    let mut users = crate::names(&args.users);
    if users.is_empty() && !args.allusers && ids.is_none() {
        users = vec![client.whoami().await?.user];
    }
    let wanted = crate::Wanted {
        ids,
        states,
        all: true,
        since,
        until,
        users,
        partitions: crate::names(&args.partitions),
        names: crate::names(&args.names),
        fields: Some(fields),
        ..Default::default()
    };
    let mut jobs = wanted.fetch(client).await?;
    jobs.sort_by_key(|j| j.id);
    Ok(jobs)
}

/// sacct's words for times, durations, states and exit codes.
pub struct Sacct;

impl Style for Sacct {
    fn time(&self, t: Option<jiff::Timestamp>) -> String {
        slurm_time(t)
    }

    fn duration(&self, secs: Option<u64>) -> String {
        secs.map_or("UNLIMITED".into(), sacct_duration)
    }

    fn state(&self, j: &JobView) -> String {
        states::sacct_state(j)
    }

    /// `code:signal`: a job a signal killed shows `0:N`, the signal its agent saw end it
    /// (`end_signal`; a timed-out or lost job without one: its code's, berth records 128+N).
    /// A cancelled job shows `0:0`, as Slurm 22.05's `sacct -X` does (the signal shows only
    /// on its batch step, which berth does not list).
    fn exit(&self, j: &JobView) -> String {
        if j.state == JobState::Cancelled {
            return "0:0".into();
        }
        let by_state = || {
            let c = j.exit_code.filter(|c| (129..=192).contains(c))?;
            matches!(j.state, JobState::Timeout | JobState::Lost).then_some(c - 128)
        };
        match (j.end_signal.or_else(by_state), j.exit_code) {
            (Some(s), _) => format!("0:{s}"),
            (None, Some(c)) => format!("{c}:0"),
            (None, None) => "0:0".into(),
        }
    }

    fn nodes(&self, j: &JobView) -> String {
        if j.nodes.is_empty() { "None assigned".into() } else { crate::format::hostlist(&j.nodes) }
    }

    /// Slurm's reason word for a pending job, `None` otherwise (berth's sentences are in
    /// `berth show` and `berth history -o reason`).
    fn reason(&self, j: &JobView) -> String {
        j.pending_reason.as_ref().map_or("None", |r| states::reason_word(r.kind)).into()
    }

    fn empty(&self) -> String {
        String::new()
    }

    /// Slurm's account: the job's project, else its user's own, as the job itself sees it in
    /// `SLURM_JOB_ACCOUNT` (and `scontrol show job` in `Account=`).
    fn project(&self, j: &JobView) -> Option<String> {
        Some(j.project.clone().unwrap_or_else(|| j.user.clone()))
    }

    /// `100M`, `16G`: Slurm's unit letters (22.05 no longer appends `n`/`c`).
    fn mem(&self, bytes: u64) -> String {
        jobfields::slurm_mem(bytes)
    }

    /// In KiB, as sacct prints MaxRSS: `4348K`.
    fn rss(&self, bytes: u64) -> String {
        format!("{}K", bytes.div_ceil(1024))
    }

    /// sacct's TotalCPU: `MM:SS.mmm` under an hour, `HH:MM:SS` and `D-HH:MM:SS` beyond.
    fn cpu_used(&self, secs: f64) -> String {
        let millis = (secs.max(0.0) * 1000.0).round() as u64;
        let whole = millis / 1000;
        if whole >= 3600 {
            sacct_duration(whole)
        } else {
            format!("{:02}:{:02}.{:03}", whole / 60, whole % 60, millis % 1000)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_table_byte_for_byte() {
        let cols = columns(DEFAULT).unwrap();
        let head: Vec<String> = cols.iter().map(|c| c.header.to_string()).collect();
        assert_eq!(
            render_line(&cols, &head, None, "|"),
            "JobID           JobName  Partition    Account  AllocCPUS      State ExitCode "
        );
        let rule: Vec<String> = cols.iter().map(|c| "-".repeat(c.width.unsigned_abs() as usize)).collect();
        assert_eq!(
            render_line(&cols, &rule, None, "|"),
            "------------ ---------- ---------- ---------- ---------- ---------- -------- "
        );
        let mut j = crate::fixtures::job(JobState::Cancelled);
        j.stop = Some(berth_model::StopCause::Cancelled { by: "alice".into() });
        j.exit_code = Some(143);
        let now = j.submitted_at;
        let cells: Vec<String> = cols.iter().map(|c| jobfields::value(c.info.field, &j, now, &Sacct)).collect();
        assert_eq!(
            render_line(&cols, &cells, None, "|"),
            "1                     x    default          u          1 CANCELLED+      0:0 "
        );
        assert_eq!(render_line(&cols[..2], &cells[..2], Some(true), "|"), "1|x|");
        assert_eq!(render_line(&cols[..2], &cells[..2], Some(false), "|"), "1|x");
    }

    #[test]
    fn fields_widths_and_mistakes() {
        let cols = columns("jobname%30,NodeList%5,state").unwrap();
        assert_eq!(
            cols.iter().map(|c| (c.header, c.width)).collect::<Vec<_>>(),
            [("JobName", 30), ("NodeList", -5), ("State", 10)]
        );
        assert_eq!(columns("JobID,Bogus").err().unwrap(), "Invalid field requested: \"Bogus\"");
        let mut j = crate::fixtures::job(JobState::Failed);
        j.exit_code = Some(3);
        assert_eq!(Sacct.exit(&j), "3:0");
        j.reason = Some("killed by signal 9 (SIGKILL)".into());
        j.exit_code = Some(137);
        assert_eq!(Sacct.exit(&j), "137:0", "the reason's text is for people: no signal recorded, none shown");
        j.end_signal = Some(9);
        assert_eq!(Sacct.exit(&j), "0:9");
        j.state = JobState::Cancelled;
        assert_eq!(Sacct.exit(&j), "0:0", "cancelled while running: 0:0 in sacct -X, as Slurm 22.05");
        (j.state, j.end_signal, j.exit_code) = (JobState::Timeout, None, Some(143));
        assert_eq!(Sacct.exit(&j), "0:15", "killed at its time limit");
        assert_eq!(jobfields::value(jobfields::Field::Nodes, &j, j.submitted_at, &Sacct), "None assigned");
    }

    /// The fields Snakemake's efficiency report and seff-like scripts ask for, in Slurm's units.
    #[test]
    fn measured_and_derived_fields_in_slurms_units() {
        let cols = columns("JobIdRaw,ReqMem,Account,DerivedExitCode,MaxRSS,TotalCPU,CPUTime,Comment,WorkDir").unwrap();
        let mut j = crate::fixtures::varied().remove(0);
        (j.state, j.exit_code, j.end_signal, j.project) = (JobState::Failed, Some(3), None, None);
        j.workdir = Some("/home/alice/run".into());
        j.mem_bytes = 100 << 20;
        j.ended_at = Some(j.submitted_at + jiff::SignedDuration::from_secs(3600));
        let now = j.submitted_at;
        let cells: Vec<String> = cols.iter().map(|c| jobfields::value(c.info.field, &j, now, &Sacct)).collect();
        // 2 nodes × 3 CPUs for 59 minutes; 75.25 CPU seconds and 300 MiB measured.
        assert_eq!(
            render_line(&cols, &cells, Some(false), "|"),
            "12|100M|alice|3:0|307200K|01:15.250|05:54:00||/home/alice/run"
        );
        assert_eq!(Sacct.cpu_used(3.0 * 3600.0 + 61.5), "03:01:01");
        assert_eq!(Sacct.cpu_used(0.0), "00:00.000");
    }

    /// Every field prints the same from a lean listing (only `jobfields::reads` asked for) as
    /// from the whole job: a field reading something it does not declare would print a default.
    #[test]
    fn each_field_prints_the_same_from_the_fields_it_asks_for() {
        jobfields::assert_fields_declare_what_they_read(&Sacct);
    }
}
