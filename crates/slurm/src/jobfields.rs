//! The columns a job list can be printed with, by name: one catalogue and one extraction for
//! `berth history -o id,name,...` and `sacct -o JobID,JobName,...`, so that a field means the
//! same in both. Each command brings its [`Style`] (how times, durations, states and exit
//! codes read: berth's `2h3m` and `SUCCEEDED`, Slurm's `02:03:00` and `COMPLETED`).

use berth_model::api::JobView;
use jiff::Timestamp;

/// A column of a job list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Id,
    IdRaw,
    Name,
    User,
    Project,
    Queue,
    State,
    Exit,
    Submitted,
    Started,
    Ended,
    Elapsed,
    ElapsedSecs,
    Nodes,
    NodeCount,
    Cpus,
    Mem,
    Gpus,
    Tres,
    TimeLimit,
    TimeLimitMinutes,
    Reason,
    Priority,
    /// The exit code as the job's steps together left it (berth: the job's own).
    DerivedExit,
    /// Peak memory, as the job's nodes measured it.
    MaxRss,
    /// CPU time used, as measured.
    TotalCpu,
    /// CPU time allocated: elapsed time × CPUs held (Slurm's CPUTime).
    CpuTime,
    /// Slurm's `--comment`, which berth does not keep: empty.
    Comment,
    WorkDir,
}

/// A field's names: berth's (`history -o`) and Slurm's (`sacct -o`, any case), with sacct's
/// default width (negative: left-justified, as sacct's own table says it).
#[derive(Debug)]
pub struct FieldInfo {
    pub field: Field,
    pub berth: &'static str,
    pub slurm: &'static [&'static str],
    pub width: i16,
}

const fn f(field: Field, berth: &'static str, slurm: &'static [&'static str], width: i16) -> FieldInfo {
    FieldInfo { field, berth, slurm, width }
}

/// Every field, in the order `--help` lists them.
pub const FIELDS: &[FieldInfo] = &[
    f(Field::Id, "id", &["JobID"], -12),
    f(Field::IdRaw, "id-raw", &["JobIDRaw"], -12),
    f(Field::Name, "name", &["JobName"], 10),
    f(Field::User, "user", &["User"], -9),
    f(Field::Project, "project", &["Account"], 10),
    f(Field::Queue, "queue", &["Partition"], 10),
    f(Field::State, "state", &["State"], 10),
    f(Field::Exit, "exit", &["ExitCode"], 8),
    f(Field::Submitted, "submitted", &["Submit"], 19),
    f(Field::Started, "started", &["Start"], 19),
    f(Field::Ended, "ended", &["End"], 19),
    f(Field::Elapsed, "elapsed", &["Elapsed"], 10),
    f(Field::ElapsedSecs, "elapsed-secs", &["ElapsedRaw"], 10),
    f(Field::Nodes, "nodes", &["NodeList"], -15),
    f(Field::NodeCount, "node-count", &["NNodes", "AllocNodes", "ReqNodes"], 8),
    f(Field::Cpus, "cpus", &["AllocCPUS", "ReqCPUS", "NCPUS"], 10),
    f(Field::Mem, "mem", &["ReqMem"], 10),
    f(Field::Gpus, "gpus", &["AllocGRES", "ReqGRES"], 12),
    f(Field::Tres, "tres", &["AllocTRES", "ReqTRES"], -10),
    f(Field::TimeLimit, "time-limit", &["Timelimit"], 10),
    f(Field::TimeLimitMinutes, "time-limit-minutes", &["TimelimitRaw"], 10),
    f(Field::Reason, "reason", &["Reason"], -20),
    f(Field::Priority, "priority", &["Priority"], 10),
    f(Field::DerivedExit, "derived-exit", &["DerivedExitCode"], 15),
    f(Field::MaxRss, "max-rss", &["MaxRSS"], 10),
    f(Field::TotalCpu, "total-cpu", &["TotalCPU"], 10),
    f(Field::CpuTime, "cpu-time", &["CPUTime"], 10),
    f(Field::Comment, "comment", &["Comment"], 15),
    f(Field::WorkDir, "workdir", &["WorkDir"], -15),
];

/// The field named `name` in berth's names.
pub fn by_berth_name(name: &str) -> Option<&'static FieldInfo> {
    FIELDS.iter().find(|i| i.berth.eq_ignore_ascii_case(name))
}

