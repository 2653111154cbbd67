//! `berth ps`: the queue, with each waiting job's position and the reason it waits.

use std::process::ExitCode;

use berth_model::JobState;
use berth_model::api::{JobListQuery, JobView};
use clap::Args;

use crate::output::{self, ListFormat, ListOutputArgs, or_dash};

#[derive(Debug, Args)]
pub struct PsArgs {
    /// Include finished jobs (not those archived past the manager's --retain: `berth usage`
    /// still counts them)
    #[arg(short, long)]
    pub all: bool,

    /// Only jobs in this state (PENDING, RUNNING, FAILED, ...)
    #[arg(long, value_name = "STATE", value_parser = parse_state)]
    pub state: Option<JobState>,

    /// Show at most the N most recent jobs
    #[arg(long, value_name = "N")]
    pub limit: Option<u32>,

    /// Only this user's jobs
    #[arg(short, long, value_name = "USER")]
    pub user: Option<String>,

    /// Only jobs of this queue
    #[arg(short, long, value_name = "QUEUE")]
    pub queue: Option<String>,

    /// Only jobs whose name contains this text
    #[arg(short, long, value_name = "TEXT")]
    pub name: Option<String>,

    /// Keep showing the list as jobs change (from the manager's event stream): on a terminal
    /// the table is redrawn, otherwise each change is a line
    #[arg(short, long)]
    pub watch: bool,

    #[command(flatten)]
    pub output: ListOutputArgs,
}

pub(crate) fn parse_state(s: &str) -> Result<JobState, String> {
    s.parse::<JobState>().map_err(|e| {
        let all: Vec<&str> = JobState::ALL.iter().map(|s| s.as_str()).collect();
        format!("{e}: use one of {}", all.join(", "))
    })
}

pub async fn run(args: PsArgs) -> anyhow::Result<ExitCode> {
    let client = crate::client::from_env()?;
    // Asking for a finished state implies --all: `--state FAILED` alone would otherwise
    // always answer nothing.
    let all = args.all || args.state.is_some_and(JobState::is_terminal);
    let q = JobListQuery {
        state: args.state.map(|s| s.as_str().to_string()),
        all,
        limit: args.limit,
        user: args.user,
        queue: args.queue,
        name: args.name,
        ..Default::default()
    };
    if args.watch {
        if !matches!(args.output.format, ListFormat::Table | ListFormat::Wide) {
            anyhow::bail!("--watch draws a table: use -o table or -o wide with it");
        }
        let wide = args.output.format == ListFormat::Wide;
        return super::ps_watch::watch(&client, q, |jobs| table(jobs, wide)).await;
    }
    let jobs = client.jobs(&q).await?;
    match args.output.format {
        ListFormat::Table => output::print_table(table(&jobs, false)),
        ListFormat::Wide => output::print_table(table(&jobs, true)),
        ListFormat::Json => output::print_json(&jobs)?,
        ListFormat::Yaml => output::print_yaml(&jobs)?,
        ListFormat::Name => jobs.iter().for_each(|j| println!("{}", crate::jobfields::display_id(j))),
    }
    Ok(ExitCode::SUCCESS)
}

/// The most characters of a reason the narrow table shows.
const REASON_WIDTH: usize = 60;

