//! Host-path mounts of container jobs: which nodes allow them.
//!
//! Each agent reports the paths its admin allows (`berth agent --allow-mount`). The pass
//! places a job with mounts only on nodes that allow every one of them, and the manager
//! refuses at submit a job whose mounts no node of its queue allows ([`check_mounts`]).
//! Paths are compared as written, component by component (`/data` covers `/data/imagenet`,
//! not `/database`); the agent still resolves symlinks when the container is created, so a
//! path that only looks allowed (a symlink out of `/data`) still fails there.
//!
//! Data folders (`--folder`) of process jobs need a node whose agent can bind them (a root
//! agent: they go into the kernel's private mount namespace); a container binds them through
//! Docker anywhere. Such a job is placed only on nodes that can, and refused at submit when
//! no node of its queue can ([`check_folders`]) rather than failing at launch (a user's
//! `berth up`, issue 41).

use std::path::Path;
use std::sync::Arc;

use crate::ledger::NodeLedger;

/// Whether `path` lies under one of `allowed`.
pub fn mount_allowed(path: &str, allowed: &[String]) -> bool {
    allowed.iter().any(|a| Path::new(path).starts_with(Path::new(a)))
}

impl NodeLedger {
    /// Sets the host paths the node allows containers to mount; `None`: not reported yet
    /// (the node then takes no job with mounts, and submit checks skip it).
    pub fn set_allowed_mounts(&mut self, allowed: Option<Vec<String>>) {
        self.allowed_mounts = allowed.map(Arc::from);
    }

    /// The allow-list the node reported, if it has.
    pub fn allowed_mounts(&self) -> Option<&[String]> {
        self.allowed_mounts.as_deref()
    }

    /// Whether the node allows every one of `mounts` (host paths); always true without mounts.
    pub fn allows_mounts(&self, mounts: &[String]) -> bool {
        mounts.is_empty() || self.allowed_mounts.as_deref().is_some_and(|a| mounts.iter().all(|m| mount_allowed(m, a)))
    }
}

impl NodeLedger {
    /// Sets whether process kernels here can get data folders (the agent's `Register`);
    /// `None`: not said yet (submit checks skip the node).
    pub fn set_folder_mounts(&mut self, can: Option<bool>) {
        self.folder_mounts = can;
    }

    /// What the agent said about folders, if it has.
    pub fn folder_mounts(&self) -> Option<bool> {
        self.folder_mounts
    }

    /// Whether the node may take a process job with data folders: false only where the agent
    /// said it cannot mount them.
    pub fn mounts_folders(&self) -> bool {
        self.folder_mounts != Some(false)
    }
}

/// A job's host mounts or data folders that no node of its queue can ever take, refused at
/// submit; the text is the API's error body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MountError {
    #[error(
        "folder {}: no node of queue {queue} can mount folders into a process job (that needs the agent to run as \
         root; a user's `berth up` does not): run the job in a container (--image), which binds folders through \
         Docker, or run berth as root (sudo berth up, or the agent's service)",
        folders.join(", ")
    )]
    FoldersUnmountable { folders: Vec<String>, queue: String },
    #[error(
        "{refused} of queue {queue} (allowed: {}): mount a path under an allowed one, or ask the admin to allow it with `berth agent --allow-mount PATH`",
        if allowed.is_empty() { "none".to_string() } else { allowed.join(", ") }
    )]
    NotAllowed { refused: MountRefusal, queue: String, allowed: Vec<String> },
}

/// Why no one node allows a job's host mounts (the job's pending reason, and the start of
/// [`MountError::NotAllowed`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MountRefusal {
    /// No node allows this path.
    #[error("mount: {0} not allowed on any node")]
    Path(String),
    /// Each path is allowed somewhere, but no one node allows them all.
    #[error("mount: no one node allows all of {}", .0.join(", "))]
    NoOneNode(Vec<String>),
}

/// Submit-time check for a process job (`in_container` false) with data `folders`: refused
/// when every node of `queue` whose agent said so cannot mount folders. A queue without such
/// nodes passes (nodes may join later). The error says why and both ways out.
pub fn check_folders(
    folders: &[String],
    in_container: bool,
    nodes: &[NodeLedger],
    queue: &str,
) -> Result<(), MountError> {
    if folders.is_empty() || in_container {
        return Ok(());
    }
    let mut known = nodes.iter().filter(|l| l.queue() == queue).filter_map(NodeLedger::folder_mounts).peekable();
    if known.peek().is_none() || known.any(|can| can) {
        return Ok(());
    }
    Err(MountError::FoldersUnmountable { folders: folders.to_vec(), queue: queue.to_string() })
}

/// The reason a job with `mounts` cannot run on any of `nodes`, naming the first path no node
/// allows (or saying that no one node allows them all), e.g.
/// `mount: /data not allowed on any node`. `None` when some node allows them all.
pub fn mounts_refused<'a>(
    mounts: &[String],
    nodes: impl Iterator<Item = &'a NodeLedger> + Clone,
) -> Option<MountRefusal> {
    if mounts.is_empty() || nodes.clone().any(|l| l.allows_mounts(mounts)) {
        return None;
    }
    let lists: Vec<&[String]> = nodes.filter_map(|l| l.allowed_mounts()).collect();
    Some(match mounts.iter().find(|m| !lists.iter().any(|a| mount_allowed(m, a))) {
        Some(m) => MountRefusal::Path(m.clone()),
        None => MountRefusal::NoOneNode(mounts.to_vec()),
    })
}

