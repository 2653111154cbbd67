//! Trace parsing: the Philly job CSV and the Standard Workload Format (SWF). Pure: the caller
//! opens (and decompresses) the file and hands a reader in.

use std::io::BufRead;

use crate::Millis;

/// A trace format `berth sim` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TraceFormat {
    /// Microsoft Philly job CSV (`timestamp,duration,num_gpus,gpu_time,cluster`): GPU jobs.
    Philly,
    /// Standard Workload Format (Parallel Workloads Archive): CPU jobs.
    Swf,
}

impl TraceFormat {
    pub fn name(self) -> &'static str {
        match self {
            TraceFormat::Philly => "philly",
            TraceFormat::Swf => "swf",
        }
    }

    /// The format a file name implies: `.csv` → philly, `.swf` / `.swf.gz` → swf.
    pub fn from_path(path: &str) -> Option<TraceFormat> {
        let p = path.to_ascii_lowercase();
        let p = p.strip_suffix(".gz").unwrap_or(&p);
        if p.ends_with(".csv") {
            Some(TraceFormat::Philly)
        } else if p.ends_with(".swf") {
            Some(TraceFormat::Swf)
        } else {
            None
        }
    }
}

/// A `--format` that names no trace format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown trace format `{0}`: use philly or swf")]
pub struct UnknownFormat(pub String);

impl std::str::FromStr for TraceFormat {
    type Err = UnknownFormat;
    fn from_str(s: &str) -> Result<Self, UnknownFormat> {
        match s {
            "philly" => Ok(TraceFormat::Philly),
            "swf" => Ok(TraceFormat::Swf),
            other => Err(UnknownFormat(other.to_string())),
        }
    }
}

/// One job of a trace, as the simulator replays it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceJob {
    /// Submit time, milliseconds after the trace's first (kept) job.
    pub submit_ms: Millis,
    /// Service time (run time once started).
    pub duration_ms: Millis,
    /// GPUs (Philly) — whole devices; 0 for CPU jobs.
    pub gpus: u32,
    /// Processors (SWF); 0 for GPU jobs (which get CPUs per GPU from the cluster shape).
    pub cpus: u32,
    /// User (Philly: the virtual cluster, the trace has no user column).
    pub user: String,
    /// The job's own time limit (SWF requested time), if the trace has one.
    pub time_limit_ms: Option<Millis>,
    /// Priority band (SWF: from the queue; Philly: 0).
    pub priority: i32,
    /// 1-based line of the trace file it came from.
    pub line: usize,
}

/// A parsed and cleaned trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    pub format: TraceFormat,
    /// Jobs sorted by submit time (ties keep file order).
    pub jobs: Vec<TraceJob>,
    /// What cleaning did, one line each (`dropped 69 jobs submitted before 2017-09-24`).
    pub notes: Vec<String>,
    /// Whether any two jobs differ in priority (the `preempt` policy needs that).
    pub has_priorities: bool,
}

/// A malformed trace line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct TraceError {
    pub line: usize,
    pub message: String,
}

fn err(line: usize, message: impl Into<String>) -> TraceError {
    TraceError { line, message: message.into() }
}

/// Cleaning options for Philly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PhillyOptions {
    /// Keep the 69 jobs submitted before 2017-09-24 (long jobs already running when logging
    /// began; dropped by default, as the traces' README advises).
    pub keep_early: bool,
}

/// Seconds since the Unix epoch of 2017-09-24 00:00:00 (the trace's clock, zone unstated).
const PHILLY_CUTOFF: i64 = 1_506_211_200;

/// Days from 1970-01-01 to a civil date (proleptic Gregorian; Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Parses `YYYY-MM-DD HH:MM:SS` into seconds since the epoch (no zone).
pub fn parse_timestamp(s: &str) -> Option<i64> {
    let s = s.trim();
    let (date, time) = s.split_once(' ')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, mo, da) = (d.next()??, d.next()??, d.next()??);
    if d.next().is_some() {
        return None;
    }
    let mut t = time.split(':').map(|p| p.parse::<i64>().ok());
    let (h, mi, se) = (t.next()??, t.next()??, t.next()??);
    if t.next().is_some() || !(1..=12).contains(&mo) || !(1..=31).contains(&da) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    // Years beyond 9999 would overflow the day arithmetic; no trace has them.
    if h < 0 || mi < 0 || se < 0 || !(0..=9999).contains(&y) {
        return None;
    }
    Some(days_from_civil(y, mo, da) * 86_400 + h * 3600 + mi * 60 + se)
}

