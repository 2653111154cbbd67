//! The jobs squeue, sacct and scontrol ask for: what the manager filters (ids, states, a time
//! window, one user or queue) goes into the query, the rest (several users or queues, exact
//! names, accounts) is filtered here; an array stands for its tasks, as in Slurm.
//!
//! Users by their Unix names, as Slurm names them (issue 48): over the manager's socket the
//! caller's berth user stands for the Unix account the caller is (root is berth's admin there,
//! and the jobs it submits run as root), so `-u root` selects the admin's jobs and they show
//! as `root` (`%u`, sacct's `User`). Other berth users show by their names, which a socket
//! login makes their Unix account's.

use berth_client::{Client, Error};
use berth_model::api::{JobListQuery, JobView};
use berth_model::{JobId, JobState};

use crate::single;

/// The jobs a command asks for: the manager filters by ids, states, a time window and one
/// user or queue; several users or queues, exact names and accounts are filtered here.
#[derive(Debug, Default)]
pub struct Wanted {
    pub ids: Option<Vec<JobId>>,
    /// `None`: any state.
    pub states: Option<Vec<JobState>>,
    /// Finished jobs too.
    pub all: bool,
    pub since: Option<jiff::Timestamp>,
    pub until: Option<jiff::Timestamp>,
    pub users: Vec<String>,
    pub partitions: Vec<String>,
    pub names: Vec<String>,
    pub accounts: Vec<String>,
    /// Only these fields of each job (`None`: all), as the manager's `fields=` takes them;
    /// what the filters and the arrays' folding read is added.
    pub fields: Option<Vec<&'static str>>,
}

impl Wanted {
    /// The jobs asked for, fetched from the manager and filtered; arrays folded as Slurm shows them.
    pub async fn fetch(&self, client: &Client) -> Result<Vec<JobView>, Error> {
        if self.states.as_ref().is_some_and(Vec::is_empty) || self.ids.as_ref().is_some_and(Vec::is_empty) {
            return Ok(Vec::new());
        }
        let alias = caller_alias(client).await;
        let users = with_alias(&self.users, alias.as_ref());
        let joined = |v: Vec<String>| v.join(",");
        let q = JobListQuery {
            all: self.all,
            state: self.states.as_ref().map(|s| joined(s.iter().map(|s| s.as_str().to_string()).collect())),
            user: single(&users),
            queue: single(&self.partitions),
            ids: self.ids.as_ref().map(|i| joined(i.iter().map(|i| i.to_string()).collect())),
            since: self.since.map(|t| t.to_string()),
            until: self.until.map(|t| t.to_string()),
            fields: self.fields.as_ref().map(|f| self.with_own_fields(f).join(",")),
            ..Default::default()
        };
        let among = |list: &[String], v: Option<&String>| list.is_empty() || v.is_some_and(|v| list.contains(v));
        let mut jobs = client.jobs(&q).await?;
        if self.ids.is_some() {
            // An array named by id stands for its tasks, as in Slurm (`sacct -j 12` lists 12_0...).
            let arrays: Vec<JobId> = jobs.iter().filter(|j| j.array.is_some()).map(|j| j.id).collect();
            for array in arrays {
                let tq = JobListQuery { array: Some(array), ids: None, since: None, until: None, ..q.clone() };
                let tasks = client.jobs(&tq).await?;
                jobs.extend(tasks.into_iter().filter(|t| !self.ids.as_ref().is_some_and(|i| i.contains(&t.id))));
            }
        }
        Ok(fold_arrays(jobs)
            .into_iter()
            .filter(|j| among(&users, Some(&j.user)) && among(&self.partitions, Some(&j.queue)))
            .filter(|j| among(&self.names, j.name.as_ref()) && among(&self.accounts, j.project.as_ref()))
            .map(|mut j| {
                if let Some(a) = alias.as_ref().filter(|a| a.berth == j.user) {
                    // The account stays the berth user's own (`SLURM_JOB_ACCOUNT`, sacctmgr's).
                    j.project.get_or_insert_with(|| a.berth.clone());
                    j.user = a.unix.clone();
                }
                j
            })
            .collect())
    }
}

/// The caller's berth user and the Unix account it stands for, when they differ.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Alias {
    berth: String,
    unix: String,
}

/// The caller's [`Alias`]: only over the manager's socket, where the manager knows the
/// caller's Unix account (and runs what it submits as it).
async fn caller_alias(client: &Client) -> Option<Alias> {
    client.socket()?;
    let berth = client.whoami().await.ok()?.user;
    let unix = crate::assoc::unix_me()?;
    (berth != unix).then_some(Alias { berth, unix })
}

