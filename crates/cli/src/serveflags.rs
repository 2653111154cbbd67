//! The flags of `berth serve create` and `berth serve update` that are the endpoint's own
//! (replicas, port, probes, autoscaling, public access), and how they and the job flags
//! (`specflags.rs`, the one definition `berth submit` uses) become an [`EndpointSpec`].
//!
//! Like [`SpecFlags`], every field is optional so that layers stack: a service file below,
//! the command line above, and for `update` the endpoint's current spec below both.

use std::path::Path;

use berth_model::JobSpec;
use berth_model::endpoint::{Autoscale, EndpointSpec, HealthSpec, MAX_REPLICAS};
use clap::Args;

use crate::specflags::SpecFlags;

/// The endpoint's flags.
#[derive(Debug, Clone, Default, PartialEq, Args)]
pub struct ServeFlags {
    /// Replicas to run; with autoscaling, the count to start from [default: 1]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=MAX_REPLICAS as i64), help_heading = "Serving")]
    pub replicas: Option<u32>,

    /// The port the server listens on in a replica [default: a free one, given to the replica
    /// in $PORT]
    #[arg(long, value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..), help_heading = "Serving")]
    pub port: Option<u16>,

    /// Anyone may call the endpoint, without a token
    #[arg(long, conflicts_with = "private", help_heading = "Serving")]
    pub public: bool,

    /// Only callers with one of its tokens (`berth serve token create`) [default]
    #[arg(long, help_heading = "Serving")]
    pub private: bool,

    /// Readiness probe: GET PATH must answer 2xx/3xx before a replica takes requests
    /// [default: the port accepting a connection]; '' removes it
    #[arg(long, value_name = "PATH", help_heading = "Health")]
    pub health: Option<String>,

    /// Liveness probe: GET PATH must keep answering or the replica restarts [default: the
    /// readiness probe]; '' removes it
    #[arg(long, value_name = "PATH", help_heading = "Health")]
    pub liveness: Option<String>,

    /// Time between probes, e.g. 2s [default: 2s]
    #[arg(long, value_name = "DURATION", value_parser = parse_secs, help_heading = "Health")]
    pub probe_period: Option<u32>,

    /// Failed probes in a row that take a replica out or restart it [default: 3]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100), help_heading = "Health")]
    pub failure_threshold: Option<u32>,

    /// How long a new replica may take to get ready before it counts as failed (and an update
    /// rolls back) [default: 5m]
    #[arg(long, value_name = "DURATION", value_parser = parse_secs, help_heading = "Health")]
    pub start_timeout: Option<u32>,

    /// How long a stopping replica's requests in flight get to finish [default: 30s]
    #[arg(long, value_name = "DURATION", value_parser = parse_secs, help_heading = "Health")]
    pub drain_grace: Option<u32>,

    /// Autoscaling: the fewest replicas (0 scales to zero when idle)
    #[arg(long, value_name = "N", help_heading = "Autoscaling")]
    pub min: Option<u32>,

    /// Autoscaling: the most replicas
    #[arg(long, value_name = "N", help_heading = "Autoscaling")]
    pub max: Option<u32>,

    /// Autoscaling target: requests in flight per ready replica
    #[arg(long, value_name = "X", conflicts_with = "target_rps", help_heading = "Autoscaling")]
    pub target_inflight: Option<f64>,

    /// Autoscaling target: requests per second per ready replica
    #[arg(long, value_name = "X", help_heading = "Autoscaling")]
    pub target_rps: Option<f64>,

    /// Time after a scale-up before the next one [default: 10s]
    #[arg(long, value_name = "DURATION", value_parser = parse_secs, help_heading = "Autoscaling")]
    pub scale_up_cooldown: Option<u32>,

    /// Time the load must stay low before replicas go (and before an idle endpoint with
    /// --min 0 scales to zero) [default: 1m]
    #[arg(long, value_name = "DURATION", value_parser = parse_secs, help_heading = "Autoscaling")]
    pub scale_down_cooldown: Option<u32>,

    /// How long the first request to an endpoint at zero waits for a replica [default: 2m]
    #[arg(long, value_name = "DURATION", value_parser = parse_secs, help_heading = "Autoscaling")]
    pub cold_start_timeout: Option<u32>,

