//! `berth sim`: replays a job trace in virtual time through the scheduler core, once per
//! policy, and prints JCT, queueing delay, utilisation and fairness (`berth_sched::sim`).
//! Runs offline: no manager needed.

use std::io::{BufRead, BufReader, IsTerminal};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use berth_model::{parse_duration, parse_mem};
use berth_sched::sim::{
    self, Cluster, Metrics, PhillyOptions, Policy, Setup, SimError, SimOptions, SwfOptions, Trace, TraceFormat, Window,
};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::UsageError;
use crate::output::{self, OutputArgs};

#[derive(Debug, Args)]
pub struct SimArgs {
    /// Trace file: Philly job CSV (`.csv`) or Standard Workload Format (`.swf`, `.swf.gz`)
    #[arg(long, value_name = "FILE")]
    pub trace: PathBuf,

    /// Trace format (default: from the file name)
    #[arg(long = "format", value_name = "FORMAT", value_parser = ["philly", "swf"])]
    pub trace_format: Option<String>,

    /// Nodes of the simulated cluster
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub nodes: u32,

    /// GPUs per node (needed for GPU traces such as Philly)
    #[arg(long, value_name = "G", default_value_t = 0)]
    pub gpus_per_node: u32,

    /// CPUs per node (GPU jobs get CPUs/G CPUs per GPU)
    #[arg(long, value_name = "C", value_parser = clap::value_parser!(u32).range(1..))]
    pub cpus_per_node: u32,

    /// Memory per node (jobs get a share proportional to their GPUs or CPUs)
    #[arg(long, value_name = "SIZE", default_value = "512GiB")]
    pub mem_per_node: String,

    /// Policies to compare, comma-separated, or `all`: fifo, lifo, skip, backfill, drf,
    /// fair-share, spread, preempt, qssf, las
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "fifo,backfill")]
    pub policy: Vec<String>,

    /// Replay the queues of a manager's config file instead of --policy: each `[[queue]]`
    /// (ordering, head_of_line, reservations, reserve_after, scoring, preemption, …) on the
    /// whole cluster, one row per queue, with `[fair_share]`'s half-life and project weights
    /// (a trace job's project is its user); a file without queues replays the default queue
    #[arg(long, value_name = "FILE", conflicts_with = "policy")]
    pub config: Option<PathBuf>,

    /// Multiply submit times by X (0.5 = arrivals twice as dense: about twice the load)
    #[arg(long, value_name = "X")]
    pub time_scale: Option<f64>,

    /// Replay only the first N jobs (after cleaning and the window)
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,

    /// Keep jobs submitted at least this long after the trace's start (`30d`, `12h`)
    #[arg(long, value_name = "DURATION")]
    pub start: Option<String>,

    /// Keep jobs submitted less than this long after the trace's start
    #[arg(long, value_name = "DURATION")]
    pub end: Option<String>,

    /// Time limit assumed by backfill for jobs without one (all Philly jobs); jobs are never
    /// killed at it
    #[arg(long, value_name = "DURATION", default_value = "1h")]
    pub default_time_limit: String,

    /// Oracle: every job's time limit is its true duration (perfect runtime estimates)
    #[arg(long)]
    pub time_limit_from_duration: bool,

    /// Half-life of the decayed usage behind fair-share
    #[arg(long, value_name = "DURATION", default_value = "7d")]
    pub half_life: String,

    /// Preempted jobs resume where they stopped instead of starting over
    #[arg(long, conflicts_with = "checkpoint_interval")]
    pub checkpoint: bool,

    /// Preempted jobs resume from their last checkpoint, taken every DURATION of run time
    /// (the work since is lost); without it (or --checkpoint) they start over
    #[arg(long, value_name = "DURATION")]
    pub checkpoint_interval: Option<String>,

    /// A running job that has run less than this is never a victim (preempt, las) [default: the
    /// checkpoint interval when given, so a victim always resumes from a checkpoint of its
    /// run; else 10m]
    #[arg(long, value_name = "DURATION")]
    pub preempt_min_runtime: Option<String>,

    /// Plan with the time limits only, without run times predicted from history
    #[arg(long)]
    pub no_predict: bool,

    /// Backfill reservations per pass: the first N blocked jobs each hold nodes
    #[arg(long, value_name = "N", default_value_t = berth_sched::sim::DEFAULT_RESERVATIONS,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub reservations: u32,

    /// Wait bound: a job pending this long goes first and gets a firm reservation (`off`: none)
    #[arg(long, value_name = "DURATION", default_value = berth_sched::sim::DEFAULT_RESERVE_AFTER)]
    pub reserve_after: String,

    /// Philly: keep the jobs submitted before 2017-09-24 (dropped by default)
    #[arg(long)]
    pub keep_early: bool,

    /// SWF: keep the run time of jobs that ran past their requested time (the limit is raised)
    /// instead of clamping it to the limit
    #[arg(long)]
    pub no_clamp: bool,

    /// Also draw queue length, allocation and waiting over time for each policy into an SVG file
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// One policy's result as `-o json` prints it.
#[derive(Debug, Serialize)]
struct PolicyResult {
    #[serde(flatten)]
    metrics: Metrics,
    /// The simulator's own wall time for this policy, in seconds.
    wall_s: f64,
}