/// Submit-time check: can some node of `queue` ever run a job with these host mounts? Only
/// nodes whose agents reported an allow-list since the manager started count (a queue without
/// any passes: nodes may join later). The error says which path and how to fix it.
pub fn check_mounts(mounts: &[String], nodes: &[NodeLedger], queue: &str) -> Result<(), MountError> {
    let known = nodes.iter().filter(|l| l.queue() == queue && l.allowed_mounts().is_some());
    if mounts.is_empty() || known.clone().next().is_none() {
        return Ok(());
    }
    match mounts_refused(mounts, known.clone()) {
        None => Ok(()),
        Some(refused) => {
            let mut allowed: Vec<String> =
                known.flat_map(|l| l.allowed_mounts().unwrap_or_default()).cloned().collect();
            allowed.sort_unstable();
            allowed.dedup();
            Err(MountError::NotAllowed { refused, queue: queue.to_string(), allowed })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::Topology;

    fn node(name: &str, allowed: Option<&[&str]>) -> NodeLedger {
        let mut l = NodeLedger::new(name, "q", Topology::synthetic(1, 2, 1 << 30, 0));
        l.set_allowed_mounts(allowed.map(|a| a.iter().map(|s| s.to_string()).collect()));
        l
    }

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn paths_are_compared_by_component() {
        let a = v(&["/data", "/scratch/"]);
        assert!(mount_allowed("/data", &a));
        assert!(mount_allowed("/data/imagenet/train", &a));
        assert!(mount_allowed("/scratch/x", &a));
        assert!(!mount_allowed("/database", &a));
        assert!(!mount_allowed("/", &a));
        assert!(!mount_allowed("/home/u", &[]));
    }

    #[test]
    fn nodes_allow_or_refuse_with_the_path() {
        let nodes = [node("a", Some(&["/data"])), node("b", Some(&["/scratch"])), node("c", None)];
        assert!(nodes[0].allows_mounts(&[]));
        assert!(nodes[2].allows_mounts(&[]), "no mounts: any node");
        assert!(!nodes[2].allows_mounts(&v(&["/data"])), "unreported: no mounts");
        assert_eq!(mounts_refused(&v(&["/data/x"]), nodes.iter()), None);
        assert_eq!(
            mounts_refused(&v(&["/home"]), nodes.iter()).unwrap().to_string(),
            "mount: /home not allowed on any node"
        );
        assert_eq!(
            mounts_refused(&v(&["/data", "/scratch"]), nodes.iter()).unwrap().to_string(),
            "mount: no one node allows all of /data, /scratch"
        );
    }

    fn folder_node(name: &str, queue: &str, can: Option<bool>) -> NodeLedger {
        let mut l = NodeLedger::new(name, queue, Topology::synthetic(1, 2, 1 << 30, 0));
        l.set_folder_mounts(can);
        l
    }

    #[test]
    fn a_process_job_with_folders_is_refused_where_no_node_can_mount_them() {
        let users = [folder_node("a", "q", Some(false)), folder_node("b", "q", Some(false))];
        let e = check_folders(&v(&["d"]), false, &users, "q").unwrap_err().to_string();
        assert!(e.starts_with("folder d: no node of queue q can mount folders into a process job"), "{e}");
        assert!(e.contains("--image") && e.contains("as root"), "{e}");
        assert!(check_folders(&v(&["d"]), true, &users, "q").is_ok(), "a container binds them through docker");
        assert!(check_folders(&[], false, &users, "q").is_ok(), "no folders");
        assert!(check_folders(&v(&["d"]), false, &users, "other").is_ok(), "a queue without nodes passes");
        // One root node is enough; nodes that have not said (a manager restart) do not count.
        let mixed = [folder_node("a", "q", Some(false)), folder_node("r", "q", Some(true))];
        assert!(check_folders(&v(&["d"]), false, &mixed, "q").is_ok());
        let unsaid = [folder_node("a", "q", Some(false)), folder_node("c", "q", None)];
        assert!(check_folders(&v(&["d"]), false, &unsaid, "q").is_err());
        assert!(check_folders(&v(&["d"]), false, &unsaid[1..], "q").is_ok());
        assert!(!users[0].mounts_folders() && mixed[1].mounts_folders() && unsaid[1].mounts_folders());
    }

    #[test]
    fn submit_check_counts_only_reporting_nodes() {
        let known = [node("a", Some(&["/data"])), node("b", Some(&[]))];
        let e = check_mounts(&v(&["/home/u"]), &known, "q").unwrap_err().to_string();
        assert!(e.starts_with("mount: /home/u not allowed on any node of queue q (allowed: /data)"), "{e}");
        assert!(e.contains("berth agent --allow-mount"), "{e}");
        assert!(check_mounts(&v(&["/data/imagenet"]), &known, "q").is_ok());
        assert!(check_mounts(&v(&["/home/u"]), &known, "other").is_ok(), "a queue without nodes passes");
        // Nodes that have not reported (a manager restart) do not count either way.
        let mixed = [node("a", Some(&["/data"])), node("c", None)];
        assert!(check_mounts(&v(&["/home/u"]), &mixed, "q").is_err());
        assert!(check_mounts(&v(&["/home/u"]), &mixed[1..], "q").is_ok());
    }
}
