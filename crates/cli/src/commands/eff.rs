//! `berth eff ID`: how well a job used what it was given, the way Slurm's `seff` tells it:
//! CPU time over CPUs × wall time, peak memory over memory given, GPU busy time over GPUs ×
//! wall time. While the job runs, the figures so far; `used_text` is the one-line summary
//! `berth show` prints too.

use std::fmt::Write as _;
use std::process::ExitCode;

use berth_model::api::JobDetail;
use berth_model::{Efficiency, JobId, JobState, JobUsage, format_bytes};
use clap::Args;
use serde::Serialize;

use crate::output::{self, OutputArgs};

#[derive(Debug, Args)]
pub struct EffArgs {
    /// The job's id
    #[arg(value_parser = clap::value_parser!(JobId).range(1..), add = crate::completion::job_ids_arg())]
    pub id: JobId,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// What `-o json` prints.
#[derive(Debug, Serialize)]
struct Report {
    id: JobId,
    state: JobState,
    /// What the job's kernels were given, all together (latest attempt).
    cpus: f64,
    memory_bytes: u64,
    gpus: f64,
    wall_secs: f64,
    usage: Option<JobUsage>,
    efficiency: Option<Efficiency>,
}

pub async fn run(args: EffArgs) -> anyhow::Result<ExitCode> {
    let d = crate::client::from_env()?.job(args.id).await?;
    let r = report(&d, jiff::Timestamp::now());
    if args.output.json() {
        output::print_json(&r)?;
    } else {
        print!("{}", render(&d, &r));
    }
    Ok(ExitCode::SUCCESS)
}

fn report(d: &JobDetail, now: jiff::Timestamp) -> Report {
    let j = &d.job;
    // The kernels are the latest attempt's (`berth show`'s), and so is the wall time: a
    // requeued job is judged on its last run.
    let cpus = d.kernels.iter().map(|k| k.binding.cpu_milli as f64 / 1000.0).sum();
    let memory_bytes = d.kernels.iter().map(|k| k.binding.mem_bytes).sum();
    let gpus = d.kernels.iter().flat_map(|k| &k.binding.gpus).map(|g| g.milli as f64 / 1000.0).sum();
    let ended: Vec<_> = d.kernels.iter().filter_map(|k| k.usage.as_ref()).collect();
    let usage = if !j.state.holds_resources() && !ended.is_empty() {
        Some(JobUsage { total: berth_model::KernelUsage::sum(ended), cpu_percent: None })
    } else {
        j.usage
    };
    let wall_secs = match j.started_at {
        Some(s) => j.ended_at.unwrap_or(now).duration_since(s).as_secs_f64().max(0.0),
        None => 0.0,
    };
    let efficiency = usage.map(|u| Efficiency::of(&u.total, cpus, memory_bytes, gpus, wall_secs));
    Report { id: j.id, state: j.state, cpus, memory_bytes, gpus, wall_secs, usage, efficiency }
}

fn render(d: &JobDetail, r: &Report) -> String {
    let j = &d.job;
    let mut o = String::new();
    let mut line = |k: &str, v: String| {
        let _ = writeln!(o, "{:<20}{v}", format!("{k}:"));
    };
    line("job", format!("{}{}", j.id, j.name.as_ref().map(|n| format!(" ({n})")).unwrap_or_default()));
    line("user", j.user.clone());
    let code = j.exit_code.map(|c| format!(" (exit code {c})")).unwrap_or_default();
    line("state", format!("{}{code}", j.state));
    line("wall time", output::duration(r.wall_secs.round() as u64));
    let Some(u) = r.usage.map(|u| u.total) else {
        let why = match j.state {
            JobState::Pending | JobState::Scheduled | JobState::Preparing => "it has not run yet",
            JobState::Running | JobState::Terminating => "no sample from its node yet: try again in a moment",
            _ => {
                "its node measured nothing: its agent runs kernels without cgroups (not as root, or no writable cgroup v2 hierarchy)"
            }
        };
        line("usage", format!("not known: {why}"));
        return o;
    };
    let e = r.efficiency.unwrap_or(Efficiency { cpu: None, memory: None, gpu: None });
    let pct = |f: Option<f64>| f.map_or("n/a".to_string(), |f| format!("{:.1}%", f * 100.0));
    line("cpus", trim(r.cpus));
    line("cpu used", u.cpu_seconds.map_or("not measured".into(), seconds));
    line("cpu efficiency", format!("{} of {} core-walltime", pct(e.cpu), seconds(r.cpus * r.wall_secs)));
    line("memory", format_bytes(r.memory_bytes));
    line("memory peak", u.memory_peak_bytes.map_or("not measured".into(), format_bytes));
    line("memory efficiency", format!("{} of {}", pct(e.memory), format_bytes(r.memory_bytes)));
    if r.gpus > 0.0 {
        line("gpus", trim(r.gpus));
        line("gpu busy", u.gpu_seconds.map_or("not measured (no NVML on its nodes)".into(), seconds));
        line("gpu efficiency", format!("{} of {} GPU-walltime", pct(e.gpu), seconds(r.gpus * r.wall_secs)));
    }
    if j.state.holds_resources() {
        line("note", "the job still runs: these are the figures so far".into());
    }
    o
}

/// What a job used, on one line: `cpu 5.9s (195% now), memory 212MiB now, peak memory 215MiB, gpu 3.2s busy (45% now)`.
pub fn used_text(u: &JobUsage) -> String {
    let t = &u.total;
    let mut parts = Vec::new();
    if let Some(c) = t.cpu_seconds {
        let now = u.cpu_percent.map(|p| format!(" ({p:.0}% now)")).unwrap_or_default();
        parts.push(format!("cpu {}{now}", seconds(c)));
    }
    if let Some(m) = t.memory_bytes {
        parts.push(format!("memory {} now", format_bytes(m)));
    }
    if let Some(p) = t.memory_peak_bytes {
        parts.push(format!("peak memory {}", format_bytes(p)));
    }
    if let Some(g) = t.gpu_seconds {
        let now = t.gpu_utilization.map(|f| format!(" ({:.0}% now)", f * 100.0)).unwrap_or_default();
        parts.push(format!("gpu {} busy{now}", seconds(g)));
    }
    parts.join(", ")
}

/// Seconds with a tenth below a minute (`5.9s`), else as a duration (`1h2m`).
fn seconds(s: f64) -> String {
    if s < 60.0 { format!("{s:.1}s") } else { output::duration(s.round() as u64) }
}

/// A count of CPUs or GPUs without a needless `.0` (`2`, `0.5`).
fn trim(n: f64) -> String {
    let s = format!("{n:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::api::{JobView, KernelView};
    use berth_model::{Binding, JobSpec, KernelUsage};

    fn detail(state: JobState, usage: Option<JobUsage>) -> JobDetail {
        let at = jiff::Timestamp::from_second(1_700_000_000).unwrap();
        let view = JobView {
            id: 5,
            name: Some("burn".into()),
            user: "alice".into(),
            state,
            queue: "default".into(),
            priority: 0,
            position: None,
            pending_reason: None,
            nodes: vec!["n1".into()],
            cpu_milli: 2000,
            mem_bytes: 512 << 20,
            gpu_milli: 0,
            submitted_at: at,
            started_at: Some(at),
            ended_at: Some(at + jiff::SignedDuration::from_secs(3)),
            exit_code: Some(0),
            end_signal: None,
            reason: None,
            expected_start: None,
            stop: None,
            end_cause: None,
            usage,
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
        let binding = Binding { node: "n1".into(), cpu_milli: 2000, mem_bytes: 512 << 20, ..Default::default() };
        JobDetail {
            job: view,
            spec: JobSpec::command(["x"]),
            kernels: vec![KernelView { index: 0, role: "main".into(), binding, exit_code: Some(0), usage: None }],
            transitions: vec![],
            submitter: None,
        }
    }

    /// 5.7 CPU-seconds over 2 CPUs × 3 s is 95 %; a 200 MiB peak of 512 MiB is 39 %.
    #[test]
    fn efficiency_is_used_over_given_like_seff() {
        let total = KernelUsage { cpu_seconds: Some(5.7), memory_peak_bytes: Some(200 << 20), ..Default::default() };
        let d = detail(JobState::Succeeded, Some(JobUsage { total, cpu_percent: None }));
        let r = report(&d, jiff::Timestamp::now());
        assert_eq!((r.cpus, r.wall_secs), (2.0, 3.0));
        let text = render(&d, &r);
        assert!(text.contains("95.0% of 6.0s core-walltime"), "{text}");
        assert!(text.contains("39.1% of 512MiB"), "{text}");
        assert!(!text.contains("gpu"), "no GPU lines for a job without GPUs: {text}");
        let unknown = detail(JobState::Succeeded, None);
        let text = render(&unknown, &report(&unknown, jiff::Timestamp::now()));
        assert!(text.contains("usage:") && text.contains("measured nothing"), "{text}");
    }

    #[test]
    fn the_summary_line_names_what_is_known() {
        let total = KernelUsage { cpu_seconds: Some(90.0), memory_bytes: Some(1 << 20), ..Default::default() };
        assert_eq!(used_text(&JobUsage { total, cpu_percent: Some(150.0) }), "cpu 1m30s (150% now), memory 1MiB now");
    }
}