/// `users` with the caller's berth name beside its Unix name, when asked for by that.
fn with_alias(users: &[String], alias: Option<&Alias>) -> Vec<String> {
    let mut out = users.to_vec();
    if let Some(a) = alias.filter(|a| users.contains(&a.unix) && !users.contains(&a.berth)) {
        out.push(a.berth.clone());
    }
    out
}

impl Wanted {
    /// `fields` and what `fetch` reads itself: the client-side filters and `fold_arrays`.
    fn with_own_fields(&self, fields: &[&'static str]) -> Vec<&'static str> {
        let mut all = fields.to_vec();
        let filters =
            [(&self.users, "user"), (&self.partitions, "queue"), (&self.names, "name"), (&self.accounts, "project")];
        let own = ["id", "state", "array", "array_task"]
            .into_iter()
            .chain(filters.into_iter().filter(|(list, _)| !list.is_empty()).map(|(_, f)| f));
        for f in own {
            if !all.contains(&f) {
                all.push(f);
            }
        }
        all
    }
}

/// An array's own row as Slurm shows it beside its tasks: while tasks are still to be made,
/// the row for them (`12_[5-19%4]`, from the manager); once all are made, none (its tasks stand
/// for it); once it ended, the row of the tasks never made (`12_[5-19]`, cancelled with it),
/// if any, reckoned from the tasks listed.
pub fn fold_arrays(jobs: Vec<JobView>) -> Vec<JobView> {
    let mut made: std::collections::HashMap<JobId, Vec<u32>> = std::collections::HashMap::new();
    for t in jobs.iter().filter_map(|j| j.array_task) {
        made.entry(t.array_id).or_default().push(t.index);
    }
    jobs.into_iter()
        .filter_map(|mut j| {
            let Some(a) = j.array.as_deref().filter(|a| !a.starts_with('[')) else { return Some(j) };
            if !j.state.is_terminal() {
                return None;
            }
            let spec: berth_model::ArraySpec = a.parse().ok()?;
            let tasks = made.get(&j.id).map(Vec::as_slice).unwrap_or_default();
            let rest = spec.remaining(|i| tasks.contains(&i));
            // `[]` or `[%4]`: every task was made.
            (!rest.trim_start_matches('[').starts_with(['%', ']'])).then(|| {
                j.array = Some(rest);
                j
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use berth_model::JobState;
    use berth_model::api::JobView;

    use super::*;

    #[test]
    fn root_asks_for_its_jobs_by_its_unix_name() {
        let alias = Alias { berth: "admin".into(), unix: "root".into() };
        let users = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(with_alias(&users(&["root"]), Some(&alias)), users(&["root", "admin"]));
        assert_eq!(with_alias(&users(&["alice"]), Some(&alias)), users(&["alice"]));
        assert_eq!(with_alias(&users(&["root"]), None), users(&["root"]));
        assert!(with_alias(&[], Some(&alias)).is_empty(), "no filter stays none");
    }

    #[test]
    fn arrays_fold_into_their_tasks() {
        let job = |id: JobId, state: JobState, array: Option<&str>, task: Option<u32>| {
            let mut j = crate::fixtures::job(state);
            j.id = id;
            j.array = array.map(str::to_string);
            j.array_task = task.map(|index| berth_model::ArrayTask { array_id: 10, index, min: 0, max: 3, count: 4 });
            j
        };
        let shown = |jobs: Vec<JobView>| {
            fold_arrays(jobs).iter().map(crate::jobfields::display_id).collect::<Vec<_>>().join(" ")
        };
        let t0 = job(11, JobState::Succeeded, None, Some(0));
        let t1 = job(12, JobState::Running, None, Some(1));
        // Still making tasks: the manager's remainder row stays.
        assert_eq!(
            shown(vec![job(10, JobState::Pending, Some("[2-3%2]"), None), t0.clone(), t1.clone()]),
            "10_[2-3%2] 10_0 10_1"
        );
        // All made: only the tasks.
        assert_eq!(shown(vec![job(10, JobState::Pending, Some("0-1"), None), t0.clone(), t1.clone()]), "10_0 10_1");
        // Ended with tasks never made: those, in the array's state.
        assert_eq!(shown(vec![job(10, JobState::Cancelled, Some("0-3%2"), None), t0.clone()]), "10_[1-3%2] 10_0");
        assert_eq!(shown(vec![job(10, JobState::Succeeded, Some("0-1"), None), t0, t1]), "10_0 10_1");
    }
}
