//! Starting kernels: the launch itself, and the setup before it (PREPARING): a job with a
//! Python environment gets it from the node's cache, built if need be ([`crate::envs`]), and
//! a job with datasets gets them prefetched into the node's dataset cache
//! ([`crate::datasets`]), before its process runs.
//!
//! The setup runs as a task of its own ([`crate::setup`]), so the kernel table (and every
//! other kernel's commands) never waits for uv or a copy; its end comes back as a
//! [`SetupDone`] that only this table acts on. A
//! kernel being set up holds its binding like a running one; a `StopKernel` ends it at once
//! (its build is killed when no other kernel waits for it), and a replayed `StartKernel` only
//! gets its progress reported again.

use std::collections::BTreeMap;
use std::os::unix::fs::OpenOptionsExt;

use berth_model::protocol::{AgentMessage, KernelEvent, KernelKey, KernelOutcome};
use berth_model::{Binding, JobSpec, SetupStep, UnixId};
use tokio::sync::oneshot;

use super::{Entry, Kernels};
use crate::disk::{FileError, FileOp};
use crate::envs;
use crate::logs;
use crate::runtime::HOLD_COMMAND;
use crate::setup::{Reports, SetupDone, Steps};

/// A kernel's file naming the environment it uses, so that an agent that takes the kernel over
/// after a restart keeps that environment from eviction.
const ENV_KEY_FILE: &str = "env-key";

/// How often the cache is listed again for the manager even when no kernel changed it (an
/// eviction after another kernel's build, a last-used time).
const ENVS_RECHECK: std::time::Duration = std::time::Duration::from_secs(30);

/// Who submitted a kernel and the data it gets besides its spec (folders to bind, code to
/// copy), kept while it is set up.
#[derive(Debug, Clone, Default)]
pub(super) struct Extras {
    pub submitter: Option<UnixId>,
    pub folders: Vec<berth_model::folder::FolderBind>,
    pub code: Option<berth_model::code::CodeCopy>,
    pub datasets: Vec<berth_model::dataset::DatasetFetch>,
}

/// What a kernel being set up starts with once its setup is done.
pub(super) struct Pending {
    spec: JobSpec,
    env: BTreeMap<String, String>,
    extras: Extras,
    /// Dropped when the kernel is stopped: the setup task gives up.
    _cancel: oneshot::Sender<()>,
}

/// `spec` running [`HOLD_COMMAND`] instead of its command (kernels past 0 of a `launch =
/// first` job, which only hold their node for `srun`).
fn holding(spec: &berth_model::JobSpec) -> berth_model::JobSpec {
    let mut held = spec.clone();
    held.command = HOLD_COMMAND.iter().map(|s| s.to_string()).collect();
    held
}

impl Kernels {
    /// Starts the kernel's process (or container) and records it: a new entry, or the one
    /// its setup made.
    pub(super) fn launch(
        &mut self,
        key: KernelKey,
        spec: &berth_model::JobSpec,
        binding: Binding,
        env: &BTreeMap<String, String>,
        extras: &Extras,
    ) -> Vec<AgentMessage> {
        let now = jiff::Timestamp::now();
        let held;
        let spec = if spec.holds_only(key.index) {
            held = holding(spec);
            &held
        } else {
            spec
        };
        // A start blocks for milliseconds (cgroup joins wait for an RCU grace period,
        // the parent waits for exec): let the runtime move other tasks off this thread.
        let folders = with_origins(spec, &extras.folders, &extras.datasets);
        let data = crate::runtime::JobData { folders: &folders, code: extras.code.as_ref() };
        let started = blocking(|| self.runtime.start(key, spec, &binding, env, extras.submitter, data, &self.events));
        let (last, handle, report) = match started {
            // A container: its `Started` (or launch failure) comes as an event.
            Ok(h) if h.deferred() => (KernelEvent::Started { pid: 0, at: now }, Some(h), false),
            Ok(h) => (KernelEvent::Started { pid: h.pid, at: now }, Some(h), true),
            Err(e) => {
                tracing::info!(?key, "launch failed: {e}");
                let ev = ended(KernelOutcome::LaunchFailed, e.to_string());
                (ev, None, true)
            }
        };
        let ended = handle.is_none();
        let entry = self.map.entry(key).or_insert_with(|| Entry::new(binding, last.clone(), None));
        entry.last = last.clone();
        entry.handle = handle;
        entry.setup = None;
        if ended && let Some(env) = entry.env_key.take() {
            self.envs.release(&env);
            self.envs_dirty = true;
        }
        if report { vec![AgentMessage::Kernel { key, event: last }] } else { Vec::new() }
    }