/// The field named `name` in Slurm's names (any case, as sacct takes them), and the name
/// as Slurm spells it (its header).
pub fn by_slurm_name(name: &str) -> Option<(&'static FieldInfo, &'static str)> {
    FIELDS.iter().find_map(|i| i.slurm.iter().find(|s| s.eq_ignore_ascii_case(name)).map(|s| (i, *s)))
}

/// The `JobView` fields (the API's names) that field `f` reads, in either style: a listing
/// printing a few columns asks the manager for these alone (`GET /v1/jobs?fields=`).
pub fn reads(f: Field) -> &'static [&'static str] {
    const NODES: &[&str] = &["nodes", "nodes_requested"];
    match f {
        Field::Id => &["id", "array_task", "array"],
        Field::IdRaw => &["id"],
        Field::Name => &["name"],
        Field::User => &["user"],
        // No project: the user's own (`Style::project`).
        Field::Project => &["project", "user"],
        Field::Queue => &["queue"],
        Field::State => &["state", "end_cause", "stop"],
        Field::Exit => &["state", "exit_code", "end_signal"],
        Field::Submitted => &["submitted_at"],
        Field::Started => &["started_at"],
        Field::Ended => &["ended_at"],
        Field::Elapsed | Field::ElapsedSecs => &["started_at", "ended_at"],
        Field::Nodes | Field::NodeCount => NODES,
        Field::Cpus => &["cpu_milli", "nodes", "nodes_requested"],
        Field::Mem => &["mem_bytes"],
        Field::Gpus => &["gpu_milli"],
        Field::Tres => &["cpu_milli", "mem_bytes", "gpu_milli", "nodes", "nodes_requested"],
        Field::TimeLimit | Field::TimeLimitMinutes => &["time_limit_secs"],
        Field::Reason => &["pending_reason", "reason"],
        Field::Priority => &["priority"],
        Field::DerivedExit => &["state", "exit_code", "end_signal"],
        Field::MaxRss | Field::TotalCpu => &["usage"],
        Field::CpuTime => &["started_at", "ended_at", "cpu_milli", "nodes", "nodes_requested"],
        Field::Comment => &[],
        Field::WorkDir => &["workdir"],
    }
}

/// The API fields that printing `fields` reads, as `fields=` takes them.
pub fn api_fields<'a>(fields: impl IntoIterator<Item = &'a Field>) -> Vec<&'static str> {
    let mut all: Vec<&'static str> = Vec::new();
    for f in fields {
        for r in reads(*f) {
            if !all.contains(r) {
                all.push(r);
            }
        }
    }
    all
}

/// How a command prints the values that berth and Slurm write differently.
pub trait Style {
    fn time(&self, t: Option<Timestamp>) -> String;
    fn duration(&self, secs: Option<u64>) -> String;
    fn state(&self, j: &JobView) -> String;
    fn exit(&self, j: &JobView) -> String;
    /// The nodes of a job (which may have none yet).
    fn nodes(&self, j: &JobView) -> String;
    /// Why it waits, or why it ended.
    fn reason(&self, j: &JobView) -> String;
    fn empty(&self) -> String;
    /// The project column: berth's project, if any.
    fn project(&self, j: &JobView) -> Option<String> {
        j.project.clone()
    }
    /// Memory asked for.
    fn mem(&self, bytes: u64) -> String {
        berth_model::format_bytes(bytes)
    }
    /// Peak memory used.
    fn rss(&self, bytes: u64) -> String {
        berth_model::format_bytes(bytes)
    }
    /// CPU time used, in seconds.
    fn cpu_used(&self, secs: f64) -> String {
        self.duration(Some(secs.round() as u64))
    }
}

