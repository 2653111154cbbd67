//! What agent connections hand the report loop (`reports.rs`): a leaf, so that the manager
//! can hold the queue without importing the loop that implements on it.

use berth_model::protocol::AgentMessage;
use tokio::sync::{mpsc, oneshot};

/// What one connection read from its agent in one go.
pub struct Report {
    pub node: String,
    pub msgs: Vec<AgentMessage>,
    /// Told once the messages are applied.
    pub done: oneshot::Sender<()>,
}

/// Where connections send their reports.
pub type Reports = mpsc::UnboundedSender<Report>;

/// The report loop's end.
pub type ReportsRx = mpsc::UnboundedReceiver<Report>;

/// A new queue.
pub fn channel() -> (Reports, ReportsRx) {
    mpsc::unbounded_channel()
}
