//! The agent hub's own state: the queue through which agent connections (`agent_conn.rs`)
//! hand their agents' reports to the report loop (`reports.rs`), the log requests waiting for
//! an agent's answer, and connection and request ids. A leaf, so that the manager can hold it
//! without importing the code that works on it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use berth_model::protocol::AgentMessage;
use tokio::sync::{mpsc, oneshot};

/// What one connection read from its agent in one go.
pub struct Report {
    pub node: String,
    pub msgs: Vec<AgentMessage>,
    /// Told once the messages are applied.
    pub done: oneshot::Sender<()>,
}

/// The report loop's end of the queue.
pub type ReportsRx = mpsc::UnboundedReceiver<Report>;

/// An agent's answer to `FetchLogs`.
#[derive(Debug)]
pub struct LogReply {
    pub data: Vec<u8>,
    pub next_offset: u64,
    pub found: bool,
}

pub struct Hub {
    reports: mpsc::UnboundedSender<Report>,
    /// The report loop's end, taken once when it starts.
    reports_rx: Mutex<Option<ReportsRx>>,
    /// What the log handler waits for, keyed by request id.
    log_waiters: Mutex<HashMap<u64, oneshot::Sender<LogReply>>>,
    next_id: AtomicU64,
}

impl Default for Hub {
    fn default() -> Hub {
        let (reports, rx) = mpsc::unbounded_channel();
        Hub {
            reports,
            reports_rx: Mutex::new(Some(rx)),
            log_waiters: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
        }
    }
}

impl Hub {
    /// The receiving end of the report queue, for the report loop (once).
    pub fn take_reports(&self) -> Option<ReportsRx> {
        self.reports_rx.lock().expect("reports lock").take()
    }

    /// Queues `msgs` from `node`'s agent for the report loop; resolves once they are applied.
    /// `None` when the loop is gone (shutdown).
    pub fn report(&self, node: &str, msgs: Vec<AgentMessage>) -> Option<oneshot::Receiver<()>> {
        let (done, applied) = oneshot::channel();
        self.reports.send(Report { node: node.to_string(), msgs, done }).ok()?;
        Some(applied)
    }

    /// A fresh id for a connection or a log request.
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Registers a log request; its answer comes through the receiver.
    pub fn expect_logs(&self, req_id: u64) -> oneshot::Receiver<LogReply> {
        let (tx, rx) = oneshot::channel();
        self.log_waiters.lock().expect("log waiters lock").insert(req_id, tx);
        rx
    }

    /// Gives up on a log request (sent nowhere, or timed out).
    pub fn forget_logs(&self, req_id: u64) {
        self.log_waiters.lock().expect("log waiters lock").remove(&req_id);
    }

    /// Hands an agent's answer to the request waiting for it, if any still does.
    pub fn logs_arrived(&self, req_id: u64, reply: LogReply) {
        let waiter = self.log_waiters.lock().expect("log waiters lock").remove(&req_id);
        if let Some(w) = waiter {
            let _ = w.send(reply);
        }
    }
}