/// How long the job has run: until it ended, or until `now`; `None` if it never started.
pub fn elapsed_secs(j: &JobView, now: Timestamp) -> Option<u64> {
    let start = j.started_at?;
    let end = j.ended_at.unwrap_or(now);
    Some((end.as_second() - start.as_second()).max(0) as u64)
}

/// A job's id as Slurm shows it: `12_7` for task 7 of array 12, `12_[8-100%10]` for the
/// tasks array 12 has still to make, the plain id otherwise.
pub fn display_id(j: &JobView) -> String {
    match (&j.array_task, &j.array) {
        (Some(t), _) => format!("{}_{}", t.array_id, t.index),
        (None, Some(rest)) if rest.starts_with('[') => format!("{}_[{}]", j.id, pending_tasks(rest)),
        _ => j.id.to_string(),
    }
}

/// The indices of an array's part still to be made (`[3,4,7%2]`, as the manager lists them) as
/// Slurm writes them: runs as ranges, each index once, the throttle after (`3-4,7%2`).
pub fn pending_tasks(rest: &str) -> String {
    let inner = rest.trim_start_matches('[').trim_end_matches(']');
    let (list, throttle) = match inner.split_once('%') {
        Some((l, t)) => (l, format!("%{t}")),
        None => (inner, String::new()),
    };
    let Ok(spec) = list.parse::<berth_model::ArraySpec>() else { return inner.to_string() };
    let mut indices: Vec<u32> = spec.indices().collect();
    indices.sort_unstable();
    indices.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < indices.len() {
        let mut j = i;
        while j + 1 < indices.len() && indices[j + 1] == indices[j] + 1 {
            j += 1;
        }
        parts.push(if j > i { format!("{}-{}", indices[i], indices[j]) } else { indices[i].to_string() });
        i = j + 1;
    }
    format!("{}{throttle}", parts.join(","))
}

/// The CPUs the job holds (or asks for): per kernel times its nodes, whole CPUs.
pub fn cpus(j: &JobView) -> u64 {
    j.cpu_milli.div_ceil(1000) * u64::from(node_count(j))
}

/// The nodes it runs on once placed, those it asks for before.
pub fn node_count(j: &JobView) -> u32 {
    if j.nodes.is_empty() { j.nodes_requested.max(1) } else { j.nodes.len() as u32 }
}

/// The value of field `f` for job `j`.
pub fn value(f: Field, j: &JobView, now: Timestamp, style: &dyn Style) -> String {
    let or_empty = |s: Option<String>| s.filter(|s| !s.is_empty()).unwrap_or_else(|| style.empty());
    match f {
        Field::Id => display_id(j),
        Field::IdRaw => j.id.to_string(),
        Field::Name => or_empty(j.name.clone()),
        Field::User => j.user.clone(),
        Field::Project => or_empty(style.project(j)),
        Field::Queue => j.queue.clone(),
        Field::State => style.state(j),
        Field::Exit => style.exit(j),
        Field::Submitted => style.time(Some(j.submitted_at)),
        Field::Started => style.time(j.started_at),
        Field::Ended => style.time(j.ended_at),
        Field::Elapsed => style.duration(Some(elapsed_secs(j, now).unwrap_or(0))),
        Field::ElapsedSecs => elapsed_secs(j, now).unwrap_or(0).to_string(),
        Field::Nodes => style.nodes(j),
        Field::NodeCount => node_count(j).to_string(),
        Field::Cpus => cpus(j).to_string(),
        Field::Mem => style.mem(j.mem_bytes),
        Field::Gpus if j.gpu_milli == 0 => style.empty(),
        Field::Gpus => format!("gpu:{}", berth_model::format_gpu_milli(j.gpu_milli)),
        Field::Tres => tres(j),
        Field::TimeLimit => style.duration(j.time_limit_secs),
        Field::TimeLimitMinutes => j.time_limit_secs.map(|s| (s / 60).to_string()).unwrap_or_else(|| style.empty()),
        Field::Reason => style.reason(j),
        Field::Priority => j.priority.to_string(),
        Field::DerivedExit => style.exit(j),
        Field::MaxRss => {
            j.usage.and_then(|u| u.total.memory_peak_bytes).map_or_else(|| style.empty(), |b| style.rss(b))
        }
        Field::TotalCpu => {
            j.usage.and_then(|u| u.total.cpu_seconds).map_or_else(|| style.empty(), |s| style.cpu_used(s))
        }
        Field::CpuTime => style.duration(Some(elapsed_secs(j, now).unwrap_or(0) * cpus(j))),
        Field::Comment => style.empty(),
        Field::WorkDir => or_empty(j.workdir.clone()),
    }
}

