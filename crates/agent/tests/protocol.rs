//! The agent against a small in-test manager (axum WebSocket server): register, commands and
//! their idempotent replays, logs, reconnect with a kernel still running, auth failure and
//! shutdown.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::extract::State;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use berth_agent::AgentConfig;
use berth_model::protocol::{AgentMessage, KernelEvent, KernelKey, KernelOutcome, LogStream, ManagerMessage};
use berth_model::{Binding, JobSpec};
use tokio::sync::mpsc;

#[derive(Clone)]
struct Manager {
    sockets: mpsc::UnboundedSender<WebSocket>,
    accept: Arc<AtomicBool>,
}

async fn connect(State(m): State<Manager>, headers: HeaderMap, ws: WebSocketUpgrade) -> Response {
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some("Bearer good-token") {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    if !m.accept.load(Ordering::SeqCst) {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    ws.on_upgrade(move |s| async move {
        let _ = m.sockets.send(s);
    })
}

/// Starts the fake manager; returns its URL, the stream of agent sockets and the accept switch.
async fn manager() -> (String, mpsc::UnboundedReceiver<WebSocket>, Arc<AtomicBool>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let accept = Arc::new(AtomicBool::new(true));
    let app = axum::Router::new()
        .route("/v1/agents/connect", axum::routing::get(connect))
        .with_state(Manager { sockets: tx, accept: accept.clone() });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, rx, accept)
}

fn config(url: &str, token: &str, dir: &std::path::Path, name: &str) -> AgentConfig {
    AgentConfig {
        manager_url: url.into(),
        join_token: token.into(),
        name: name.into(),
        queue: "default".into(),
        data_dir: dir.to_path_buf(),
        sysfs_root: "/sys".into(),
        fake_gpus: Some(2),
        topology_file: None,
        run_as: None,
        user_map: Default::default(),
        stop_grace: Duration::from_millis(200),
        address: None,
        labels: Default::default(),
        ca_file: None,
        docker: Default::default(),
        kernel_shim: None,
        favor_dynmods: false,
        stop_jobs: false,
        local_manager: false,
        cache_url: None,
        cache_weight: 1,
        metrics_listen: None,
        usage_interval: Some(berth_agent::USAGE_INTERVAL),
        envs: Default::default(),
    }
}

async fn send(ws: &mut WebSocket, m: &ManagerMessage) {
    ws.send(Message::Text(serde_json::to_string(m).unwrap().into())).await.unwrap();
}

/// The next agent message other than a heartbeat.
async fn recv(ws: &mut WebSocket) -> AgentMessage {
    loop {
        let m = tokio::time::timeout(Duration::from_secs(30), ws.recv()).await.expect("agent is silent");
        match m {
            Some(Ok(Message::Text(t))) => match serde_json::from_str(t.as_str()).unwrap() {
                AgentMessage::Heartbeat { .. } => continue,
                m => return m,
            },
            Some(Ok(_)) => continue,
            other => panic!("socket ended: {other:?}"),
        }
    }
}

fn key(job: i64) -> KernelKey {
    KernelKey { job_id: job, attempt: 1, index: 0 }
}

fn start(cmd_id: u64, job: i64, node: &str, cpus: &[u32], command: &[&str]) -> ManagerMessage {
    ManagerMessage::StartKernel {
        cmd_id,
        key: key(job),
        spec: JobSpec::command(command.iter().copied()),
        binding: Binding {
            node: node.into(),
            cpus: cpus.to_vec(),
            cpu_milli: 1000,
            mems: vec![0],
            mem_bytes: 64 << 20,
            gpus: vec![],
            port: None,
        },
        env: [("BERTH_JOB_ID".to_string(), job.to_string())].into(),
        submitter: None,
        folders: Vec::new(),
        code: None,
        datasets: Vec::new(),
    }
}

fn finished(m: &AgentMessage) -> Option<(KernelKey, KernelOutcome, String)> {
    match m {
        AgentMessage::Kernel { key, event: KernelEvent::Finished { outcome, message, .. } } => {
            Some((*key, *outcome, message.clone()))
        }
        _ => None,
    }
}

async fn register(ws: &mut WebSocket, node: &str) -> Vec<berth_model::protocol::KernelReport> {
    register_with(ws, node, 0).await
}

/// Answers the agent's `Register` with a `Welcome` naming `timeout_ms` as the heartbeat timeout
/// (0: no fencing).
async fn register_with(ws: &mut WebSocket, node: &str, timeout_ms: u64) -> Vec<berth_model::protocol::KernelReport> {
    match recv(ws).await {
        AgentMessage::Register { protocol_version, node: n, queue, topology, kernels, address, .. } => {
            assert_eq!(address.as_deref(), Some("127.0.0.1"), "the route to a loopback manager");
            assert_eq!(protocol_version, berth_model::protocol::PROTOCOL_VERSION);
            assert_eq!((n.as_str(), queue.as_str()), (node, "default"));
            assert_eq!(topology.gpus.len(), 2);
            assert!(!topology.cpus.is_empty());
            let welcome = ManagerMessage::Welcome { heartbeat_interval_ms: 200, heartbeat_timeout_ms: timeout_ms };
            send(ws, &welcome).await;
            kernels
        }
        other => panic!("expected register, got {other:?}"),
    }
}

#[tokio::test]
async fn full_protocol_flow() {
    let (url, mut sockets, accept) = manager().await;
    let dir = tempfile::tempdir().unwrap();
    let node = format!("proto-{}", std::process::id());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let agent = tokio::spawn(berth_agent::run(config(&url, "good-token", dir.path(), &node), async {
        let _ = stop_rx.await;
    }));

    let mut ws = sockets.recv().await.unwrap();
    assert!(register(&mut ws, &node).await.is_empty());

    // Start → Started, Finished.
    send(&mut ws, &start(1, 1, &node, &[0], &["sh", "-c", "echo hello $BERTH_JOB_ID"])).await;
    let started = recv(&mut ws).await;
    assert!(
        matches!(started, AgentMessage::Kernel { key: k, event: KernelEvent::Started { pid, .. } } if k == key(1) && pid > 0)
    );
    let done = recv(&mut ws).await;
    assert_eq!(finished(&done), Some((key(1), KernelOutcome::Succeeded, String::new())));

    // Replays only report the current state.
    send(&mut ws, &start(1, 1, &node, &[0], &["sh", "-c", "echo again"])).await;
    assert_eq!(recv(&mut ws).await, done);
    send(&mut ws, &ManagerMessage::StopKernel { cmd_id: 2, key: key(1), reason: "x".into(), grace_ms: 10 }).await;
    assert_eq!(recv(&mut ws).await, done);
    send(&mut ws, &ManagerMessage::StopKernel { cmd_id: 3, key: key(99), reason: "x".into(), grace_ms: 10 }).await;
    assert_eq!(
        finished(&recv(&mut ws).await),
        Some((key(99), KernelOutcome::Stopped, "not running on this node".into()))
    );

    // Logs by offset, also after Forget.
    let fetch = |req_id, offset, max_bytes| ManagerMessage::FetchLogs {
        req_id,
        key: key(1),
        stream: LogStream::Stdout,
        offset,
        max_bytes,
    };
    send(&mut ws, &fetch(7, 0, 1000)).await;
    let b64 = base64::engine::general_purpose::STANDARD;
    match recv(&mut ws).await {
        AgentMessage::LogData { req_id: 7, data, next_offset: 8, found: true } => {
            assert_eq!(b64.decode(data).unwrap(), b"hello 1\n");
        }
        other => panic!("{other:?}"),
    }
    send(&mut ws, &ManagerMessage::Forget { key: key(1) }).await;
    send(&mut ws, &fetch(8, 2, 3)).await;
    match recv(&mut ws).await {
        AgentMessage::LogData { req_id: 8, data, next_offset: 5, found: true } => {
            assert_eq!(b64.decode(data).unwrap(), b"llo")
        }
        other => panic!("{other:?}"),
    }

    // The ledger refuses a binding that clashes with a running kernel.
    send(&mut ws, &start(4, 2, &node, &[0], &["sleep", "60"])).await;
    let pid = match recv(&mut ws).await {
        AgentMessage::Kernel { event: KernelEvent::Started { pid, .. }, .. } => pid,
        other => panic!("{other:?}"),
    };
    send(&mut ws, &start(5, 3, &node, &[0], &["true"])).await;
    match recv(&mut ws).await {
        AgentMessage::CommandFailed { cmd_id: 5, key: k, error } => {
            assert_eq!(k, key(3));
            assert_eq!(error, "CPU 0 is already used by another kernel");
        }
        other => panic!("{other:?}"),
    }
    // A kernel that will end while the agent is disconnected. Its gate lies outside /tmp:
    // kernels of a root agent get a private /tmp.
    let gates = tempfile::tempdir_in("/var/tmp").unwrap();
    let gate = gates.path().join("go");
    let wait_gate = format!("while [ ! -e {} ]; do sleep 0.01; done", gate.display());
    send(&mut ws, &start(6, 4, &node, &[], &["sh", "-c", &wait_gate])).await;
    assert!(matches!(recv(&mut ws).await, AgentMessage::Kernel { event: KernelEvent::Started { .. }, .. }));

    // The manager drops the connection and refuses new ones for a while: kernels go on.
    accept.store(false, Ordering::SeqCst);
    drop(ws);
    std::fs::write(&gate, "").unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    accept.store(true, Ordering::SeqCst);
    let mut ws = sockets.recv().await.unwrap();
    let reports = register(&mut ws, &node).await;
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists(), "kernel 2 kept running");
    let r2 = reports.iter().find(|r| r.key == key(2)).expect("kernel 2 reported");
    assert!(matches!(r2.last, KernelEvent::Started { pid: p, .. } if p == pid));
    assert!(reports.iter().all(|r| r.key != key(1)), "forgotten kernels are not reported");
    // Kernel 4 ended while disconnected: in the report, or sent right after Welcome.
    let r4 = reports.iter().find(|r| r.key == key(4)).expect("kernel 4 reported");
    if !matches!(r4.last, KernelEvent::Finished { .. }) {
        assert_eq!(finished(&recv(&mut ws).await).map(|f| (f.0, f.1)), Some((key(4), KernelOutcome::Succeeded)));
    }

    // Stop after reconnect.
    send(&mut ws, &ManagerMessage::StopKernel { cmd_id: 9, key: key(2), reason: "cancelled".into(), grace_ms: 100 })
        .await;
    assert_eq!(finished(&recv(&mut ws).await), Some((key(2), KernelOutcome::Stopped, "cancelled".into())));

    // Agent shutdown stops what runs, reports it and closes.
    send(&mut ws, &start(10, 5, &node, &[0], &["sleep", "60"])).await;
    assert!(matches!(recv(&mut ws).await, AgentMessage::Kernel { event: KernelEvent::Started { .. }, .. }));
    stop_tx.send(()).unwrap();
    assert_eq!(finished(&recv(&mut ws).await), Some((key(5), KernelOutcome::Stopped, "agent shut down".into())));
    loop {
        match tokio::time::timeout(Duration::from_secs(10), ws.recv()).await.unwrap() {
            Some(Ok(Message::Close(_))) | None => break,
            Some(Ok(_)) => continue,
            Some(Err(_)) => break,
        }
    }
    tokio::time::timeout(Duration::from_secs(10), agent).await.unwrap().unwrap().unwrap();
}