#[derive(Debug, Serialize)]
struct Skipped {
    policy: String,
    why: String,
}

#[derive(Debug, Serialize)]
struct Report {
    trace: String,
    format: TraceFormat,
    jobs: usize,
    nodes: u32,
    gpus_per_node: u32,
    cpus_per_node: u32,
    mem_per_node: u64,
    notes: Vec<String>,
    results: Vec<PolicyResult>,
    skipped: Vec<Skipped>,
}

fn usage(flag: &str, e: impl std::fmt::Display) -> anyhow::Error {
    UsageError::error(format!("{flag}: {e}"))
}

fn millis(flag: &str, s: &str) -> anyhow::Result<i64> {
    Ok(parse_duration(s).map_err(|e| usage(flag, e))? as i64 * 1000)
}

/// Opens a trace file, decompressing `.gz`.
fn open(path: &Path) -> anyhow::Result<Box<dyn BufRead>> {
    let file = std::fs::File::open(path).with_context(|| format!("cannot open trace {}", path.display()))?;
    if path.extension().is_some_and(|e| e == "gz") {
        Ok(Box::new(BufReader::with_capacity(1 << 20, flate2::read::MultiGzDecoder::new(file))))
    } else {
        Ok(Box::new(BufReader::with_capacity(1 << 20, file)))
    }
}

