//! A kernel's side of its environment: find it in the cache, or start its build, or wait for
//! the build another kernel started; report progress as `Preparing` events and say in the
//! kernel's setup log what happened. Runs as a task of its own; the kernel table gets the
//! outcome as a [`SetupDone`] and alone decides what follows (the kernel may have been stopped
//! meanwhile).

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use berth_model::SetupStep;
use berth_model::environment::EnvSpec;
use berth_model::protocol::{KernelEvent, KernelKey};
use tokio::sync::{mpsc, oneshot, watch};

use super::build::{self, BuildError, PHASES};
use super::{EnvCache, Status, read_meta, short, touch};
use crate::runtime::{KernelUpdate, RunUser};

/// The end of a kernel's setup: the environment's directory, or why there is none (uv's
/// error, for the job's reason).
#[derive(Debug)]
pub(crate) struct SetupDone {
    pub key: KernelKey,
    pub result: Result<PathBuf, String>,
}

/// The kernel whose environment is prepared.
pub(crate) struct Kernel {
    pub key: KernelKey,
    pub spec: EnvSpec,
    /// Who builds it: the kernel's own user.
    pub user: RunUser,
    /// When its setup began (PREPARING's progress carries it).
    pub since: jiff::Timestamp,
}

/// Where a kernel's setup reports to.
pub(crate) struct Reports {
    pub events: mpsc::UnboundedSender<KernelUpdate>,
    pub done: mpsc::UnboundedSender<SetupDone>,
}

/// Prepares `spec` for `kernel`, writing to `log`, until done or `cancel` fires (or its sender
/// is dropped: the kernel was stopped). A build nobody waits for any more is killed.
pub(crate) async fn prepare(
    cache: EnvCache,
    job: Kernel,
    mut log: std::fs::File,
    reports: Reports,
    mut cancel: oneshot::Receiver<()>,
) {
    let Kernel { key: kernel, spec, user, since } = job;
    let key = spec.key();
    let started = Instant::now();
    let _ = writeln!(
        log,
        "environment {key}: python {}, {} ({} bytes)",
        spec.python,
        spec.kind.file_name(),
        spec.contents.len()
    );
    let progress = |done: u32, detail: Option<String>| {
        let ev = KernelEvent::Preparing { step: SetupStep::Environment, done: done.into(), total: PHASES.into(), detail, since };
        let _ = reports.events.send((kernel, ev));
    };
    let result = loop {
        let (mut rx, builder) = {
            let mut book = cache.book();
            let dir = cache.dir(&key);
            if read_meta(&dir).is_some() {
                touch(&dir);
                drop(book);
                let secs = started.elapsed().as_secs_f64();
                let _ = writeln!(log, "reused environment {key} (cached on this node; ready in {secs:.2}s)");
                break Ok(dir);
            }
            match book.builds.get(&key) {
                Some(tx) => (tx.subscribe(), false),
                None => {
                    let (tx, rx) = watch::channel(Status::Running { done: 0, detail: None });
                    let tx = Arc::new(tx);
                    book.builds.insert(key.clone(), tx.clone());
                    tokio::spawn(build::run(cache.clone(), key.clone(), spec.clone(), user.clone(), tx));
                    (rx, true)
                }
            }
        };
        if builder {
            let _ = writeln!(log, "building environment {} with uv as user {}", short(&key), user.name);
        } else {
            let _ = writeln!(log, "waiting for the build of environment {} another kernel started", short(&key));
        }
        progress(0, Some("waiting for uv".into()));
        let status = loop {
            tokio::select! {
                // Stopped: dropping `rx` lets a build nobody else waits for be killed.
                _ = &mut cancel => return,
                changed = rx.changed() => {
                    if changed.is_err() {
                        break Err(BuildError::Cancelled);
                    }
                    let status = rx.borrow_and_update().clone();
                    match status {
                        Status::Running { done, detail, .. } => progress(done, detail),
                        Status::Done(done) => break done,
                    }
                }
            }
        };
        let secs = started.elapsed().as_secs_f64();
        match status {
            Ok(built) => {
                let _ = writeln!(log, "{}", built.output);
                let how = if builder { "built" } else { "waited for" };
                let _ = writeln!(log, "{how} environment {key} in {secs:.2}s (uv ran {:.2}s)", built.secs);
                break Ok(cache.dir(&key));
            }
            // Its builder's kernels were all stopped just as this one subscribed: build anew.
            Err(BuildError::Cancelled) => continue,
            Err(BuildError::Failed { message, output }) => {
                let _ = writeln!(log, "{output}\nenvironment build failed after {secs:.2}s: {message}");
                break Err(format!("environment build failed: {message}"));
            }
        }
    };
    let _ = log.flush();
    let _ = reports.done.send(SetupDone { key: kernel, result });
}
