//! The optional TOML config file: queues with their policies, and fair-share settings.
//!
//! ```toml
//! [[queue]]
//! name = "gpu"
//! ordering = "qssf"            # fifo | lifo | drf | fair-share | las | qssf
//! head_of_line = "backfill"    # strict | skip-after-N | backfill
//! backfill_window = 500        # jobs tried past the first that cannot start (Slurm bf_max_job_test)
//! reservations = 4             # blocked jobs holding a backfill reservation per pass (≥ 1)
//! reserve_after = "12h"        # wait bound: first in line with a firm reservation ("off": none)
//! las_thresholds = ["1h", "10h"]  # las: device-hours of service at which a job moves down a level
//! scoring = "binpack"          # binpack | spread
//! default_time_limit = "1h"    # assumed for jobs without --time-limit (backfill)
//! preemption = "off"           # off | requeue | cancel
//! preempt_min_runtime = "10m"  # a job that ran less is never preempted (≥ jobs' checkpoint interval)
//!
//! [fair_share]
//! half_life = "7d"             # past usage counts half after this long
//!
//! [fair_share.weights]         # per project (missing: 1.0)
//! projecta = 2.0
//!
//! store = "postgres://berth@db.example/berth"  # default: SQLite in the data dir
//! # store_file = "/etc/berth/store-url"      # or the URL in a 0600 file (a URL with a password)
//! retain = "180d"              # archive finished jobs older than this (default: keep all)
//! kill_invalid_depend = true   # cancel a job whose dependency can never be met (false: keep it pending)
//!
//! [qos.high]                   # Slurm's --qos: the priority of its jobs (qos.rs)
//! priority = 100
//! max_time_limit = "1d"        # optional
//! ```
//!
//! (`store`, `store_file`, `retain` and `kill_invalid_depend` are top-level keys: in a real file they come before the
//! first table.) `berth manager --store`/`--store-file`/`--retain` win over them.
//!
//! Keys a `[[queue]]` leaves out take the values of [`base_queue`] (berth's recommended policy,
//! `QueueConfig::recommended`), as does a queue created through the API and the `default`
//! queue made when nothing defines one.
//!
//! Queues are stored; the file seeds them. A queue whose file entry is unchanged since the
//! last start keeps what an admin set through the API (`berth admin queue set`); a queue whose
//! entry changed (or is new) takes the file's values, like `slurm.conf` over `scontrol update`.

use std::collections::BTreeMap;
use std::path::Path;

use berth_model::api::{QueuePolicy, QueueUpdate};
use berth_sched::{HeadOfLine, Ordering, PreemptAction, Preemption, QueueConfig, Scoring};
use serde::Deserialize;

mod error;
pub use error::SettingError;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {err}")]
    Read { path: String, err: std::io::Error },
    #[error("invalid config file {path}: {error}")]
    Invalid { path: String, error: SettingError },
}

/// What the config file says.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The queues the file defines (empty: the file defines none).
    pub queues: Vec<QueueConfig>,
    pub fair_share: FairShareConfig,
    /// The store the file names (`store` or `store_file`); `None`: the default.
    pub store: Option<berth_store::StoreUrl>,
    /// `retain`: archive finished jobs that ended longer ago (`retention.rs`); `None`: keep all.
    pub retain: Option<std::time::Duration>,
    /// `kill_invalid_depend` (Slurm's name): a job whose dependency can never be met is
    /// cancelled (the default), or kept pending with that reason (`false`).
    pub kill_invalid_depend: bool,
    /// `[qos.NAME]`: the qualities of service jobs may ask for (`--qos`).
    pub qos: crate::qos::QosTable,
}

/// Fair-share settings.
#[derive(Debug, Clone, PartialEq)]
pub struct FairShareConfig {
    pub half_life_ms: i64,
    /// Weight per project (missing: 1.0).
    pub weights: BTreeMap<String, f64>,
}

