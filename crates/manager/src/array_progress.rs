//! How far a job array has got: which of its tasks it has made (as jobs of their own) and how
//! the made tasks that ended did, kept in memory per array (`State::arrays`) and rebuilt from
//! the tasks' rows after a restart (`arrays.rs`).

use std::collections::HashSet;

use berth_model::{ArraySpec, JobState};

/// One array's progress.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArrayProgress {
    /// Indices whose task job exists.
    pub made: HashSet<u32>,
    /// Every position (in the array's order) before this one is made.
    pub next: u64,
    pub succeeded: u64,
    /// Failed, timed out or lost.
    pub failed: u64,
    pub cancelled: u64,
}

impl ArrayProgress {
    /// Progress from the tasks on record: each task's index and state.
    pub fn from_tasks(array: &ArraySpec, tasks: impl IntoIterator<Item = (u32, JobState)>) -> ArrayProgress {
        let mut p = ArrayProgress::default();
        for (index, state) in tasks {
            p.made.insert(index);
            p.ended(state);
        }
        p.skip_made(array);
        p
    }

    /// Counts a task that ended in `state` (nothing for an unfinished state).
    pub fn ended(&mut self, state: JobState) {
        match state {
            JobState::Succeeded => self.succeeded += 1,
            JobState::Cancelled => self.cancelled += 1,
            s if s.is_terminal() => self.failed += 1,
            _ => {}
        }
    }

    fn skip_made(&mut self, array: &ArraySpec) {
        while array.nth(self.next).is_some_and(|i| self.made.contains(&i)) {
            self.next += 1;
        }
    }

    /// Takes up to `n` indices still to make, in order, and counts them as made.
    pub fn take(&mut self, array: &ArraySpec, n: usize) -> Vec<u32> {
        let mut out = Vec::with_capacity(n.min(1024));
        while out.len() < n {
            self.skip_made(array);
            let Some(i) = array.nth(self.next) else { break };
            self.made.insert(i);
            out.push(i);
        }
        out
    }

    /// Whether every task has been made.
    pub fn all_made(&self, array: &ArraySpec) -> bool {
        self.made.len() as u64 >= array.count()
    }

    /// How the array ends once every task has: FAILED if one failed, else CANCELLED if one was
    /// cancelled, else SUCCEEDED; with the words for its reason.
    pub fn outcome(&self, total: u64) -> (JobState, String) {
        if self.failed > 0 {
            (JobState::Failed, format!("{} of {total} tasks failed", self.failed))
        } else if self.cancelled > 0 {
            (JobState::Cancelled, format!("{} of {total} tasks cancelled", self.cancelled))
        } else {
            (JobState::Succeeded, format!("all {total} tasks succeeded"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_are_taken_in_order_skipping_those_made_and_ends_decide_the_outcome() {
        let a: ArraySpec = "0-9:2".parse().unwrap();
        let mut p = ArrayProgress::from_tasks(&a, [(0, JobState::Succeeded), (4, JobState::Running)]);
        assert_eq!(p.next, 1);
        assert_eq!(p.take(&a, 2), [2, 6]);
        assert_eq!(p.take(&a, 5), [8]);
        assert!(p.all_made(&a));
        assert_eq!(p.take(&a, 1), Vec::<u32>::new());
        p.ended(JobState::Succeeded);
        assert_eq!(p.outcome(5).0, JobState::Succeeded);
        p.ended(JobState::Cancelled);
        assert_eq!(p.outcome(5), (JobState::Cancelled, "1 of 5 tasks cancelled".into()));
        p.ended(JobState::Timeout);
        assert_eq!(p.outcome(5), (JobState::Failed, "1 of 5 tasks failed".into()));
    }
}