pub fn run(args: SimArgs) -> anyhow::Result<ExitCode> {
    let path_text = args.trace.display().to_string();
    let format = match &args.trace_format {
        Some(f) => f.parse::<TraceFormat>().map_err(|e| usage("--format", e))?,
        None => TraceFormat::from_path(&path_text).ok_or_else(|| {
            UsageError::error(format!(
                "cannot tell the format of {path_text} from its name (.csv, .swf, .swf.gz): give --format philly|swf"
            ))
        })?,
    };
    let mut policies: Vec<Policy> = Vec::new();
    for name in args.policy.iter().filter(|_| args.config.is_none()) {
        let name = name.trim();
        if name == "all" {
            policies.extend(Policy::ALL);
        } else if !name.is_empty() {
            policies.push(name.parse().map_err(|e| usage("--policy", e))?);
        }
    }
    if policies.is_empty() && args.config.is_none() {
        return Err(UsageError::error("--policy: give at least one policy"));
    }
    if let Some(p) = &args.plot {
        if p.extension().is_none_or(|e| !e.eq_ignore_ascii_case("svg")) {
            return Err(usage("--plot", format!("`{}`: only SVG is drawn: name a file ending in .svg", p.display())));
        }
        // Before minutes of replay: a plot that cannot be written fails now.
        std::fs::write(p, "").with_context(|| format!("--plot: cannot write {}", p.display()))?;
    }
    if format == TraceFormat::Philly && args.gpus_per_node == 0 {
        return Err(UsageError::error("philly is a GPU trace: give --gpus-per-node"));
    }
    if let Some(x) = args.time_scale
        && !(x.is_finite() && x > 0.0)
    {
        return Err(usage("--time-scale", format!("`{x}` must be a number above 0")));
    }
    let cluster = Cluster {
        nodes: args.nodes,
        gpus_per_node: args.gpus_per_node,
        cpus_per_node: args.cpus_per_node,
        mem_per_node: parse_mem(&args.mem_per_node).map_err(|e| usage("--mem-per-node", e))?,
    };
    let checkpoint_interval_ms =
        args.checkpoint_interval.as_deref().map(|s| millis("--checkpoint-interval", s)).transpose()?;
    let min_runtime_ms = match args.preempt_min_runtime.as_deref() {
        Some(s) => millis("--preempt-min-runtime", s)?,
        None => checkpoint_interval_ms.unwrap_or(SimOptions::default().min_runtime_ms),
    };
    let mut opts = SimOptions {
        default_time_limit_ms: millis("--default-time-limit", &args.default_time_limit)?,
        time_limit_from_duration: args.time_limit_from_duration,
        half_life_ms: millis("--half-life", &args.half_life)?,
        checkpoint: args.checkpoint,
        checkpoint_interval_ms,
        min_runtime_ms,
        predict: !args.no_predict,
        reservations: args.reservations,
        reserve_after_ms: match args.reserve_after.as_str() {
            "off" | "none" => None,
            s => Some(millis("--reserve-after", s)?),
        },
        ..SimOptions::default()
    };
    // Only a minimum the user gave can be shorter than the interval (the default is it).
    let preempting = policies.iter().any(|p| matches!(p, Policy::Preempt | Policy::Las));
    if let (Some(min), Some(interval)) = (&args.preempt_min_runtime, &args.checkpoint_interval)
        && preempting
        && checkpoint_interval_ms.is_some_and(|i| min_runtime_ms < i)
    {
        eprintln!(
            "note: --preempt-min-runtime {min} is shorter than --checkpoint-interval {interval}: a job stopped before \
             its first checkpoint loses its whole run, and on a busy queue the same jobs may be stopped again and again"
        );
    }
    let mut runs: Vec<Run> = policies.into_iter().map(Run::Policy).collect();
    if let Some(path) = &args.config {
        let config = berth_manager::config::load(Some(path.as_path())).map_err(|e| usage("--config", e))?;
        opts.half_life_ms = config.fair_share.half_life_ms;
        let queues =
            if config.queues.is_empty() { berth_manager::config::default_queues() } else { config.queues.clone() };
        runs.extend(
            queues
                .into_iter()
                .map(|q| Run::Queue(Box::new(Setup::of_queue(q, config.fair_share.weights.clone(), &opts)))),
        );
    }
    let window = Window {
        start_ms: args.start.as_deref().map(|s| millis("--start", s)).transpose()?,
        end_ms: args.end.as_deref().map(|s| millis("--end", s)).transpose()?,
        limit: args.limit,
    };

    let reader = open(&args.trace)?;
    let parsed = match format {
        TraceFormat::Philly => sim::parse_philly(reader, PhillyOptions { keep_early: args.keep_early }),
        TraceFormat::Swf => sim::parse_swf(reader, SwfOptions { no_clamp: args.no_clamp }),
    };
    let mut trace: Trace = parsed.with_context(|| format!("{path_text}: not a valid {} trace", format.name()))?;
    trace.select(window);
    if let Some(x) = args.time_scale {
        trace.scale_arrivals(x);
    }
    let mut notes = trace.notes.clone();
    let too_big = sim::too_big(&trace, &cluster);
    if let Some((line, why)) = too_big.first() {
        notes.push(format!(
            "{} jobs are larger than the cluster and are skipped (first: line {line}, {why})",
            too_big.len()
        ));
    }
    let json = args.output.json();
    if !json {
        for n in &notes {
            eprintln!("note: {n}");
        }
    }

    let mut results = Vec::new();
    let mut skipped = Vec::new();
    let mut plotted: Vec<(String, Vec<sim::JobOutcome>)> = Vec::new();
    // The table streams: its header now, each policy's row as soon as that policy is done
    // (a full trace takes seconds to minutes per policy).
    let rows = RowPrinter::new(trace.jobs.len());
    if !json {
        rows.print(&header(&trace));
    }
    for r in &runs {
        let t0 = Instant::now();
        let bar = progress_bar(r.name(), trace.jobs.len(), json);
        let mut progress = |progress: sim::SimProgress| bar.set_position(progress.settled as u64);
        let outcome = match r {
            Run::Policy(p) => sim::simulate_observed(&trace, &cluster, *p, &opts, &mut progress),
            Run::Queue(setup) => sim::simulate_setup(&trace, &cluster, setup, &opts, &mut progress),
        };
        bar.finish_and_clear();
        match outcome {
            Ok((metrics, outcomes)) => {
                if args.plot.is_some() {
                    plotted.push((r.name().to_string(), outcomes));
                }
                let result = PolicyResult { metrics, wall_s: t0.elapsed().as_secs_f64() };
                if !json {
                    rows.print(&row(&result));
                }
                results.push(result);
            }
            Err(SimError::NotApplicable { policy, why }) => {
                if !json {
                    eprintln!("note: skipped policy {policy}: {why}");
                }
                skipped.push(Skipped { policy: policy.to_string(), why });
            }
            Err(e) => return Err(UsageError::error(e.to_string())),
        }
    }
    if let Some(path) = &args.plot {
        let all: Vec<Vec<sim::JobOutcome>> = plotted.iter().map(|(_, o)| o.clone()).collect();
        let end = super::sim_plot::end_ms(&all);
        let series: Vec<_> =
            plotted.iter().map(|(name, o)| super::sim_plot::series(name, &trace, &cluster, o, end)).collect();
        let title = format!(
            "{} on {} nodes x {} GPUs x {} CPUs, {} jobs",
            args.trace.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_else(|| path_text.clone()),
            cluster.nodes,
            cluster.gpus_per_node,
            cluster.cpus_per_node,
            trace.jobs.len()
        );
        super::sim_plot::draw(path, &title, &series)?;
        if !json {
            eprintln!("plot: {}", path.display());
        }
    }
    if json {
        output::print_json(&Report {
            trace: path_text,
            format: trace.format,
            jobs: trace.jobs.len(),
            nodes: cluster.nodes,
            gpus_per_node: cluster.gpus_per_node,
            cpus_per_node: cluster.cpus_per_node,
            mem_per_node: cluster.mem_per_node,
            notes,
            results,
            skipped,
        })?;
    }
    Ok(ExitCode::SUCCESS)
}

