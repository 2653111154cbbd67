//! A kernel's setup task (PREPARING): its Python environment ([`crate::envs`]), then its
//! datasets ([`crate::datasets`]), each reporting progress as `Preparing` events and writing
//! to the kernel's setup log (`berth logs --setup`). The task never touches the kernel table:
//! its end comes back as a [`SetupDone`] that only the table acts on (the kernel may have been
//! stopped meanwhile). A stop drops the cancel sender, which ends the task at its next await.

use std::io::Write;

use berth_model::SetupStep;
use berth_model::protocol::{KernelEvent, KernelKey};
use tokio::sync::{mpsc, oneshot};

use crate::datasets::Prefetch;
use crate::envs::{self, EnvCache};
use crate::runtime::KernelUpdate;

/// The end of a kernel's setup: a lease on its environment (if it has one), or why the
/// kernel cannot run (uv's error, a dataset's missing origin), for the job's reason. A lease
/// nobody keeps (the kernel was stopped meanwhile) lets go of the environment when dropped.
#[derive(Debug)]
pub(crate) struct SetupDone {
    pub key: KernelKey,
    pub result: Result<Option<envs::Lease>, SetupError>,
}

/// Why a kernel's setup failed; the text is its `SetupFailed` reason.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SetupError {
    #[error(transparent)]
    Env(#[from] envs::EnvError),
    #[error(transparent)]
    Datasets(#[from] crate::datasets::DatasetError),
}

/// Where a kernel's setup reports to.
pub(crate) struct Reports {
    pub events: mpsc::UnboundedSender<KernelUpdate>,
    pub done: mpsc::UnboundedSender<SetupDone>,
}

/// What a kernel's setup does.
pub(crate) struct Steps {
    pub key: KernelKey,
    pub since: jiff::Timestamp,
    pub env: Option<(EnvCache, envs::Kernel)>,
    pub datasets: Option<Prefetch>,
}

/// Runs the steps in order; the first failure ends the setup.
pub(crate) async fn run(steps: Steps, mut log: std::fs::File, reports: Reports, mut cancel: oneshot::Receiver<()>) {
    let Steps { key, since, env, datasets } = steps;
    let mut venv = None;
    if let Some((cache, kernel)) = env {
        match envs::prepare(cache, kernel, &mut log, &reports.events, &mut cancel).await {
            None => return,
            Some(Ok(dir)) => venv = Some(dir),
            Some(Err(e)) => {
                let _ = reports.done.send(SetupDone { key, result: Err(e.into()) });
                return;
            }
        }
    }
    if let Some(p) = datasets {
        let progress = |done: u64, total: u64, detail: Option<String>| {
            let ev = KernelEvent::Preparing { step: SetupStep::Datasets, done, total, detail, since };
            let _ = reports.events.send((key, ev));
        };
        let ran = tokio::select! {
            _ = &mut cancel => return,
            r = p.run(&mut log, progress) => r,
        };
        if let Err(e) = ran {
            let _ = writeln!(log, "{e}");
            let _ = reports.done.send(SetupDone { key, result: Err(e.into()) });
            return;
        }
    }
    let _ = log.flush();
    let _ = reports.done.send(SetupDone { key, result: Ok(venv) });
}
