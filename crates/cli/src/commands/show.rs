//! `berth show ID`: everything about one job: its spec, where each kernel runs with which
//! devices, and every state change with its time and reason.

use std::fmt::Write as _;
use std::process::ExitCode;

use berth_model::api::JobDetail;
use berth_model::{JobId, StopCause, format_bytes, format_duration, format_gpu_milli};
use clap::Args;

use crate::client::Client;
use crate::output::{self, OutputArgs};

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The job's id
    #[arg(value_parser = clap::value_parser!(JobId).range(1..), add = crate::completion::job_ids_arg())]
    pub id: JobId,

    #[command(flatten)]
    pub output: OutputArgs,
}

pub async fn run(args: ShowArgs) -> anyhow::Result<ExitCode> {
    let client = crate::client::from_env()?;
    let d = client.job(args.id).await?;
    if args.output.json() {
        output::print_json(&d)?;
    } else {
        print!("{}", render(&d));
        print!("{}", stderr_tail(&client, &d).await);
    }
    Ok(ExitCode::SUCCESS)
}

/// How many lines of a failed job's stderr `show` prints.
const STDERR_TAIL: usize = 10;

/// For a job that failed, the last lines of its main kernel's stderr log, where a crashed
/// script's traceback is; empty otherwise, or when the log cannot be read (a job that failed
/// before it ran has none) or its stderr went to a file of its own.
async fn stderr_tail(client: &Client, d: &JobDetail) -> String {
    if d.job.state != berth_model::JobState::Failed || output_files(d, 0).stderr.is_some() {
        return String::new();
    }
    let log = super::follow::LogRef { id: d.job.id, stream: berth_model::protocol::LogStream::Stderr, kernel: 0 };
    let Ok(bytes) = super::follow::last_lines(client, log, STDERR_TAIL).await else { return String::new() };
    if bytes.is_empty() {
        return String::new();
    }
    let mut o = format!("last lines of stderr (all of it: berth logs --stderr {}):\n", d.job.id);
    for l in String::from_utf8_lossy(&bytes).lines() {
        o.push_str(&format!("  {l}\n"));
    }
    o
}

