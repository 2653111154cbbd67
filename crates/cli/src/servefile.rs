//! Service files (`berth serve create svc.toml`): an endpoint's keys and, beside them, its
//! replica job's keys exactly as a job file (`jobfile.rs`) takes them.
//!
//! ```toml
//! name = "llm"                        # the endpoint [default: the file name without .toml]
//! replicas = 2
//! port = 8000                         # default: a free port, given to the replica in $PORT
//! public = false                      # true: callers need no token
//! command = ["python3", "server.py"]  # and every other job file key: gpus, image, [env], ...
//! gpus = 1
//!
//! [health]
//! ready_path = "/ready"               # default: the port accepting a connection
//! live_path = "/live"                 # default: the readiness probe
//! period = "2s"
//! failures = 3
//! start_timeout = "5m"
//! drain = "30s"
//!
//! [autoscale]                         # min and max, and one target
//! min = 0                             # 0: scale to zero when idle
//! max = 4
//! target_inflight = 8                 # or target_rps = 20
//! up_cooldown = "10s"
//! down_cooldown = "1m"
//! cold_start = "2m"
//! ```
//!
//! The job keys are handed to the job file's parser, so the two never disagree on a key, and
//! both refuse unknown keys: a typo must not silently serve with defaults.

use std::path::Path;

use anyhow::Context;
use serde::Deserialize;

use crate::jobfile;
use crate::serveflags::ServeFlags;

/// What a service file contributes, to be overridden by the command line.
#[derive(Debug)]
pub struct Loaded {
    /// The endpoint's name (`name`, else the file's stem).
    pub name: Option<String>,
    pub serve: ServeFlags,
    /// The replica job's flags and command.
    pub job: jobfile::Loaded,
}

/// The endpoint's own keys, taken out of the file before the rest goes to the job parser.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServiceKeys {
    name: Option<String>,
    replicas: Option<u32>,
    port: Option<u16>,
    public: Option<bool>,
    health: Option<HealthSection>,
    autoscale: Option<AutoscaleSection>,
}

/// The keys [`ServiceKeys`] has: the only ones taken out of the table.
const SERVICE_KEYS: [&str; 6] = ["name", "replicas", "port", "public", "health", "autoscale"];

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HealthSection {
    ready_path: Option<String>,
    live_path: Option<String>,
    #[serde(default, deserialize_with = "jobfile::de_duration")]
    period: Option<u64>,
    failures: Option<u32>,
    #[serde(default, deserialize_with = "jobfile::de_duration")]
    start_timeout: Option<u64>,
    #[serde(default, deserialize_with = "jobfile::de_duration")]
    drain: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AutoscaleSection {
    min: Option<u32>,
    max: Option<u32>,
    target_inflight: Option<f64>,
    target_rps: Option<f64>,
    #[serde(default, deserialize_with = "jobfile::de_duration")]
    up_cooldown: Option<u64>,
    #[serde(default, deserialize_with = "jobfile::de_duration")]
    down_cooldown: Option<u64>,
    #[serde(default, deserialize_with = "jobfile::de_duration")]
    cold_start: Option<u64>,
}

/// Reads and parses the service file at `path`.
pub fn load(path: &Path) -> anyhow::Result<Loaded> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read service file {}", path.display()))?;
    let dir = std::path::absolute(path)
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| std::path::PathBuf::from("/"));
    parse(&text, path, &dir)
}

