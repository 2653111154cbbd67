//! The endpoints' controller: a loop (four times a second, and when kicked) that brings every
//! endpoint's replicas in line with its row. Each round it reads the replica jobs from the
//! job state, updates what it knows of each replica, asks `plan` (and, for an autoscaled
//! endpoint, `autoscale`) what to do, and does it: starts replica jobs through the same checks
//! as a submit, drains and stops them, rolls updates back, and sends health probes through
//! the app proxy (a replica's first passing probe decides how the router reaches it:
//! `direct`). Only the leader runs it.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use berth_model::endpoint::{HealthSpec, ReplicaState, Rollout};
use berth_model::replica::replicas;
use berth_model::{JobId, JobState, StopCause};
use berth_store::StoreError;
use berth_store::endpoints::EndpointRow;

use super::autoscale::{LOAD_WINDOW, Load};
use super::plan::{self, Action, Facts};
use super::{Endpoint, Replica};
use crate::apps::proxy::{AppKey, ProbeError, Proxy};
use crate::jobs::Jobs;
use crate::lifecycle::Move;
use crate::manager::Manager;
use crate::state::State;

const TICK: Duration = Duration::from_millis(250);
/// Probes of a replica that has never been ready: often, so that it takes traffic soon.
const FIRST_PROBES: Duration = Duration::from_millis(300);
/// The longest a failing replica's restart waits.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// A replica job as the job state has it.
struct JobFacts {
    id: JobId,
    endpoint_id: i64,
    revision: u64,
    state: JobState,
    attempt: u32,
    node: Option<String>,
    reason: Option<String>,
}

pub async fn run(m: Arc<Manager>) {
    let proxy = Arc::new(Proxy::new(m.clone(), m.serving.routes.clone()));
    let mut shutdown = m.shutdown.clone();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(TICK) => {}
            _ = m.serving.kick.notified() => {}
            _ = shutdown.changed() => break,
        }
        if m.lease.may_act() && m.serving.loaded() {
            round(&m, &proxy).await;
        }
    }
}

/// The time a failed replica's successor waits: 1 s, doubling, at most a minute.
fn backoff(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.saturating_sub(1).min(6)).min(MAX_BACKOFF)
}