    /// Begins kernel `key`'s setup; reports `Preparing` (or the failure to begin).
    pub(super) fn start_setup(
        &mut self,
        key: KernelKey,
        spec: JobSpec,
        binding: Binding,
        env: BTreeMap<String, String>,
        extras: Extras,
    ) -> Vec<AgentMessage> {
        let env_spec = spec.environment.clone().filter(|_| spec.image.is_none());
        if env_spec.is_none() && extras.datasets.is_empty() {
            return self.launch(key, &spec, binding, &env, &extras);
        }
        let mut env = env;
        let now = jiff::Timestamp::now();
        // Either error's text is the kernel's `LaunchFailed` message.
        let prepared = match self.runtime.kernel_user(&env, extras.submitter) {
            Ok(user) => self.open_setup_log(&key, &user).map(|log| (log, user)).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        let (log, user) = match prepared {
            Ok(p) => p,
            Err(message) => {
                let ev = ended(KernelOutcome::LaunchFailed, message);
                self.map.insert(key, Entry::new(binding, ev.clone(), None));
                return vec![AgentMessage::Kernel { key, event: ev }];
            }
        };
        // The environment's key is known once its setup resolved the node's interpreter and
        // settings: `setup_done` takes the setup's lease on it.
        let mut job_env = spec.submit_env.clone();
        job_env.extend(spec.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        let settings = envs::user_settings(&job_env);
        let datasets = (!extras.datasets.is_empty()).then(|| crate::datasets::Prefetch {
            http: self.http.clone(),
            datasets: extras.datasets.clone(),
            cache_url: env.get("BERTH_CACHE_URL").cloned(),
        });
        if let Some(p) = &datasets {
            env.extend(p.env());
        }
        let last = match &env_spec {
            Some(_) => KernelEvent::Preparing {
                step: SetupStep::Environment,
                done: 0,
                total: envs::build::PHASES.into(),
                detail: None,
                since: now,
            },
            None => KernelEvent::Preparing { step: SetupStep::Datasets, done: 0, total: 0, detail: None, since: now },
        };
        let (cancel, cancelled) = oneshot::channel();
        let reports = Reports { events: self.events.clone(), done: self.setups.clone() };
        let steps = Steps {
            key,
            since: now,
            env: env_spec.map(|env_spec| {
                let notes = crate::runtime::env::python_env_notes(&spec);
                (self.envs.clone(), envs::Kernel { key, spec: env_spec, user, since: now, settings, notes })
            }),
            datasets,
        };
        tokio::spawn(crate::setup::run(steps, log, reports, cancelled));
        let mut entry = Entry::new(binding, last.clone(), None);
        entry.setup = Some(Pending { spec, env, extras, _cancel: cancel });
        self.map.insert(key, entry);
        vec![AgentMessage::Kernel { key, event: last }]
    }

    /// `<kernel dir>/setup.log`, 0600 and the kernel user's (who may read it from the kernel).
    fn open_setup_log(&self, key: &KernelKey, user: &crate::runtime::RunUser) -> Result<std::fs::File, FileError> {
        let dir = logs::kernel_dir(&self.data_dir, key);
        std::fs::create_dir_all(&dir).map_err(|e| FileError::new(&self.node, FileOp::Create, &dir, e))?;
        let path = logs::log_path(&self.data_dir, key, berth_model::protocol::LogStream::Setup);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| FileError::new(&self.node, FileOp::Create, &path, e))?;
        if user.switch {
            let _ = std::os::unix::fs::chown(&path, Some(user.uid), Some(user.gid));
        }
        Ok(f)
    }

    /// A kernel's setup ended: start it with its environment, or end it with the setup's error.
    /// A kernel stopped meanwhile is left as it is.
    pub fn setup_done(&mut self, done: SetupDone) -> Vec<AgentMessage> {
        let key = done.key;
        let Some(e) = self.map.get_mut(&key) else { return Vec::new() };
        let Some(pending) = e.setup.take() else { return Vec::new() };
        let binding = e.binding.clone();
        self.envs_dirty = true;
        let out = match done.result {
            Ok(venv) => {
                let mut env = pending.env;
                // `runtime::env` puts `$VIRTUAL_ENV/bin` first on the kernel's PATH.
                if let Some(lease) = venv {
                    env.insert("VIRTUAL_ENV".into(), lease.dir().to_string_lossy().into_owned());
                    // The kernel holds the environment until it ends (`record` releases it); a
                    // restarted agent finds the key in the kernel's dir.
                    let k = lease.keep();
                    let _ = std::fs::write(logs::kernel_dir(&self.data_dir, &key).join(ENV_KEY_FILE), &k);
                    if let Some(e) = self.map.get_mut(&key) {
                        e.env_key = Some(k);
                    }
                }
                self.launch(key, &pending.spec, binding, &env, &pending.extras)
            }
            Err(e) => {
                tracing::info!(?key, "setup failed: {e}");
                let ev = ended(KernelOutcome::SetupFailed, e.to_string());
                self.record((key, ev)).into_iter().collect()
            }
        };
        self.publish();
        out
    }

    /// Ends kernel `key`'s setup now (a stop during it); returns the report.
    pub(super) fn end_setup(&mut self, key: KernelKey, outcome: KernelOutcome, message: String) -> Vec<AgentMessage> {
        let ev = ended(outcome, message);
        self.record((key, ev)).into_iter().collect()
    }

    /// Ends every setup under way (agent shutdown, fencing): their `Finished` events go through
    /// the events channel, as running kernels' do.
    pub(super) fn end_setups(&mut self, outcome: KernelOutcome, message: &str) {
        for (key, e) in self.map.iter_mut() {
            if e.setup.take().is_some() {
                let ev = ended(outcome, message.to_string());
                let _ = self.events.send((*key, ev));
            }
        }
    }

    /// The environment a kernel taken over from a previous agent uses (kept from eviction).
    pub(super) fn adopted_env(&self, key: KernelKey) -> Option<String> {
        let env = std::fs::read_to_string(logs::kernel_dir(&self.data_dir, &key).join(ENV_KEY_FILE)).ok()?;
        let env = env.trim().to_string();
        self.envs.acquire(&env);
        Some(env)
    }

    /// `berth env rm`: renames the environment out of the cache now and deletes it in the
    /// background; one a live kernel uses stays (the manager checked, but a kernel may have
    /// started with it since).
    pub(super) fn remove_env(&mut self, key: &str) {
        match self.envs.remove(key) {
            Ok((key, trash)) => {
                tracing::info!(env = %envs::short(&key), "removed environment (berth env rm)");
                tokio::task::spawn_blocking(move || std::fs::remove_dir_all(trash));
            }
            Err(e) => tracing::warn!("cannot remove environment: {e}"),
        }
        self.envs_dirty = true;
    }

    /// The node's environment cache for the manager, when it differs from what was last sent
    /// (a node without environments sends none).
    pub fn envs_report(&mut self) -> Option<AgentMessage> {
        if !self.envs_dirty && self.envs_checked.elapsed() < ENVS_RECHECK {
            return None;
        }
        self.envs_dirty = false;
        self.envs_checked = std::time::Instant::now();
        let list = self.envs.list();
        if self.envs_sent == list {
            return None;
        }
        self.envs_sent = list.clone();
        Some(AgentMessage::Envs { envs: list })
    }

    /// A new connection: the manager knows no environments of this node yet.
    pub fn envs_resend(&mut self) {
        self.envs_sent.clear();
        self.envs_dirty = true;
    }
}

/// A container's binds: its folders, and each dataset's origin read-only at its own path, so
/// PFIO in the container reads what the cache misses where a process would. A process kernel
/// sees the host's filesystem and needs none.
fn with_origins(
    spec: &JobSpec,
    folders: &[berth_model::folder::FolderBind],
    datasets: &[berth_model::dataset::DatasetFetch],
) -> Vec<berth_model::folder::FolderBind> {
    let mut out = folders.to_vec();
    if spec.image.is_none() {
        return out;
    }
    for d in datasets {
        if !out.iter().any(|f| f.target == d.origin) {
            out.push(berth_model::folder::FolderBind {
                name: format!("origin of {}", d.dataset.bucket),
                source: d.origin.clone(),
                target: d.origin.clone(),
                read_only: true,
            });
        }
    }
    out
}

/// The end of a kernel that never ran (or was stopped before it did), now.
fn ended(outcome: KernelOutcome, message: String) -> KernelEvent {
    KernelEvent::Finished { outcome, exit_code: None, message, at: jiff::Timestamp::now(), usage: None, signal: None }
}

/// Runs `f`, telling a multi-threaded tokio runtime that this thread blocks meanwhile (on a
/// current-thread runtime, as in some tests, it just runs).
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holding_kernel_runs_only_the_wait() {
        let mut spec = berth_model::JobSpec::command(["python", "train.py"]);
        spec.env.insert("A".into(), "1".into());
        let held = holding(&spec);
        assert_eq!(held.command, HOLD_COMMAND);
        assert_eq!(held.env, spec.env, "the rest of the spec stays");
    }
}