impl Default for FairShareConfig {
    fn default() -> Self {
        Self { half_life_ms: 7 * 86_400_000, weights: BTreeMap::new() }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    store: Option<String>,
    #[serde(default)]
    store_file: Option<std::path::PathBuf>,
    #[serde(default)]
    retain: Option<Duration>,
    #[serde(default)]
    kill_invalid_depend: Option<bool>,
    #[serde(default)]
    queue: Vec<QueueEntry>,
    #[serde(default)]
    fair_share: Option<FairShareEntry>,
    #[serde(default)]
    qos: BTreeMap<String, QosEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct QosEntry {
    priority: i32,
    #[serde(default)]
    max_time_limit: Option<Duration>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FairShareEntry {
    #[serde(default)]
    half_life: Option<Duration>,
    #[serde(default)]
    weights: BTreeMap<String, f64>,
}

/// A duration as text (`"1h"`) or seconds (`3600`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Duration {
    Secs(u64),
    Text(String),
}

impl Duration {
    fn text(&self) -> String {
        match self {
            Duration::Secs(s) => s.to_string(),
            Duration::Text(t) => t.clone(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct QueueEntry {
    name: String,
    #[serde(default)]
    ordering: Option<String>,
    #[serde(default)]
    head_of_line: Option<String>,
    #[serde(default)]
    backfill_window: Option<u32>,
    #[serde(default)]
    scoring: Option<String>,
    #[serde(default)]
    default_time_limit: Option<Duration>,
    #[serde(default)]
    preemption: Option<String>,
    #[serde(default)]
    preempt_min_runtime: Option<Duration>,
    #[serde(default)]
    projects: Option<Vec<String>>,
    #[serde(default)]
    max_time_limit: Option<Duration>,
    #[serde(default)]
    nodes: Option<Vec<String>>,
    #[serde(default)]
    node_labels: Option<std::collections::BTreeMap<String, String>>,
    #[serde(default)]
    idle_timeout: Option<Duration>,
    #[serde(default)]
    max_session: Option<Duration>,
    /// Signed, so that a negative number is refused with this key's own message.
    #[serde(default)]
    reservations: Option<i64>,
    #[serde(default)]
    reserve_after: Option<Duration>,
    #[serde(default)]
    las_thresholds: Option<Vec<Duration>>,
}

/// Minimum runtime before a job may be preempted when the config names none.
pub const DEFAULT_PREEMPT_MIN_RUNTIME_MS: i64 = 600_000;

/// What a queue is before its keys are applied (a `[[queue]]` entry, a queue created through
/// the API, the `default` queue): the policy berth recommends (`QueueConfig::recommended`).
pub fn base_queue(name: &str) -> QueueConfig {
    QueueConfig::recommended(name)
}

/// The queues when there is no config file: one `default` queue, with the recommended policy.
pub fn default_queues() -> Vec<QueueConfig> {
    vec![base_queue(berth_model::DEFAULT_QUEUE)]
}

/// Reads the config from `path`; without a file, no queues (the caller seeds `default`).
pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
    let Some(path) = path else {
        return Ok(Config {
            queues: vec![],
            fair_share: FairShareConfig::default(),
            store: None,
            retain: None,
            kill_invalid_depend: true,
            qos: Default::default(),
        });
    };
    let p = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|err| ConfigError::Read { path: p.clone(), err })?;
    parse(&text).map_err(|error| ConfigError::Invalid { path: p, error })
}

/// Parses the config text (errors name the key and say what to fix).
pub fn parse(text: &str) -> Result<Config, SettingError> {
    let file: File = toml::from_str(text).map_err(|e| SettingError::Toml(Box::new(e)))?;
    let store = store_of(file.store.as_deref(), file.store_file.as_deref())?;
    let mut out: Vec<QueueConfig> = Vec::new();
    for q in file.queue {
        check_queue_name(&q.name)?;
        if out.iter().any(|o| o.name == q.name) {
            return Err(SettingError::QueueTwice(q.name));
        }
        let update = QueueUpdate {
            ordering: q.ordering,
            head_of_line: q.head_of_line,
            backfill_window: q.backfill_window,
            scoring: q.scoring,
            default_time_limit: q.default_time_limit.as_ref().map(Duration::text),
            preemption: q.preemption,
            preempt_min_runtime: q.preempt_min_runtime.as_ref().map(Duration::text),
            projects: q.projects,
            max_time_limit: q.max_time_limit.as_ref().map(Duration::text),
            nodes: q.nodes,
            node_labels: q.node_labels,
            idle_timeout: q.idle_timeout.as_ref().map(Duration::text),
            max_session: q.max_session.as_ref().map(Duration::text),
            reservations: q.reservations.map(reservations_key).transpose().map_err(SettingError::in_queue(&q.name))?,
            reserve_after: q.reserve_after.as_ref().map(Duration::text),
            las_thresholds: q.las_thresholds.as_ref().map(|v| v.iter().map(Duration::text).collect()),
        };
        let policy =
            apply_update(&to_policy(&base_queue(&q.name)), &update).map_err(SettingError::in_queue(&q.name))?;
        out.push(from_policy(&q.name, &policy).map_err(SettingError::in_queue(&q.name))?);
    }
    let mut fair_share = FairShareConfig::default();
    if let Some(fs) = file.fair_share {
        if let Some(h) = fs.half_life {
            let secs = berth_model::parse_duration(&h.text())
                .map_err(SettingError::HalfLife)
                .and_then(|s| if s == 0 { Err(SettingError::HalfLifeZero) } else { Ok(s) })?;
            fair_share.half_life_ms = secs as i64 * 1000;
        }
        for (project, w) in fs.weights {
            if !(w.is_finite() && w > 0.0) {
                return Err(SettingError::Weight { project, weight: w });
            }
            fair_share.weights.insert(project, w);
        }
    }
    let retain =
        file.retain.map(|r| retain_period(&r.text())).transpose().map_err(|e| SettingError::Retain(Box::new(e)))?;
    let kill_invalid_depend = file.kill_invalid_depend.unwrap_or(true);
    let qos = file.qos.into_iter().map(|(name, q)| (name, q.priority, q.max_time_limit.as_ref().map(Duration::text)));
    let qos = crate::qos::QosTable::parse(qos)?;
    Ok(Config { queues: out, fair_share, store, retain, kill_invalid_depend, qos })
}

/// The `store` or `store_file` key: a URL here must hold no password (config files are often
/// readable by all); one with a password goes in a 0600 store file, or the password in
/// `~/.pgpass`.
fn store_of(url: Option<&str>, file: Option<&Path>) -> Result<Option<berth_store::StoreUrl>, SettingError> {
    match (url, file) {
        (Some(_), Some(_)) => Err(SettingError::StoreTwice),
        (Some(u), None) => {
            let url = berth_store::StoreUrl::parse(u).map_err(SettingError::Store)?;
            if url.has_password() {
                return Err(SettingError::StorePassword(url.to_string()));
            }
            Ok(Some(url))
        }
        (None, Some(f)) => berth_store::StoreUrl::from_file(f).map(Some).map_err(SettingError::StoreFile),
        (None, None) => Ok(None),
    }
}

/// Queue names: letters, digits, `-` and `_`.
pub fn check_queue_name(name: &str) -> Result<(), SettingError> {
    if name.is_empty() || name.len() > 64 || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        return Err(SettingError::QueueName(name.to_string()));
    }
    Ok(())
}

/// `strict`, `skip-after-N` or `backfill`.
pub fn parse_head_of_line(s: &str) -> Result<HeadOfLine, SettingError> {
    match s {
        "strict" => return Ok(HeadOfLine::Strict),
        "backfill" => return Ok(HeadOfLine::Backfill),
        _ => {}
    }
    if let Some(n) = s.strip_prefix("skip-after-").and_then(|n| n.parse::<u32>().ok())
        && n > 0
    {
        return Ok(HeadOfLine::SkipAfter(n));
    }
    Err(SettingError::HeadOfLine(s.to_string()))
}

/// An ordering's name (`berth_sched::Ordering`'s table: the same names as the API and `berth sim`).
pub fn parse_ordering(s: &str) -> Result<Ordering, SettingError> {
    s.parse().map_err(|_| SettingError::Ordering(s.to_string()))
}

/// The file's `reservations` number: a whole number of at least 1.
fn reservations_key(n: i64) -> Result<u32, SettingError> {
    u32::try_from(n).map_err(|_| SettingError::Reservations(n)).and_then(check_reservations)
}

/// Backfill reservations per pass: at least 1.
fn check_reservations(n: u32) -> Result<u32, SettingError> {
    if n == 0 { Err(SettingError::Reservations(n.into())) } else { Ok(n) }
}

/// `las_thresholds`: device-seconds, ascending and not empty.
fn check_las_thresholds(t: &[u64]) -> Result<(), SettingError> {
    if t.is_empty() {
        return Err(SettingError::LasEmpty);
    }
    if t.contains(&0) {
        return Err(SettingError::LasZero);
    }
    if t.windows(2).any(|w| w[0] >= w[1]) {
        return Err(SettingError::LasOrder(t.to_vec()));
    }
    Ok(())
}

pub fn parse_scoring(s: &str) -> Result<Scoring, SettingError> {
    match s {
        "binpack" => Ok(Scoring::Binpack),
        "spread" => Ok(Scoring::Spread),
        _ => Err(SettingError::Scoring(s.to_string())),
    }
}

/// `off` (None), `requeue` or `cancel`.
pub fn parse_preemption(s: &str) -> Result<Option<PreemptAction>, SettingError> {
    match s {
        "off" => Ok(None),
        "requeue" => Ok(Some(PreemptAction::Requeue)),
        "cancel" => Ok(Some(PreemptAction::Cancel)),
        _ => Err(SettingError::Preemption(s.to_string())),
    }
}

fn head_of_line_name(h: HeadOfLine) -> String {
    match h {
        HeadOfLine::Strict => "strict".into(),
        HeadOfLine::SkipAfter(n) => format!("skip-after-{n}"),
        HeadOfLine::Backfill => "backfill".into(),
    }
}

fn kebab<T: serde::Serialize>(v: T) -> String {
    serde_json::to_value(v).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}

/// The policy of a queue as the API shows it.
pub fn to_policy(q: &QueueConfig) -> QueuePolicy {
    QueuePolicy {
        ordering: q.ordering.to_string(),
        head_of_line: head_of_line_name(q.head_of_line),
        backfill_window: q.backfill_window,
        scoring: kebab(q.scoring),
        default_time_limit_secs: (q.default_time_limit_ms / 1000).max(0) as u64,
        preemption: q.preemption.map(|p| kebab(p.action)).unwrap_or_else(|| "off".into()),
        preempt_min_runtime_secs: (q.preemption.map(|p| p.min_runtime_ms).unwrap_or(DEFAULT_PREEMPT_MIN_RUNTIME_MS)
            / 1000)
            .max(0) as u64,
        projects: q.projects.clone(),
        max_time_limit_secs: q.max_time_limit_ms.map(|m| (m / 1000).max(0) as u64),
        nodes: q.node_names.clone(),
        node_labels: q.node_labels.clone(),
        idle_timeout_secs: q.idle_timeout_ms.map(|m| (m / 1000).max(0) as u64),
        max_session_secs: q.max_session_ms.map(|m| (m / 1000).max(0) as u64),
        reservations: q.reservations,
        reserve_after_secs: q.reserve_after_ms.map(|m| (m / 1000).max(0) as u64),
        las_thresholds_secs: q.las_thresholds.clone(),
    }
}

/// The scheduler's queue config from a stored or requested policy.
pub fn from_policy(name: &str, p: &QueuePolicy) -> Result<QueueConfig, SettingError> {
    if p.default_time_limit_secs == 0 {
        return Err(SettingError::DefaultTimeLimitZero);
    }
    Ok(QueueConfig {
        name: name.to_string(),
        ordering: parse_ordering(&p.ordering)?,
        head_of_line: parse_head_of_line(&p.head_of_line)?,
        scoring: parse_scoring(&p.scoring)?,
        default_time_limit_ms: p.default_time_limit_secs as i64 * 1000,
        preemption: parse_preemption(&p.preemption)?
            .map(|action| Preemption { action, min_runtime_ms: p.preempt_min_runtime_secs as i64 * 1000 }),
        projects: p.projects.clone(),
        max_time_limit_ms: p.max_time_limit_secs.map(|s| s as i64 * 1000),
        node_names: p.nodes.clone(),
        node_labels: p.node_labels.clone(),
        backfill_window: check_backfill_window(p.backfill_window)?,
        idle_timeout_ms: p.idle_timeout_secs.map(|s| s as i64 * 1000),
        max_session_ms: p.max_session_secs.map(|s| s as i64 * 1000),
        reservations: check_reservations(p.reservations)?,
        reserve_after_ms: p.reserve_after_secs.map(|s| s as i64 * 1000),
        las_thresholds: if p.las_thresholds_secs.is_empty() {
            berth_sched::DEFAULT_LAS_THRESHOLDS.to_vec()
        } else {
            check_las_thresholds(&p.las_thresholds_secs)?;
            p.las_thresholds_secs.clone()
        },
    })
}

/// The window must let at least one job past a blocked one be tried.
fn check_backfill_window(n: u32) -> Result<u32, SettingError> {
    if n == 0 {
        return Err(SettingError::BackfillWindowZero);
    }
    Ok(n)
}

/// `base` with the keys of `u` applied and checked; errors name the key.
pub fn apply_update(base: &QueuePolicy, u: &QueueUpdate) -> Result<QueuePolicy, SettingError> {
    let mut p = base.clone();
    if let Some(v) = &u.ordering {
        parse_ordering(v)?;
        p.ordering = v.clone();
    }
    if let Some(v) = &u.head_of_line {
        parse_head_of_line(v)?;
        p.head_of_line = v.clone();
    }
    if let Some(n) = u.backfill_window {
        p.backfill_window = check_backfill_window(n)?;
    }
    if let Some(v) = &u.scoring {
        parse_scoring(v)?;
        p.scoring = v.clone();
    }
    if let Some(v) = &u.preemption {
        parse_preemption(v)?;
        p.preemption = v.clone();
    }
    if let Some(v) = &u.default_time_limit {
        let s = berth_model::parse_duration(v)
            .map_err(|error| SettingError::Duration { key: "default_time_limit", error })?;
        if s == 0 {
            return Err(SettingError::DefaultTimeLimitZero);
        }
        p.default_time_limit_secs = s;
    }
    if let Some(v) = &u.preempt_min_runtime {
        p.preempt_min_runtime_secs =
            parse_duration_or_zero(v).map_err(|error| SettingError::Duration { key: "preempt_min_runtime", error })?;
    }
    if let Some(list) = &u.projects {
        let list: Vec<String> = list.iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
        if let Some(bad) = list.iter().find(|s| !berth_model::valid_name(s)) {
            return Err(SettingError::Project(bad.clone()));
        }
        p.projects = list;
    }
    if let Some(v) = &u.max_time_limit {
        p.max_time_limit_secs = duration_or_none("max_time_limit", v)?;
    }
    if let Some(v) = &u.idle_timeout {
        p.idle_timeout_secs = duration_or_none("idle_timeout", v)?;
    }
    if let Some(v) = &u.max_session {
        p.max_session_secs = duration_or_none("max_session", v)?;
    }
    if let Some(n) = u.reservations {
        p.reservations = check_reservations(n)?;
    }
    if let Some(v) = &u.reserve_after {
        p.reserve_after_secs = match v.trim() {
            "off" | "none" => None,
            t => match berth_model::parse_duration(t).map_err(SettingError::ReserveAfter)? {
                0 => return Err(SettingError::ReserveAfterZero),
                s => Some(s),
            },
        };
    }
    if let Some(list) = &u.las_thresholds {
        let secs = list
            .iter()
            .map(|t| {
                berth_model::parse_duration(t.trim())
                    .map_err(|error| SettingError::LasThreshold { text: t.clone(), error })
            })
            .collect::<Result<Vec<u64>, SettingError>>()?;
        check_las_thresholds(&secs)?;
        p.las_thresholds_secs = secs;
    }
    if let Some(list) = &u.nodes {
        let list: Vec<String> = list.iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
        if let Some(bad) = list.iter().find(|s| !crate::node_name::valid_node_name(s)) {
            return Err(SettingError::Node(bad.clone()));
        }
        p.nodes = list;
    }
    if let Some(labels) = &u.node_labels {
        if let Some((k, v)) = labels.iter().find(|(k, v)| !valid_label(k) || !valid_label(v)) {
            return Err(SettingError::Label { key: k.clone(), value: v.clone() });
        }
        p.node_labels = labels.clone();
    }
    if let Some(max) = p.max_time_limit_secs
        && p.default_time_limit_secs > max
    {
        return Err(SettingError::DefaultAboveMax { default: p.default_time_limit_secs, max });
    }
    Ok(p)
}

/// A duration above 0, or `none` (no limit); errors name `key`.
fn duration_or_none(key: &'static str, v: &str) -> Result<Option<u64>, SettingError> {
    match v.trim() {
        "none" | "" => Ok(None),
        v => match berth_model::parse_duration(v).map_err(|error| SettingError::Duration { key, error })? {
            0 => Err(SettingError::ZeroNotNone(key)),
            s => Ok(Some(s)),
        },
    }
}

/// A label key or value (also what a node feature is made of: `--constraint`).
pub use berth_model::constraint::valid_label;

/// A retention period (`retain`, `berth manager --retain`): a duration of at least an hour,
/// so that a bare number (seconds: `--retain 180`) cannot archive every job minutes after it
/// ends.
pub fn retain_period(s: &str) -> Result<std::time::Duration, SettingError> {
    let secs = berth_model::parse_duration(s).map_err(SettingError::RetainDuration)?;
    if secs < 3600 {
        return Err(SettingError::RetainTooShort(s.to_string()));
    }
    Ok(std::time::Duration::from_secs(secs))
}

/// A duration that may be zero (`0`, `0s`, `0m`, ...).
fn parse_duration_or_zero(s: &str) -> Result<u64, berth_model::QuantityError> {
    let t = s.trim();
    let digits = t.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    if !digits.is_empty() && digits.chars().all(|c| c == '0') && t.len() - digits.len() <= 1 {
        return Ok(0);
    }
    berth_model::parse_duration(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qos_tables_set_priorities() {
        let c = parse("[qos.high]\npriority = 100\nmax_time_limit = \"1d\"\n\n[qos.low]\npriority = -5\n").unwrap();
        let high = c.qos.get("high").unwrap();
        assert_eq!((high.priority, high.max_time_limit_secs), (100, Some(86_400)));
        assert_eq!(c.qos.get("low").unwrap().max_time_limit_secs, None);
        assert!(parse("").unwrap().qos.get("high").is_none());
        assert!(
            parse("[qos.high]\nmax_time_limit = \"1h\"\n").unwrap_err().to_string().contains("priority"),
            "priority is required"
        );
        assert!(parse("[qos.high]\npriority = 1\nprio = 2\n").unwrap_err().to_string().contains("prio"));
        assert!(
            parse("[qos.high]\npriority = 1\nmax_time_limit = \"x\"\n").unwrap_err().to_string().contains("qos.high")
        );
    }

    #[test]
    fn kill_invalid_depend_is_on_unless_the_file_turns_it_off() {
        assert!(parse("").unwrap().kill_invalid_depend);
        assert!(!parse("kill_invalid_depend = false\n").unwrap().kill_invalid_depend);
        assert!(parse("kill_invalid_depend = \"no\"\n").is_err());
    }

    #[test]
    fn the_retain_key_takes_a_duration_above_zero() {
        let c = parse("retain = \"180d\"\n").unwrap();
        assert_eq!(c.retain, Some(std::time::Duration::from_secs(180 * 86_400)));
        assert_eq!(parse("").unwrap().retain, None);
        let e = parse("retain = \"0s\"\n").unwrap_err().to_string();
        assert!(e.starts_with("retain: "), "{e}");
        assert!(parse("retain = \"soon\"\n").unwrap_err().to_string().starts_with("retain: "));
        assert_eq!(parse("retain = 3600\n").unwrap().retain, Some(std::time::Duration::from_secs(3600)));
        let e = parse("retain = 180\n").unwrap_err().to_string();
        assert!(e.contains("too short") && e.contains("180d"), "{e}");
    }

    #[test]
    fn the_store_key_takes_a_url_without_a_password_or_a_private_file() {
        let c = parse("store = \"postgres://berth@db/berth\"\n").unwrap();
        assert_eq!(c.store, Some(berth_store::StoreUrl::Postgres("postgres://berth@db/berth".into())));
        assert_eq!(parse("").unwrap().store, None);
        let e = parse("store = \"postgres://berth:pw@db/berth\"\n").unwrap_err().to_string();
        assert!(e.contains("holds a password") && e.contains("store_file") && !e.contains("pw@"), "{e}");
        let e = parse("store = \"mysql://db\"\n").unwrap_err().to_string();
        assert!(e.starts_with("store: unknown store URL"), "{e}");
        let e = parse("store = \"sqlite:a.db\"\nstore_file = \"/x\"\n").unwrap_err().to_string();
        assert!(e.contains("give one of them"), "{e}");
        let e = parse("store_file = \"/nonexistent/store-url\"\n").unwrap_err().to_string();
        assert!(e.starts_with("store_file: store file /nonexistent/store-url"), "{e}");
    }

    #[test]
    fn parses_queues() {
        let c = parse("[[queue]]\nname = \"default\"\n\n[[queue]]\nname = \"gpu\"\nhead_of_line = \"skip-after-3\"\n")
            .unwrap();
        let q = c.queues;
        assert_eq!(q.len(), 2);
        // Keys left out take the recommended policy, like the default queue.
        assert_eq!(q[0], QueueConfig::recommended("default"));
        assert_eq!(q[1].head_of_line, HeadOfLine::SkipAfter(3));
        assert_eq!(q[1].reservations, berth_sched::RECOMMENDED_RESERVATIONS);
        assert!(parse("").unwrap().queues.is_empty());
        assert_eq!(QueueConfig::recommended("default"), default_queues()[0]);
    }

    #[test]
    fn parses_the_reservation_and_las_keys() {
        let c = parse(
            "[[queue]]\nname = \"a\"\nordering = \"las\"\nreservations = 2\nreserve_after = \"6h\"\n\
             las_thresholds = [\"30m\", \"5h\", 72000]\n\n[[queue]]\nname = \"b\"\nordering = \"qssf\"\n\
             reserve_after = \"off\"\nhead_of_line = \"strict\"\n",
        )
        .unwrap();
        let (a, b) = (&c.queues[0], &c.queues[1]);
        assert_eq!((a.ordering, a.reservations, a.reserve_after_ms), (Ordering::Las, 2, Some(6 * 3_600_000)));
        assert_eq!(a.las_thresholds, vec![1800, 18_000, 72_000]);
        assert_eq!((b.ordering, b.head_of_line, b.reserve_after_ms), (Ordering::Qssf, HeadOfLine::Strict, None));
        assert_eq!(b.las_thresholds, berth_sched::DEFAULT_LAS_THRESHOLDS.to_vec());
        for q in [a, b] {
            assert_eq!(&from_policy(&q.name, &to_policy(q)).unwrap(), q, "round trip through the API's policy");
        }
        // A policy stored before these keys existed reads with EASY backfill's one reservation.
        let mut old = serde_json::to_value(to_policy(a)).unwrap();
        for k in ["reservations", "reserve_after_secs", "las_thresholds_secs"] {
            old.as_object_mut().unwrap().remove(k);
        }
        let old = from_policy("a", &serde_json::from_value(old).unwrap()).unwrap();
        assert_eq!((old.reservations, old.reserve_after_ms), (1, None));
        assert_eq!(old.las_thresholds, berth_sched::DEFAULT_LAS_THRESHOLDS.to_vec());
    }

    #[test]
    fn bad_reservation_and_las_keys_say_what_to_use() {
        let bad = |body: &str| parse(&format!("[[queue]]\nname = \"a\"\n{body}\n")).unwrap_err().to_string();
        for n in ["0", "-2"] {
            let e = bad(&format!("reservations = {n}"));
            assert!(e.starts_with(&format!("queue `a`: reservations = {n}")) && e.contains("at least 1"), "{e}");
        }
        let e = bad("ordering = \"sjf\"");
        assert!(e.contains("ordering `sjf`") && e.contains("\"las\" or \"qssf\""), "{e}");
        let e = bad("las_thresholds = [\"10h\", \"1h\"]");
        assert!(e.contains("las_thresholds [10h, 1h] are not ascending"), "{e}");
        assert!(bad("las_thresholds = [\"1h\", \"1h\"]").contains("not ascending"));
        assert!(bad("las_thresholds = []").contains("las_thresholds is empty"));
        assert!(bad("las_thresholds = [\"soon\"]").contains("las_thresholds: `soon`"));
        let e = bad("reserve_after = \"0s\"");
        assert!(e.starts_with("queue `a`: reserve_after") && e.contains("\"off\""), "{e}");
        assert!(bad("reserve_after = \"later\"").starts_with("queue `a`: reserve_after: "));
        let p = to_policy(&QueueConfig::new("a"));
        let e = apply_update(&p, &QueueUpdate { reservations: Some(0), ..Default::default() }).unwrap_err().to_string();
        assert!(e.starts_with("reservations = 0"), "{e}");
        let stored = QueuePolicy { reservations: 0, ..p };
        assert!(from_policy("a", &stored).unwrap_err().to_string().contains("reservations"));
    }

    #[test]
    fn parses_every_policy_key() {
        let c = parse(
            r#"
            [[queue]]
            name = "gpu"
            ordering = "fair-share"
            head_of_line = "backfill"
            scoring = "spread"
            default_time_limit = "2h"
            preemption = "requeue"
            preempt_min_runtime = 300

            [fair_share]
            half_life = "1d"
            [fair_share.weights]
            projecta = 2.0
            "#,
        )
        .unwrap();
        let q = &c.queues[0];
        assert_eq!(q.ordering, Ordering::FairShare);
        assert_eq!(q.head_of_line, HeadOfLine::Backfill);
        assert_eq!(q.scoring, Scoring::Spread);
        assert_eq!(q.default_time_limit_ms, 7_200_000);
        assert_eq!(q.preemption, Some(Preemption { action: PreemptAction::Requeue, min_runtime_ms: 300_000 }));
        assert_eq!(c.fair_share.half_life_ms, 86_400_000);
        assert_eq!(c.fair_share.weights["projecta"], 2.0);
        // round trip through the API's policy
        assert_eq!(&from_policy("gpu", &to_policy(q)).unwrap(), q);
    }

    #[test]
    fn queue_projects_and_maximum_from_the_file() {
        let c = parse("[[queue]]\nname = \"gpu\"\nprojects = [\"vision\"]\nmax_time_limit = \"1d\"\n").unwrap();
        assert_eq!(c.queues[0].projects, vec!["vision".to_string()]);
        assert_eq!(c.queues[0].max_time_limit_ms, Some(86_400_000));
        assert!(
            parse("[[queue]]\nname = \"gpu\"\nmax_time_limit = \"30m\"\n")
                .unwrap_err()
                .to_string()
                .contains("above max_time_limit")
        );
        assert!(
            parse("[[queue]]\nname = \"gpu\"\nprojects = [\"../x\"]\n")
                .unwrap_err()
                .to_string()
                .contains("not a project name")
        );
    }

    #[test]
    fn bad_config_says_what_to_fix() {
        let e = parse("[[queue]]\nname = \"a\"\nhead_of_line = \"lifo\"").unwrap_err().to_string();
        assert!(e.contains("queue `a`") && e.contains("head_of_line") && e.contains("skip-after-N"), "{e}");
        assert!(parse("[[queue]]\nname = \"a\"\n[[queue]]\nname = \"a\"").unwrap_err().to_string().contains("twice"));
        assert!(parse("[[queue]]\nnam = \"a\"").is_err());
        assert!(parse("[[queue]]\nname = \"a b\"").unwrap_err().to_string().contains("letters"));
        assert!(
            parse("[[queue]]\nname = \"a\"\nordering = \"random\"")
                .unwrap_err()
                .to_string()
                .contains("ordering `random`")
        );
        assert!(parse("[[queue]]\nname = \"a\"\nscoring = \"x\"").unwrap_err().to_string().contains("scoring"));
        assert!(parse("[[queue]]\nname = \"a\"\npreemption = \"yes\"").unwrap_err().to_string().contains("preemption"));
        assert!(
            parse("[[queue]]\nname = \"a\"\ndefault_time_limit = \"soon\"")
                .unwrap_err()
                .to_string()
                .contains("default_time_limit")
        );
        assert!(
            parse("[[queue]]\nname = \"a\"\ndefault_time_limit = 0")
                .unwrap_err()
                .to_string()
                .contains("default_time_limit")
        );
        assert!(parse("[fair_share]\nhalf_life = \"x\"").unwrap_err().to_string().contains("fair_share.half_life"));
        let zero = parse("[[queue]]\nname = \"a\"\npreemption = \"cancel\"\npreempt_min_runtime = \"0s\"").unwrap();
        assert_eq!(zero.queues[0].preemption.unwrap().min_runtime_ms, 0);
        assert!(parse("[fair_share.weights]\np = -1.0").unwrap_err().to_string().contains("fair_share.weights.p"));
    }
}
