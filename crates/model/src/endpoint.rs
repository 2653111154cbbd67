//! Serving endpoints (`berth serve`): a named HTTP service made of replicas, each a job that
//! berth places like any other, restarts when it fails and never lets end on its own. Requests
//! to `/serve/<name>/` on the app listener are spread over the ready replicas.
//!
//! An endpoint is its [`EndpointSpec`] (what one replica runs and how many), a revision that
//! changes with the spec (a rolling update) and the tokens that may call it. The replica jobs
//! carry a [`ReplicaOf`] that names their endpoint and revision, so that the manager can find
//! them again after a restart without parsing names.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::SpecError;
use crate::job::JobSpec;

pub use crate::replica::{REPLICA_APP, ReplicaOf};

/// The most replicas an endpoint may ask for.
pub const MAX_REPLICAS: u32 = 256;

/// The path endpoint `name` is served at, with its trailing `/`.
pub fn base_path(name: &str) -> String {
    format!("/serve/{name}/")
}

/// What an endpoint is: its replicas' job and how many of them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct EndpointSpec {
    /// Its name in URLs (`/serve/<name>/`): lowercase letters, digits and `-`, at most 32.
    pub name: String,
    /// Replicas to run when the endpoint does not autoscale (and the first count when it does).
    #[serde(default = "one")]
    pub replicas: u32,
    /// The port the server listens on inside a replica; `None`: berth picks a free one and
    /// tells the replica in `PORT` (two replicas on one node never collide).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// Probes and draining.
    #[serde(default)]
    pub health: HealthSpec,
    /// Adds and removes replicas with the load; `None`: `replicas`, fixed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscale: Option<Autoscale>,
    /// Anyone may call it, without a token.
    #[serde(default)]
    pub public: bool,
    /// What each replica runs and needs (command, resources, image, queue, folders, ...).
    pub job: JobSpec,
}

fn one() -> u32 {
    1
}

/// Readiness and liveness probes, and how a replica leaves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct HealthSpec {
    /// `GET` on this path must answer 2xx or 3xx before a replica takes requests; `None`: the
    /// port accepting a connection is enough.
    pub ready_path: Option<String>,
    /// `GET` on this path must keep answering, or the replica is restarted; `None`: the
    /// readiness probe, once the replica has been ready.
    pub live_path: Option<String>,
    /// Seconds between probes.
    pub period_secs: u32,
    /// Failed probes in a row that take a replica out (readiness) or restart it (liveness).
    pub failures: u32,
    /// Seconds a new replica may take to become ready before it counts as failed (and an
    /// update rolls back).
    pub start_timeout_secs: u32,
    /// Seconds a stopping replica's in-flight requests get to finish.
    pub drain_secs: u32,
}

impl Default for HealthSpec {
    fn default() -> Self {
        HealthSpec {
            ready_path: None,
            live_path: None,
            period_secs: 2,
            failures: 3,
            start_timeout_secs: 300,
            drain_secs: 30,
        }
    }
}

/// Autoscaling: the replica count follows the load between `min` and `max`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Autoscale {
    pub min: u32,
    pub max: u32,
    /// Requests in flight per ready replica to aim for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_inflight: Option<f64>,
    /// Requests per second per ready replica to aim for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_rps: Option<f64>,
    /// Seconds after a scale-up before the next one.
    #[serde(default = "up_cooldown")]
    pub up_cooldown_secs: u32,
    /// Seconds the load must stay low before replicas are removed (and, with `min` 0, how
    /// long an endpoint must be idle before it scales to zero).
    #[serde(default = "down_cooldown")]
    pub down_cooldown_secs: u32,
    /// Seconds the first request to an endpoint at zero waits for a replica to get ready.
    #[serde(default = "cold_start")]
    pub cold_start_secs: u32,
}

fn up_cooldown() -> u32 {
    10
}
fn down_cooldown() -> u32 {
    60
}
fn cold_start() -> u32 {
    120
}

