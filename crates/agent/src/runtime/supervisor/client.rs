//! The agent's side of the kernel supervisor: find it (or start it), ask it to spawn kernels,
//! pass the fencing lease on, and hand each kernel's end to the task watching it.

use std::collections::HashMap;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};
use thiserror::Error;
use tokio::io::AsyncReadExt;
use tokio::sync::oneshot;

use super::{LISTEN_FD, LOG, Reply, Request, Role, SOCKET, SUBCOMMAND, SpawnRequest, VERSION};

/// How long the agent waits for the supervisor's answer (a spawn waits for the child's exec).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// A kernel's end as the supervisor saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    /// The raw wait status.
    pub raw: i32,
    /// The supervisor stopped it because no agent was there when the lease ran out.
    pub fenced: bool,
}

#[derive(Debug, Error)]
pub enum SpawnError {
    /// The kernel could not be started (its program, directory, user...).
    #[error("{0}")]
    Kernel(std::io::Error),
    /// The supervisor could not be asked.
    #[error("the kernel supervisor did not answer ({0}): restart the agent")]
    Supervisor(std::io::Error),
}

#[derive(Default)]
struct Exits {
    waiting: HashMap<String, oneshot::Sender<Exit>>,
    /// Ends that came before anyone asked for them.
    ended: HashMap<String, Exit>,
    /// The events connection is gone: nobody will be told.
    gone: bool,
}

/// A connection to the node's kernel supervisor.
pub struct Supervisor {
    control: Mutex<UnixStream>,
    exits: Arc<Mutex<Exits>>,
    /// The kernels it ran when this agent connected.
    live: Vec<String>,
    /// What was left of the previous agent's fencing lease.
    fence_in: Option<Duration>,
    /// It keeps kernels' terminals across agents (`Request::Keep`).
    keeps_terminals: bool,
    /// A failed lease pass-on was logged (once, not on every tick).
    lease_failed: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor").field("live", &self.live).finish_non_exhaustive()
    }
}

impl Supervisor {
    /// Connects to the supervisor of `data_dir`, starting one (`exe kernel-supervisor`) when
    /// none listens. Needs a tokio runtime (the events are read by a task).
    pub fn connect_or_start(data_dir: &Path, exe: &Path) -> std::io::Result<Supervisor> {
        let mut last = None;
        // A supervisor that was just exiting (no kernels, no agent) refuses or drops us: the
        // next try starts a new one.
        for _ in 0..3 {
            match Self::try_once(data_dir, exe) {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("no kernel supervisor")))
    }