async fn round(m: &Arc<Manager>, proxy: &Arc<Proxy>) {
    let jobs: Vec<JobFacts> = {
        let st = m.jobs.lock().await;
        st.live_jobs()
            .filter_map(|j| {
                let r = j.spec.replica_of.as_ref()?;
                Some(JobFacts {
                    id: j.id,
                    endpoint_id: r.endpoint_id,
                    revision: r.revision,
                    state: j.state,
                    attempt: j.attempt.number,
                    node: j.attempt.bindings.first().map(|b| b.node.clone()),
                    reason: j.waiting.reason.as_ref().map(|r| r.to_string()).or_else(|| j.reason.clone()),
                })
            })
            .collect()
    };
    let now = m.serving.now();
    let mut orphans: Vec<JobId> = Vec::new();
    let mut work: Vec<(EndpointRow, Vec<Action>, Vec<String>)> = Vec::new();
    let mut ended: Vec<(i64, JobId)> = Vec::new();
    let mut probes = Vec::new();
    {
        let mut eps = m.serving.lock();
        // Replicas of an endpoint that was removed (while this manager was down, say).
        orphans.extend(
            jobs.iter().filter(|j| !eps.contains_key(&j.endpoint_id) && j.state != JobState::Terminating).map(|j| j.id),
        );
        for ep in eps.values_mut() {
            ended.extend(sync(ep, &jobs, now).into_iter().map(|id| (ep.row.id, id)));
            if let Some(a) = ep.row.spec.autoscale.clone() {
                let load = Load {
                    inflight: ep.replicas.values().map(|r| r.inflight.load(Ordering::Relaxed)).sum(),
                    rps: ep.traffic.summary(now, LOAD_WINDOW.as_secs()).rate,
                    last_request: ep.traffic.last_request(),
                };
                let desired = ep.scaler.decide(&a, now, load, ep.row.desired);
                if desired != ep.row.desired {
                    tracing::info!(endpoint = ep.row.name, from = ep.row.desired, to = desired, "autoscaling");
                    ep.row.desired = desired;
                    ep.dirty = true;
                }
            }
            let facts: Vec<Facts> = ep
                .replicas
                .values()
                .filter(|r| !r.stopping)
                .map(|r| facts(r, health_of(&ep.row, r.revision)))
                .collect();
            let input = plan::Input {
                now,
                health: &ep.row.spec.health,
                revision: ep.row.revision,
                desired: ep.row.desired,
                can_roll_back: ep.row.previous.is_some(),
                replicas: &facts,
                start_after: ep.start_after,
                rollout_failures: ep.rollout_failures,
            };
            let actions = plan::plan(&input);
            let rolling = facts.iter().any(|f| f.revision != ep.row.revision && f.draining_since.is_none());
            if !rolling && ep.row.rollout == Rollout::Rolling && actions.is_empty() {
                ep.row.rollout = Rollout::Done;
                ep.row.message = None;
                ep.rollout_failures = 0;
                ep.dirty = true;
            }
            probes.extend(due_probes(ep, now));
            let avoid: Vec<String> =
                ep.replicas.values().filter(|r| !r.stopping).filter_map(|r| r.node.clone()).collect();
            if !actions.is_empty() || ep.dirty {
                ep.dirty = false;
                apply_in_memory(ep, &actions, now);
                work.push((ep.row.clone(), actions, avoid));
            }
        }
        let counts: Vec<(String, [u64; 4])> = eps.values().map(|e| (e.row.name.clone(), state_counts(e))).collect();
        m.metrics.endpoint_replicas(&counts);
        // The routes of replicas that are gone (or of their earlier attempts) go with them.
        m.serving
            .routes
            .retain(|k| eps.values().any(|e| e.replicas.get(&k.job).is_some_and(|r| r.attempt == k.attempt)));
    }
    for (row, actions, avoid) in work {
        act(m, &row, actions, avoid).await;
    }
    for id in orphans {
        let mut st = m.jobs.lock().await;
        if let Err(e) = m.jobs.cancel(&mut st, id, "serve (its endpoint was removed)").await {
            tracing::warn!(job = id, "cannot stop the replica of a removed endpoint: {e}");
        }
    }
    for (endpoint, job) in ended {
        note_end(m, endpoint, job).await;
    }
    for (key, node, path, timeout) in probes {
        let (m, proxy) = (m.clone(), proxy.clone());
        tokio::spawn(async move {
            let result = proxy.probe(&key, path.as_deref(), timeout).await;
            // Decided before the replica is ready, so that the router's connections to it
            // are all of one kind.
            if result.is_ok() && !m.serving.routes.decided(&key) {
                super::direct::decide(&m, &proxy, &key, node.as_deref()).await;
            }
            probed(&m, key.job, result);
        });
    }
}

/// Brings `ep`'s replicas in line with the job state; returns the replicas whose jobs ended.
fn sync(ep: &mut Endpoint, jobs: &[JobFacts], now: Instant) -> Vec<JobId> {
    for j in jobs.iter().filter(|j| j.endpoint_id == ep.row.id) {
        let r = ep.replicas.entry(j.id).or_insert_with(|| Replica::new(j.id, j.revision, now));
        r.attempt = j.attempt;
        r.node = j.node.clone();
        r.placed = j.state != JobState::Pending;
        match j.state {
            JobState::Running if r.running_since.is_none() => {
                r.running_since = Some(now);
                if r.state == ReplicaState::Starting {
                    r.state = ReplicaState::NotReady;
                    r.reason = Some("waiting for its first successful probe".into());
                }
            }
            JobState::Running => {}
            s if (s.holds_resources() || s == JobState::Pending) && r.state != ReplicaState::Draining => {
                r.state = if s == JobState::Terminating { ReplicaState::Draining } else { ReplicaState::Starting };
                r.reason = j.reason.clone();
            }
            _ => {}
        }
    }
    let gone: Vec<JobId> = ep.replicas.keys().filter(|id| !jobs.iter().any(|j| j.id == **id)).copied().collect();
    let mut ended = Vec::new();
    for id in gone {
        let Some(r) = ep.replicas.remove(&id) else { continue };
        if !r.stopping {
            // It ended by itself (or someone cancelled its job): a failure, replaced after a backoff.
            ep.failures += 1;
            ep.restarts += 1;
            ep.start_after = Some(now + backoff(ep.failures));
            if r.revision == ep.row.revision && ep.replicas.values().any(|o| o.revision != ep.row.revision) {
                ep.rollout_failures += 1;
            }
            ended.push(id);
        }
    }
    ended
}

