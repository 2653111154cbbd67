//! PostgreSQL's [`crate::Store::insert_jobs`] (a group commit of submits): one statement, run
//! on its own so that it is its own transaction, writes the whole batch in one round trip and
//! one WAL flush, where a transaction took five (BEGIN, the fence check, the jobs, their
//! history, COMMIT), each a wait for the manager with the transaction open on a loaded
//! machine (issue 42). It does what `insert_jobs_in` does inside `check_fence`'s transaction:
//!
//! - the fence: the lease row is read `FOR KEY SHARE`, a lock held until the statement
//!   commits, so a takeover (`FOR UPDATE`) cannot slip in between the check and the commit;
//!   with another epoch than this manager's, nothing is inserted and the call is `Fenced`;
//! - ids: `nextval` once per job, in the batch's order (`UNNEST ... WITH ORDINALITY` yields
//!   the rows in order), so the ids ascend in the batch's order;
//! - every job's row and its `submitted` history row, or none of them (one statement).

use std::sync::atomic::Ordering;

use berth_model::{JobId, JobState};
use sqlx::Row;

use super::PgStore;
use crate::rows::{duplicate, to_json, ts};
use crate::{NewJob, Result, StoreError};

const INSERT: &str = "WITH lease AS (SELECT epoch FROM leader_lease WHERE id = 1 FOR KEY SHARE), \
     go AS (SELECT $12::bigint = 0 OR EXISTS (SELECT 1 FROM lease WHERE epoch = $12) AS ok), \
     t AS MATERIALIZED (SELECT nextval(pg_get_serial_sequence('jobs', 'id')) AS id, u.* \
         FROM UNNEST($1::bigint[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::text[], $7::bool[], \
             $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[]) WITH ORDINALITY \
             AS u(user_id, spec, queue, priority, at, project, shared, uid, gid, array_id, array_index, ord) \
         WHERE (SELECT ok FROM go)), \
     j AS (INSERT INTO jobs (id, user_id, spec, queue, priority, state, attempt, submitted_at, project, shared, \
         submitter_uid, submitter_gid, array_id, array_index) \
         SELECT id, user_id, spec, queue, priority, $13::text, 0, at, project, shared, uid, gid, array_id, array_index \
         FROM t), \
     h AS (INSERT INTO transitions (job_id, at, from_state, to_state, reason) \
         SELECT id, at, NULL, $13::text, 'submitted' FROM t ORDER BY ord) \
     SELECT (SELECT epoch FROM lease) AS epoch, ARRAY(SELECT id FROM t ORDER BY ord) AS ids";

/// Inserts `jobs` (at least one) in one statement: their ids, in `jobs`' order.
pub(super) async fn insert_jobs(a: &PgStore, jobs: &[NewJob<'_>]) -> Result<Vec<JobId>> {
    let mut user = Vec::with_capacity(jobs.len());
    let mut spec = Vec::with_capacity(jobs.len());
    let (mut queue, mut priority, mut at, mut project, mut shared) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut uid, mut gid, mut array_id, mut array_index) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for j in jobs {
        user.push(j.user_id);
        spec.push(to_json(j.spec));
        queue.push(j.spec.queue_name());
        priority.push(j.spec.priority as i64);
        at.push(ts(j.at));
        project.push(j.spec.project.as_deref().unwrap_or(""));
        shared.push(j.spec.shared);
        uid.push(j.submitter.map(|s| s.uid as i64));
        gid.push(j.submitter.map(|s| s.gid as i64));
        array_id.push(j.spec.array_task.map(|t| t.array_id));
        array_index.push(j.spec.array_task.map(|t| i64::from(t.index)));
    }
    let mine = a.fence.load(Ordering::SeqCst);
    let row = sqlx::query(INSERT)
        .bind(&user)
        .bind(&spec)
        .bind(&queue)
        .bind(&priority)
        .bind(&at)
        .bind(&project)
        .bind(&shared)
        .bind(&uid)
        .bind(&gid)
        .bind(&array_id)
        .bind(&array_index)
        .bind(mine as i64)
        .bind(JobState::Pending.as_str())
        .fetch_one(&a.writer)
        .await
        .map_err(duplicate(|| {
            let tasks: Vec<String> =
                jobs.iter().filter_map(|j| j.spec.array_task).map(|t| format!("{}_{}", t.array_id, t.index)).collect();
            format!("array task {}", tasks.join(", "))
        }))?;
    let now: Option<i64> = row.try_get("epoch")?;
    let ids: Vec<i64> = row.try_get("ids")?;
    if mine != 0 && now != Some(mine as i64) {
        return Err(StoreError::Fenced { mine, now: now.unwrap_or(0).max(0) as u64 });
    }
    if ids.len() != jobs.len() {
        return Err(StoreError::Corrupt(format!("{} jobs inserted, {} ids returned", jobs.len(), ids.len())));
    }
    Ok(ids)
}
