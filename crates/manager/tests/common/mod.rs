//! Shared test helpers: a manager on 127.0.0.1:0 in a temp dir, a REST client and a fake
//! agent speaking the WebSocket protocol.
#![allow(dead_code)]

use std::future::Future;
use std::path::Path;
use std::time::Duration;

pub use berth_manager::clock::Clock;
use berth_manager::{ManagerConfig, ManagerHandle};
use berth_model::api::JobView;
use berth_model::protocol::{AgentMessage, KernelEvent, KernelOutcome, KernelReport, ManagerMessage, PROTOCOL_VERSION};
use berth_model::{JobSpec, Topology};
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

/// Generous: tests fail on it, they never measure with it.
pub const WAIT: Duration = Duration::from_secs(15);

pub fn config(dir: &Path, heartbeat: Duration) -> ManagerConfig {
    ManagerConfig {
        cache: None,
        data_dir: dir.to_path_buf(),
        store: None,
        listen: "127.0.0.1:0".parse().unwrap(),
        admin_user: "alice".into(),
        config_file: None,
        heartbeat_timeout: heartbeat,
        tls: None,
        socket: Some(berth_manager::local::LocalSocket { path: dir.join("berth.sock"), everyone: false }),
        apps_listen: None,
        apps_url: None,
        apps_listen_defaulted: false,
        advertise_url: None,
        lease_timeout: berth_manager::DEFAULT_LEASE_TIMEOUT,
        on_standby: None,
        retain: None,
        folder_root: None,
        code_limit: None,
        metrics: Default::default(),
        stop: None,
    }
}

pub struct Env {
    pub dir: tempfile::TempDir,
    pub m: ManagerHandle,
    pub admin: Client,
    /// The manager's clock: a manual one ([`start_manual`]) moves only when the test
    /// advances it.
    pub clock: Clock,
}

pub async fn start() -> Env {
    start_with(Duration::from_secs(60)).await
}

pub async fn start_with(heartbeat: Duration) -> Env {
    start_in(tempfile::tempdir().unwrap(), |c| ManagerConfig { heartbeat_timeout: heartbeat, ..c }, Clock::system())
        .await
}

/// A manager whose clock stands still until the test advances it (`e.clock.advance(..)`),
/// for tests that would otherwise sleep for time to pass (a token's expiry, usage).
pub async fn start_manual() -> Env {
    start_in(tempfile::tempdir().unwrap(), |c| c, Clock::manual()).await
}

/// A manager in `dir` with the config `tune` makes of the default one, reading `clock`.
pub async fn start_in(dir: tempfile::TempDir, tune: impl FnOnce(ManagerConfig) -> ManagerConfig, clock: Clock) -> Env {
    let m = berth_manager::start_with_clock(tune(config(dir.path(), Duration::from_secs(60))), clock.clone())
        .await
        .unwrap();
    let token = m.bootstrap.clone().expect("first start bootstraps").token;
    let admin = Client::new(&m.url, &token);
    Env { dir, m, admin, clock }
}

/// Makes the `default` queue strict FIFO (nothing passes a blocked head), for tests of what a
/// strict queue shows: the default queue has the recommended policy (backfill, qssf).
pub async fn strict_fifo(admin: &Client) {
    let body = serde_json::json!({"ordering": "fifo", "head_of_line": "strict"});
    let (s, v) = admin.put("/v1/queues/default", body).await;
    assert_eq!(s, 200, "{v}");
}

/// A REST client holding one token.
#[derive(Clone)]
pub struct Client {
    pub url: String,
    pub token: String,
    pub http: reqwest::Client,
}

impl Client {
    pub fn new(url: &str, token: &str) -> Client {
        Client { url: url.to_string(), token: token.to_string(), http: reqwest::Client::new() }
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let r = self.http.get(format!("{}{path}", self.url)).bearer_auth(&self.token).send().await.unwrap();
        decode(r).await
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let r =
            self.http.post(format!("{}{path}", self.url)).bearer_auth(&self.token).json(&body).send().await.unwrap();
        decode(r).await
    }

    pub async fn put(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self.http.put(format!("{}{path}", self.url)).bearer_auth(&self.token).json(&body).send().await.unwrap();
        decode(r).await
    }

    pub async fn delete(&self, path: &str) -> (u16, Value) {
        let r = self.http.delete(format!("{}{path}", self.url)).bearer_auth(&self.token).send().await.unwrap();
        decode(r).await
    }

    pub async fn submit(&self, spec: &JobSpec) -> (u16, Value) {
        self.post("/v1/jobs", serde_json::json!({ "spec": spec })).await
    }

    pub async fn submit_ok(&self, spec: &JobSpec) -> i64 {
        let (s, v) = self.submit(spec).await;
        assert_eq!(s, 201, "{v}");
        v["id"].as_i64().unwrap()
    }

    pub async fn job(&self, id: i64) -> Value {
        let (s, v) = self.get(&format!("/v1/jobs/{id}")).await;
        assert_eq!(s, 200, "{v}");
        v
    }

    pub async fn state(&self, id: i64) -> String {
        self.job(id).await["job"]["state"].as_str().unwrap().to_string()
    }

    /// Polls until job `id` is in `state` (fails after [`WAIT`]).
    pub async fn wait_state(&self, id: i64, state: &str) -> Value {
        let c = self.clone();
        let want = state.to_string();
        eventually(&format!("job {id} to become {state}"), move || {
            let c = c.clone();
            let want = want.clone();
            async move {
                let j = c.job(id).await;
                (j["job"]["state"] == want.as_str()).then_some(j)
            }
        })
        .await
    }

