//! The manager's Prometheus metrics (`GET /metrics`, `api/metrics.rs`).
//!
//! Two kinds, kept apart on purpose:
//! - **events** (counters and histograms: submits, starts, ends, queue waits, pass and commit
//!   durations, API requests) live here for the manager's lifetime and are recorded where the
//!   event happens, once it is stored;
//! - **levels** (jobs by state, pending reasons, nodes, allocations, connected agents) are
//!   never kept in sync by hand: `gauges` computes them from the in-memory state at scrape
//!   time, so they cannot drift from what `berth ps` and `berth nodes` show.
//!
//! Labels are bounded: queues, states, reason kinds, node names, API route templates. No job
//! ids, user names or tokens (an admin reads those from the API, not from a time series).
//! Series that name tenants' objects (serving endpoints) sit in a registry of their own, shown
//! only to the callers `access` lets see them.

mod access;
mod gauges;

use std::sync::OnceLock;
use std::time::Duration;

use berth_model::JobState;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};

pub use access::{MetricsAccess, View, view};
pub use gauges::Snapshot;

/// One label set of one or two labels (bounded values only, see the module doc).
pub type L1 = [(&'static str, String); 1];
pub type L2 = [(&'static str, String); 2];
pub type L3 = [(&'static str, String); 3];
type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// One serving endpoint's request series (issue 42): the router keeps one per endpoint and
/// records into its handles, where looking a series up per request built three label strings
/// and hashed them under the family's lock. Handles are made at the first request that needs
/// them, so an endpoint nobody called has no series, as before.
pub struct EndpointSeries {
    name: String,
    requests: Family<L2, Counter>,
    seconds: Histograms<L1>,
    /// `code="200"`, most answers' (other codes are looked up in the family).
    ok: OnceLock<Counter>,
    latency: OnceLock<Histogram>,
}

impl EndpointSeries {
    /// A request was answered `status` after `took`.
    pub fn request(&self, status: u16, took: Duration) {
        let label = || ("endpoint", self.name.clone());
        if status == 200 {
            self.ok.get_or_init(|| self.requests.get_or_create(&[label(), ("code", "200".into())]).clone()).inc();
        } else {
            self.requests.get_or_create(&[label(), ("code", status.to_string())]).inc();
        }
        let latency = self.latency.get_or_init(|| self.seconds.get_or_create(&[label()]).clone());
        latency.observe(took.as_secs_f64());
    }
}

/// The content type of the exposition `prometheus-client` writes (OpenMetrics text).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Where a store commit came from (the `batch` label of `berth_store_commit_seconds`).
#[derive(Debug, Clone, Copy)]
pub enum Commit {
    /// A scheduling pass's starts and reasons.
    Pass,
    /// One report-loop round of agent reports.
    Reports,
    /// A single job move outside a batch (cancel, a deferred report, node loss).
    Transition,
    /// The periodic fair-share usage flush.
    Usage,
}

impl Commit {
    fn as_str(self) -> &'static str {
        match self {
            Commit::Pass => "pass",
            Commit::Reports => "reports",
            Commit::Transition => "transition",
            Commit::Usage => "usage",
        }
    }
}

/// A job event recorded once its change is stored. Inside a batch of agent reports it waits
/// in the batch (`State::note`), so a batch the store refuses (and applies again one by one)
/// is not counted twice.
#[derive(Debug, Clone)]
pub enum JobEvent {
    /// The job's first kernel started: how long after its submit.
    Started { queue: String, since_submit: Duration },
    /// The job ended in `state`.
    Finished { queue: String, state: JobState },
}

/// The event metrics; see the module doc.
pub struct Metrics {
    registry: Registry,
    /// The series that name tenants' objects (endpoints): [`View::All`] only.
    tenants: Registry,
    submitted: Family<L1, Counter>,
    starts: Family<L1, Counter>,
    finished: Family<L2, Counter>,
    queue_wait: Histograms<L1>,
    submit_to_start: Histograms<L1>,
    pass: Histogram,
    commit: Histograms<L1>,
    requests: Family<L3, Counter>,
    request_seconds: Histograms<L2>,
    archived: Counter,
    endpoint_requests: Family<L2, Counter>,
    endpoint_seconds: Histograms<L1>,
    endpoint_replicas: Family<L2, Gauge>,
}

/// Queue waits and submit-to-start times: from a scheduler pass (0.1 s) to days.
fn wait_buckets() -> Histogram {
    Histogram::new([0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0])
}

/// Sub-millisecond to seconds: passes, commits, API requests.
fn fast_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.5, 14))
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let m = Metrics {
            registry: Registry::default(),
            tenants: Registry::default(),
            submitted: Family::default(),
            starts: Family::default(),
            finished: Family::default(),
            queue_wait: Family::new_with_constructor(wait_buckets),
            submit_to_start: Family::new_with_constructor(wait_buckets),
            pass: fast_buckets(),
            commit: Family::new_with_constructor(fast_buckets),
            requests: Family::default(),
            request_seconds: Family::new_with_constructor(fast_buckets),
            archived: Counter::default(),
            endpoint_requests: Family::default(),
            endpoint_seconds: Family::new_with_constructor(fast_buckets),
            endpoint_replicas: Family::default(),
        };
        let mut r = Registry::default();
        r.register("berth_build", "The berth version this manager runs", build_info());
        r.register("berth_jobs_submitted", "Jobs submitted, by queue", m.submitted.clone());
        r.register(
            "berth_scheduler_starts",
            "Jobs the scheduler placed (rate() gives starts per second), by queue",
            m.starts.clone(),
        );
        r.register("berth_jobs_finished", "Jobs that reached a final state, by queue and state", m.finished.clone());
        let wait = "Time from submit to placement by the scheduler (a requeued job counts from its submit), by queue";
        seconds(&mut r, "berth_job_queue_wait", wait, m.queue_wait.clone());
        let start = "Time from submit to the first kernel running, by queue";
        seconds(&mut r, "berth_job_submit_to_start", start, m.submit_to_start.clone());
        seconds(&mut r, "berth_scheduler_pass", "Duration of scheduling passes that had pending jobs", m.pass.clone());
        seconds(&mut r, "berth_store_commit", "Store commit latency, by what was committed", m.commit.clone());
        r.register("berth_api_requests", "REST API requests, by method, route template and status", m.requests.clone());
        let api = "REST API request latency, by method and route template";
        seconds(&mut r, "berth_api_request", api, m.request_seconds.clone());
        let archived = "Finished jobs moved from the store's hot tables into its archive (retention)";
        r.register("berth_jobs_archived", archived, m.archived.clone());
        let served =
            "Requests to serving endpoints, by endpoint and the status answered (502/503/504: no replica answered)";
        // Endpoint names are tenants': a private endpoint's must not be read by strangers.
        let mut t = Registry::default();
        t.register("berth_endpoint_requests", served, m.endpoint_requests.clone());
        let latency = "Serving endpoints' latency to the response head, by endpoint";
        seconds(&mut t, "berth_endpoint_request_duration", latency, m.endpoint_seconds.clone());
        let replicas = "Serving endpoints' replicas, by endpoint and state (starting, not-ready, ready, draining)";
        t.register("berth_endpoint_replicas", replicas, m.endpoint_replicas.clone());
        Metrics { registry: r, tenants: t, ..m }
    }

    pub fn submitted(&self, queue: &str) {
        self.submitted.get_or_create(&[("queue", queue.to_string())]).inc();
    }

    /// A pass placed a job of `queue` that had waited `waited`.
    pub fn started(&self, queue: &str, waited: Duration) {
        let l = [("queue", queue.to_string())];
        self.starts.get_or_create(&l).inc();
        self.queue_wait.get_or_create(&l).observe(waited.as_secs_f64());
    }

    pub fn pass(&self, took: Duration) {
        self.pass.observe(took.as_secs_f64());
    }

    pub fn commit(&self, what: Commit, took: Duration) {
        self.commit.get_or_create(&[("batch", what.as_str().to_string())]).observe(took.as_secs_f64());
    }

    pub fn request(&self, method: &str, route: &str, status: u16, took: Duration) {
        let (method, route) = (("method", method.to_string()), ("route", route.to_string()));
        self.requests.get_or_create(&[method.clone(), route.clone(), ("status", status.to_string())]).inc();
        self.request_seconds.get_or_create(&[method, route]).observe(took.as_secs_f64());
    }

    /// Endpoint `endpoint`'s request series, to keep and record into per request.
    pub fn endpoint(&self, endpoint: &str) -> EndpointSeries {
        EndpointSeries {
            name: endpoint.to_string(),
            requests: self.endpoint_requests.clone(),
            seconds: self.endpoint_seconds.clone(),
            ok: OnceLock::new(),
            latency: OnceLock::new(),
        }
    }

    /// Every endpoint's replicas by state (starting, not ready, ready, draining), replacing
    /// the last round's (a removed endpoint's series go).
    pub fn endpoint_replicas(&self, counts: &[(String, [u64; 4])]) {
        self.endpoint_replicas.clear();
        for (name, c) in counts {
            for (state, n) in ["starting", "not-ready", "ready", "draining"].iter().zip(c) {
                let l = [("endpoint", name.clone()), ("state", state.to_string())];
                self.endpoint_replicas.get_or_create(&l).set(*n as i64);
            }
        }
    }

    /// Retention archived `n` finished jobs.
    pub fn archived(&self, n: u64) {
        self.archived.inc_by(n);
    }

    pub fn job_event(&self, ev: JobEvent) {
        match ev {
            JobEvent::Started { queue, since_submit } => {
                self.submit_to_start.get_or_create(&[("queue", queue)]).observe(since_submit.as_secs_f64());
            }
            JobEvent::Finished { queue, state } => {
                let state = state.as_str().to_ascii_lowercase();
                self.finished.get_or_create(&[("queue", queue), ("state", state)]).inc();
            }
        }
    }

    /// The exposition `view` may see: these event metrics (tenants' with [`View::All`]), then
    /// the levels of `snapshot`.
    pub fn render(&self, snapshot: &Snapshot, view: View) -> String {
        use prometheus_client::encoding::text::{encode_eof, encode_registry};
        let mut out = String::with_capacity(64 * 1024);
        let levels = snapshot.registry();
        // Writing to a String cannot fail.
        let _ = encode_registry(&mut out, &self.registry);
        if view == View::All {
            let _ = encode_registry(&mut out, &self.tenants);
        }
        let _ = encode_registry(&mut out, &levels);
        let _ = encode_eof(&mut out);
        out
    }
}

fn seconds(r: &mut Registry, name: &str, help: &str, metric: impl prometheus_client::registry::Metric) {
    r.register_with_unit(name, help, Unit::Seconds, metric);
}

fn build_info() -> Info<L1> {
    Info::new([("version", env!("CARGO_PKG_VERSION").to_string())])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_render_with_prometheus_names() {
        let m = Metrics::new();
        m.submitted("gpu");
        m.started("gpu", Duration::from_secs(2));
        m.job_event(JobEvent::Finished { queue: "gpu".into(), state: JobState::Succeeded });
        m.request("GET", "/v1/jobs/{id}", 404, Duration::from_millis(3));
        m.commit(Commit::Pass, Duration::from_millis(1));
        m.archived(3);
        let text = m.render(&Snapshot::default(), View::Cluster);
        for line in [
            "berth_build_info{version=\"",
            "berth_jobs_submitted_total{queue=\"gpu\"} 1",
            "berth_scheduler_starts_total{queue=\"gpu\"} 1",
            "berth_jobs_finished_total{queue=\"gpu\",state=\"succeeded\"} 1",
            "berth_job_queue_wait_seconds_count{queue=\"gpu\"} 1",
            "berth_api_requests_total{method=\"GET\",route=\"/v1/jobs/{id}\",status=\"404\"} 1",
            "berth_store_commit_seconds_count{batch=\"pass\"} 1",
            "berth_agents_connected 0",
            "berth_jobs_archived_total 3",
        ] {
            assert!(text.contains(line), "missing `{line}` in\n{text}");
        }
        assert!(text.ends_with("# EOF\n"), "one EOF, at the end");
        assert_eq!(text.matches("# EOF").count(), 1);
    }

    #[test]
    fn endpoint_names_are_only_in_the_full_view() {
        let m = Metrics::new();
        let series = m.endpoint("aserv");
        series.request(200, Duration::from_millis(3));
        series.request(503, Duration::from_millis(1));
        m.endpoint_replicas(&[("aserv".into(), [0, 0, 1, 0])]);
        let cluster = m.render(&Snapshot::default(), View::Cluster);
        assert!(!cluster.contains("aserv"), "{cluster}");
        assert!(cluster.contains("berth_build_info"), "{cluster}");
        let all = m.render(&Snapshot::default(), View::All);
        assert!(all.contains("berth_endpoint_requests_total{endpoint=\"aserv\",code=\"200\"} 1"), "{all}");
        assert!(all.contains("berth_endpoint_requests_total{endpoint=\"aserv\",code=\"503\"} 1"), "{all}");
        assert!(all.contains("berth_endpoint_request_duration_seconds_count{endpoint=\"aserv\"} 2"), "{all}");
        assert!(all.contains("berth_endpoint_replicas{endpoint=\"aserv\",state=\"ready\"} 1"), "{all}");
        assert_eq!(all.matches("# EOF").count(), 1);
    }
}