    /// Turn autoscaling off: a fixed --replicas count
    #[arg(long, conflicts_with_all = ["min", "max", "target_inflight", "target_rps"], help_heading = "Autoscaling")]
    pub no_autoscale: bool,
}

/// A duration flag (`90s`, `5m`, `1h`, berth's duration syntax) as whole seconds.
pub fn parse_secs(s: &str) -> Result<u32, String> {
    let secs = berth_model::parse_duration(s).map_err(|e| e.to_string())?;
    u32::try_from(secs).map_err(|_| format!("`{s}` is too long"))
}

impl ServeFlags {
    /// `self` with every flag given in `over` replacing it.
    pub fn overlay(self, over: ServeFlags) -> ServeFlags {
        // One target or the other: the upper layer's choice replaces both.
        let target = over.target_inflight.is_some() || over.target_rps.is_some();
        ServeFlags {
            replicas: over.replicas.or(self.replicas),
            port: over.port.or(self.port),
            public: over.public || (self.public && !over.private),
            private: over.private || (self.private && !over.public),
            health: over.health.or(self.health),
            liveness: over.liveness.or(self.liveness),
            probe_period: over.probe_period.or(self.probe_period),
            failure_threshold: over.failure_threshold.or(self.failure_threshold),
            start_timeout: over.start_timeout.or(self.start_timeout),
            drain_grace: over.drain_grace.or(self.drain_grace),
            min: over.min.or(self.min),
            max: over.max.or(self.max),
            target_inflight: if target { over.target_inflight } else { self.target_inflight },
            target_rps: if target { over.target_rps } else { self.target_rps },
            scale_up_cooldown: over.scale_up_cooldown.or(self.scale_up_cooldown),
            scale_down_cooldown: over.scale_down_cooldown.or(self.scale_down_cooldown),
            cold_start_timeout: over.cold_start_timeout.or(self.cold_start_timeout),
            no_autoscale: over.no_autoscale,
        }
    }

    fn autoscales(&self) -> bool {
        self.min.is_some()
            || self.max.is_some()
            || self.target_inflight.is_some()
            || self.target_rps.is_some()
            || self.scale_up_cooldown.is_some()
            || self.scale_down_cooldown.is_some()
            || self.cold_start_timeout.is_some()
    }

    /// Writes the given flags over `spec` (a new one, or the endpoint's current spec).
    pub fn apply(&self, spec: &mut EndpointSpec) -> Result<(), String> {
        if let Some(r) = self.replicas {
            spec.replicas = r;
        }
        if self.port.is_some() {
            spec.port = self.port;
        }
        if self.public || self.private {
            spec.public = self.public;
        }
        let h = &mut spec.health;
        // An empty path removes the probe: `--health ''` on update goes back to the default.
        let path = |p: &String| Some(p.clone()).filter(|p| !p.is_empty());
        if let Some(p) = &self.health {
            h.ready_path = path(p);
        }
        if let Some(p) = &self.liveness {
            h.live_path = path(p);
        }
        h.period_secs = self.probe_period.unwrap_or(h.period_secs);
        h.failures = self.failure_threshold.unwrap_or(h.failures);
        h.start_timeout_secs = self.start_timeout.unwrap_or(h.start_timeout_secs);
        h.drain_secs = self.drain_grace.unwrap_or(h.drain_secs);
        if self.no_autoscale {
            spec.autoscale = None;
        } else if self.autoscales() {
            let mut a = match spec.autoscale.take() {
                Some(a) => a,
                None => match (self.min, self.max) {
                    (Some(min), Some(max)) => default_autoscale(min, max)?,
                    _ => return Err("autoscaling needs both --min N and --max N".into()),
                },
            };
            a.min = self.min.unwrap_or(a.min);
            a.max = self.max.unwrap_or(a.max);
            if self.target_inflight.is_some() || self.target_rps.is_some() {
                a.target_inflight = self.target_inflight;
                a.target_rps = self.target_rps;
            }
            a.up_cooldown_secs = self.scale_up_cooldown.unwrap_or(a.up_cooldown_secs);
            a.down_cooldown_secs = self.scale_down_cooldown.unwrap_or(a.down_cooldown_secs);
            a.cold_start_secs = self.cold_start_timeout.unwrap_or(a.cold_start_secs);
            spec.autoscale = Some(a);
        }
        Ok(())
    }
}

