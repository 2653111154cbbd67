//! The `podman` backend (`berth agent --container-runtime podman`): container kernels run by
//! Podman, through the Docker-compatible API of its service (`podman system service`), so
//! jobs with an image run, are limited, logged, exec'd into and taken over after an agent
//! restart exactly as on Docker (the `docker` backend speaks to both). What differs is here:
//! where the service listens and how it is started when nobody runs it, the resource limits
//! Podman would otherwise raise, and the `localhost/` prefix of the images it lists.
//!
//! Containers belong to Podman's `conmon` monitors, not to the service or the agent: they
//! outlive both, and the next agent finds them by label as on Docker. The service the agent
//! starts runs on (`--time=0`) and serves the agents after it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use berth_model::protocol::{ContainerInfo, KernelKey};
use berth_model::signal::SignalTarget;
use futures_util::future::BoxFuture;
use tokio::sync::mpsc;

use super::backend::{Kernel, KernelBackend, StartError};
use super::engine_error::EngineError;
use super::signal_now::Reached;
use super::{Adopted, Docker, KernelHandle, KernelUpdate};

/// Which engine runs a node's container kernels.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Engine {
    #[default]
    Docker,
    Podman,
}

/// A `--container-runtime` that names no engine berth knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown container runtime `{0}`: use docker or podman")]
pub struct UnknownEngine(pub String);

impl std::str::FromStr for Engine {
    type Err = UnknownEngine;

    fn from_str(s: &str) -> Result<Engine, UnknownEngine> {
        match s {
            "docker" => Ok(Engine::Docker),
            "podman" => Ok(Engine::Podman),
            other => Err(UnknownEngine(other.to_string())),
        }
    }
}

impl Engine {
    /// The engine's name, as its command line tool is called.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Docker => "docker",
            Engine::Podman => "podman",
        }
    }
}

/// How long a service the agent started has to open its socket.
const SERVICE_START: Duration = Duration::from_secs(15);

/// The Podman backend: the Engine API backend, connected to Podman's service.
#[derive(Debug, Clone)]
pub struct Podman {
    engine: Docker,
}

impl Podman {
    pub(super) fn new(opts: &super::RuntimeOptions, scope: String) -> Podman {
        Podman { engine: Docker::new(opts, scope) }
    }
}

impl KernelBackend for Podman {
    fn name(&self) -> &'static str {
        "podman"
    }

    fn start(&self, kernel: Kernel<'_>) -> Result<KernelHandle, StartError> {
        self.engine.start(kernel)
    }

    fn adopt<'a>(&'a self, events: &'a mpsc::UnboundedSender<KernelUpdate>) -> BoxFuture<'a, Vec<Adopted>> {
        self.engine.adopt(events)
    }

    fn target(
        &self,
        key: KernelKey,
        pid: u32,
        attach: bool,
    ) -> Result<crate::streams::Target, crate::streams::TargetError> {
        self.engine.target(key, pid, attach)
    }

    fn signal(&self, key: KernelKey, pid: u32, sig: u8, to: SignalTarget) -> BoxFuture<'static, Reached> {
        self.engine.signal(key, pid, sig, to)
    }

    fn info(&self) -> BoxFuture<'_, Option<ContainerInfo>> {
        self.engine.info()
    }
}

/// Where Podman's API service listens: root's system socket (what the `podman.socket` unit
/// of Debian's package opens), or the user's own under `$XDG_RUNTIME_DIR` (rootless).
pub(crate) fn socket() -> PathBuf {
    if nix::unistd::Uid::effective().is_root() {
        return PathBuf::from("/run/podman/podman.sock");
    }
    let runtime_dir = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join(format!("podman-run-{}", nix::unistd::Uid::effective())));
    runtime_dir.join("podman/podman.sock")
}

/// Connects to Podman's service at `sock`, starting it first (detached, in a session of its
/// own, so it outlives this agent) when nobody listens there.
pub(crate) async fn connect(sock: &Path) -> Result<bollard::Docker, EngineError> {
    if tokio::net::UnixStream::connect(sock).await.is_err() {
        start_service(sock).await?;
    }
    let c = bollard::Docker::connect_with_unix(&sock.to_string_lossy(), 120, bollard::API_DEFAULT_VERSION)
        .map_err(|e| unreachable(sock, &e.to_string()))?;
    c.negotiate_version().await.map_err(|e| unreachable(sock, &e.to_string()))
}

/// Why the service cannot be used (the error says how to fix it).
pub(crate) fn unreachable(sock: &Path, why: &str) -> EngineError {
    EngineError::PodmanUnreachable { sock: sock.to_path_buf(), why: why.to_string() }
}