/// Parses a service file's text; `path` names it in errors and `dir` anchors relative paths.
pub fn parse(text: &str, path: &Path, dir: &Path) -> anyhow::Result<Loaded> {
    let what = || format!("invalid service file {}", path.display());
    // Read as a table first so that TOML syntax errors keep their line and column.
    let mut table: toml::Table = toml::from_str(text).with_context(what)?;
    let mut own = toml::Table::new();
    for key in SERVICE_KEYS {
        if let Some(v) = table.remove(key) {
            own.insert(key.to_string(), v);
        }
    }
    let keys: ServiceKeys = toml::Value::Table(own).try_into().with_context(what)?;
    let mut job = jobfile::parse_table(table, "service", path, dir).map_err(|e| {
        // The job parser lists the job keys it expected; say that the endpoint's are fine too.
        let e = format!("{e:#}");
        anyhow::anyhow!("{} (or one of the endpoint's: {})", e.trim_end(), SERVICE_KEYS.join(", "))
    })?;
    // `name` is the endpoint's: the job parser's default (the file stem) must not stand in
    // for a job name, so the replicas are named after the endpoint.
    job.flags.name = None;
    let secs = |v: Option<u64>, key: &str| -> anyhow::Result<Option<u32>> {
        v.map(|s| u32::try_from(s).map_err(|_| anyhow::anyhow!("{}: `{key}` is too long", what()))).transpose()
    };
    let h = keys.health.unwrap_or_default();
    let a = keys.autoscale.unwrap_or_default();
    if a.target_inflight.is_some() && a.target_rps.is_some() {
        anyhow::bail!("{}: [autoscale] takes `target_inflight` or `target_rps`, not both", what());
    }
    let serve = ServeFlags {
        replicas: keys.replicas,
        port: keys.port,
        public: keys.public == Some(true),
        private: keys.public == Some(false),
        health: h.ready_path,
        liveness: h.live_path,
        probe_period: secs(h.period, "period")?,
        failure_threshold: h.failures,
        start_timeout: secs(h.start_timeout, "start_timeout")?,
        drain_grace: secs(h.drain, "drain")?,
        min: a.min,
        max: a.max,
        target_inflight: a.target_inflight,
        target_rps: a.target_rps,
        scale_up_cooldown: secs(a.up_cooldown, "up_cooldown")?,
        scale_down_cooldown: secs(a.down_cooldown, "down_cooldown")?,
        cold_start_timeout: secs(a.cold_start, "cold_start")?,
        no_autoscale: false,
    };
    let name = keys.name.or_else(|| path.file_stem().map(|s| s.to_string_lossy().into_owned()));
    Ok(Loaded { name, serve, job })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> anyhow::Result<Loaded> {
        parse(text, Path::new("svc.toml"), Path::new("/work/svc"))
    }

    #[test]
    fn a_full_file() {
        let l = p(r#"
name = "llm"
replicas = 2
port = 8000
public = true
command = ["python3", "server.py"]
gpus = 1
workdir = "app"

[env]
MODEL = "small"

[health]
ready_path = "/ready"
period = "5s"
failures = 4
start_timeout = "10m"
drain = 45

[autoscale]
min = 0
max = 4
target_inflight = 8
down_cooldown = "5m"
"#)
        .unwrap();
        assert_eq!(l.name.as_deref(), Some("llm"));
        let s = &l.serve;
        assert_eq!((s.replicas, s.port, s.public, s.private), (Some(2), Some(8000), true, false));
        assert_eq!((s.health.as_deref(), s.liveness.as_deref()), (Some("/ready"), None));
        assert_eq!(
            (s.probe_period, s.failure_threshold, s.start_timeout, s.drain_grace),
            (Some(5), Some(4), Some(600), Some(45))
        );
        assert_eq!((s.min, s.max, s.target_inflight, s.scale_down_cooldown), (Some(0), Some(4), Some(8.0), Some(300)));
        assert_eq!(l.job.command.as_deref().unwrap(), ["python3", "server.py"]);
        assert_eq!((l.job.flags.gpus, l.job.flags.name.as_deref()), (Some(1000), None));
        assert_eq!(l.job.flags.workdir.as_deref(), Some("/work/svc/app"), "relative to the file");
        assert_eq!(l.job.flags.env, [("MODEL".to_string(), "small".to_string())]);
    }

    #[test]
    fn the_name_defaults_to_the_file_stem() {
        let l = p("command = [\"x\"]").unwrap();
        assert_eq!(l.name.as_deref(), Some("svc"));
        assert_eq!(l.serve, ServeFlags::default());
    }

    #[test]
    fn unknown_keys_are_refused_with_their_name() {
        let e = format!("{:#}", p("command = [\"x\"]\nreplica = 2").unwrap_err());
        assert!(e.contains("invalid service file svc.toml") && e.contains("unknown field `replica`"), "{e}");
        assert!(e.contains("replicas"), "the endpoint's keys are named too: {e}");
        let e = format!("{:#}", p("[health]\nready = \"/r\"").unwrap_err());
        assert!(e.contains("invalid service file svc.toml") && e.contains("unknown field `ready`"), "{e}");
        let e = format!("{:#}", p("[autoscale]\nmin = 0\nmax = 2\ntarget = 3").unwrap_err());
        assert!(e.contains("unknown field `target`"), "{e}");
    }

    #[test]
    fn bad_values_say_what_is_wrong() {
        let e = format!("{:#}", p("[health]\nperiod = \"soon\"").unwrap_err());
        assert!(e.contains("invalid service file svc.toml"), "{e}");
        let e = format!("{:#}", p("port = 70000").unwrap_err());
        assert!(e.contains("port"), "{e}");
        let e = format!("{:#}", p("[autoscale]\nmin = 0\nmax = 2\ntarget_rps = 1\ntarget_inflight = 2").unwrap_err());
        assert!(e.contains("not both"), "{e}");
        let e = format!("{:#}", p("command = [\"x\"\n").unwrap_err());
        assert!(e.contains("line") && e.contains("column"), "syntax errors keep their position: {e}");
        let e = format!("{:#}", p("mem = \"4\"").unwrap_err());
        assert!(e.contains("add a unit"), "job keys are checked as in a job file: {e}");
    }

    #[test]
    fn private_in_the_file_is_private() {
        let l = p("public = false").unwrap();
        assert!(!l.serve.public && l.serve.private);
    }
}