/// An autoscaling range with the model's default cooldowns: they live in its serde defaults,
/// which reading a bare `{min, max}` applies, so they are not repeated here.
fn default_autoscale(min: u32, max: u32) -> Result<Autoscale, String> {
    serde_json::from_value(serde_json::json!({ "min": min, "max": max })).map_err(|e| e.to_string())
}

/// A new endpoint's spec: `serve` over the model's defaults, and a replica job built from
/// `job` as `berth submit` builds one (its directory and environment are the caller's).
pub fn new_spec(
    name: &str,
    serve: &ServeFlags,
    job: &SpecFlags,
    command: Vec<String>,
    cwd: &Path,
    vars: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> anyhow::Result<EndpointSpec> {
    let mut spec = job.to_spec(command);
    spec.environment = job.environment()?;
    if spec.name.is_none() {
        spec.name = Some(name.to_string());
    }
    let skipped = job.submitted_from(&mut spec, cwd, vars);
    if !skipped.is_empty() {
        eprintln!("warning: not exported (not UTF-8): {}", skipped.join(", "));
    }
    let mut e = EndpointSpec {
        name: name.to_string(),
        replicas: 1,
        port: None,
        health: HealthSpec::default(),
        autoscale: None,
        public: false,
        job: spec,
    };
    serve.apply(&mut e).map_err(anyhow::Error::msg)?;
    Ok(e)
}

/// Writes the job flags given in `f` (and a new command) over a replica job, leaving what
/// they do not name as it is: the flags go through [`SpecFlags::to_spec`], so each value is
/// translated exactly as `berth submit` translates it, and only the given ones are copied.
pub fn overlay_job(job: &mut JobSpec, f: &SpecFlags, command: Option<Vec<String>>) -> anyhow::Result<()> {
    let new = f.to_spec(command.clone().unwrap_or_else(|| job.command.clone()));
    if command.is_some() || f.has_preset() {
        job.command = new.command;
    }
    let r = &mut job.resources;
    r.cpu_milli = f.cpus.map_or(r.cpu_milli, |_| new.resources.cpu_milli);
    r.mem_bytes = f.mem.map_or(r.mem_bytes, |_| new.resources.mem_bytes);
    r.gpu_milli = f.gpus.map_or(r.gpu_milli, |_| new.resources.gpu_milli);
    macro_rules! given {
        ($($flag:ident => $field:ident),* $(,)?) => {
            $(if f.$flag.is_some() { job.$field = new.$field.clone(); })*
        };
    }
    given!(name => name, queue => queue, project => project, image => image, workdir => workdir,
        signal => signal, array => array, dependency => dependency, begin => begin_at,
        time_limit => time_limit_secs, nodes => nodes, kernels => kernels, priority => priority,
        numa => numa, tasks_per_node => tasks_per_node, gpus_per_task => gpus_per_task, launch => launch);
    job.env.extend(new.env);
    macro_rules! lists {
        ($($flag:ident),* $(,)?) => {
            $(if !f.$flag.is_empty() { job.$flag = new.$flag.clone(); })*
        };
    }
    lists!(mounts, folders, datasets);
    if !new.apps.is_empty() {
        job.apps = new.apps;
    }
    if f.output_file.is_some() || f.error_file.is_some() || f.open_mode.is_some() {
        job.output = new.output;
    }
    if f.placement.constraint.is_some() {
        job.constraint = new.constraint;
    }
    if f.placement.qos.is_some() {
        job.qos = new.qos;
    }
    job.exclusive |= f.placement.exclusive;
    job.requeue |= f.requeue;
    job.preemptible |= f.preemptible;
    job.shared |= f.share;
    if f.job_dir {
        job.workdir = None;
    }
    if f.python.is_some() {
        job.environment = f.environment()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    #[command(no_binary_name = true)]
    struct P {
        #[command(flatten)]
        s: ServeFlags,
        #[command(flatten)]
        j: SpecFlags,
    }

    fn parse(args: &[&str]) -> Result<(ServeFlags, SpecFlags), String> {
        P::try_parse_from(args).map(|p| (p.s, p.j)).map_err(|e| e.to_string())
    }

    fn spec(args: &[&str]) -> anyhow::Result<EndpointSpec> {
        let (s, j) = parse(args).map_err(anyhow::Error::msg)?;
        new_spec("llm", &s, &j, vec!["python3".into(), "server.py".into()], Path::new("/home/a"), [])
    }

    #[test]
    fn flags_reach_the_endpoint_and_its_job() {
        let e = spec(&[
            "--replicas",
            "3",
            "--port",
            "8000",
            "--health",
            "/ready",
            "--probe-period",
            "5s",
            "--drain-grace",
            "1m",
            "--public",
            "--gpus",
            "1",
            "--queue",
            "gpu",
            "--env",
            "A=1",
        ])
        .unwrap();
        assert_eq!((e.replicas, e.port, e.public), (3, Some(8000), true));
        assert_eq!(e.health.ready_path.as_deref(), Some("/ready"));
        assert_eq!((e.health.period_secs, e.health.drain_secs, e.health.failures), (5, 60, 3));
        assert_eq!((e.job.resources.gpu_milli, e.job.queue.as_deref()), (1000, Some("gpu")));
        assert_eq!(e.job.name.as_deref(), Some("llm"), "replicas are named after the endpoint");
        assert_eq!(e.job.workdir.as_deref(), Some("/home/a"));
        assert!(e.validate().is_ok());
        let e = spec(&[]).unwrap();
        assert_eq!((e.replicas, e.public, e.autoscale.is_none()), (1, false, true));
    }

    #[test]
    fn autoscaling_needs_a_range_and_keeps_the_model_defaults() {
        let e = spec(&["--min", "0", "--max", "4", "--target-rps", "20", "--cold-start-timeout", "30s"]).unwrap();
        let a = e.autoscale.unwrap();
        assert_eq!((a.min, a.max, a.target_rps, a.target_inflight), (0, 4, Some(20.0), None));
        assert_eq!((a.up_cooldown_secs, a.down_cooldown_secs, a.cold_start_secs), (10, 60, 30));
        let e = spec(&["--max", "4", "--target-rps", "20"]).unwrap_err().to_string();
        assert!(e.contains("--min N and --max N"), "{e}");
        let e = parse(&["--min", "1", "--max", "2", "--target-rps", "1", "--target-inflight", "2"]).unwrap_err();
        assert!(e.contains("cannot be used with"), "{e}");
        assert!(parse(&["--probe-period", "soon"]).unwrap_err().contains("--probe-period"));
    }

    #[test]
    fn update_flags_change_only_what_they_name() {
        let mut e =
            spec(&["--min", "1", "--max", "4", "--target-inflight", "8", "--health", "/h", "--cpus", "2"]).unwrap();
        let (s, j) =
            parse(&["--max", "10", "--target-rps", "5", "--health", "", "--mem", "8GiB", "--private"]).unwrap();
        s.apply(&mut e).unwrap();
        overlay_job(&mut e.job, &j, None).unwrap();
        let a = e.autoscale.clone().unwrap();
        assert_eq!((a.min, a.max, a.target_inflight, a.target_rps), (1, 10, None, Some(5.0)));
        assert_eq!(e.health.ready_path, None);
        assert_eq!((e.job.resources.cpu_milli, e.job.resources.mem_bytes), (2000, 8 << 30));
        assert_eq!(e.job.command, ["python3", "server.py"]);
        assert!(!e.public);
        let (s, j) = parse(&["--no-autoscale", "--replicas", "2", "--env", "B=2"]).unwrap();
        s.apply(&mut e).unwrap();
        overlay_job(&mut e.job, &j, Some(vec!["./serve".into()])).unwrap();
        assert_eq!((e.autoscale, e.replicas), (None, 2));
        assert_eq!(e.job.command, ["./serve"]);
        assert_eq!(e.job.env.get("B").map(String::as_str), Some("2"));
    }

    #[test]
    fn the_upper_layer_wins() {
        let (low, _) = parse(&["--public", "--replicas", "2", "--target-rps", "3", "--min", "1"]).unwrap();
        let (high, _) = parse(&["--private", "--target-inflight", "4"]).unwrap();
        let f = low.overlay(high);
        assert!(!f.public && f.private);
        assert_eq!((f.replicas, f.min, f.target_rps, f.target_inflight), (Some(2), Some(1), None, Some(4.0)));
    }
}