/// The table; the `EXPECTED START` column appears only when some job has one (a queue with
/// backfill gives the jobs it reserves for one), `CPU%` and `MEM` only when some job was
/// measured (running: CPUs busy now and memory now; ended: peak memory), `TIME LEFT` only when
/// some running job will be stopped (its time limit, or `idle` for a session nobody uses).
/// `wide` adds the queue and priority, what each job asked for, every node it runs on, when
/// it was submitted and started, and its exit code.
fn table(jobs: &[JobView], wide: bool) -> comfy_table::Table {
    let expected = jobs.iter().any(|j| j.expected_start.is_some());
    let measured = jobs.iter().any(|j| j.usage.is_some());
    let deadlines = jobs.iter().any(|j| j.deadline.is_some());
    let mut header = vec!["ID", "NAME", "USER"];
    if wide {
        header.extend(["QUEUE", "PRI"]);
    }
    header.extend(["STATE", "POS", "REASON"]);
    if expected {
        header.push("EXPECTED START");
    }
    if measured {
        header.extend(["CPU%", "MEM"]);
    }
    if deadlines {
        header.push("TIME LEFT");
    }
    if wide {
        header.extend(["CPUS", "MEM LIMIT", "GPUS", "NODES", "SUBMITTED", "STARTED", "EXIT"]);
    } else {
        header.push("NODE");
    }
    header.push("AGE");
    let mut t = output::table(header);
    for j in jobs {
        let mut row =
            vec![crate::jobfields::display_id(j), or_dash(j.name.clone().unwrap_or_default()), j.user.clone()];
        if wide {
            row.extend([j.queue.clone(), j.priority.to_string()]);
        }
        row.extend([
            berth_model::cause::state_label(j.state, j.end_cause).to_string(),
            or_dash(j.position.map(|p| p.to_string()).unwrap_or_default()),
            // One long reason must not widen every row: `-o wide` and `berth show` have it whole.
            or_dash(if wide { reason(j) } else { output::clip(&reason(j), REASON_WIDTH) }),
        ]);
        if expected {
            row.push(or_dash(j.expected_start.map(output::until).unwrap_or_default()));
        }
        if measured {
            let u = j.usage.as_ref();
            row.push(or_dash(u.and_then(|u| u.cpu_percent).map(|p| format!("{p:.0}")).unwrap_or_default()));
            let mem = u.and_then(|u| u.total.memory_bytes.or(u.total.memory_peak_bytes));
            row.push(or_dash(mem.map(berth_model::format_bytes).unwrap_or_default()));
        }
        if deadlines {
            row.push(or_dash(j.deadline.map(time_left).unwrap_or_default()));
        }
        if wide {
            row.extend([
                berth_model::format_gpu_milli(j.cpu_milli),
                berth_model::format_bytes(j.mem_bytes),
                or_dash(if j.gpu_milli == 0 { String::new() } else { berth_model::format_gpu_milli(j.gpu_milli) }),
                or_dash(j.nodes.join(",")),
                output::local_time(j.submitted_at),
                or_dash(j.started_at.map(output::local_time).unwrap_or_default()),
                or_dash(j.exit_code.map(|c| c.to_string()).unwrap_or_default()),
            ]);
        } else {
            row.push(or_dash(j.nodes.join(",")));
        }
        row.push(output::age(j.submitted_at));
        t.add_row(row);
    }
    t
}

/// `1h59m`, or `9m (idle)` when the session is stopped for being idle first.
fn time_left(d: berth_model::api::Deadline) -> String {
    let secs = (d.at.as_second() - jiff::Timestamp::now().as_second()).max(0);
    let left = output::duration(secs as u64);
    match d.kind {
        berth_model::api::DeadlineKind::TimeLimit => left,
        berth_model::api::DeadlineKind::Idle => format!("{left} (idle)"),
    }
}

