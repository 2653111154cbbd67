//! Job ids as users write them, in berth's commands and Slurm's alike: `12`, `12_7` (task 7 of
//! job array 12) and `12_[1-5,9]` (several of its tasks), resolved to the jobs the manager
//! made for those tasks.
//!
//! A task is a job of its own, with its own id (Slurm's `JobIDRaw`), made when its turn comes:
//! one not made yet has no job to act on, and says so.

use berth_client::Client;
use berth_model::api::JobListQuery;
use berth_model::{ArraySpec, JobId};

use crate::Error;

/// One job, or tasks of an array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobRef {
    /// `12`
    Job(JobId),
    /// `12_7`
    Task(JobId, u32),
    /// `12_[1-5,9]`
    Tasks(JobId, ArraySpec),
}

impl std::str::FromStr for JobRef {
    type Err = String;

    fn from_str(s: &str) -> Result<JobRef, String> {
        let bad = || format!("invalid job id specified: {s}");
        let id = |t: &str| t.parse::<JobId>().ok().filter(|i| *i >= 1).ok_or_else(bad);
        match s.split_once('_') {
            None => Ok(JobRef::Job(id(s)?)),
            Some((job, tasks)) if tasks.starts_with('[') && tasks.ends_with(']') => {
                let spec = tasks[1..tasks.len() - 1].parse::<ArraySpec>().map_err(|e| format!("{}: {}", bad(), e.0))?;
                Ok(JobRef::Tasks(id(job)?, spec))
            }
            Some((job, task)) => Ok(JobRef::Task(id(job)?, task.parse().map_err(|_| bad())?)),
        }
    }
}

impl std::fmt::Display for JobRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JobRef::Job(id) => write!(f, "{id}"),
            JobRef::Task(id, t) => write!(f, "{id}_{t}"),
            JobRef::Tasks(id, spec) => write!(f, "{id}_[{spec}]"),
        }
    }
}

/// The job ids of `refs`, in order: plain ids as they are, tasks as the jobs made for them.
/// A task not made yet (or an array the user cannot see) is an error naming it.
pub async fn resolve(client: &Client, refs: &[JobRef]) -> Result<Vec<JobId>, Error> {
    let mut out = Vec::new();
    for r in refs {
        let (array, wanted): (JobId, Vec<u32>) = match r {
            JobRef::Job(id) => {
                out.push(*id);
                continue;
            }
            JobRef::Task(a, t) => (*a, vec![*t]),
            JobRef::Tasks(a, spec) => (*a, spec.indices().collect()),
        };
        let q = JobListQuery { array: Some(array), all: true, ..Default::default() };
        let tasks = client.jobs(&q).await?;
        for index in wanted {
            match tasks.iter().find(|j| j.array_task.is_some_and(|t| t.index == index)) {
                Some(j) => out.push(j.id),
                None => {
                    return Err(Error::failed(format!(
                        "task {array}_{index} has not started (no job was made for it yet): cancel the whole array \
                         (berth cancel {array}), or act on it once it starts"
                    )));
                }
            }
        }
    }
    Ok(out)
}

/// The plain job ids of `refs`, and their array tasks as (array, indices): what a cancel acts
/// on, since a task not made yet can be cancelled too (`cancel_tasks`).
pub fn split(refs: &[JobRef]) -> (Vec<JobId>, Vec<(JobId, ArraySpec)>) {
    let mut jobs = Vec::new();
    let mut tasks = Vec::new();
    for r in refs {
        match r {
            JobRef::Job(id) => jobs.push(*id),
            JobRef::Task(a, t) => tasks.push((*a, ArraySpec::one(*t))),
            JobRef::Tasks(a, spec) => tasks.push((*a, spec.clone())),
        }
    }
    (jobs, tasks)
}

/// Tasks of an array as users write them: `12_7`, `12_[1-3,9]`.
pub fn tasks_label(array: JobId, spec: &ArraySpec) -> String {
    if spec.count() == 1 { format!("{array}_{spec}") } else { format!("{array}_[{spec}]") }
}

/// A comma-separated list of job ids and array tasks (`-j 3,7,12_1,12_[1-3,9]`): the commas
/// inside brackets belong to the task list.
pub fn parse_list(list: &str) -> Result<Vec<JobRef>, String> {
    let items = berth_model::hostlist::split_unbracketed(list)
        .ok_or_else(|| format!("invalid job list `{list}`: its brackets do not pair up (write 12_[1-3,9])"))?;
    items.into_iter().map(str::parse).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_tasks_and_task_lists() {
        assert_eq!("12".parse(), Ok(JobRef::Job(12)));
        assert_eq!("12_7".parse(), Ok(JobRef::Task(12, 7)));
        let r: JobRef = "12_[1-3,9]".parse().unwrap();
        assert!(matches!(&r, JobRef::Tasks(12, s) if s.indices().collect::<Vec<_>>() == [1, 2, 3, 9]));
        assert_eq!(r.to_string(), "12_[1-3,9]");
        assert_eq!("x".parse::<JobRef>().unwrap_err(), "invalid job id specified: x");
        assert_eq!("0".parse::<JobRef>().unwrap_err(), "invalid job id specified: 0");
        assert!("12_[5-1]".parse::<JobRef>().unwrap_err().contains("ends before it starts"));
        assert_eq!(parse_list("3, 12_7,").unwrap(), vec![JobRef::Job(3), JobRef::Task(12, 7)]);
        // Regression: `-j 12_[1-3,9]` was split at its inner comma.
        let l = parse_list("12_[1-3,9],4").unwrap();
        assert!(matches!(&l[..], [JobRef::Tasks(12, s), JobRef::Job(4)] if s.count() == 4), "{l:?}");
        let (jobs, tasks) = split(&l);
        assert_eq!((jobs, tasks.len(), tasks_label(12, &tasks[0].1)), (vec![4], 1, "12_[1-3,9]".to_string()));
        assert_eq!(tasks_label(12, &ArraySpec::one(7)), "12_7");
    }
}