#[tokio::test]
async fn rejected_join_token_is_fatal() {
    let (url, _sockets, _) = manager().await;
    let dir = tempfile::tempdir().unwrap();
    let run = berth_agent::run(config(&url, "wrong", dir.path(), "badtoken"), std::future::pending());
    let err = tokio::time::timeout(Duration::from_secs(30), run).await.unwrap().unwrap_err();
    assert_eq!(err.to_string(), "join token rejected by the manager");
}

#[tokio::test]
async fn version_refusal_is_fatal() {
    let (url, mut sockets, _) = manager().await;
    let dir = tempfile::tempdir().unwrap();
    let agent =
        tokio::spawn(berth_agent::run(config(&url, "good-token", dir.path(), "refused"), std::future::pending()));
    let mut ws = sockets.recv().await.unwrap();
    assert!(matches!(recv(&mut ws).await, AgentMessage::Register { .. }));
    send(&mut ws, &ManagerMessage::Refused { reason: "protocol version 1 is not supported".into() }).await;
    let err = tokio::time::timeout(Duration::from_secs(30), agent).await.unwrap().unwrap().unwrap_err();
    assert!(err.to_string().contains("protocol version 1 is not supported"), "{err}");
}

#[tokio::test]
async fn an_unusable_ca_file_fails_the_start_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config("https://127.0.0.1:1", "t", dir.path(), "tls");
    c.ca_file = Some(dir.path().join("missing-ca.pem"));
    // Without the check at start this would retry the dead address forever.
    let err = tokio::time::timeout(Duration::from_secs(30), berth_agent::run(c, std::future::pending()))
        .await
        .expect("the agent gave up at once")
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("cannot read the CA file") && err.contains("missing-ca.pem"), "{err}");
}

