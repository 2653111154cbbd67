//! Interactive sessions' activity: clients attached to a job (exec, attach, port-forward
//! connections, app WebSockets) and the time of its last client or app traffic, for the
//! queues' idle timeouts (Backend.AI's idle checkers). Memory only: after a manager restart a
//! session's idle time counts from the restart, never from before it.

use std::collections::HashMap;
use std::sync::Mutex;

use berth_model::JobId;
use jiff::Timestamp;

use crate::clock::Clock;

#[derive(Debug, Clone, Copy)]
struct Activity {
    attached: u32,
    last: Timestamp,
}

#[derive(Debug)]
pub struct Sessions {
    jobs: Mutex<HashMap<JobId, Activity>>,
    /// When this manager started: no session has been idle for longer than since then.
    started: Timestamp,
    clock: Clock,
}

impl Default for Sessions {
    fn default() -> Self {
        Sessions::new(Clock::system())
    }
}

/// A client attached to a job while this lives; its end counts as traffic.
pub struct Attached<'a> {
    sessions: &'a Sessions,
    job: JobId,
}

impl Drop for Attached<'_> {
    fn drop(&mut self) {
        let mut jobs = self.sessions.jobs.lock().expect("sessions lock");
        if let Some(a) = jobs.get_mut(&self.job) {
            a.attached = a.attached.saturating_sub(1);
            a.last = self.sessions.clock.now();
        }
    }
}

impl Sessions {
    /// No sessions yet, timed by `clock`.
    pub fn new(clock: Clock) -> Sessions {
        Sessions { jobs: Mutex::default(), started: clock.now(), clock }
    }

    /// A client attaches to `job` until the guard is dropped.
    pub fn attach(&self, job: JobId) -> Attached<'_> {
        let now = self.clock.now();
        let mut jobs = self.jobs.lock().expect("sessions lock");
        let a = jobs.entry(job).or_insert(Activity { attached: 0, last: now });
        a.attached += 1;
        a.last = now;
        Attached { sessions: self, job }
    }

    /// Traffic for `job` now (a request to one of its apps).
    pub fn touch(&self, job: JobId) {
        let now = self.clock.now();
        let mut jobs = self.jobs.lock().expect("sessions lock");
        jobs.entry(job).and_modify(|a| a.last = now).or_insert(Activity { attached: 0, last: now });
    }

    /// Since when `job` (running since `started`) has been idle: `None` while a client is
    /// attached.
    pub fn idle_since(&self, job: JobId, started: Option<Timestamp>) -> Option<Timestamp> {
        let jobs = self.jobs.lock().expect("sessions lock");
        let floor = started.map_or(self.started, |s| s.max(self.started));
        match jobs.get(&job) {
            Some(a) if a.attached > 0 => None,
            Some(a) => Some(a.last.max(floor)),
            None => Some(floor),
        }
    }

    /// Forgets jobs that are no longer running.
    pub fn retain(&self, running: impl Fn(JobId) -> bool) {
        self.jobs.lock().expect("sessions lock").retain(|id, _| running(*id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attached_clients_hold_a_session_and_their_end_is_traffic() {
        let s = Sessions::default();
        let long_ago = Timestamp::UNIX_EPOCH;
        assert_eq!(s.idle_since(7, Some(long_ago)), Some(s.started), "idle since the manager started at most");
        let a = s.attach(7);
        let b = s.attach(7);
        assert_eq!(s.idle_since(7, Some(long_ago)), None);
        drop(a);
        assert_eq!(s.idle_since(7, Some(long_ago)), None, "one client is still there");
        drop(b);
        let since = s.idle_since(7, Some(long_ago)).unwrap();
        assert!(since >= s.started);
        s.touch(8);
        assert!(s.idle_since(8, None).unwrap() >= s.started);
        s.retain(|id| id == 8);
        assert_eq!(s.idle_since(7, None), Some(s.started));
    }
}