/// One replay: a named policy (`--policy`) or a queue of a config file (`--config`).
enum Run {
    Policy(Policy),
    Queue(Box<Setup>),
}

impl Run {
    fn name(&self) -> &str {
        match self {
            Run::Policy(p) => p.name(),
            Run::Queue(s) => &s.name,
        }
    }
}

/// A bar on stderr for one policy's replay, drawn only on a terminal (and never with `-o json`,
/// whose reader wants a clean stream).
fn progress_bar(policy: &str, jobs: usize, json: bool) -> ProgressBar {
    if json || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(jobs as u64);
    if let Ok(style) = ProgressStyle::with_template("{prefix:>10} [{elapsed_precise}] {wide_bar} {pos}/{len} jobs") {
        bar.set_style(style);
    }
    bar.set_prefix(policy.to_string());
    bar
}

/// A span of seconds in a unit that keeps 2–3 significant digits: `45s`, `12.5m`, `3.21h`, `4.2d`.
fn span(secs: f64) -> String {
    if secs < 120.0 {
        format!("{secs:.0}s")
    } else if secs < 7200.0 {
        format!("{:.1}m", secs / 60.0)
    } else if secs < 172_800.0 {
        format!("{:.2}h", secs / 3600.0)
    } else {
        format!("{:.1}d", secs / 86_400.0)
    }
}