/// A manager that goes silent (a partition: no commands, no pings) makes the agent fence: it
/// stops its kernels after half the heartbeat timeout, reports them `fenced` on the next
/// connection, and a manager that keeps pinging keeps them alive.
#[tokio::test]
async fn a_silent_manager_makes_the_agent_fence_its_kernels() {
    let (url, mut sockets, _accept) = manager().await;
    let dir = tempfile::tempdir().unwrap();
    let node = format!("fence-{}", std::process::id());
    let (_stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let _agent = tokio::spawn(berth_agent::run(config(&url, "good-token", dir.path(), &node), async {
        let _ = stop_rx.await;
    }));
    let mut ws = sockets.recv().await.unwrap();
    register_with(&mut ws, &node, 2000).await;
    send(&mut ws, &start(1, 7, &node, &[0], &["sleep", "60"])).await;
    assert!(matches!(recv(&mut ws).await, AgentMessage::Kernel { event: KernelEvent::Started { .. }, .. }));

    // Pings alone keep the lease: 3 s of pings at 100 ms, three times the 1 s lease (a 0.5 s
    // lease fenced now and then on a loaded 2-core machine where the test itself stalled).
    for _ in 0..30 {
        ws.send(Message::Ping(Default::default())).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Silence: the agent fences within the lease (plus the 1/8-timeout grace) and drops this
    // connection; the kernel's end arrives on the next one.
    let ended = loop {
        match tokio::time::timeout(Duration::from_secs(10), ws.recv()).await.expect("agent is silent") {
            Some(Ok(Message::Text(t))) => match serde_json::from_str::<AgentMessage>(t.as_str()).unwrap() {
                m @ AgentMessage::Kernel { event: KernelEvent::Finished { .. }, .. } => break Some(m),
                _ => continue,
            },
            Some(Ok(_)) => continue,
            _ => break None,
        }
    };
    let report = match ended {
        Some(m) => finished(&m).unwrap(),
        None => {
            let mut ws = sockets.recv().await.unwrap();
            let kernels = register_with(&mut ws, &node, 2000).await;
            let k = kernels.iter().find(|k| k.key == key(7)).expect("the fenced kernel is reported");
            match &k.last {
                KernelEvent::Finished { outcome, message, .. } => (k.key, *outcome, message.clone()),
                // Reconnected while the kernel was still stopping: its end follows here.
                KernelEvent::Started { .. } | KernelEvent::Preparing { .. } => loop {
                    if let m @ AgentMessage::Kernel { event: KernelEvent::Finished { .. }, .. } = recv(&mut ws).await {
                        break finished(&m).unwrap();
                    }
                },
            }
        }
    };
    assert_eq!(report.1, KernelOutcome::Fenced, "{report:?}");
    assert!(report.2.contains("lost contact with the manager"), "{report:?}");
}

/// Regression (cluster tests, a multi-node `--requeue` job losing one node): the manager frees
/// a kernel's devices when it decides to stop it, so the job's new attempt may be sent to a
/// node whose old kernel is still within its stop grace. The start waits for the stop instead
/// of failing the job; a start that clashes with a kernel nobody stops is still refused.
#[tokio::test]
async fn a_start_waits_for_a_stopping_kernel_that_holds_its_devices() {
    let (url, mut sockets, _accept) = manager().await;
    let dir = tempfile::tempdir().unwrap();
    let node = format!("defer-{}", std::process::id());
    let (_stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let _agent = tokio::spawn(berth_agent::run(config(&url, "good-token", dir.path(), &node), async {
        let _ = stop_rx.await;
    }));
    let mut ws = sockets.recv().await.unwrap();
    register(&mut ws, &node).await;
    // The old kernel ignores SIGTERM: it holds CPU 0 until the SIGKILL after its grace.
    send(&mut ws, &start(1, 1, &node, &[0], &["sh", "-c", "trap '' TERM; sleep 30"])).await;
    assert!(matches!(recv(&mut ws).await, AgentMessage::Kernel { event: KernelEvent::Started { .. }, .. }));
    // Nobody stops it yet: a clashing start is refused.
    send(&mut ws, &start(2, 3, &node, &[0], &["true"])).await;
    assert!(matches!(recv(&mut ws).await, AgentMessage::CommandFailed { cmd_id: 2, .. }));

    send(&mut ws, &ManagerMessage::StopKernel { cmd_id: 3, key: key(1), reason: "node lost".into(), grace_ms: 800 })
        .await;
    send(&mut ws, &start(4, 2, &node, &[0], &["true"])).await;
    // First the old kernel's end, then the waiting start runs (and ends).
    let mut order = Vec::new();
    while order.len() < 3 {
        match recv(&mut ws).await {
            AgentMessage::Kernel { key: k, event } => {
                order.push((k.job_id, matches!(event, KernelEvent::Started { .. })))
            }
            AgentMessage::CommandFailed { error, .. } => panic!("the start was refused: {error}"),
            _ => {}
        }
    }
    assert_eq!(order[0], (1, false), "{order:?}");
    assert_eq!(order[1], (2, true), "{order:?}");
}

/// Sends `m` as a frame of the manager leading with `epoch`.
async fn send_as(ws: &mut WebSocket, epoch: u64, m: &ManagerMessage) {
    let frame = berth_model::protocol::Envelope { epoch, msg: m.clone() };
    ws.send(Message::Text(serde_json::to_string(&frame).unwrap().into())).await.unwrap();
}

/// Fencing by epoch, on the agent's side: a command of an older leader is refused, and so is
/// an older leader's connection once the agent followed a newer one.
#[tokio::test]
async fn an_older_leaders_commands_and_connections_are_refused() {
    let (url, mut sockets, _accept) = manager().await;
    let dir = tempfile::tempdir().unwrap();
    let node = format!("epoch-{}", std::process::id());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let agent = tokio::spawn(berth_agent::run(config(&url, "good-token", dir.path(), &node), async {
        let _ = stop_rx.await;
    }));
    let mut ws = sockets.recv().await.unwrap();
    assert!(matches!(recv(&mut ws).await, AgentMessage::Register { .. }));
    let welcome = ManagerMessage::Welcome { heartbeat_interval_ms: 200, heartbeat_timeout_ms: 0 };
    send_as(&mut ws, 5, &welcome).await;

    // epoch 4 is a deposed leader: its start is dropped; epoch 5's runs
    send_as(&mut ws, 4, &start(1, 1, &node, &[0], &["true"])).await;
    send_as(&mut ws, 5, &start(2, 2, &node, &[0], &["true"])).await;
    let first = recv(&mut ws).await;
    assert!(
        matches!(first, AgentMessage::Kernel { key: k, event: KernelEvent::Started { .. } } if k == key(2)),
        "the older leader's start never ran: {first:?}"
    );
    assert_eq!(finished(&recv(&mut ws).await).map(|f| f.0), Some(key(2)));

    // A new connection whose manager welcomes with an older epoch is left at once.
    drop(ws);
    let mut old = sockets.recv().await.unwrap();
    assert!(matches!(recv(&mut old).await, AgentMessage::Register { .. }));
    send_as(&mut old, 3, &welcome).await;
    let left = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match old.recv().await {
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return,
                Some(Ok(_)) => continue,
            }
        }
    })
    .await;
    assert!(left.is_ok(), "the agent leaves a deposed leader's connection");
    // and the next manager, at epoch 6, is followed
    let mut new = sockets.recv().await.unwrap();
    assert!(matches!(recv(&mut new).await, AgentMessage::Register { .. }));
    send_as(&mut new, 6, &welcome).await;
    send_as(&mut new, 6, &start(3, 3, &node, &[0], &["true"])).await;
    assert!(matches!(recv(&mut new).await, AgentMessage::Kernel { key: k, .. } if k == key(3)));
    let _ = stop_tx.send(());
    let _ = agent.await;
}
