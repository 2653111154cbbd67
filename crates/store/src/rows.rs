//! What both SQL adapters share outside the queries: how values are stored (timestamps as
//! BIGINT microseconds, JSON as TEXT, typed states and causes), the column list of a job row,
//! and statements held as text plus arguments ([`Stmt`]) for the few places where the two
//! databases run the same SQL in a different number of round trips.

use std::str::FromStr;

use berth_model::api::NodeState;
use berth_model::{EndCause, JobState, PreemptAction, StopCause, UnixId};
use jiff::Timestamp;

use crate::{Result, StoreError};

pub(crate) fn ts(t: Timestamp) -> i64 {
    t.as_microsecond()
}

pub(crate) fn from_ts(v: i64) -> Result<Timestamp> {
    Timestamp::from_microsecond(v).map_err(|e| StoreError::Corrupt(format!("timestamp {v}: {e}")))
}

pub(crate) fn opt_ts(v: Option<i64>) -> Result<Option<Timestamp>> {
    v.map(from_ts).transpose()
}

pub(crate) fn state(s: &str) -> Result<JobState> {
    JobState::from_str(s).map_err(StoreError::Corrupt)
}

pub(crate) fn json<T: serde::de::DeserializeOwned>(what: &str, s: &str) -> Result<T> {
    serde_json::from_str(s).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

pub(crate) fn to_json<T: serde::Serialize>(v: &T) -> String {
    // Model types always serialise (no maps with non-string keys, no failing impls).
    serde_json::to_string(v).expect("model types serialise to json")
}

pub(crate) fn node_state(s: &str) -> Result<NodeState> {
    NodeState::parse(s).ok_or_else(|| StoreError::Corrupt(format!("node state `{s}`")))
}

/// The one row a write's `RETURNING` gave.
///
/// Writes with `RETURNING` are read with `fetch_all`, never `fetch_one`/`fetch_optional`: SQLite
/// hands the row out before the statement has finished (and, outside a transaction, before it
/// has committed), and those stop reading at the first row, so a failure after it (a full disk
/// at commit) went unseen and the caller got a row that was never stored (issue 13).
pub(crate) fn returned<R>(rows: &[R]) -> Result<&R> {
    rows.first().ok_or_else(|| StoreError::Corrupt("a write's RETURNING gave no row".into()))
}

pub(crate) fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation())
}

/// A unique violation as `Duplicate(what)`, anything else as itself.
pub(crate) fn duplicate(what: impl FnOnce() -> String) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |e| if is_unique_violation(&e) { StoreError::Duplicate(what()) } else { e.into() }
}

pub(crate) const JOB_COLUMNS: &str = "j.id, j.user_id, u.name AS user_name, j.spec, j.queue, j.priority, j.state, j.attempt, \
     j.submitted_at, j.started_at, j.ended_at, j.exit_code, j.reason, j.pending_reason, j.nodes, \
     j.submitter_uid, j.submitter_gid, j.cancelled_by, j.preempted_by, j.preempt_action, j.idle_stop_secs, \
     j.scaled_down_to, j.end_cause, j.used_cpu_seconds, j.used_memory_peak_bytes, j.used_gpu_seconds, j.end_signal, \
     j.hold";

/// The `hold` column of a job's hold: `released` for none, so that a job submitted held
/// (`JobSpec::hold`) stays released; NULL is only ever as submitted.
pub(crate) fn hold_column(hold: Option<berth_model::Hold>) -> &'static str {
    match hold {
        Some(berth_model::Hold::User) => "user",
        Some(berth_model::Hold::Admin) => "admin",
        None => "released",
    }
}

/// A job's hold from its `hold` column and whether its spec asked to be submitted held.
pub(crate) fn hold(column: Option<&str>, submitted_held: bool) -> Result<Option<berth_model::Hold>> {
    match column {
        None => Ok(submitted_held.then_some(berth_model::Hold::User)),
        Some("user") => Ok(Some(berth_model::Hold::User)),
        Some("admin") => Ok(Some(berth_model::Hold::Admin)),
        Some("released") => Ok(None),
        Some(h) => Err(StoreError::Corrupt(format!("job hold `{h}`"))),
    }
}

/// The `end_cause` column.
pub(crate) fn end_cause(c: Option<&str>) -> Result<Option<EndCause>> {
    c.map(|c| EndCause::parse(c).ok_or_else(|| StoreError::Corrupt(format!("job end cause `{c}`")))).transpose()
}

/// The `nodes` column: comma-separated names, none when empty.
pub(crate) fn node_list(s: &str) -> Vec<String> {
    s.split(',').filter(|n| !n.is_empty()).map(str::to_string).collect()
}