/// Why a job waits; for a preparing one, how far it is; for a finished job that did not
/// succeed, why it ended.
fn reason(j: &JobView) -> String {
    if let Some(r) = &j.pending_reason {
        return r.message.clone();
    }
    match j.state {
        // How far its setup is: `env build 2/4`.
        JobState::Preparing => j.setup.as_ref().map(|s| s.short()).unwrap_or_default(),
        JobState::Failed | JobState::Cancelled | JobState::Timeout | JobState::Lost | JobState::Terminating => {
            j.reason.clone().unwrap_or_default()
        }
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::{PendingKind, PendingReason};

    #[test]
    fn rows_show_position_and_reason() {
        let j = JobView {
            id: 17,
            name: Some("train".into()),
            user: "alice".into(),
            state: JobState::Pending,
            queue: "default".into(),
            priority: 0,
            position: Some(2),
            pending_reason: Some(PendingReason::new(PendingKind::Resources, "resources: needs 1 GPU")),
            nodes: vec![],
            cpu_milli: 1000,
            mem_bytes: 1 << 30,
            gpu_milli: 1000,
            submitted_at: jiff::Timestamp::now(),
            started_at: None,
            ended_at: None,
            exit_code: None,
            end_signal: None,
            reason: None,
            expected_start: None,
            stop: None,
            end_cause: None,
            usage: None,
            deadline: None,
            setup: None,
            nodes_requested: 1,
            time_limit_secs: None,
            project: None,
            workdir: None,
            array_task: None,
            array: None,
            expected_run_secs: None,
        };
        let lines: Vec<String> = table(std::slice::from_ref(&j), false).lines().collect();
        assert!(lines[0].contains("ID") && lines[0].contains("REASON"), "{lines:?}");
        assert!(!lines[0].contains("EXPECTED"), "no column without an expected start: {lines:?}");
        assert!(lines[1].contains("resources: needs 1 GPU") && lines[1].contains("PENDING"), "{lines:?}");
        let soon = JobView {
            expected_start: Some(jiff::Timestamp::now() + jiff::SignedDuration::from_secs(725)),
            ..j.clone()
        };
        let lines: Vec<String> = table(&[soon], false).lines().collect();
        assert!(lines[0].contains("EXPECTED START"), "{lines:?}");
        assert!(lines[1].contains("in 12m"), "{lines:?}");
        assert!(!lines[0].contains("CPU%"), "no usage columns without usage: {lines:?}");
        let total = berth_model::KernelUsage { memory_bytes: Some(300 << 20), ..Default::default() };
        let busy = JobView {
            state: JobState::Running,
            usage: Some(berth_model::JobUsage { total, cpu_percent: Some(198.6) }),
            ..j
        };
        let lines: Vec<String> = table(std::slice::from_ref(&busy), false).lines().collect();
        assert!(lines[0].contains("CPU%") && lines[0].contains("MEM"), "{lines:?}");
        assert!(lines[1].contains("199") && lines[1].contains("300MiB"), "{lines:?}");
        assert!(!lines[0].contains("TIME LEFT"), "{lines:?}");
        let idle = berth_model::api::Deadline {
            at: jiff::Timestamp::now() + jiff::SignedDuration::from_secs(545),
            kind: berth_model::api::DeadlineKind::Idle,
        };
        let session = JobView { deadline: Some(idle), ..busy.clone() };
        let lines: Vec<String> = table(&[session], false).lines().collect();
        assert!(lines[0].contains("TIME LEFT"), "{lines:?}");
        assert!(lines[1].contains("9m") && lines[1].contains("(idle)"), "{lines:?}");
        let lines: Vec<String> = table(std::slice::from_ref(&busy), true).lines().collect();
        for col in ["QUEUE", "PRI", "CPUS", "MEM LIMIT", "GPUS", "NODES", "SUBMITTED", "STARTED", "EXIT", "AGE"] {
            assert!(lines[0].contains(col), "wide has {col}: {lines:?}");
        }
        assert!(lines[1].contains("default") && lines[1].contains("1GiB"), "{lines:?}");
        assert!(parse_state("running").is_ok());
        assert!(parse_state("bogus").unwrap_err().contains("PENDING"));
        // Regression (issue 41): one long reason made every row ~200 characters wide.
        let long = "resources: needs 8 CPUs; best node n1 has 4 free (2 nodes in queue); reserved to start at t+1h on n2 (backfill)";
        let waiting = JobView {
            state: JobState::Pending,
            usage: None,
            pending_reason: Some(PendingReason::new(PendingKind::Resources, long)),
            ..busy
        };
        let narrow = output::render_table(table(std::slice::from_ref(&waiting), false));
        assert!(narrow.lines().all(|l| l.chars().count() < 120), "{narrow}");
        assert!(narrow.contains("resources: needs 8 CPUs") && narrow.contains('…'), "{narrow}");
        let wide = output::render_table(table(&[waiting], true));
        assert!(wide.contains(long), "-o wide keeps the whole reason: {wide}");
    }
}
