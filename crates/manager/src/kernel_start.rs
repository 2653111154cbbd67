//! Starting kernels: the `StartKernel` a kernel's agent gets, with everything the manager adds
//! for it on top of the job's spec (the cluster's variables, the dataset cache's URL and
//! token, the step token, data folders, code and dataset fetches). The scheduler sends it
//! when it binds a job, and an agent's reconnect sends it again for kernels the agent does
//! not report (`agent_conn`).

use berth_model::protocol::ManagerMessage;

use crate::manager::Manager;
use crate::state::{Job, State};

/// Sends `StartKernel` for every kernel of `job` that has not ended (a no-op for nodes whose
/// agent is away: reconcile re-sends on reconnect).
pub fn send_start(m: &Manager, st: &State, job: &Job) {
    for i in 0..job.attempt.bindings.len() {
        if job.attempt.ends.get(i).is_some_and(|e| e.is_some()) {
            continue;
        }
        send_start_one(m, st, job, i as u32);
    }
}

/// Sends `StartKernel` for kernel `index` of `job`.
pub fn send_start_one(m: &Manager, st: &State, job: &Job, index: u32) {
    let Some(b) = job.attempt.bindings.get(index as usize) else { return };
    let mut env = crate::cluster_env::kernel_env(st, job, index);
    if let Some(c) = m.cache.as_ref()
        && let Some(url) = m.cache_members.url_for(st, &b.node, job.id).or_else(|| c.url.clone())
    {
        c.add_to(&mut env, job, &url);
    }
    // Added here, never to the spec: `berth show` and the store never see it.
    env.insert(crate::step_token::VAR.into(), m.step_key.mint(job.id, job.attempt.number));
    let msg = ManagerMessage::StartKernel {
        cmd_id: m.jobs.next_cmd_id(),
        key: job.key(index),
        spec: job.full_spec(),
        binding: b.clone(),
        env,
        submitter: job.owner.submitter,
        folders: m.folders.binds(&job.spec),
        code: job.spec.code.as_ref().map(|c| m.code.copy_for(&c.id)),
        datasets: crate::datasets::fetches(m, job.id, &job.spec),
    };
    st.send(&b.node, msg);
}
