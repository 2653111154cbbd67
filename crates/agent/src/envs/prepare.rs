//! A kernel's side of its environment: find it in the cache, or start its build, or wait for
//! the build another kernel started; report progress as `Preparing` events and say in the
//! kernel's setup log what happened. A step of the kernel's setup task (`crate::setup`), which
//! hands the outcome to the kernel table.
//!
//! First the environment's inputs are resolved ([`super::inputs::plan`]): its key depends on
//! the node's interpreter and index settings and, for a private one, on the user, so it is
//! known only here, not when the kernel table starts the setup. The kernel holds a
//! [`Lease`] on that key from then on: nothing evicts its environment under it.

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use berth_model::SetupStep;
use berth_model::environment::EnvSpec;
use berth_model::protocol::{KernelEvent, KernelKey};
use tokio::sync::{mpsc, oneshot, watch};

use super::build::{self, BuildError, PHASES};
use super::{EnvCache, EnvError, Lease, Status, check, inputs, read_meta, short, touch};
use crate::runtime::{KernelUpdate, RunUser};

/// The kernel whose environment is prepared.
pub(crate) struct Kernel {
    pub key: KernelKey,
    pub spec: EnvSpec,
    /// Who builds it: the kernel's own user.
    pub user: RunUser,
    /// When its setup began (PREPARING's progress carries it).
    pub since: jiff::Timestamp,
    /// The job's own build settings ([`super::user_settings`]): they make it private.
    pub settings: Vec<(String, String)>,
    /// What the environment overrides of what the submitter carried along (their venv,
    /// `PYTHONPATH`): `runtime::env::python_env_notes`, for the setup log.
    pub notes: Vec<String>,
}

/// Prepares `spec` for `kernel`, writing to `log`: a lease on the environment, or why there
/// is none (uv's error, for the job's reason); `None` when `cancel` fires (or its sender is
/// dropped: the kernel was stopped). A build nobody waits for any more is killed.
pub(crate) async fn prepare(
    cache: EnvCache,
    job: Kernel,
    log: &mut std::fs::File,
    events: &mpsc::UnboundedSender<KernelUpdate>,
    cancel: &mut oneshot::Receiver<()>,
) -> Option<Result<Lease, EnvError>> {
    let Kernel { key: kernel, spec, user, since, settings, notes } = job;
    let started = Instant::now();
    let plan = tokio::select! {
        _ = &mut *cancel => return None,
        p = inputs::plan(&cache, &spec, &user, &settings) => p,
    };
    let plan = match plan {
        Ok(p) => p,
        Err(e) => {
            let _ = writeln!(log, "environment for python {}: {e}", spec.python);
            let _ = log.flush();
            return Some(Err(EnvError::Plan(Box::new(e))));
        }
    };
    let key = plan.key.clone();
    let _ = writeln!(
        log,
        "environment {key}: python {}, {} ({} bytes), interpreter {} ({})",
        spec.python,
        spec.kind.file_name(),
        spec.contents.len(),
        plan.inputs.interpreter.path,
        plan.inputs.interpreter.version,
    );
    match &plan.private_why {
        Some(why) => {
            let _ = writeln!(log, "private to user {} (uid {}): {why}", user.name, user.uid);
        }
        None => {
            let _ = writeln!(log, "shared: built with the node's settings only, no user's uv configuration");
        }
    }
    let lease = Lease::take(&cache, &key);
    let progress = |done: u32, detail: Option<String>| {
        let ev = KernelEvent::Preparing {
            step: SetupStep::Environment,
            done: done.into(),
            total: PHASES.into(),
            detail,
            since,
        };
        let _ = events.send((kernel, ev));
    };
    let result = loop {
        let (mut rx, builder) = {
            let mut book = cache.book();
            let dir = cache.dir(&key);
            if read_meta(&dir).is_some() {
                touch(&dir);
                break Ok(false);
            }
            match book.builds.get(&key) {
                Some(tx) => (tx.subscribe(), false),
                None => {
                    let (tx, rx) = watch::channel(Status::Running { done: 0, detail: None });
                    let tx = Arc::new(tx);
                    book.builds.insert(key.clone(), tx.clone());
                    tokio::spawn(build::run(cache.clone(), plan.clone(), spec.clone(), user.clone(), tx));
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
                _ = &mut *cancel => return None,
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
                break Ok(true);
            }
            // Its builder's kernels were all stopped just as this one subscribed: build anew.
            Err(BuildError::Cancelled) => continue,
            Err(BuildError::Failed { message, output }) => {
                let _ = writeln!(log, "{output}\nenvironment build failed after {secs:.2}s: {message}");
                break Err(EnvError::Build { message });
            }
        }
    };
    // Ready only once the kernel's user has run its python (not `Permission denied`, exit
    // 127, after "ready": issue 41 item 2).
    let result = match result {
        Ok(built) => {
            let dir = lease.dir();
            let checked = tokio::select! {
                _ = &mut *cancel => return None,
                c = check::usable_by(&dir, &key, &user) => c,
            };
            match checked {
                Ok(()) if built => Ok(lease),
                Ok(()) => {
                    let secs = started.elapsed().as_secs_f64();
                    let _ = writeln!(log, "reused environment {key} (cached on this node; ready in {secs:.2}s)");
                    Ok(lease)
                }
                Err(e) => {
                    let _ = writeln!(log, "{e}");
                    Err(e)
                }
            }
        }
        Err(e) => Err(e),
    };
    if result.is_ok() {
        for n in &notes {
            let _ = writeln!(log, "{n}");
        }
    }
    let _ = log.flush();
    Some(result)
}