/// Parses a whole-second count written as an integer or an integer-valued float (`66.0`).
fn parse_secs(field: &str) -> Option<f64> {
    let v: f64 = field.trim().parse().ok()?;
    v.is_finite().then_some(v)
}

/// Parses a Philly job CSV. Rows are sorted by timestamp (the file is not); a header row
/// (`timestamp,...`) is skipped; blank lines are ignored.
pub fn parse_philly(reader: impl BufRead, opts: PhillyOptions) -> Result<Trace, TraceError> {
    let mut raw: Vec<(i64, TraceJob)> = Vec::new();
    let mut early = 0usize;
    for (i, line) in reader.lines().enumerate() {
        let n = i + 1;
        let line = line.map_err(|e| err(n, format!("cannot read: {e}")))?;
        let line = line.trim();
        if line.is_empty() || (n == 1 && line.starts_with("timestamp")) {
            continue;
        }
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != 5 {
            return Err(err(
                n,
                format!(
                    "expected 5 comma-separated fields (timestamp,duration,num_gpus,gpu_time,cluster), got {}",
                    f.len()
                ),
            ));
        }
        let ts = parse_timestamp(f[0])
            .ok_or_else(|| err(n, format!("bad timestamp `{}`: expected YYYY-MM-DD HH:MM:SS", f[0])))?;
        let dur =
            parse_secs(f[1]).filter(|d| *d >= 0.0 && *d <= berth_model::MAX_DURATION_SECS as f64).ok_or_else(|| {
                err(
                    n,
                    format!("bad duration `{}`: expected seconds from 0 to {}", f[1], berth_model::MAX_DURATION_SECS),
                )
            })?;
        let gpus: u32 = f[2]
            .trim()
            .parse()
            .ok()
            .filter(|g| *g > 0)
            .ok_or_else(|| err(n, format!("bad num_gpus `{}`: expected a whole number ≥ 1", f[2])))?;
        let user = f[4].trim();
        if user.is_empty() {
            return Err(err(n, "empty cluster (virtual cluster id)"));
        }
        if !opts.keep_early && ts < PHILLY_CUTOFF {
            early += 1;
            continue;
        }
        raw.push((
            ts,
            TraceJob {
                submit_ms: 0,
                duration_ms: (dur * 1000.0).round() as Millis,
                gpus,
                cpus: 0,
                user: user.to_string(),
                time_limit_ms: None,
                priority: 0,
                line: n,
            },
        ));
    }
    raw.sort_by_key(|(ts, _)| *ts);
    let t0 = raw.first().map(|(ts, _)| *ts).unwrap_or(0);
    let jobs = raw
        .into_iter()
        .map(|(ts, mut j)| {
            j.submit_ms = (ts - t0) * 1000;
            j
        })
        .collect();
    let mut notes = Vec::new();
    if early > 0 {
        notes.push(format!("dropped {early} jobs submitted before 2017-09-24 (use --keep-early to keep them)"));
    }
    Ok(Trace { format: TraceFormat::Philly, jobs, notes, has_priorities: false })
}

/// Cleaning options for SWF.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SwfOptions {
    /// Keep jobs that run longer than they requested as they are (the limit is raised to the
    /// run time) instead of clamping their run time to the limit (the default: they would
    /// have been killed at their walltime by a scheduler that enforces it).
    pub no_clamp: bool,
}

/// Priority band of an SWF queue number (SDSC Blue's names: 0 interactive, 1 express, 2 high,
/// 3 normal, 4 low, 5 standby; the rest are diagnostic queues).
pub fn swf_priority(queue: i64) -> i32 {
    match queue {
        0 | 1 => 2,
        2 => 1,
        4 | 5 => -1,
        _ => 0,
    }
}

