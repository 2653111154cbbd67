//! The kernel supervisor: one long-lived process per agent data dir that forks the node's
//! process kernels on the agent's request and is their parent, so they outlive the agent (the
//! role slurmstepd plays for slurmd, or containerd-shim for containerd) with their exit
//! statuses intact.
//!
//! The agent starts it once (`berth kernel-supervisor`, [`server::main`]) on a unix socket it
//! binds itself, `<data dir>/supervisor.sock` (0600), and hands over the listening socket; a
//! later agent on the same data dir finds it there ([`client::Supervisor::connect_or_start`]).
//! The agent prepares everything as for a kernel it forks itself (dirs, logs, cgroup, user,
//! environment) and sends a [`Request::Spawn`] with the log and `cgroup.procs` descriptors
//! attached (`SCM_RIGHTS`); the supervisor forks, and the child joins its cgroups, starts a
//! session, switches user and execs, as before. The agent still signals the kernel's process
//! group itself (SIGTERM, SIGKILL after the grace) and reads OOM kills from the cgroup.
//!
//! The supervisor reaps its children, writes each raw wait status to the kernel's exit file
//! (`<kernel dir>/exit`) and then sends [`Reply::Exited`] to every connected agent. A starting
//! agent connects before it looks at the kernel dirs, so a kernel either ended before (its
//! exit file says how) or its end arrives as an event.
//!
//! Fencing while no agent is there: the agent passes on its fencing lease ([`Request::Lease`]).
//! When no agent is connected and that lease runs out, the supervisor stops the kernels itself
//! (SIGTERM, SIGKILL after the grace) and marks their exit files `fenced`, so a node whose agent
//! stays away is handled as a lost node (the manager requeues its jobs after the heartbeat
//! timeout) without its kernels running on. An agent whose manager runs in the same process
//! (`berth up`) sends no lease: nobody requeues while both are down.
//!
//! Orphaned: while no agent is connected, the supervisor also looks every few seconds whether
//! its socket is still there ([`home`]); once the data dir is removed or replaced no agent can
//! ever reach it, so it stops the kernels itself (as when fencing) rather than leave them
//! running with nobody to end them.
//!
//! It exits once no agent is connected and no kernel runs.
//!
//! Wire format: each message is a little-endian `u32` length and that many bytes of JSON, both
//! ways, on a stream socket. Two connections per agent: `control` (requests, and a reply to
//! each `Hello` and `Spawn`) and `events` (only [`Reply::Exited`]).

pub mod client;
mod home;
pub mod server;

use std::io::{Read, Write};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The hidden `berth` subcommand that runs [`server::main`].
pub const SUBCOMMAND: &str = "kernel-supervisor";

/// Version of the messages below; an agent and a supervisor of different versions do not talk.
pub const VERSION: u32 = 1;

/// The supervisor's socket in the agent's data dir.
pub const SOCKET: &str = "supervisor.sock";

/// Where the supervisor writes its own diagnostics, in the agent's data dir.
pub const LOG: &str = "supervisor.log";

/// The descriptor the agent hands the listening socket on.
pub(crate) const LISTEN_FD: i32 = 3;

/// Messages are small; anything bigger than this is a broken peer.
const MAX_MESSAGE: u32 = 64 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Control,
    Events,
}

/// From the agent to the supervisor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum Request {
    /// First message of each connection; a `control` one is answered with [`Reply::Welcome`].
    Hello { version: u32, role: Role },
    /// Start a kernel. The message carries `2 + stdin + cgroup_fds` descriptors: stdout,
    /// stderr, stdin when `stdin` says so, then the `cgroup.procs` files the child writes
    /// itself into before exec.
    Spawn(Box<SpawnRequest>),
    /// The agent's fencing lease: when no agent is connected `fence_in_ms` from now, the
    /// supervisor stops every kernel (SIGTERM, SIGKILL after `grace_ms`). `None`: never.
    Lease { fence_in_ms: Option<u64>, grace_ms: u64 },
    /// Keep a duplicate of kernel `name`'s terminal master (one descriptor attached) until the
    /// kernel ends, so that its terminal outlives the agent (no hang-up) and a later agent can
    /// [`Request::Take`] it back. No reply.
    Keep { name: String },
    /// Hand back a duplicate of what [`Request::Keep`] left for kernel `name`: answered with
    /// [`Reply::Kept`], the descriptor attached when there is one.
    Take { name: String },
}