/// Starts `podman system service` on `sock` and waits until it answers. Agents starting it
/// at once take turns (a lock beside the socket); the second finds it running.
async fn start_service(sock: &Path) -> Result<(), EngineError> {
    let dir = sock.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(dir).map_err(|e| unreachable(sock, &format!("cannot create `{}`: {e}", dir.display())))?;
    let lock_path = sock.with_extension("berth-lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| unreachable(sock, &format!("cannot open `{}`: {e}", lock_path.display())))?;
    let lock = tokio::task::spawn_blocking(move || nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive))
        .await
        .map_err(|e| unreachable(sock, &e.to_string()))?
        .map_err(|(_, e)| unreachable(sock, &format!("cannot lock `{}`: {e}", lock_path.display())))?;
    if tokio::net::UnixStream::connect(sock).await.is_ok() {
        return Ok(());
    }
    // A socket file nobody listens on (a service that died) would keep the new one from binding.
    let _ = std::fs::remove_file(sock);
    let mut cmd = std::process::Command::new("podman");
    cmd.args(["system", "service", "--time=0"])
        .arg(format!("unix://{}", sock.display()))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        // Not the agent's directory: Podman 4.3's container monitors write files (`oom`) into
        // their working directory on cgroup v1.
        .current_dir(dir);
    // Its own session: a signal to the agent's process group (Ctrl-C of `berth up`) does not
    // end it, nor the containers' monitors it starts.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd.spawn().map_err(|e| unreachable(sock, &format!("cannot run podman: {e}")))?;
    tracing::info!(socket = %sock.display(), pid = child.id(), "started podman's API service");
    let deadline = tokio::time::Instant::now() + SERVICE_START;
    loop {
        if tokio::net::UnixStream::connect(sock).await.is_ok() {
            // Reaped by whoever inherits it once this agent is gone; until then, now and then.
            std::thread::spawn(move || child.wait());
            drop(lock);
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(unreachable(sock, &format!("podman system service exited: {status}")));
        }
        if tokio::time::Instant::now() > deadline {
            return Err(unreachable(sock, "podman system service did not open its socket"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The resource limits a Podman container asks for. As root, Podman gives every container
/// `nofile` and `nproc` limits of 1,048,576, which its runtime can set only with
/// CAP_SYS_RESOURCE (a sandboxed node, such as a VM whose init dropped it, refuses every
/// start: "error setting rlimit type 6"). The agent asks for its own limits instead, as
/// Docker's containers inherit dockerd's, with `nproc` no higher than the kernel's `pid_max`
/// (Podman lowers its own to that).
pub(crate) fn ulimits() -> Vec<bollard::models::ResourcesUlimits> {
    use nix::sys::resource::{Resource, getrlimit};
    let pid_max = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(u64::MAX);
    let limit = |name: &str, (soft, hard): (u64, u64), cap: u64| bollard::models::ResourcesUlimits {
        name: Some(name.to_string()),
        soft: Some(soft.min(cap).min(i64::MAX as u64) as i64),
        hard: Some(hard.min(cap).min(i64::MAX as u64) as i64),
    };
    let mut out = Vec::new();
    if let Ok(l) = getrlimit(Resource::RLIMIT_NOFILE) {
        out.push(limit("nofile", l, u64::MAX));
    }
    if let Ok(l) = getrlimit(Resource::RLIMIT_NPROC) {
        out.push(limit("nproc", l, pid_max));
    }
    out
}

/// An image name as Podman lists it (`localhost/name:tag` for images built or imported on
/// the node) as jobs name it (`name:tag`).
pub(crate) fn listed_image(name: &str) -> &str {
    name.strip_prefix("localhost/").unwrap_or(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engines_are_named_as_their_tools() {
        assert_eq!("podman".parse::<Engine>(), Ok(Engine::Podman));
        assert_eq!("docker".parse::<Engine>(), Ok(Engine::Docker));
        let e = "rkt".parse::<Engine>().unwrap_err();
        assert_eq!(e.to_string(), "unknown container runtime `rkt`: use docker or podman");
        assert_eq!(Engine::default(), Engine::Docker);
    }

    #[test]
    fn images_podman_built_here_are_listed_as_jobs_name_them() {
        assert_eq!(listed_image("localhost/berth-test/busybox:1"), "berth-test/busybox:1");
        assert_eq!(listed_image("docker.io/library/alpine:3"), "docker.io/library/alpine:3");
    }

    #[test]
    fn podman_containers_ask_for_no_more_than_the_agent_has() {
        use nix::sys::resource::{Resource, getrlimit};
        let limits = ulimits();
        let nofile = limits.iter().find(|l| l.name.as_deref() == Some("nofile")).unwrap();
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        assert!(nofile.hard.unwrap() as u64 <= hard);
        let nproc = limits.iter().find(|l| l.name.as_deref() == Some("nproc")).unwrap();
        assert!(nproc.soft <= nproc.hard);
    }
}