impl EndpointSpec {
    /// Checks what the manager cannot fix: names, counts, paths and the replica job's shape.
    pub fn validate(&self) -> Result<(), SpecError> {
        crate::app::valid_app_name(&self.name).map_err(|_| {
            SpecError(format!(
                "invalid endpoint name `{}`: use lowercase letters, digits and `-`, starting with a letter, at most 32",
                self.name
            ))
        })?;
        if self.replicas > MAX_REPLICAS {
            return Err(SpecError(format!("--replicas {} is more than {MAX_REPLICAS}", self.replicas)));
        }
        if self.port == Some(0) {
            return Err(SpecError(
                "--port 0 is not a port: give the server's port, or leave it out and read $PORT".into(),
            ));
        }
        let h = &self.health;
        for p in [&h.ready_path, &h.live_path].into_iter().flatten() {
            if !p.starts_with('/') || p.len() > 1024 || p.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(SpecError(format!("invalid health path `{p}`: give a URL path such as /healthz")));
            }
        }
        if h.period_secs == 0 || h.period_secs > 3600 {
            return Err(SpecError(format!("probe period {}s: use 1 to 3600 seconds", h.period_secs)));
        }
        if h.failures == 0 || h.failures > 100 {
            return Err(SpecError(format!("failure threshold {}: use 1 to 100", h.failures)));
        }
        if h.start_timeout_secs == 0 || h.drain_secs > 3600 {
            return Err(SpecError("start timeout must be positive and the drain grace at most 1h".into()));
        }
        if let Some(a) = &self.autoscale {
            if a.max == 0 || a.max > MAX_REPLICAS || a.min > a.max {
                return Err(SpecError(format!(
                    "autoscaling from {} to {}: use 0 <= --min <= --max <= {MAX_REPLICAS}, --max at least 1",
                    a.min,
                    crate::replica::replicas(a.max)
                )));
            }
            let positive = |v: Option<f64>| v.is_none_or(|v| v.is_finite() && v > 0.0);
            if a.target_inflight.is_none() && a.target_rps.is_none() {
                return Err(SpecError(
                    "autoscaling needs a target: --target-inflight N (requests in flight per replica) or --target-rps N"
                        .into(),
                ));
            }
            if !positive(a.target_inflight) || !positive(a.target_rps) {
                return Err(SpecError("autoscaling targets must be positive numbers".into()));
            }
        }
        let j = &self.job;
        if j.command.is_empty() && j.image.is_none() {
            return Err(SpecError("a replica needs a command (after --) or an image".into()));
        }
        if j.array.is_some() || j.array_task.is_some() || j.dependency.is_some() || j.begin_at.is_some() {
            return Err(SpecError("a replica cannot be an array, wait for a dependency or a begin time".into()));
        }
        if j.nodes != 1 || j.kernels != 1 {
            return Err(SpecError("a replica runs on one node: scale with --replicas instead of --nodes".into()));
        }
        if j.interactive() || !j.apps.is_empty() || j.time_limit_secs.is_some() {
            return Err(SpecError(
                "a replica is not interactive, serves no other app and has no time limit (it runs until removed)"
                    .into(),
            ));
        }
        j.validate()
    }

    /// The job a replica of revision `revision` of endpoint `endpoint_id` runs: the spec's job
    /// with the server's port as the app `serve` and the endpoint it belongs to. The manager
    /// checks it (at create and update) and submits it (each replica) in this one form.
    pub fn replica_job(&self, endpoint_id: i64, revision: u64) -> JobSpec {
        let mut job = self.job.clone();
        job.name.get_or_insert_with(|| format!("serve-{}", self.name));
        job.apps = vec![crate::app::AppSpec::custom(REPLICA_APP, self.port)];
        job.replica_of = Some(ReplicaOf { endpoint_id, endpoint: self.name.clone(), revision });
        job
    }

    /// The replicas to run at the start (`replicas`, within the autoscaling range).
    pub fn initial_replicas(&self) -> u32 {
        match &self.autoscale {
            Some(a) => self.replicas.clamp(a.min, a.max),
            None => self.replicas,
        }
    }
}

/// Where a rolling update stands.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    Serialize,
    Deserialize,
    ToSchema,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum Rollout {
    /// Every replica runs the current revision.
    #[default]
    Done,
    /// Replicas of an older revision are being replaced, one at a time.
    Rolling,
    /// The last update's replicas never got ready: the previous spec is back.
    RolledBack,
}

impl Rollout {
    pub fn as_str(&self) -> &'static str {
        (*self).into()
    }

    pub fn parse(s: &str) -> Option<Rollout> {
        crate::names::parse(s)
    }
}

/// What a replica is doing, as the router sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ReplicaState {
    /// Its job waits for a place or sets up.
    Starting,
    /// Running, not (yet) answering its readiness probe.
    NotReady,
    /// Takes requests.
    Ready,
    /// Takes no new requests; stops when its in-flight ones finish.
    Draining,
}

/// `POST /v1/endpoints`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CreateEndpoint {
    pub spec: EndpointSpec,
}

