//! Agent connections: one WebSocket per agent at `/v1/agents/connect` (protocol in
//! `berth_model::protocol`). Handles `Register` (with reconciliation) here, and hands the
//! rest (heartbeats, kernel events, command failures, log answers) to the report loop
//! (`reports.rs`), which applies them with [`handle`].

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use berth_model::protocol::{
    AgentMessage, Envelope, KernelEvent, KernelOutcome, KernelReport, ManagerMessage, PROTOCOL_VERSION,
};
use berth_model::{JobState, Topology};
use berth_sched::NodeLedger;
use berth_store::NodeRow;
use futures_util::{FutureExt, SinkExt, StreamExt};
use tokio::sync::mpsc;

use crate::error::ApiError;
use crate::hub::LogReply;
use crate::kernel_start::send_start_one;
use crate::manager::Manager;
use crate::state::{Conn, Exit, Node};

/// Most agent messages handled under one state lock.
const MAX_BATCH: usize = 256;

/// How long a new connection may take to send `Register`.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(10);

/// `GET /v1/agents/connect`: checks the join token, then upgrades to a WebSocket.
pub async fn connect(
    State(m): State<Arc<Manager>>,
    headers: HeaderMap,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let ok = crate::auth::bearer_of(&headers).is_some_and(|t| m.tenancy.join_token_valid(t));
    if !ok {
        return ApiError::unauthorized("invalid or missing join token: start the agent with --join-token <token>")
            .into_response();
    }
    match ws {
        // A small read buffer: tungstenite zero-fills its unused part before every read, and
        // agents send small frames (with the 128 KiB default, that memset was 5% of a loaded
        // manager's CPU, and 500 agents' buffers 64 MiB of its memory: docs/perf.md, issue 42).
        Ok(ws) => ws.read_buffer_size(berth_model::stream::READ_BUFFER).on_upgrade(move |socket| serve(m, socket)),
        Err(e) => ApiError::bad_request(format!("expected a websocket upgrade: {}", e.body_text())).into_response(),
    }
}

async fn serve(m: Arc<Manager>, socket: WebSocket) {
    let (mut sink, mut stream) = socket.split();
    let first = tokio::time::timeout(REGISTER_TIMEOUT, next_message(&mut stream)).await;
    let refuse = |reason: String| ManagerMessage::Refused { reason };
    let register = match first {
        Ok(Some(Ok(msg))) => msg,
        Ok(Some(Err(e))) => {
            let _ = send(&mut sink, &refuse(format!("bad message: {e}"))).await;
            return;
        }
        _ => return,
    };
    let AgentMessage::Register {
        protocol_version,
        node,
        agent_version,
        queue,
        topology,
        kernels,
        address,
        containers,
        labels,
        cache_url,
        cache_weight,
        folder_mounts,
    } = register
    else {
        let _ = send(&mut sink, &refuse("the first message must be register".into())).await;
        return;
    };
    if protocol_version != PROTOCOL_VERSION {
        let reason = format!(
            "agent speaks protocol version {protocol_version}, this manager speaks {PROTOCOL_VERSION}: \
             run the same berth version on the agent and the manager"
        );
        let _ = send(&mut sink, &refuse(reason)).await;
        let _ = sink.close().await;
        return;
    }
    if !crate::node_name::valid_node_name(&node) {
        let _ =
            send(&mut sink, &refuse(format!("invalid node name `{node}`: use letters, digits, `-`, `_`, `.`"))).await;
        let _ = sink.close().await;
        return;
    }

    let (tx, mut rx) = mpsc::unbounded_channel::<ManagerMessage>();
    let conn_id = m.hub.next_id();
    // Pings tell the agent the manager still hears it: an agent that gets no frame for half
    // the heartbeat timeout fences itself (stops its kernels), see berth-agent's `conn`.
    let ping_every = m.nodes.heartbeat_interval;
    let lease = m.lease.clone();
    let mut writer = tokio::spawn(async move {
        let mut ping = tokio::time::interval(ping_every);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let next = tokio::select! {
                msg = rx.recv() => match msg {
                    Some(msg) => Some(msg),
                    None => break,
                },
                _ = ping.tick() => None,
            };
            // A manager that no longer leads sends nothing, not even a ping (which would keep the
            // agent from looking for the new leader): it drops the connection instead.
            if !lease.may_act() {
                // (the loss itself is logged once, by `leader::keep`; a clean stop ends here too)
                tracing::debug!("not acting any more: closing an agent connection");
                break;
            }
            let sent = match next {
                Some(msg) => send(&mut sink, &Envelope { epoch: lease.epoch(), msg }).await,
                None => sink.send(Message::Ping(Default::default())).await,
            };
            if sent.is_err() {
                break;
            }
        }
        let _ = sink.close().await;
    });
    let agent = Registration {
        version: agent_version,
        queue,
        topology,
        address,
        containers,
        labels,
        cache_url,
        cache_weight,
        folder_mounts,
    };
    let heard = crate::heard::Heard::new(m.clock.instant());
    let conn = Conn { id: conn_id, tx, heard: heard.clone() };
    if let Err(e) = self::register(&m, conn, &node, agent, kernels).await {
        tracing::error!(node, "cannot register node: {e}");
        writer.abort();
        return;
    }

    let mut shutdown = m.shutdown.clone();
    loop {
        tokio::select! {
            msg = next_message(&mut stream) => match msg {
                Some(Ok(msg)) => {
                    // The rest of a burst goes along: one state lock for all of it. One lock
                    // round per message let a busy agent's heartbeat wait behind its own kernel
                    // events for 30 s with 500 agents (the node was declared lost).
                    let mut batch = vec![msg];
                    let mut closed = false;
                    while batch.len() < MAX_BATCH {
                        match next_message(&mut stream).now_or_never() {
                            Some(Some(Ok(msg))) => batch.push(msg),
                            Some(Some(Err(e))) => tracing::warn!(node, "ignoring bad message from agent: {e}"),
                            Some(None) => {
                                closed = true;
                                break;
                            }
                            None => break,
                        }
                    }
                    // Heard now, whenever the report loop gets to it (`heard::Heard`).
                    heard.handed(m.clock.instant());
                    let applied = match m.hub.report(&node, batch) {
                        Some(applied) => applied.await.is_ok(),
                        None => false,
                    };
                    heard.applied(m.clock.instant());
                    if !applied || closed {
                        break;
                    }
                }
                Some(Err(e)) => tracing::warn!(node, "ignoring bad message from agent: {e}"),
                None => break,
            },
            // The writer ends when this connection was replaced or the node declared lost.
            _ = &mut writer => break,
            _ = shutdown.changed() => break,
        }
    }
    m.nodes.disconnected(&m.jobs, &node, conn_id).await;
    writer.abort();
}

