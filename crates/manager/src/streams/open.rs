//! Opening a stream into a kernel: waiting for the kernel to start, asking its agent to dial
//! the stream back, and waiting for the dial. The errors say why not, for the user.

use std::time::Duration;

use axum::extract::ws::WebSocket;
use berth_model::protocol::{ManagerMessage, StreamOpen};
use berth_model::{JobId, JobState};

use crate::manager::Manager;

/// How long the agent may take to dial a stream back.
pub const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a stream waits for its kernel to start in a running job: a job runs once one of
/// its kernels does, and the others may still be set up (an environment built, an image
/// pulled); `srun` in a batch script's first kernel opens streams into all of them at once.
pub const START_WAIT: Duration = Duration::from_secs(15 * 60);

/// Why no stream into a kernel was opened; the text is the stream's end, for the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    #[error("job {0} is not running")]
    NotRunning(JobId),
    /// The job is in `state`; `what` is the stream (exec, attach, a forward).
    #[error("job {id} is {state}: {what} needs a running job")]
    NotRunningNow { id: JobId, state: JobState, what: &'static str },
    #[error("job {id} has no kernel {kernel}: use --kernel 0 to {last}")]
    NoKernel { id: JobId, kernel: u32, last: u32 },
    #[error("kernel {kernel} of job {id} has ended")]
    Ended { id: JobId, kernel: u32 },
    #[error("kernel {kernel} of job {id} has not started within {} min", START_WAIT.as_secs() / 60)]
    NotStarted { id: JobId, kernel: u32 },
    #[error("node {0} is not connected")]
    NotConnected(String),
    #[error("the agent on {node} did not open the stream within {}s", OPEN_TIMEOUT.as_secs())]
    NoDial { node: String },
}

/// Asks the agent of kernel `kernel` of running job `id` for a stream serving `open`, and
/// waits for it.
pub async fn open_stream(m: &Manager, id: JobId, kernel: u32, open: StreamOpen) -> Result<WebSocket, StreamError> {
    let what = match open {
        StreamOpen::Exec { .. } => "exec",
        StreamOpen::Attach => "attach",
        StreamOpen::Forward { .. } => "a forward",
    };
    wait_started(m, id, kernel).await?;
    let mut awaited = m.streams.expect();
    let node = {
        let st = m.jobs.lock().await;
        let Some(job) = st.job(id) else {
            return Err(StreamError::NotRunning(id));
        };
        if job.state != JobState::Running {
            return Err(StreamError::NotRunningNow { id, state: job.state, what });
        }
        let kernels = job.attempt.bindings.len() as u32;
        if kernel >= kernels {
            return Err(StreamError::NoKernel { id, kernel, last: kernels.saturating_sub(1) });
        }
        if job.attempt.ends.get(kernel as usize).is_some_and(|e| e.is_some()) {
            return Err(StreamError::Ended { id, kernel });
        }
        let node = job.attempt.bindings[kernel as usize].node.clone();
        let msg = ManagerMessage::OpenStream {
            stream: awaited.id,
            secret: awaited.secret.clone(),
            key: job.key(kernel),
            open,
        };
        if !st.send(&node, msg) {
            return Err(StreamError::NotConnected(node));
        }
        node
    };
    match tokio::time::timeout(OPEN_TIMEOUT, &mut awaited.socket).await {
        Ok(Ok(socket)) => Ok(socket),
        _ => Err(StreamError::NoDial { node }),
    }
}

/// Waits while kernel `kernel` of running job `id` has not started yet.
async fn wait_started(m: &Manager, id: JobId, kernel: u32) -> Result<(), StreamError> {
    let deadline = tokio::time::Instant::now() + START_WAIT;
    loop {
        let waiting = {
            let st = m.jobs.lock().await;
            st.job(id).is_some_and(|j| j.state == JobState::Running && j.attempt.unstarted.contains(&kernel))
        };
        if !waiting {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(StreamError::NotStarted { id, kernel });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
