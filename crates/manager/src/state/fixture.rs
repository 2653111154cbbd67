//! Test fixtures for the tests of the state and its readers: a connected-looking node and a
//! state with one running job.

use berth_model::{Binding, JobSpec, JobState, Topology};
use berth_sched::NodeLedger;

use super::{Job, Node, Owner, State};

/// A ready, undrained node of queue `default` whose ledger is `st.ledgers[ledger]`.
pub fn node(ledger: usize) -> Node {
    Node {
        ledger,
        queue: "default".into(),
        asked_queue: "default".into(),
        labels: Default::default(),
        version: "test".into(),
        ready: true,
        address: None,
        drain: None,
        last_heartbeat: None,
        heard: crate::heard::Heard::new(std::time::Instant::now()),
        conn: None,
        orphan_deadline: None,
        containers: Default::default(),
        gpus_in_use: Vec::new(),
        envs: Vec::new(),
    }
}

/// Job `id` of alice in queue `default`, in `state`, with nothing placed.
pub fn job(id: i64, state: JobState) -> Job {
    let owner = Owner { user_id: 1, name: "alice".into(), submitter: None };
    let now = jiff::Timestamp::now();
    let mut j = Job::submitted(id, owner, JobSpec::command(["true"]), "default".into(), now, &Default::default());
    j.state = state;
    j
}

/// State with node n1 (4 CPUs, 8 GiB, no GPU) and job 1 of alice running on 2 of its CPUs
/// and 1 GiB; the binding.
pub fn one_running_job() -> (State, Binding) {
    let mut st = State::default();
    st.ledgers.push(NodeLedger::new("n1", "default", Topology::synthetic(1, 4, 8 << 30, 0)));
    st.nodes.insert("n1".into(), node(0));
    let b = Binding {
        node: "n1".into(),
        cpus: vec![0, 1],
        cpu_milli: 2000,
        mems: vec![0],
        mem_bytes: 1 << 30,
        gpus: vec![],
        port: None,
    };
    st.allocate(1, std::slice::from_ref(&b));
    let mut running = job(1, JobState::Running);
    running.attempt.bindings = vec![b.clone()];
    st.insert_job(running);
    (st, b)
}