/// The text `berth show` prints: `label: value` lines, then the kernels and the history.
fn render(d: &JobDetail) -> String {
    let (j, s) = (&d.job, &d.spec);
    let mut o = String::new();
    // A label of "" continues the line above: indented, without a lone `:`.
    let mut line = |k: &str, v: String| {
        let label = if k.is_empty() { String::new() } else { format!("{k}:") };
        // A label too long for the column still keeps a space before its value.
        let _ = if label.len() > 12 { writeln!(o, "{label} {v}") } else { writeln!(o, "{label:<12}{v}") };
    };
    line("job", format!("{}{}", j.id, j.name.as_ref().map(|n| format!(" ({n})")).unwrap_or_default()));
    line("user", j.user.clone());
    if let Some(u) = d.submitter {
        line("unix user", format!("uid {} gid {} (vouched for by the manager's host)", u.uid, u.gid));
    }
    line("state", berth_model::cause::state_label(j.state, j.end_cause).to_string());
    if let Some(r) = &j.pending_reason {
        line("waiting", format!("{}{}", r.message, j.position.map(|p| format!(" (position {p})")).unwrap_or_default()));
    }
    if let Some(s) = &j.setup {
        let detail = s.detail.as_ref().map(|d| format!(": {d}")).unwrap_or_default();
        let since = format!("since {} ({} ago)", output::local_time(s.since), output::age(s.since));
        line("setup", format!("{}{detail}, {since}", s.short()));
    }
    if let Some(t) = j.expected_start {
        line("expected", format!("to start {} ({})", output::until(t), output::local_time(t)));
    }
    if let Some(r) = j.reason.as_ref().filter(|r| !r.is_empty()) {
        line("reason", r.clone());
    }
    if let Some(c) = j.exit_code {
        line("exit code", c.to_string());
    }
    match &j.stop {
        Some(StopCause::Cancelled { by }) => line("stop", format!("cancelled by {by}")),
        Some(StopCause::Preempted { by_job, action }) => {
            line("stop", format!("preempted by job {by_job}, then {}", action.as_str()))
        }
        Some(StopCause::Requeued { by }) => line("stop", format!("requeued by {by}")),
        Some(StopCause::ScaledDown { endpoint, wants }) => {
            line("stop", format!("scaled down: endpoint {endpoint} wanted {}", berth_model::replica::replicas(*wants)))
        }
        Some(StopCause::Idle { idle_secs }) => {
            line("stop", format!("idle for {} (the queue's idle timeout)", format_duration(*idle_secs)))
        }
        None => {}
    }
    if let Some(c) = j.end_cause {
        line("ended by", c.as_str().replace('_', " "));
    }
    line("command", output::command_line(&s.command));
    if s.command.iter().any(|a| a.contains('\n')) {
        line("", "(the script text is in `berth show -o json`)".into());
    }
    let r = &s.resources;
    line(
        "resources",
        format!(
            "cpus {}, memory {}, gpus {} (per node); {} node{}; numa {}",
            format_gpu_milli(r.cpu_milli),
            format_bytes(r.mem_bytes),
            format_gpu_milli(r.gpu_milli),
            s.nodes,
            if s.nodes == 1 { "" } else { "s" },
            numa_name(s.numa),
        ),
    );
    if s.tasks_per_node > 1 || s.launch == berth_model::Launch::First {
        let launch = match s.launch {
            berth_model::Launch::Every => "every kernel runs the command",
            berth_model::Launch::First => "the first kernel runs the command, the others hold their nodes for srun",
        };
        line("tasks", format!("{} per node; {launch}", s.tasks_per_node));
    }
    line("time limit", s.time_limit_secs.map(output::duration).unwrap_or_else(|| "none".into()));
    if let Some(secs) = j.expected_run_secs {
        // A prediction, not a limit: the job is stopped only at its time limit.
        line("expected run time", format!("{} (predicted from earlier runs)", output::duration(secs)));
    }
    line("queue", format!("{} (priority {})", j.queue, s.priority));
    if let Some(q) = &s.qos {
        line("qos", format!("{q} (its priority comes from it)"));
    }
    if let Some(c) = &s.constraint {
        line("constraint", format!("{c} (node features)"));
    }
    if s.exclusive {
        line("exclusive", "yes: whole nodes, shared with no other job".into());
    }
    if let Some(d) = &s.dependency {
        let how = if d.any { "any one of" } else { "all of" };
        line("dependency", if d.conditions.len() > 1 { format!("{d} ({how})") } else { d.to_string() });
    }
    if let Some(b) = s.begin_at {
        line("begin", output::local_time(b));
    }
    if let Some(sig) = &s.signal {
        let to = if sig.batch_only { "the batch shell" } else { "the job's steps (srun)" };
        line("signal", format!("{sig}: to {to}, {} s before the time limit", sig.before_secs));
    }
    if s.requeue {
        line("requeue", "yes, if its node is lost".into());
    }
    if s.preemptible {
        line("preemptible", "yes: a higher-priority job may stop it (the queue requeues or cancels it)".into());
    }
    if let Some(w) = &s.workdir {
        line("workdir", w.clone());
    }
    if s.output.has_files() {
        let p = output_files(d, 0);
        let mut notes = Vec::new();
        if d.kernels.is_empty() {
            notes.push("expanded when it starts");
        }
        if !s.output.open_mode.is_truncate() {
            notes.push("appended to");
        }
        if s.launch == berth_model::Launch::Every && s.kernel_count() > 1 {
            notes.push("kernel 0's; every kernel opens its own");
        }
        let text = |path: &str, first: Option<&str>| {
            let notes: Vec<&str> = first.into_iter().chain(notes.iter().copied()).collect();
            let notes = if notes.is_empty() { String::new() } else { format!(" ({})", notes.join(", ")) };
            format!("{path}{notes}")
        };
        match (&p.stdout, &p.stderr) {
            (Some(o), Some(e)) if o == e => line("output", text(o, Some("stdout and stderr"))),
            (o, e) => {
                for (label, path) in [("stdout", o), ("stderr", e)] {
                    if let Some(path) = path {
                        line(label, text(path, None));
                    }
                }
            }
        }
    }
    if let Some(c) = &s.code {
        let git = c
            .git
            .as_ref()
            .map(|g| format!(", git {}{}", g.commit, if g.dirty { " with changes not committed (dirty)" } else { "" }))
            .unwrap_or_default();
        line(
            "code",
            format!("snapshot {} ({} files, {}){git}", &c.id[..12], c.files, berth_model::format_bytes(c.bytes)),
        );
    }
    for f in &s.folders {
        line("folder", format!("{} at {}{}", f.folder, f.target(), if f.read_only { " (read-only)" } else { "" }));
    }
    for d in &s.datasets {
        line("dataset", format!("{d} (prefetched into the node's cache before it runs)"));
    }
    if !s.submit_env.is_empty() {
        line(
            "exported",
            format!("{} variables of the submitter's environment (`-o json` lists them)", s.submit_env.len()),
        );
    }
    for (k, v) in &s.env {
        line("env", format!("{k}={}", output::shell_quote(v)));
    }
    line("submitted", output::local_time(j.submitted_at));
    if let Some(t) = j.started_at {
        line("started", output::local_time(t));
    }
    if let Some(t) = j.ended_at {
        line("ended", output::local_time(t));
    }
    if let Some(u) = &j.usage {
        let so_far = if j.state.holds_resources() { " so far" } else { "" };
        line(
            "used",
            format!("{}{so_far} (`berth eff {}` compares it with what it was given)", super::eff::used_text(u), j.id),
        );
    }
    if !d.kernels.is_empty() {
        let _ = writeln!(o, "\nkernels:");
        for k in &d.kernels {
            let b = &k.binding;
            let gpus = if b.gpus.is_empty() {
                "none".to_string()
            } else {
                b.gpus
                    .iter()
                    .map(|g| format!("{} {} ({}/1)", g.index, g.uuid, format_gpu_milli(g.milli)))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let _ = writeln!(
                o,
                "  {} {} on {}: cpuset {} ({} cpu), memory nodes {}, memory {}, gpus {}{}{}",
                k.index,
                k.role,
                b.node,
                output::or_dash(b.cpuset()),
                format_gpu_milli(b.cpu_milli),
                output::or_dash(b.memset()),
                format_bytes(b.mem_bytes),
                gpus,
                k.exit_code.map(|c| format!(", exit code {c}")).unwrap_or_default(),
                k.usage
                    .map(|u| format!(
                        "; used {}",
                        super::eff::used_text(&berth_model::JobUsage { total: u, cpu_percent: None })
                    ))
                    .unwrap_or_default(),
            );
        }
    }
    if !d.transitions.is_empty() {
        let _ = writeln!(o, "\nhistory:");
        for t in &d.transitions {
            let from = t.from.map(|f| format!("{f} → ")).unwrap_or_default();
            let _ = writeln!(o, "  {}  {from}{}  {}", output::local_time(t.at), t.to, t.reason);
        }
    }
    o
}

/// Where kernel `index` of the job writes its stdout and stderr when the job has output
/// files: expanded once the kernel has a node, else the templates; a relative path under the
/// job's working directory when the spec names it.
pub(crate) fn output_files(d: &JobDetail, index: u32) -> berth_model::output::Paths {
    use berth_model::output::{Context, Paths, job_name, resolve};
    let s = &d.spec;
    let node = d.kernels.iter().find(|k| k.index == index).map(|k| k.binding.node.as_str());
    let paths = match node {
        Some(node) => {
            let name = job_name(s.name.as_deref().or(d.job.name.as_deref()), d.job.id);
            let task = if s.launch == berth_model::Launch::First { 0 } else { index };
            let array = s.array_task.map(|t| (t.array_id, t.index));
            let c = Context {
                job_id: d.job.id,
                array,
                name: &name,
                user: &d.job.user,
                node,
                node_index: index,
                task,
                step: None,
            };
            s.output.expand(&c).unwrap_or_default()
        }
        None => Paths { stdout: s.output.stdout.clone(), stderr: s.output.stderr.clone().or(s.output.stdout.clone()) },
    };
    let under = |p: Option<String>| match (p, &s.workdir) {
        (Some(p), Some(w)) => Some(resolve(&p, std::path::Path::new(w)).display().to_string()),
        (p, _) => p,
    };
    Paths { stdout: under(paths.stdout), stderr: under(paths.stderr) }
}

fn numa_name(n: berth_model::NumaPolicy) -> String {
    serde_json::to_value(n).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::api::{JobView, KernelView, Transition};
    use berth_model::{Binding, GpuShare, JobSpec, JobState};

    #[test]
    fn renders_binding_and_history() {
        let now = jiff::Timestamp::now();
        let mut spec = JobSpec::command(["python", "train.py"]);
        spec.time_limit_secs = Some(3600);
        spec.resources.gpu_milli = 500;
        let d = JobDetail {
            job: JobView {
                id: 3,
                name: Some("t".into()),
                user: "bob".into(),
                state: JobState::Succeeded,
                queue: "default".into(),
                priority: 0,
                position: None,
                pending_reason: None,
                nodes: vec!["n1".into()],
                cpu_milli: 1000,
                mem_bytes: 1 << 30,
                gpu_milli: 500,
                submitted_at: now,
                started_at: Some(now),
                ended_at: Some(now),
                exit_code: Some(0),
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
            },
            spec,
            kernels: vec![KernelView {
                index: 0,
                role: "main".into(),
                binding: Binding {
                    node: "n1".into(),
                    cpus: vec![0, 1],
                    cpu_milli: 1000,
                    mems: vec![0],
                    mem_bytes: 1 << 30,
                    gpus: vec![GpuShare { uuid: "GPU-abc".into(), index: 0, milli: 500 }],
                    port: None,
                },
                exit_code: Some(0),
                usage: Some(berth_model::KernelUsage { cpu_seconds: Some(2.5), ..Default::default() }),
            }],
            transitions: vec![Transition { at: now, from: None, to: JobState::Pending, reason: "submitted".into() }],
            submitter: None,
        };
        let mut with_files = d.clone();
        with_files.spec.output.stdout = Some("logs/%x-%j-%N.out".into());
        with_files.spec.workdir = Some("/home/bob".into());
        let s = render(&with_files);
        assert!(s.contains("output:     /home/bob/logs/t-3-n1.out (stdout and stderr)\n"), "{s}");
        with_files.spec.output.stderr = Some("/tmp/%u.err".into());
        with_files.spec.output.open_mode = berth_model::output::OpenMode::Append;
        with_files.kernels.clear();
        let s = render(&with_files);
        assert!(s.contains("stdout:     /home/bob/logs/%x-%j-%N.out (expanded when it starts, appended to)\n"), "{s}");
        assert!(s.contains("stderr:     /tmp/%u.err (expanded when it starts, appended to)\n"), "{s}");
        let s = render(&d);
        assert!(!s.contains("output:"), "{s}");
        assert!(s.contains("time limit: 1h"), "{s}");
        assert!(!s.contains("expected run time"), "no prediction, no line: {s}");
        let mut predicted = d.clone();
        predicted.job.expected_run_secs = Some(7_800);
        let s2 = render(&predicted);
        assert!(s2.contains("\nexpected run time: 2h10m (predicted from earlier runs)\n"), "{s2}");
        assert!(s.contains("0 main on n1: cpuset 0-1 (1 cpu)"), "{s}");
        assert!(s.contains("GPU-abc (0.5/1)"), "{s}");
        assert!(s.contains("numa prefer-local"), "{s}");
        assert!(s.contains("PENDING  submitted"), "{s}");
        assert!(s.contains("exit code 0; used cpu 2.5s"), "{s}");
    }

    #[test]
    fn a_script_job_shows_no_line_starting_with_a_colon() {
        let now = jiff::Timestamp::now();
        let spec = JobSpec::command(["/bin/sh", "-c", "#!/bin/sh\n#BERTH --cpus 1\necho hi\n"]);
        let d = JobDetail {
            job: JobView {
                id: 4,
                name: None,
                user: "bob".into(),
                state: JobState::Pending,
                queue: "default".into(),
                priority: 0,
                position: None,
                pending_reason: None,
                nodes: vec![],
                cpu_milli: 1000,
                mem_bytes: 1 << 30,
                gpu_milli: 0,
                submitted_at: now,
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
            },
            spec,
            kernels: vec![],
            transitions: vec![],
            submitter: None,
        };
        let s = render(&d);
        assert!(s.contains("<script, 3 lines>"), "{s}");
        assert!(s.contains("            (the script text is in `berth show -o json`)"), "{s}");
        assert!(s.lines().all(|l| !l.trim_start().starts_with(':')), "{s}");

        // Who stopped it and how it ended come from the typed fields, not the reason.
        let mut d = d;
        d.job.state = JobState::Cancelled;
        d.job.stop = Some(StopCause::Preempted { by_job: 9, action: berth_model::PreemptAction::Cancel });
        d.job.end_cause = Some(berth_model::EndCause::Preempted);
        let s = render(&d);
        assert!(s.contains("stop:       preempted by job 9, then cancel"), "{s}");
        assert!(s.contains("ended by:   preempted"), "{s}");
    }
}