async fn send(
    sink: &mut futures_util::stream::SplitSink<WebSocket, Message>,
    msg: &impl serde::Serialize,
) -> Result<(), axum::Error> {
    let text = serde_json::to_string(msg).expect("protocol messages serialise");
    sink.send(Message::Text(text.into())).await
}

/// The next protocol message; `None` when the connection is over.
async fn next_message(
    stream: &mut futures_util::stream::SplitStream<WebSocket>,
) -> Option<Result<AgentMessage, serde_json::Error>> {
    loop {
        match stream.next().await? {
            Ok(Message::Text(t)) => return Some(serde_json::from_str(t.as_str())),
            Ok(Message::Binary(b)) => return Some(serde_json::from_slice(&b)),
            Ok(Message::Close(_)) | Err(_) => return None,
            Ok(_) => continue,
        }
    }
}

/// What an agent says about its node when it registers.
pub struct Registration {
    pub version: String,
    pub queue: String,
    pub topology: Topology,
    pub address: Option<String>,
    pub containers: berth_model::protocol::ContainerInfo,
    pub labels: std::collections::BTreeMap<String, String>,
    /// The dataset cache node on the agent's machine (`berth agent --cache-url`).
    pub cache_url: Option<String>,
    /// Its weight (`berth agent --cache-weight`; none: 1).
    pub cache_weight: Option<u32>,
    /// Whether process kernels there can get data folders (a root agent).
    pub folder_mounts: bool,
}