    fn try_once(data_dir: &Path, exe: &Path) -> std::io::Result<Supervisor> {
        let path = data_dir.join(SOCKET);
        let (events, mut control) = match UnixStream::connect(&path) {
            Ok(events) => (events, UnixStream::connect(&path)?),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound) => {
                let _ = std::fs::remove_file(&path);
                let listener = UnixListener::bind(&path)?;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
                // Queued until the supervisor accepts them: it never sees an empty start.
                let conns = (UnixStream::connect(&path)?, UnixStream::connect(&path)?);
                start(data_dir, exe, &listener)?;
                conns
            }
            Err(e) => return Err(e),
        };
        let mut ev = events;
        super::write_blocking(&mut ev, &Request::Hello { version: VERSION, role: Role::Events })?;
        super::write_blocking(&mut control, &Request::Hello { version: VERSION, role: Role::Control })?;
        control.set_read_timeout(Some(ANSWER_TIMEOUT))?;
        let (live, fence_in, keeps_terminals) = match super::read_blocking::<Reply>(&mut control)? {
            Reply::Welcome { version, live, fence_in_ms, keeps_terminals } if version == VERSION => {
                (live, fence_in_ms.map(Duration::from_millis), keeps_terminals)
            }
            Reply::Welcome { version, .. } => {
                return Err(std::io::Error::other(format!(
                    "the running kernel supervisor speaks version {version}, this agent {VERSION}: stop its kernels and the supervisor (`{}`), then start the agent again",
                    path.display()
                )));
            }
            other => return Err(std::io::Error::other(format!("unexpected first answer {other:?}"))),
        };
        ev.set_nonblocking(true)?;
        let ev = tokio::net::UnixStream::from_std(ev)?;
        let exits = Arc::new(Mutex::new(Exits::default()));
        tokio::spawn(read_events(ev, exits.clone()));
        Ok(Supervisor {
            control: Mutex::new(control),
            exits,
            live,
            fence_in,
            keeps_terminals,
            lease_failed: Default::default(),
        })
    }

    /// The kernels (by name) the supervisor ran when this agent connected.
    pub fn live(&self) -> &[String] {
        &self.live
    }

    /// Has the supervisor keep a duplicate of kernel `name`'s terminal master, so that the
    /// terminal outlives this agent and a later one can [`Supervisor::take_terminal`] it.
    pub fn keep_terminal(&self, name: &str, master: RawFd) -> std::io::Result<()> {
        if !self.keeps_terminals {
            return Ok(());
        }
        let bytes = super::encode(&Request::Keep { name: name.to_string() });
        let mut control = self.control.lock().unwrap_or_else(|e| e.into_inner());
        let fds = [master];
        let rights = [ControlMessage::ScmRights(&fds)];
        let sent =
            sendmsg::<()>(control.as_raw_fd(), &[std::io::IoSlice::new(&bytes)], &rights, MsgFlags::MSG_NOSIGNAL, None)
                .map_err(std::io::Error::from)?;
        if sent < bytes.len() {
            control.write_all(&bytes[sent..])?;
        }
        Ok(())
    }

    /// The terminal master an earlier agent had the supervisor keep for kernel `name`.
    pub fn take_terminal(&self, name: &str) -> std::io::Result<Option<OwnedFd>> {
        if !self.keeps_terminals {
            return Ok(None);
        }
        let mut control = self.control.lock().unwrap_or_else(|e| e.into_inner());
        super::write_blocking(&mut *control, &Request::Take { name: name.to_string() })?;
        let mut buf = vec![0u8; 4096];
        let mut got = Vec::new();
        let mut fd = None;
        loop {
            let mut cmsg = nix::cmsg_space!([RawFd; 1]);
            let mut iov = [std::io::IoSliceMut::new(&mut buf)];
            let m = recvmsg::<()>(control.as_raw_fd(), &mut iov, Some(&mut cmsg), MsgFlags::MSG_CMSG_CLOEXEC)
                .map_err(std::io::Error::from)?;
            for c in m.cmsgs().into_iter().flatten() {
                if let ControlMessageOwned::ScmRights(fds) = c {
                    // SAFETY: the kernel just gave this process these descriptors.
                    fd = fds.into_iter().map(|f| unsafe { OwnedFd::from_raw_fd(f) }).next();
                }
            }
            let n = m.bytes;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            got.extend_from_slice(&buf[..n]);
            if let Some((reply, _)) = super::decode::<Reply>(&got)? {
                return match reply {
                    Reply::Kept { found: true } => Ok(fd),
                    Reply::Kept { found: false } => Ok(None),
                    other => Err(std::io::Error::other(format!("unexpected answer {other:?}"))),
                };
            }
        }
    }

    /// What was left of the fencing lease the previous agent passed on.
    pub fn fence_in(&self) -> Option<Duration> {
        self.fence_in
    }

    /// Spawns a kernel; `fds` are its stdout, stderr and `cgroup.procs` descriptors. Returns
    /// its pid once it has exec'd.
    pub fn spawn(&self, req: SpawnRequest, fds: &[RawFd]) -> Result<u32, SpawnError> {
        let bytes = super::encode(&Request::Spawn(Box::new(req)));
        let mut control = self.control.lock().unwrap_or_else(|e| e.into_inner());
        let rights = [ControlMessage::ScmRights(fds)];
        let sent =
            sendmsg::<()>(control.as_raw_fd(), &[std::io::IoSlice::new(&bytes)], &rights, MsgFlags::MSG_NOSIGNAL, None)
                .map_err(|e| SpawnError::Supervisor(e.into()))?;
        if sent < bytes.len() {
            control.write_all(&bytes[sent..]).map_err(SpawnError::Supervisor)?;
        }
        match super::read_blocking::<Reply>(&mut *control).map_err(SpawnError::Supervisor)? {
            Reply::Spawned { pid } => Ok(pid),
            Reply::Failed { errno, .. } => Err(SpawnError::Kernel(std::io::Error::from_raw_os_error(errno))),
            other => Err(SpawnError::Supervisor(std::io::Error::other(format!("unexpected answer {other:?}")))),
        }
    }

    /// The end of kernel `name`, once the supervisor reports it. An error: the supervisor is
    /// gone and will not say (the caller falls back to the exit file).
    pub fn exited(&self, name: &str) -> oneshot::Receiver<Exit> {
        let (tx, rx) = oneshot::channel();
        let mut exits = self.exits.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = exits.ended.remove(name) {
            let _ = tx.send(e);
        } else if !exits.gone {
            exits.waiting.insert(name.to_string(), tx);
        }
        rx
    }

    /// Passes the agent's fencing lease on (see the module doc of `supervisor`).
    pub fn lease(&self, fence_in: Option<Duration>, grace: Duration) {
        let msg =
            Request::Lease { fence_in_ms: fence_in.map(|d| d.as_millis() as u64), grace_ms: grace.as_millis() as u64 };
        let mut control = self.control.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = super::write_blocking(&mut *control, &msg)
            && !self.lease_failed.swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::warn!("cannot pass the fencing lease to the kernel supervisor: {e}");
        }
    }
}