fn header(trace: &Trace) -> Vec<String> {
    let alloc =
        if trace.format == TraceFormat::Philly || trace.jobs.iter().any(|j| j.gpus > 0) { "GPU" } else { "CPU" };
    [
        "POLICY",
        "JOBS",
        "JCT-MEAN",
        "JCT-MED",
        "JCT-P99",
        "WAIT-MEAN",
        "WAIT-P99",
        "MAKESPAN",
        &format!("{alloc}-ALLOC"),
        "JAIN",
        "BIG-WAIT-MAX",
        "PREEMPT",
        "PRED-2X",
        "WALL",
    ]
    .map(String::from)
    .to_vec()
}

fn row(r: &PolicyResult) -> Vec<String> {
    let m = &r.metrics;
    vec![
        m.policy.clone(),
        if m.unfinished > 0 { format!("{}/{}", m.finished, m.jobs) } else { m.finished.to_string() },
        span(m.jct_mean_s),
        span(m.jct_median_s),
        span(m.jct_p99_s),
        span(m.wait_mean_s),
        span(m.wait_p99_s),
        span(m.makespan_s),
        format!("{:.3}", m.allocation),
        format!("{:.3}", m.jain_slowdown),
        if m.big_jobs > 0 { span(m.big_wait_max_s) } else { "-".into() },
        m.preemptions.to_string(),
        if m.prediction.predicted > 0 { format!("{:.0}%", m.prediction.within_2x * 100.0) } else { "-".into() },
        format!("{:.1}s", r.wall_s),
    ]
}

/// Prints table lines one at a time with column widths fixed up front (a table printed at the
/// end could size them from its rows; a streamed one cannot), two spaces apart like
/// [`output::print_table`].
struct RowPrinter {
    widths: [usize; 14],
}

impl RowPrinter {
    /// Widths that fit every header and every value the metrics can print for `jobs` jobs: spans
    /// are at most 7 characters (`1234.5d`), ratios 5, the JOBS column `finished/jobs`.
    fn new(jobs: usize) -> Self {
        let count = jobs.to_string().len();
        Self { widths: [10, (2 * count + 1).max(4), 8, 7, 7, 9, 8, 8, 9, 5, 12, 7, 7, 0] }
    }

    fn line(&self, cells: &[String]) -> String {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            let width = self.widths.get(i).copied().unwrap_or(0);
            if i + 1 < cells.len() {
                out.push_str(&format!("{cell:<width$}  "));
            } else {
                out.push_str(cell);
            }
        }
        out.trim_end().to_string()
    }

    fn print(&self, cells: &[String]) {
        println!("{}", self.line(cells));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streamed_rows_line_up_under_the_header() {
        let rows = RowPrinter::new(82_178);
        let head = rows.line(&["POLICY", "JOBS", "JCT-MEAN"].map(String::from));
        let line = rows.line(&["fair-share", "82178", "1234.5d"].map(String::from));
        assert_eq!(head.find("JOBS"), line.find("82178"));
        assert_eq!(head.find("JCT-MEAN"), line.find("1234.5d"));
    }

    #[test]
    fn spans() {
        assert_eq!(span(45.0), "45s");
        assert_eq!(span(750.0), "12.5m");
        assert_eq!(span(3.0 * 3600.0), "3.00h");
        assert_eq!(span(3.0 * 86_400.0), "3.0d");
    }
}