/// Slurm's TRES list: `cpu=4,mem=16G,node=1,gres/gpu=1`.
fn tres(j: &JobView) -> String {
    let nodes = u64::from(node_count(j));
    let mut s = format!("cpu={},mem={},node={nodes}", cpus(j), slurm_mem(j.mem_bytes * nodes));
    if j.gpu_milli > 0 {
        s.push_str(&format!(",gres/gpu={}", berth_model::format_gpu_milli(j.gpu_milli * nodes)));
    }
    s
}

/// Memory as Slurm prints it: the largest unit that divides it (`16G`, `512M`), else bytes
/// in KiB rounded up.
pub fn slurm_mem(bytes: u64) -> String {
    for (shift, unit) in [(40, "T"), (30, "G"), (20, "M")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    format!("{}K", bytes.div_ceil(1024))
}

/// Checks that every field prints the same in `style` from a lean listing (only what
/// [`reads`] names) as from the whole job: a field reading something it does not declare
/// would print a default.
#[cfg(any(test, feature = "test-support"))]
pub fn assert_fields_declare_what_they_read(style: &dyn Style) {
    let jobs = crate::fixtures::varied();
    let now = jobs[0].submitted_at + jiff::SignedDuration::from_secs(600);
    for info in FIELDS {
        let asked = api_fields([&info.field]).join(",");
        for j in &jobs {
            let lean = crate::fixtures::lean(j, &asked);
            assert_eq!(
                value(info.field, &lean, now, style),
                value(info.field, j, now, style),
                "{} of a {} job, from `fields={asked}`",
                info.berth,
                j.state
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_either_way() {
        assert_eq!(by_berth_name("ELAPSED").unwrap().field, Field::Elapsed);
        let (i, spelled) = by_slurm_name("jobidraw").unwrap();
        assert_eq!((i.field, spelled), (Field::IdRaw, "JobIDRaw"));
        assert!(by_slurm_name("bogus").is_none());
        for i in FIELDS {
            assert_eq!(by_berth_name(i.berth).unwrap().field, i.field, "{}", i.berth);
            for s in i.slurm {
                assert_eq!(by_slurm_name(s).unwrap().0.field, i.field, "{s}");
            }
        }
    }

    #[test]
    fn pending_array_parts_as_ranges() {
        assert_eq!(pending_tasks("[3,4%2]"), "3-4%2");
        assert_eq!(pending_tasks("[1-9:2,10]"), "1,3,5,7,9-10");
        assert_eq!(pending_tasks("[5-100]"), "5-100");
        let mut j = crate::fixtures::job(berth_model::JobState::Pending);
        (j.id, j.array) = (23, Some("[3,4%2]".into()));
        assert_eq!(display_id(&j), "23_[3-4%2]");
    }

    #[test]
    fn memory_like_slurm() {
        assert_eq!(slurm_mem(16 << 30), "16G");
        assert_eq!(slurm_mem(512 << 20), "512M");
        assert_eq!(slurm_mem(1536 << 20), "1536M");
        assert_eq!(slurm_mem(1000), "1K");
    }
}