/// Replicas by state: starting, not ready, ready, draining.
fn state_counts(ep: &Endpoint) -> [u64; 4] {
    let mut c = [0; 4];
    for r in ep.replicas.values() {
        c[match r.state {
            ReplicaState::Starting => 0,
            ReplicaState::NotReady => 1,
            ReplicaState::Ready => 2,
            ReplicaState::Draining => 3,
        }] += 1;
    }
    c
}

/// The probes replicas of `revision` run with: an old replica keeps its own while an update
/// rolls (a new readiness path must not fail the replicas that serve meanwhile).
fn health_of(row: &EndpointRow, revision: u64) -> &HealthSpec {
    match &row.previous {
        Some(p) if revision != row.revision => &p.health,
        _ => &row.spec.health,
    }
}

fn facts(r: &Replica, h: &HealthSpec) -> Facts {
    Facts {
        job: r.job,
        revision: r.revision,
        state: r.state,
        placed: r.placed,
        running_since: r.running_since,
        ever_ready: r.ever_ready,
        probe_fails: r.probe_fails,
        inflight: r.inflight.load(Ordering::Relaxed),
        draining_since: r.draining_since,
        start_timeout_secs: h.start_timeout_secs,
        failures: h.failures,
    }
}

/// What the actions change in memory at once (before the store and the jobs see them), so
/// the router stops sending requests to a draining replica right away.
fn apply_in_memory(ep: &mut Endpoint, actions: &[Action], now: Instant) {
    for a in actions {
        match a {
            Action::Drain(job) => {
                let (revision, wants) = (ep.row.revision, replicas(ep.row.desired));
                if let Some(r) = ep.replicas.get_mut(job) {
                    r.state = ReplicaState::Draining;
                    r.draining_since = Some(now);
                    r.reason = Some(if r.revision == revision {
                        format!("draining: the endpoint wants {wants}")
                    } else {
                        format!("draining: replaced by revision {revision}")
                    });
                }
            }
            Action::Stop { job, reason, failed } => {
                if let Some(r) = ep.replicas.get_mut(job) {
                    r.stopping = true;
                    r.state = ReplicaState::Draining;
                    r.reason = Some(reason.clone());
                }
                if *failed {
                    ep.failures += 1;
                    ep.restarts += 1;
                    ep.start_after = Some(now + backoff(ep.failures));
                    ep.row.message = Some(format!("replica job {job} restarted: {reason}"));
                }
            }
            Action::RollBack { reason } => {
                let failed = ep.row.revision;
                if let Some(prev) = ep.row.previous.take() {
                    ep.row.spec = prev;
                    ep.row.revision = failed.saturating_sub(1);
                }
                ep.row.rollout = Rollout::RolledBack;
                ep.row.message = Some(format!("update rolled back: {reason}"));
                ep.rollout_failures = 0;
                ep.failures = 0;
                ep.start_after = None;
                for r in ep.replicas.values_mut().filter(|r| r.revision == failed) {
                    r.stopping = true;
                    r.state = ReplicaState::Draining;
                }
                tracing::warn!(endpoint = ep.row.name, "update rolled back: {reason}");
            }
            Action::Start => {}
        }
    }
}