/// Parses a Standard Workload Format log. `;` lines are comments; jobs with run time ≤ 0
/// (mostly cancelled) are dropped; size is allocated processors, or requested ones when
/// allocated is −1; the requested time is the job's time limit.
pub fn parse_swf(reader: impl BufRead, opts: SwfOptions) -> Result<Trace, TraceError> {
    let mut jobs: Vec<TraceJob> = Vec::new();
    let (mut no_run, mut no_size, mut clamped, mut raised) = (0usize, 0usize, 0usize, 0usize);
    let mut prios = std::collections::BTreeSet::new();
    for (i, line) in reader.lines().enumerate() {
        let n = i + 1;
        let line = line.map_err(|e| err(n, format!("cannot read: {e}")))?;
        let line = line.trim();
        if line.is_empty() || line.starts_with(';') {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 18 {
            return Err(err(n, format!("expected 18 whitespace-separated SWF fields, got {}", f.len())));
        }
        let num = |k: usize, what: &str| -> Result<i64, TraceError> {
            let s = f[k - 1];
            s.parse::<i64>()
                .or_else(|_| s.parse::<f64>().map(|v| v.round() as i64))
                .map_err(|_| err(n, format!("field {k} ({what}) `{s}` is not a number")))
        };
        // Times are seconds, turned into milliseconds below: past the maximum they would wrap.
        let secs = |k: usize, what: &str| -> Result<i64, TraceError> {
            let v = num(k, what)?;
            if v > berth_model::MAX_DURATION_SECS as i64 {
                return Err(err(
                    n,
                    format!("field {k} ({what}) `{v}` is too large: at most {}", berth_model::MAX_DURATION_SECS),
                ));
            }
            Ok(v)
        };
        let submit = secs(2, "submit time")?;
        let run = secs(4, "run time")?;
        let alloc = num(5, "allocated processors")?;
        let req_procs = num(8, "requested processors")?;
        let req_time = secs(9, "requested time")?;
        let user = num(12, "user id")?;
        let queue = num(15, "queue")?;
        if submit < 0 {
            return Err(err(n, format!("field 2 (submit time) `{submit}` is negative")));
        }
        if run <= 0 {
            no_run += 1;
            continue;
        }
        let procs = if alloc > 0 { alloc } else { req_procs };
        if procs <= 0 {
            no_size += 1;
            continue;
        }
        let mut run_ms = run * 1000;
        let mut limit = (req_time > 0).then_some(req_time * 1000);
        if let Some(l) = limit
            && run_ms > l
        {
            if opts.no_clamp {
                limit = Some(run_ms);
                raised += 1;
            } else {
                run_ms = l;
                clamped += 1;
            }
        }
        let priority = swf_priority(queue);
        prios.insert(priority);
        jobs.push(TraceJob {
            submit_ms: submit * 1000,
            duration_ms: run_ms,
            gpus: 0,
            cpus: u32::try_from(procs).map_err(|_| err(n, format!("processor count {procs} is too large")))?,
            user: format!("u{user}"),
            time_limit_ms: limit,
            priority,
            line: n,
        });
    }
    jobs.sort_by_key(|j| j.submit_ms);
    if let Some(t0) = jobs.first().map(|j| j.submit_ms) {
        for j in &mut jobs {
            j.submit_ms -= t0;
        }
    }
    let mut notes = Vec::new();
    if no_run > 0 {
        notes.push(format!("dropped {no_run} jobs with run time ≤ 0 (cancelled before running)"));
    }
    if no_size > 0 {
        notes.push(format!("dropped {no_size} jobs with no processor count"));
    }
    if clamped > 0 {
        notes.push(format!("clamped the run time of {clamped} jobs to their requested time (--no-clamp keeps it)"));
    }
    if raised > 0 {
        notes.push(format!("raised the time limit of {raised} jobs to their run time"));
    }
    Ok(Trace { format: TraceFormat::Swf, jobs, notes, has_priorities: prios.len() > 1 })
}

/// Parses a trace in the given format with default cleaning.
pub fn parse(format: TraceFormat, reader: impl BufRead) -> Result<Trace, TraceError> {
    match format {
        TraceFormat::Philly => parse_philly(reader, PhillyOptions::default()),
        TraceFormat::Swf => parse_swf(reader, SwfOptions::default()),
    }
}

/// Selection applied after parsing: a window of submit times and the first N jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Window {
    /// Keep jobs submitted at or after this offset from the trace's start.
    pub start_ms: Option<Millis>,
    /// Keep jobs submitted before this offset.
    pub end_ms: Option<Millis>,
    /// Then keep only the first N jobs.
    pub limit: Option<usize>,
}

impl Trace {
    /// Applies a window (and a job limit); submit times are re-based on the first kept job.
    pub fn select(&mut self, w: Window) {
        let before = self.jobs.len();
        self.jobs.retain(|j| w.start_ms.is_none_or(|s| j.submit_ms >= s) && w.end_ms.is_none_or(|e| j.submit_ms < e));
        if let Some(n) = w.limit {
            self.jobs.truncate(n);
        }
        if let Some(t0) = self.jobs.first().map(|j| j.submit_ms) {
            for j in &mut self.jobs {
                j.submit_ms -= t0;
            }
        }
        if self.jobs.len() < before {
            self.notes.push(format!("kept {} of {} jobs (window/limit)", self.jobs.len(), before));
        }
    }

    /// Multiplies submit offsets by `scale` (0.5: arrivals twice as dense, about twice the load).
    pub fn scale_arrivals(&mut self, scale: f64) {
        for j in &mut self.jobs {
            j.submit_ms = (j.submit_ms as f64 * scale).round() as Millis;
        }
    }
}