/// Starts `exe kernel-supervisor` in its own session (a Ctrl-C on the agent's terminal must
/// not reach it) with the listening socket, an empty environment and its log in the data dir.
fn start(data_dir: &Path, exe: &Path, listener: &UnixListener) -> std::io::Result<()> {
    let log = std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(data_dir.join(LOG))?;
    let fd = listener.as_raw_fd();
    let mut cmd = std::process::Command::new(exe);
    cmd.arg0("berth")
        .arg(SUBCOMMAND)
        .env_clear()
        .current_dir("/")
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    // SAFETY: between fork and exec only async-signal-safe calls (setsid, dup2, fcntl).
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let r = if fd == LISTEN_FD { libc::fcntl(fd, libc::F_SETFD, 0) } else { libc::dup2(fd, LISTEN_FD) };
            if r < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    // Not waited for: it outlives this agent (a zombie only if it ends while the agent runs).
    cmd.spawn().map(drop)
}

/// Hands each `Exited` to its waiter (or keeps it until one asks); when the connection ends,
/// every waiter learns that nobody will tell.
async fn read_events(mut s: tokio::net::UnixStream, exits: Arc<Mutex<Exits>>) {
    while let Ok(len) = s.read_u32_le().await {
        if len > super::MAX_MESSAGE {
            break;
        }
        let mut body = vec![0; len as usize];
        if s.read_exact(&mut body).await.is_err() {
            break;
        }
        let Ok(Reply::Exited { name, raw, fenced }) = serde_json::from_slice::<Reply>(&body) else { continue };
        let exit = Exit { raw, fenced };
        let mut e = exits.lock().unwrap_or_else(|e| e.into_inner());
        match e.waiting.remove(&name) {
            Some(tx) => {
                let _ = tx.send(exit);
            }
            None => {
                e.ended.insert(name, exit);
            }
        }
    }
    tracing::warn!("lost the connection to the kernel supervisor: kernel ends are read from their exit files");
    let mut e = exits.lock().unwrap_or_else(|e| e.into_inner());
    e.gone = true;
    e.waiting.clear();
}
