//! What a kernel learns about its job from the environment (docs/node.md): berth's own
//! `BERTH_*` variables and the ones PyTorch's `torchrun`/`init_process_group(env://)` read
//! (`MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`, `RANK`, `NODE_RANK`, `LOCAL_RANK`).
//!
//! One kernel runs per node, so a kernel's rank is its index and `LOCAL_RANK` is 0; torchrun,
//! started in each kernel, spreads its own workers over the node's GPUs from there.
//!
//! A job with several kernels on its node (`--kernels N`, containers on the job's private
//! network) is one node of N local ranks: the hosts are the kernels' roles (`main`, `sub1`,
//! ..., their host names on that network), `MASTER_ADDR` is `main`, `LOCAL_RANK` the index,
//! `LOCAL_WORLD_SIZE` N and `NODE_RANK` 0.
//!
//! `MASTER_PORT` is a port of the main kernel's node reserved by the manager when the job is
//! placed ([`assign_ports`]), stored in the main kernel's binding, so a re-sent `StartKernel`
//! after a reconnect or a manager restart carries the same value, and two jobs whose main
//! kernels share a node never get the same port.

use std::collections::{BTreeMap, HashMap, HashSet};

use berth_model::Binding;

use crate::state::{Job, State};

/// Ports handed out as `MASTER_PORT`: from torchrun's default 29500, a thousand of them.
pub const PORT_BASE: u16 = 29500;
pub const PORT_COUNT: u16 = 1000;

/// The variables the manager adds to kernel `index`'s environment.
pub fn kernel_env(st: &State, job: &Job, index: u32) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    let nodes: Vec<&str> = job.attempt.bindings.iter().map(|b| b.node.as_str()).collect();
    let per_node = job.spec.kernels.max(1);
    let hosts: Vec<String> = if per_node > 1 {
        (0..job.attempt.bindings.len() as u32).map(role).collect()
    } else {
        nodes.iter().map(|n| address_of(st, n)).collect()
    };
    let size = job.attempt.bindings.len().to_string();
    let mut set = |k: &str, v: String| {
        env.insert(k.to_string(), v);
    };
    set("BERTH_JOB_ID", job.id.to_string());
    set("BERTH_JOB_NAME", job.spec.name.clone().unwrap_or_else(|| format!("job-{}", job.id)));
    set("BERTH_USER", job.owner.name.clone());
    // The agent maps it to the kernel's Unix uid (`--user-map`).
    set("BERTH_USER_ID", job.owner.user_id.to_string());
    set("BERTH_KERNEL_INDEX", index.to_string());
    set("BERTH_CLUSTER_SIZE", size.clone());
    set("BERTH_CLUSTER_ROLE", role(index));
    set("BERTH_CLUSTER_INDEX", index.to_string());
    set("BERTH_CLUSTER_HOSTS", hosts.join(","));
    set("BERTH_CLUSTER_NODES", nodes.join(","));
    if let Some(main) = hosts.first() {
        set("MASTER_ADDR", main.clone());
    }
    if let Some(port) = job.attempt.bindings.first().and_then(|b| b.port) {
        set("MASTER_PORT", port.to_string());
    }
    set("WORLD_SIZE", size);
    set("RANK", index.to_string());
    set("NODE_RANK", (index / per_node).to_string());
    set("LOCAL_RANK", (index % per_node).to_string());
    set("LOCAL_WORLD_SIZE", per_node.to_string());
    for app in &job.spec.apps {
        set(&berth_model::app::base_url_var(&app.name), berth_model::app::base_path(job.id, &app.name));
    }
    // Slurm's names for the same facts, for batch scripts written for Slurm.
    let slurm_hosts: Vec<String> = if per_node > 1 { hosts } else { nodes.iter().map(|n| n.to_string()).collect() };
    crate::slurm_env::add(&mut env, job, index, &slurm_hosts);
    env
}

/// `main` for kernel 0, `sub1`, `sub2`, ... for the others.
pub fn role(index: u32) -> String {
    berth_model::job::kernel_role(index)
}

/// Where other nodes reach `node`: the address its agent registered, else its name.
fn address_of(st: &State, node: &str) -> String {
    st.node(node).and_then(|n| n.address.clone()).unwrap_or_else(|| node.to_string())
}

/// Ports reserved on each node by the main kernels of jobs holding resources.
pub fn ports_in_use(st: &State) -> HashMap<String, HashSet<u16>> {
    let mut used: HashMap<String, HashSet<u16>> = HashMap::new();
    for j in st.holding_jobs() {
        if let Some(b) = j.attempt.bindings.first()
            && let Some(p) = b.port
        {
            used.entry(b.node.clone()).or_default().insert(p);
        }
    }
    used
}

/// Reserves a `MASTER_PORT` for a job being placed with `bindings`, on its main kernel's node.
/// The search starts at a point that depends on the job id, so a port freed by one job is
/// not the next job's first choice (its old sockets may linger in TIME_WAIT). When all ports
/// of that node are taken the job runs without `MASTER_PORT`.
pub fn assign_port(used: &mut HashMap<String, HashSet<u16>>, job: berth_model::JobId, bindings: &mut [Binding]) {
    let Some(main) = bindings.first_mut() else { return };
    let taken = used.entry(main.node.clone()).or_default();
    let start = job.rem_euclid(PORT_COUNT as i64) as u16;
    for i in 0..PORT_COUNT {
        let port = PORT_BASE + (start + i) % PORT_COUNT;
        if taken.insert(port) {
            main.port = Some(port);
            return;
        }
    }
    tracing::warn!(job, node = %main.node, "no free MASTER_PORT left on the node: the job runs without one");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bindings(nodes: &[&str]) -> Vec<Binding> {
        nodes.iter().map(|n| Binding { node: n.to_string(), ..Default::default() }).collect()
    }

    #[test]
    fn ports_are_unique_per_main_node_and_wrap_around() {
        let mut used = HashMap::new();
        let mut a = bindings(&["n1", "n2"]);
        assign_port(&mut used, 7, &mut a);
        assert_eq!(a[0].port, Some(PORT_BASE + 7));
        assert_eq!(a[1].port, None, "only the main kernel reserves a port");
        // Job 1007 starts its search at the same port on the same node: it gets the next one.
        let mut b = bindings(&["n1"]);
        assign_port(&mut used, 1007, &mut b);
        assert_eq!(b[0].port, Some(PORT_BASE + 8));
        // On another node the same port is free.
        let mut c = bindings(&["n2", "n1"]);
        assign_port(&mut used, 7, &mut c);
        assert_eq!(c[0].port, Some(PORT_BASE + 7));
        // Search wraps past the end of the range.
        let mut d = bindings(&["n3"]);
        used.insert("n3".into(), [PORT_BASE + 999].into_iter().collect());
        assign_port(&mut used, 999, &mut d);
        assert_eq!(d[0].port, Some(PORT_BASE));
    }

    #[test]
    fn a_full_node_gives_no_port() {
        let mut used = HashMap::new();
        used.insert("n1".to_string(), (PORT_BASE..PORT_BASE + PORT_COUNT).collect());
        let mut b = bindings(&["n1"]);
        assign_port(&mut used, 1, &mut b);
        assert_eq!(b[0].port, None);
    }

    #[test]
    fn roles() {
        assert_eq!(role(0), "main");
        assert_eq!(role(2), "sub2");
    }
}