/// Everything the child needs besides its descriptors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpawnRequest {
    /// The kernel's name (`<job>.<attempt>.<index>`), unique within the data dir.
    pub name: String,
    pub program: String,
    pub args: Vec<String>,
    /// The whole environment (nothing of the supervisor's is inherited).
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    /// The user to switch to (a root agent); `None`: stay.
    pub user: Option<super::private_tmp::UserSwitch>,
    pub exit_file: PathBuf,
    pub cgroup_fds: usize,
    /// The kernel's own `/dev/shm` and `/tmp` (a root agent), made in its child after the
    /// cgroup join; the child then switches to `user` itself.
    #[serde(default)]
    pub private_tmp: Option<super::private_tmp::PrivateTmpRequest>,
    /// A stdin descriptor comes after stderr (an interactive kernel: `berth run -i/-t`);
    /// otherwise stdin is `/dev/null`.
    #[serde(default)]
    pub stdin: bool,
    /// Stdin is a terminal the child takes as its controlling terminal after `setsid`.
    #[serde(default)]
    pub ctty: bool,
}

/// From the supervisor to the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum Reply {
    /// The supervisor's version, the kernels it runs (by name) and the fencing lease it holds.
    Welcome {
        version: u32,
        live: Vec<String>,
        fence_in_ms: Option<u64>,
        /// It takes [`Request::Keep`] and [`Request::Take`] (a supervisor of an earlier berth
        /// says nothing, and is never sent them).
        #[serde(default)]
        keeps_terminals: bool,
    },
    Spawned {
        pid: u32,
    },
    /// The spawn failed: `errno` of the failed step (exec: `ENOENT`, `EACCES`, ...).
    Failed {
        errno: i32,
        what: String,
    },
    /// The answer to [`Request::Take`]: whether a descriptor comes with it.
    Kept {
        found: bool,
    },
    /// A kernel ended (or was fenced by the supervisor).
    Exited {
        name: String,
        raw: i32,
        fenced: bool,
    },
}

/// Encodes one message (length and JSON).
pub(crate) fn encode<T: Serialize>(msg: &T) -> Vec<u8> {
    let body = serde_json::to_vec(msg).unwrap_or_default();
    let mut out = Vec::with_capacity(body.len() + 4);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// The first whole message in `buf`, if there is one, and how many bytes it took.
pub(crate) fn decode<T: for<'de> Deserialize<'de>>(buf: &[u8]) -> std::io::Result<Option<(T, usize)>> {
    let Some(len) = buf.get(..4) else { return Ok(None) };
    let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]);
    if len > MAX_MESSAGE {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "kernel supervisor message too long"));
    }
    let end = 4 + len as usize;
    let Some(body) = buf.get(4..end) else { return Ok(None) };
    let msg = serde_json::from_slice(body).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    Ok(Some((msg, end)))
}

/// Reads one message from a blocking stream.
pub(crate) fn read_blocking<T: for<'de> Deserialize<'de>>(s: &mut impl Read) -> std::io::Result<T> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len);
    if len > MAX_MESSAGE {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "kernel supervisor message too long"));
    }
    let mut body = vec![0; len as usize];
    s.read_exact(&mut body)?;
    serde_json::from_slice(&body).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Writes one message to a blocking stream.
pub(crate) fn write_blocking<T: Serialize>(s: &mut impl Write, msg: &T) -> std::io::Result<()> {
    s.write_all(&encode(msg))
}

/// The content of an exit file: the raw wait status, then ` fenced` when the supervisor
/// stopped the kernel because its agent stayed away.
pub(crate) fn exit_text(raw: i32, fenced: bool) -> String {
    if fenced { format!("{raw} fenced\n") } else { format!("{raw}\n") }
}

/// Parses [`exit_text`] (and the bare status the earlier kernel shim wrote).
pub(crate) fn parse_exit(text: &str) -> Option<(i32, bool)> {
    let mut parts = text.split_whitespace();
    let raw = parts.next()?.parse().ok()?;
    Some((raw, parts.next() == Some("fenced")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_partial_ones_wait() {
        let m = Request::Lease { fence_in_ms: Some(5), grace_ms: 2 };
        let bytes = encode(&m);
        assert_eq!(decode::<Request>(&bytes[..bytes.len() - 1]).unwrap(), None, "not whole yet");
        let mut two = bytes.clone();
        two.extend_from_slice(&bytes);
        let (back, used) = decode::<Request>(&two).unwrap().unwrap();
        assert_eq!((back, used), (m, bytes.len()));
        assert!(decode::<Request>(&[255, 255, 255, 255]).is_err(), "a length no message has");
    }

    #[test]
    fn exit_texts() {
        assert_eq!(parse_exit(&exit_text(3 << 8, false)), Some((3 << 8, false)));
        assert_eq!(parse_exit(&exit_text(15, true)), Some((15, true)));
        assert_eq!(parse_exit("256\n"), Some((256, false)), "the kernel shim's format");
        assert_eq!(parse_exit(""), None);
    }
}