/// Registers (or re-registers) a node and reconciles its kernels with what the store says.
pub async fn register(
    m: &Manager,
    conn: Conn,
    node: &str,
    agent: Registration,
    kernels: Vec<KernelReport>,
) -> Result<(), berth_store::StoreError> {
    let Registration {
        version,
        queue: asked_queue,
        topology,
        address,
        containers,
        labels,
        cache_url,
        cache_weight,
        folder_mounts,
    } = agent;
    m.cache_members.reported(&*m.store, node, cache_url.as_deref(), cache_weight).await?;
    // A queue that selects this node by name or label takes it; else the agent's choice.
    let queue = crate::nodes::queue_for(&m.queues.all(), node, &labels, &asked_queue);
    let mut st = m.jobs.lock().await;
    let now = m.clock.now();
    m.store
        .upsert_node(&NodeRow {
            name: node.to_string(),
            queue: queue.clone(),
            topology: topology.clone(),
            version: version.clone(),
            state: berth_model::api::NodeState::Ready,
            last_heartbeat: Some(now),
            address: address.clone(),
            drain_reason: None,
        })
        .await?;
    // A drain outlives the agent's connections: keep it (it was loaded from the store).
    let drain = st.node(node).and_then(|n| n.drain.clone());
    if m.queues.get(&queue).is_none() {
        tracing::warn!(node, queue, "node joined a queue that is not configured: no job will run on it");
    }
    let mut ledger = NodeLedger::new(node, queue.clone(), topology);
    ledger.set_images(crate::images::ledger_images(&containers));
    ledger.set_allowed_mounts(Some(containers.allow_mounts.clone()));
    ledger.set_labels(labels.clone());
    ledger.set_folder_mounts(Some(folder_mounts));
    if !folder_mounts {
        tracing::info!(node, "node cannot mount data folders into process kernels (its agent is not root)");
    }
    m.nodes.publish_shape(&ledger);
    // Replacing the entry drops the old connection's sender, which closes it.
    st.register_node(
        node.to_string(),
        Node {
            ledger: 0,
            queue,
            asked_queue,
            labels,
            version,
            ready: true,
            address,
            drain,
            last_heartbeat: Some(now),
            heard: conn.heard.clone(),
            conn: Some(conn.clone()),
            orphan_deadline: None,
            containers,
            gpus_in_use: Vec::new(),
            envs: Vec::new(),
        },
        ledger,
    );
    st.refresh_schedulable(node);
    for id in st.jobs_on(node) {
        let mine: Vec<_> = st
            .job(id)
            .expect("jobs_on lists jobs in memory")
            .attempt
            .bindings
            .iter()
            .filter(|b| b.node == node)
            .cloned()
            .collect();
        st.allocate(id, &mine);
    }
    let _ = conn.tx.send(ManagerMessage::Welcome {
        heartbeat_interval_ms: m.nodes.heartbeat_interval.as_millis() as u64,
        heartbeat_timeout_ms: m.nodes.heartbeat_timeout.as_millis() as u64,
    });
    tracing::info!(node, kernels = kernels.len(), "agent registered");

    // Reconcile what the agent reports with what the manager wants.
    let mut reported = std::collections::HashSet::new();
    for r in kernels {
        let wanted = st.job(r.key.job_id).is_some_and(|j| {
            j.attempt.number == r.key.attempt && j.state.holds_resources() && j.on_node(r.key.index, node)
        });
        if wanted {
            reported.insert(r.key);
        }
        match r.last {
            KernelEvent::Preparing { step, done, total, detail, since } if wanted => {
                let progress = berth_model::SetupProgress { step, done, total, detail, since };
                m.jobs.kernel_preparing(&mut st, node, r.key, progress).await;
                if st.job(r.key.job_id).expect("wanted: in memory").state == JobState::Terminating {
                    let stops = m.jobs.stop_commands(&st, r.key.job_id, "cancelled");
                    st.send_all(stops.into_iter().filter(|(n, _)| n == node).collect());
                }
            }
            KernelEvent::Started { .. } if wanted => {
                m.jobs.kernel_started(&mut st, node, r.key).await;
                let job = st.job(r.key.job_id).expect("wanted: in memory");
                if job.state == JobState::Terminating {
                    // The stop may have been lost with the old connection.
                    let stops = m.jobs.stop_commands(&st, r.key.job_id, "cancelled");
                    st.send_all(stops.into_iter().filter(|(n, _)| n == node).collect());
                }
            }
            KernelEvent::Started { .. } | KernelEvent::Preparing { .. } => {
                let reason = "not wanted by the manager after reconnect".to_string();
                let cmd_id = m.jobs.next_cmd_id();
                st.send(node, ManagerMessage::StopKernel { cmd_id, key: r.key, reason, grace_ms: 10_000 });
            }
            KernelEvent::Finished { outcome, exit_code, message, usage, signal, .. } => {
                st.meters_mut().finished(r.key, usage, m.clock.instant());
                let exit = Exit { code: exit_code, signal };
                m.jobs.kernel_finished(&mut st, node, r.key, outcome, exit, &message).await;
            }
        }
    }
    for id in st.jobs_on(node) {
        let Some(job) = st.job(id) else { continue };
        let missing: Vec<u32> = (0..job.attempt.bindings.len() as u32)
            .filter(|&i| job.on_node(i, node) && !reported.contains(&job.key(i)))
            .filter(|&i| job.attempt.ends.get(i as usize).is_some_and(|e| e.is_none()))
            .collect();
        if missing.is_empty() {
            continue;
        }
        match job.state {
            JobState::Scheduled | JobState::Preparing => {
                let job = job.clone();
                for i in missing {
                    send_start_one(m, &st, &job, i);
                }
            }
            // Kernels that never ran (the agent died while starting them, e.g. a container
            // created but not started) are started again; a kernel that ran and is gone
            // loses the job.
            JobState::Running if missing.iter().all(|i| job.attempt.unstarted.contains(i)) => {
                let job = job.clone();
                for i in missing {
                    send_start_one(m, &st, &job, i);
                }
            }
            JobState::Running => {
                let reason = format!("kernel lost: not running on {node} after agent reconnect");
                m.jobs.lose_job(&mut st, id, node, crate::deferred::LostCause::Kernel, reason).await;
            }
            JobState::Terminating => {
                // Nothing left to stop: the cancel is complete.
                let key = job.key(missing[0]);
                m.jobs.kernel_finished(&mut st, node, key, KernelOutcome::Stopped, Exit::default(), "").await;
            }
            _ => {}
        }
    }
    m.jobs.wake();
    // after the node is ready: the pusher then sees its cache up
    m.cache_members.changed.notify_one();
    Ok(())
}