/// Does the actions' outside part: stores the row, starts and stops jobs.
async fn act(m: &Arc<Manager>, row: &EndpointRow, actions: Vec<Action>, avoid: Vec<String>) {
    {
        // The row as memory has it now (the API may have changed it since this round began).
        let _w = m.serving.writes.lock().await;
        let now = m.serving.lock().get(&row.id).map(|e| e.row.clone());
        if let Some(now) = now
            && let Err(e) = m.serving.store().update_endpoint(&now).await
        {
            tracing::warn!(endpoint = row.name, "cannot store the endpoint: {e}");
        }
    }
    let rolled_back = actions.iter().any(|a| matches!(a, Action::RollBack { .. }));
    // Drained replicas the endpoint no longer wants (fewer wanted, or an update replaced
    // them) end as scaled down; failing ones, and a failed update's, are cancelled.
    let (mut stops, mut scaled_down): (Vec<JobId>, Vec<JobId>) = (Vec::new(), Vec::new());
    for a in &actions {
        if let Action::Stop { job, failed, .. } = a {
            if *failed { stops.push(*job) } else { scaled_down.push(*job) }
        }
    }
    if rolled_back {
        let eps = m.serving.lock();
        if let Some(ep) = eps.get(&row.id) {
            stops.extend(ep.replicas.values().filter(|r| r.stopping).map(|r| r.job));
        }
        scaled_down.retain(|j| !stops.contains(j));
    }
    if !stops.is_empty() || !scaled_down.is_empty() {
        let mut st = m.jobs.lock().await;
        for job in stops {
            if let Err(e) = m.jobs.cancel(&mut st, job, &format!("serve (endpoint {})", row.name)).await {
                tracing::debug!(job, "cannot stop a replica: {e}");
            }
        }
        for job in scaled_down {
            if let Err(e) = scale_down(&m.jobs, &mut st, job, &row.name, row.desired).await {
                tracing::debug!(job, "cannot stop a replica: {e}");
            }
        }
    }
    if actions.contains(&Action::Start)
        && let Err(e) = start(m, row, avoid).await
    {
        let mut eps = m.serving.lock();
        if let Some(ep) = eps.get_mut(&row.id) {
            ep.failures += 1;
            ep.start_after = Some(m.serving.now() + backoff(ep.failures));
            ep.row.message = Some(format!("cannot start a replica: {}", e.message));
        }
    }
}

/// Stops replica job `id`, which endpoint `endpoint` (wanting `wants` replicas) no longer
/// wants: typed ([`StopCause::ScaledDown`]), so that its end reads as what it is, neither a
/// failure nor someone's cancel. A pending one ends at once, a running one once it stopped.
async fn scale_down(jobs: &Jobs, st: &mut State, id: JobId, endpoint: &str, wants: u32) -> Result<(), StoreError> {
    let Some(state) = st.job(id).map(|j| j.state) else { return Ok(()) };
    let cause = StopCause::ScaledDown { endpoint: endpoint.to_string(), wants };
    match state {
        JobState::Pending => {
            let mv = Move { stop: Some(cause.clone()), ..Move::stopped(Some(&cause), "") };
            jobs.transition(st, id, mv, vec![]).await
        }
        JobState::Terminating => Ok(()),
        _ => {
            let why = format!("scaling down: endpoint {endpoint} wants {}", replicas(wants));
            jobs.stop_running(st, id, cause, why).await
        }
    }
}

/// Starts one replica job of `row`'s current revision, as its owner, through a submit's checks.
async fn start(m: &Arc<Manager>, row: &EndpointRow, avoid: Vec<String>) -> Result<JobId, crate::error::ApiError> {
    let user = owner(m, row.owner_id).await?;
    let spec = row.spec.replica_job(row.id, row.revision);
    let (spec, queue, data_on) = crate::admission::admit(m, &user, spec).await?;
    let owner = crate::state::Owner { user_id: user.id, name: user.name.clone(), submitter: row.submitter };
    let hints = crate::jobs::Placement { data_on, avoid };
    let view = m.jobs.submit_placed(None, owner, spec, queue, None, hints).await?;
    tracing::info!(endpoint = row.name, job = view.id, revision = row.revision, "replica started");
    let mut eps = m.serving.lock();
    if let Some(ep) = eps.get_mut(&row.id) {
        ep.replicas.entry(view.id).or_insert_with(|| Replica::new(view.id, row.revision, m.serving.now()));
    }
    Ok(view.id)
}