/// `PATCH /v1/endpoints/{name}`: a new spec (a rolling update), a count, or public access.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct UpdateEndpoint {
    /// The whole new spec (its name must stay): replicas are replaced one at a time.
    pub spec: Option<EndpointSpec>,
    /// A new replica count (with autoscaling: the count to start from, within min and max).
    pub replicas: Option<u32>,
    pub public: Option<bool>,
}

/// One replica of an endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ReplicaView {
    pub job: crate::JobId,
    pub revision: u64,
    pub state: ReplicaState,
    pub node: Option<String>,
    /// Requests it is answering now.
    pub inflight: u64,
    /// Why it is not ready (its job's pending reason, a failing probe, ...).
    pub reason: Option<String>,
    /// How the router reaches it; `None` until its first probe passes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<ReplicaRoute>,
}

/// How the router reaches a replica ([docs/serving.md]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ReplicaRoute {
    /// Straight to its port on its node, over pooled connections.
    Direct,
    /// Through its node's agent (the node or the replica's port is not reachable from the
    /// manager: a private network, NAT, a port on the node's loopback).
    Tunnel,
}

/// An endpoint as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct EndpointView {
    pub id: i64,
    pub name: String,
    pub owner: String,
    pub spec: EndpointSpec,
    pub revision: u64,
    /// Replicas wanted now (set by `scale` or the autoscaler).
    pub desired: u32,
    pub ready: u32,
    pub rollout: Rollout,
    /// Why the last update rolled back, or what the endpoint waits for.
    pub message: Option<String>,
    /// The path to call it at, on the app listener.
    pub path: String,
    /// The whole URL, as the caller reaches the manager (`None`: the app listener is off).
    #[serde(default)]
    pub url: Option<String>,
    pub replicas: Vec<ReplicaView>,
    /// Requests per second over the last minute.
    pub request_rate: f64,
    pub error_rate: f64,
    /// Latency percentiles over the last minute, in milliseconds.
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// Replica restarts since the endpoint was created (or the manager started).
    pub restarts: u64,
    pub created_at: jiff::Timestamp,
}

/// A token that may call an endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct EndpointTokenView {
    pub id: i64,
    pub label: String,
    pub created_at: jiff::Timestamp,
}

/// `POST /v1/endpoints/{name}/tokens`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct CreateEndpointToken {
    pub label: String,
}

/// A new endpoint token: the secret is shown once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CreatedEndpointToken {
    pub token: EndpointTokenView,
    pub secret: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> EndpointSpec {
        EndpointSpec {
            name: "llm".into(),
            replicas: 2,
            port: None,
            health: HealthSpec::default(),
            autoscale: None,
            public: false,
            job: JobSpec::command(["python3", "server.py"]),
        }
    }

    #[test]
    fn a_plain_endpoint_is_valid_and_bad_ones_say_why() {
        spec().validate().unwrap();
        let mut s = spec();
        s.name = "LLM".into();
        assert!(s.validate().unwrap_err().0.contains("invalid endpoint name"));
        let mut s = spec();
        s.health.ready_path = Some("healthz".into());
        assert!(s.validate().unwrap_err().0.contains("/healthz"));
        let mut s = spec();
        s.autoscale = Some(Autoscale {
            min: 3,
            max: 2,
            target_inflight: Some(4.0),
            target_rps: None,
            up_cooldown_secs: 1,
            down_cooldown_secs: 1,
            cold_start_secs: 1,
        });
        assert!(s.validate().unwrap_err().0.contains("--min"));
        let mut s = spec();
        s.job.nodes = 2;
        assert!(s.validate().unwrap_err().0.contains("--replicas"));
        let mut s = spec();
        s.job.time_limit_secs = Some(60);
        assert!(s.validate().is_err());
    }

    #[test]
    fn the_first_count_stays_within_the_autoscaling_range() {
        let mut s = spec();
        s.replicas = 1;
        s.autoscale = Some(Autoscale {
            min: 2,
            max: 8,
            target_inflight: Some(4.0),
            target_rps: None,
            up_cooldown_secs: 1,
            down_cooldown_secs: 1,
            cold_start_secs: 1,
        });
        assert_eq!(s.initial_replicas(), 2);
    }

    #[test]
    fn rollout_names_round_trip() {
        for r in [Rollout::Done, Rollout::Rolling, Rollout::RolledBack] {
            assert_eq!(Rollout::parse(r.as_str()), Some(r));
        }
    }
}