/// The stop columns: a canceller, or a preemptor with its action (both or neither), or an
/// idle time alone, or an endpoint (in the canceller's column) with the replicas it wanted.
pub(crate) fn stop_cause(
    by: Option<String>,
    for_job: Option<i64>,
    action: Option<&str>,
    idle: Option<i64>,
    scaled_to: Option<i64>,
) -> Result<Option<StopCause>> {
    if let Some(wants) = scaled_to {
        return match (by, for_job, action, idle) {
            (Some(endpoint), None, None, None) => {
                Ok(Some(StopCause::ScaledDown { endpoint, wants: wants.clamp(0, u32::MAX.into()) as u32 }))
            }
            (by, job, action, idle) => Err(StoreError::Corrupt(format!(
                "job stop cause: scaled_down_to {wants} with cancelled_by {by:?}, preempted_by {job:?}, \
                 preempt_action {action:?}, idle_stop_secs {idle:?}"
            ))),
        };
    }
    if let Some(secs) = idle {
        return match (by, for_job, action) {
            (None, None, None) => Ok(Some(StopCause::Idle { idle_secs: secs.max(0) as u64 })),
            (by, job, action) => Err(StoreError::Corrupt(format!(
                "job stop cause: idle_stop_secs {secs} with cancelled_by {by:?}, preempted_by {job:?}, \
                 preempt_action {action:?}"
            ))),
        };
    }
    Ok(match (by, for_job, action) {
        (None, None, None) => None,
        (Some(by), None, None) => Some(StopCause::Cancelled { by }),
        (Some(by), None, Some("requeue")) => Some(StopCause::Requeued { by }),
        (None, Some(by_job), Some(a)) => {
            let action = PreemptAction::parse(a).ok_or_else(|| StoreError::Corrupt(format!("preempt action `{a}`")))?;
            Some(StopCause::Preempted { by_job, action })
        }
        (by, job, action) => {
            return Err(StoreError::Corrupt(format!(
                "job stop cause: cancelled_by {by:?}, preempted_by {job:?}, preempt_action {action:?}"
            )));
        }
    })
}

/// The `submitter_uid`/`submitter_gid` pair of a `what` (job, endpoint): both or neither, each
/// a u32.
pub(crate) fn submitter(what: &str, uid: Option<i64>, gid: Option<i64>) -> Result<Option<UnixId>> {
    match (uid, gid) {
        (None, None) => Ok(None),
        (Some(u), Some(g)) => match (u32::try_from(u), u32::try_from(g)) {
            (Ok(uid), Ok(gid)) => Ok(Some(UnixId { uid, gid })),
            _ => Err(StoreError::Corrupt(format!("{what} submitter uid {u} / gid {g} out of range"))),
        },
        _ => Err(StoreError::Corrupt(format!("{what} submitter has a uid or a gid but not both"))),
    }
}

/// One argument of a [`Stmt`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Arg {
    Int(Option<i64>),
    Text(Option<String>),
}

impl From<i64> for Arg {
    fn from(v: i64) -> Arg {
        Arg::Int(Some(v))
    }
}

impl From<&str> for Arg {
    fn from(v: &str) -> Arg {
        Arg::Text(Some(v.to_string()))
    }
}

/// A statement written with `?` placeholders and its arguments in order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Stmt {
    pub sql: String,
    pub args: Vec<Arg>,
}

/// Binds `args` in order (each adapter's query type is concrete, so this is a macro).
macro_rules! bind_args {
    ($q:expr, $args:expr) => {{
        let mut q = $q;
        for a in $args {
            q = match a {
                $crate::rows::Arg::Int(v) => q.bind(*v),
                $crate::rows::Arg::Text(v) => q.bind(v.as_deref()),
            };
        }
        q
    }};
}
pub(crate) use bind_args;

/// `?` and `?N` placeholders as PostgreSQL's `$N`; `?` inside quotes is left alone. The shared
/// SQL is written for SQLite's placeholders, which are the shorter to read.
pub(crate) fn dollar_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let (mut next, mut quoted) = (0u32, false);
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\'' {
            quoted = !quoted;
        }
        if c != '?' || quoted {
            out.push(c);
            continue;
        }
        let mut digits = String::new();
        while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            digits.push(*d);
            chars.next();
        }
        out.push('$');
        if digits.is_empty() {
            next += 1;
            out.push_str(&next.to_string());
        } else {
            out.push_str(&digits);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_in_order_and_numbered_ones_kept() {
        assert_eq!(dollar_placeholders("a = ? AND b IN (?, ?)"), "a = $1 AND b IN ($2, $3)");
        assert_eq!(dollar_placeholders("x = ?2 + ?1 + ?2"), "x = $2 + $1 + $2");
        assert_eq!(dollar_placeholders("x = '?' AND y = ?"), "x = '?' AND y = $1");
    }

    #[test]
    fn stop_columns_need_both_halves_of_a_preemption() {
        assert!(stop_cause(None, Some(3), None, None, None).is_err());
        assert_eq!(
            stop_cause(Some("ann".into()), None, None, None, None).unwrap(),
            Some(StopCause::Cancelled { by: "ann".into() })
        );
        assert_eq!(
            stop_cause(Some("llm".into()), None, None, None, Some(1)).unwrap(),
            Some(StopCause::ScaledDown { endpoint: "llm".into(), wants: 1 })
        );
        assert!(stop_cause(None, None, None, None, Some(1)).is_err());
        assert!(submitter("job", Some(1), None).is_err());
    }
}