/// Handles one message after `Register` (from the report loop, `reports.rs`).
pub async fn handle(m: &Manager, st: &mut crate::state::State, node: &str, msg: &AgentMessage) {
    if let AgentMessage::Kernel { key, .. } | AgentMessage::CommandFailed { key, .. } = msg {
        // In a batch: what undoes it if the store refuses the batch.
        st.touch(key.job_id);
    }
    match msg {
        AgentMessage::Register { .. } => tracing::warn!(node, "ignoring a second register on one connection"),
        AgentMessage::Containers { info } => m.nodes.containers_changed(st, node, info.clone()),
        AgentMessage::Heartbeat { at, usage, gpus } => {
            let now = m.clock.instant();
            if let Some(n) = st.node_mut(node) {
                n.last_heartbeat = Some(*at);
                n.gpus_in_use.clone_from(gpus);
            }
            for s in usage {
                // Only kernels of current attempts that run here: a late sample of an ended
                // or requeued run would be kept for nothing.
                let current = st.job(s.key.job_id).is_some_and(|j| {
                    j.attempt.number == s.key.attempt && j.state.holds_resources() && j.on_node(s.key.index, node)
                });
                if current {
                    st.meters_mut().record(s.key, s.usage, now);
                }
            }
        }
        AgentMessage::Envs { envs } => {
            if let Some(n) = st.node_mut(node) {
                n.envs.clone_from(envs);
            }
        }
        AgentMessage::Kernel { key, event } => match event {
            KernelEvent::Preparing { step, done, total, detail, since } => {
                let progress = berth_model::SetupProgress {
                    step: *step,
                    done: *done,
                    total: *total,
                    detail: detail.clone(),
                    since: *since,
                };
                m.jobs.kernel_preparing(st, node, *key, progress).await;
            }
            KernelEvent::Started { .. } => {
                if st.job(key.job_id).is_some_and(|j| !j.spec.datasets.is_empty()) {
                    // its prefetch just filled a cache: measure again for the next job
                    m.dataset_holdings.forget();
                }
                if !m.jobs.kernel_started(st, node, *key).await {
                    tracing::debug!(node, ?key, "ignoring start of a kernel the manager does not want");
                }
            }
            KernelEvent::Finished { outcome, exit_code, message, usage, signal, .. } => {
                st.meters_mut().finished(*key, *usage, m.clock.instant());
                let exit = Exit { code: *exit_code, signal: *signal };
                m.jobs.kernel_finished(st, node, *key, *outcome, exit, message).await;
            }
        },
        AgentMessage::CommandFailed { key, error, .. } => {
            let live = st.job(key.job_id).is_some_and(|j| {
                j.attempt.number == key.attempt
                    && j.on_node(key.index, node)
                    && matches!(j.state, JobState::Scheduled | JobState::Preparing | JobState::Running)
            });
            if live {
                m.jobs.kernel_finished(st, node, *key, KernelOutcome::Failed, Exit::default(), error).await;
            } else {
                tracing::warn!(node, ?key, "agent command failed: {error}");
            }
        }
        AgentMessage::LogData { req_id, data, next_offset, found } => {
            let data = base64::engine::general_purpose::STANDARD.decode(data.as_bytes()).unwrap_or_default();
            m.hub.logs_arrived(*req_id, LogReply { data, next_offset: *next_offset, found: *found });
        }
    }
}