/// The endpoint owner as a user (their projects, for a submit's checks).
async fn owner(m: &Manager, user_id: i64) -> Result<crate::identity::User, crate::error::ApiError> {
    let users = m.store.users().await?;
    let u = users
        .into_iter()
        .find(|u| u.id == user_id)
        .ok_or_else(|| crate::error::ApiError::not_found(format!("the endpoint's owner (user {user_id}) is gone")))?;
    if u.disabled {
        return Err(crate::error::ApiError::forbidden(format!("the endpoint's owner {} is disabled", u.name)));
    }
    let projects = m.store.memberships(u.id).await?;
    Ok(crate::identity::User { id: u.id, name: u.name, role: u.role, projects, token_hash: String::new() })
}

/// Says why a replica that ended on its own did (its exit, from the store).
async fn note_end(m: &Manager, endpoint: i64, job: JobId) {
    let why = match m.store.job(job).await {
        Ok(Some(row)) => {
            let how = row.reason.unwrap_or_else(|| row.state.to_string());
            match row.exit_code {
                Some(c) => format!("replica job {job} ended ({how}, exit code {c}): restarting it"),
                None => format!("replica job {job} ended ({how}): restarting it"),
            }
        }
        _ => format!("replica job {job} ended: restarting it"),
    };
    tracing::info!(endpoint, job, "{why}");
    let mut eps = m.serving.lock();
    if let Some(ep) = eps.get_mut(&endpoint) {
        ep.row.message = Some(why);
    }
}

/// The probes to send now: for each running replica whose turn it is (its key, node, path
/// and timeout).
fn due_probes(ep: &mut Endpoint, now: Instant) -> Vec<(AppKey, Option<String>, Option<String>, Duration)> {
    let mut out = Vec::new();
    for r in ep.replicas.values_mut() {
        if r.stopping || r.probing || r.running_since.is_none() || now < r.next_probe {
            continue;
        }
        let h = health_of(&ep.row, r.revision);
        let period = Duration::from_secs(u64::from(h.period_secs));
        r.probing = true;
        r.next_probe = now + if r.ever_ready { period } else { FIRST_PROBES.min(period) };
        let path = if r.ever_ready { h.live_path.clone().or(h.ready_path.clone()) } else { h.ready_path.clone() };
        out.push((r.key(), r.node.clone(), path, period.clamp(Duration::from_secs(1), Duration::from_secs(10))));
    }
    out
}

/// Records a probe's result.
fn probed(m: &Manager, job: JobId, result: Result<(), ProbeError>) {
    let mut eps = m.serving.lock();
    let Some(ep) = eps.values_mut().find(|e| e.replicas.contains_key(&job)) else { return };
    let Some(revision) = ep.replicas.get(&job).map(|r| r.revision) else { return };
    let failures = health_of(&ep.row, revision).failures;
    let Some(r) = ep.replicas.get_mut(&job) else { return };
    r.probing = false;
    match result {
        Ok(()) => {
            r.probe_fails = 0;
            if r.draining_since.is_none() && !r.stopping && r.state != ReplicaState::Ready {
                r.state = ReplicaState::Ready;
                r.reason = None;
                if !r.ever_ready {
                    r.ever_ready = true;
                    tracing::info!(endpoint = ep.row.name, job, "replica ready");
                }
                ep.failures = 0;
                ep.start_after = None;
                ep.ready.notify_waiters();
            }
        }
        Err(e) => {
            r.probe_fails += 1;
            if r.state == ReplicaState::Ready && r.probe_fails >= failures {
                r.state = ReplicaState::NotReady;
                tracing::warn!(endpoint = ep.row.name, job, "replica not ready: {e}");
            }
            if r.state != ReplicaState::Draining {
                r.reason = Some(format!("probe failed: {e}"));
            }
        }
    }
}

/// The router could not connect to a ready replica: out of rotation until a probe passes.
pub fn unreachable(m: &Manager, job: JobId, why: &str) {
    let mut eps = m.serving.lock();
    let Some(ep) = eps.values_mut().find(|e| e.replicas.contains_key(&job)) else { return };
    if let Some(r) = ep.replicas.get_mut(&job)
        && r.state == ReplicaState::Ready
    {
        r.state = ReplicaState::NotReady;
        r.probe_fails = r.probe_fails.max(1);
        r.reason = Some(format!("connection failed: {why}"));
        r.next_probe = m.serving.now();
    }
}