    pub async fn list(&self, query: &str) -> Vec<JobView> {
        let (s, v) = self.get(&format!("/v1/jobs{query}")).await;
        assert_eq!(s, 200, "{v}");
        serde_json::from_value(v).unwrap()
    }
}

async fn decode(r: reqwest::Response) -> (u16, Value) {
    let s = r.status().as_u16();
    let text = r.text().await.unwrap();
    if s == 204 && text.is_empty() {
        return (s, Value::Null);
    }
    let v = serde_json::from_str(&text).unwrap_or_else(|_| panic!("status {s}: body is not JSON: {text:?}"));
    (s, v)
}

/// Polls `f` until it gives `Some`, failing the test after [`WAIT`].
pub async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn spec(cpus: f64, gpus: f64) -> JobSpec {
    let mut s = JobSpec::command(["sleep", "100"]);
    s.resources.cpu_milli = (cpus * 1000.0) as u64;
    s.resources.gpu_milli = (gpus * 1000.0) as u64;
    s.resources.mem_bytes = 1 << 30;
    s
}

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A fake agent: registers with a synthetic topology and reports whatever the test says.
pub struct Agent {
    pub ws: Ws,
    pub node: String,
}

impl Agent {
    pub async fn dial(url: &str, join_token: &str) -> Result<Ws, tokio_tungstenite::tungstenite::Error> {
        let ws_url = format!("{}/v1/agents/connect", url.replacen("http://", "ws://", 1));
        let mut req = ws_url.into_client_request().unwrap();
        req.headers_mut().insert("authorization", format!("Bearer {join_token}").parse().unwrap());
        tokio_tungstenite::connect_async(req).await.map(|(ws, _)| ws)
    }

    /// Connects and registers; returns once `Welcome` arrived.
    pub async fn connect(m: &ManagerHandle, node: &str, topo: Topology, kernels: Vec<KernelReport>) -> Agent {
        Agent::connect_labelled(m, node, topo, kernels, &[]).await
    }

    /// [`Agent::connect`] with agent labels (`berth agent --label k=v`).
    pub async fn connect_labelled(
        m: &ManagerHandle,
        node: &str,
        topo: Topology,
        kernels: Vec<KernelReport>,
        labels: &[(&str, &str)],
    ) -> Agent {
        Agent::connect_with(m, node, topo, kernels, labels, None).await
    }

    /// [`Agent::connect_labelled`] with the URL of the node's cache (`berth agent --cache-url`).
    pub async fn connect_with(
        m: &ManagerHandle,
        node: &str,
        topo: Topology,
        kernels: Vec<KernelReport>,
        labels: &[(&str, &str)],
        cache_url: Option<&str>,
    ) -> Agent {
        Agent::connect_cache(m, node, topo, kernels, labels, cache_url, None).await
    }

    /// [`Agent::connect_with`] with the weight of the node's cache (`berth agent --cache-weight`).
    pub async fn connect_cache(
        m: &ManagerHandle,
        node: &str,
        topo: Topology,
        kernels: Vec<KernelReport>,
        labels: &[(&str, &str)],
        cache_url: Option<&str>,
        cache_weight: Option<u32>,
    ) -> Agent {
        let ws = Agent::dial(&m.url, &m.join_token).await.unwrap();
        let mut a = Agent { ws, node: node.to_string() };
        a.send(AgentMessage::Register {
            protocol_version: PROTOCOL_VERSION,
            node: node.into(),
            agent_version: "test".into(),
            queue: "default".into(),
            topology: topo,
            kernels,
            address: Some(format!("{node}.addr")),
            containers: Default::default(),
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            cache_url: cache_url.map(str::to_string),
            cache_weight,
            folder_mounts: true,
        })
        .await;
        match a.recv().await {
            ManagerMessage::Welcome { .. } => {}
            m => panic!("expected welcome, got {m:?}"),
        }
        a
    }

    pub async fn send(&mut self, msg: AgentMessage) {
        self.ws.send(Message::Text(serde_json::to_string(&msg).unwrap().into())).await.unwrap();
    }

    pub async fn recv(&mut self) -> ManagerMessage {
        loop {
            let m = tokio::time::timeout(WAIT, self.ws.next())
                .await
                .expect("timed out waiting for a manager message")
                .expect("connection closed")
                .expect("websocket error");
            match m {
                Message::Text(t) => return serde_json::from_str(t.as_str()).unwrap(),
                Message::Close(_) => panic!("connection closed"),
                _ => continue,
            }
        }
    }

    /// Reads messages until one matches (others are dropped).
    pub async fn expect(&mut self, what: &str, f: impl Fn(&ManagerMessage) -> bool) -> ManagerMessage {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let m = tokio::time::timeout_at(deadline, self.recv())
                .await
                .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
            if f(&m) {
                return m;
            }
        }
    }

    /// The next `StartKernel`; returns (key, env).
    pub async fn expect_start(&mut self) -> ManagerMessage {
        self.expect("start-kernel", |m| matches!(m, ManagerMessage::StartKernel { .. })).await
    }
}

pub fn start_key(m: &ManagerMessage) -> berth_model::protocol::KernelKey {
    match m {
        ManagerMessage::StartKernel { key, .. } => *key,
        m => panic!("not a start: {m:?}"),
    }
}

/// A kernel's end as an agent reports it: `outcome` with exit code `code`, nothing measured.
pub fn finished(outcome: KernelOutcome, code: Option<i32>) -> KernelEvent {
    KernelEvent::Finished {
        outcome,
        exit_code: code,
        message: String::new(),
        at: jiff::Timestamp::now(),
        usage: None,
        signal: None,
    }
}
