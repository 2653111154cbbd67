//! The supervisor process itself (`berth kernel-supervisor`): one thread, no async runtime,
//! a `poll` loop over the listening socket, a signalfd for SIGCHLD and the agents'
//! connections. Kernels are forked with `std::process::Command` (fork, then in the child:
//! session, cgroup join, user, directory, exec), which is safe here because this process has
//! a single thread, and cheap because it is small (the agent of `berth up` holds a manager).

use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{SigSet, Signal, killpg};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg, sockopt};
use nix::unistd::Pid;

use super::home::Home;
use super::{Reply, Request, Role, SpawnRequest, VERSION, decode, encode, exit_text};

/// How often the supervisor looks whether its socket is still there while no agent is
/// connected ([`super::home`]).
const LOOK_EVERY: Duration = Duration::from_secs(2);

/// The grace before SIGKILL when no agent passed one.
const DEFAULT_GRACE: Duration = Duration::from_secs(10);

/// A connected agent.
struct Conn {
    stream: UnixStream,
    role: Option<Role>,
    buf: Vec<u8>,
    /// Descriptors received and not yet taken by a `Spawn`.
    fds: VecDeque<OwnedFd>,
    dead: bool,
}

struct Kernel {
    name: String,
    exit_file: PathBuf,
    fenced: bool,
}

struct Supervisor {
    listener: UnixListener,
    conns: Vec<Conn>,
    kernels: HashMap<i32, Kernel>,
    /// When to fence if no agent is connected then, and the grace before SIGKILL.
    lease: Option<(Instant, Duration)>,
    /// The grace before SIGKILL the agent last passed on (with or without a lease).
    grace: Duration,
    /// The socket agents reach this supervisor by; `None`: not watched.
    home: Option<Home>,
    /// When to look at `home` next while no agent is connected.
    look_at: Instant,
    /// Fenced kernels get SIGKILL at this time.
    kill_at: Option<Instant>,
    /// Terminal masters the agents asked to keep (`Request::Keep`), by kernel name, until the
    /// kernel ends.
    kept: HashMap<String, OwnedFd>,
}

/// Runs the supervisor on the listening socket at [`super::LISTEN_FD`]; never returns.
pub fn main(_args: &[OsString]) -> ! {
    // SAFETY: the agent passed this descriptor for the supervisor; nothing else owns it.
    let listener = unsafe { UnixListener::from_raw_fd(super::LISTEN_FD) };
    // Kernels must not inherit it.
    // SAFETY: fcntl on a descriptor this process owns.
    unsafe { libc::fcntl(super::LISTEN_FD, libc::F_SETFD, libc::FD_CLOEXEC) };
    if let Err(e) = listener.set_nonblocking(true) {
        fatal(&format!("bad listening socket: {e}"));
    }
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGCHLD);
    if let Err(e) = mask.thread_block() {
        fatal(&format!("cannot block SIGCHLD: {e}"));
    }
    let sigfd = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
        .unwrap_or_else(|e| fatal(&format!("cannot create a signalfd: {e}")));
    let path = listener.local_addr().ok().and_then(|a| a.as_pathname().map(std::path::Path::to_path_buf));
    let home = path.as_deref().and_then(Home::of);
    if home.is_none() {
        log(format_args!(
            "cannot tell where agents reach this supervisor: it keeps its kernels even if the data dir goes"
        ));
    }
    let mut s = Supervisor {
        listener,
        conns: Vec::new(),
        kernels: HashMap::new(),
        lease: None,
        grace: DEFAULT_GRACE,
        home,
        look_at: Instant::now(),
        kill_at: None,
        kept: HashMap::new(),
    };
    loop {
        s.accept();
        if s.conns.is_empty() && s.kernels.is_empty() {
            // Nothing to supervise and nobody to serve; an agent connecting now finds the
            // socket refused and starts a new supervisor.
            std::process::exit(0);
        }
        let now = Instant::now();
        s.fence(now);
        s.look_home(now);
        let alone = s.conns.is_empty();
        let look = (alone && s.home.is_some() && !s.kernels.is_empty()).then_some(s.look_at);
        let wake = [s.kill_at, s.lease.filter(|_| alone).map(|l| l.0), look].into_iter().flatten().min();
        let timeout = wake.map_or(-1, |t| t.saturating_duration_since(now).as_millis().min(60_000) as i32 + 1);
        let mut fds: Vec<libc::pollfd> = [s.listener.as_raw_fd(), sigfd.as_fd().as_raw_fd()]
            .into_iter()
            .chain(s.conns.iter().map(|c| c.stream.as_raw_fd()))
            .map(|fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 })
            .collect();
        // SAFETY: `fds` is a valid array of pollfd for its length.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
        if n < 0 {
            continue; // EINTR
        }
        if fds[1].revents != 0 {
            while let Ok(Some(_)) = sigfd.read_signal() {}
            s.reap();
        }
        for (i, pfd) in fds.iter().enumerate().skip(2) {
            if pfd.revents != 0 {
                s.read(i - 2);
            }
        }
        s.conns.retain(|c| !c.dead);
    }
}

fn fatal(what: &str) -> ! {
    log(format_args!("{what}"));
    std::process::exit(1)
}

/// A line in the supervisor's log (in the agent's data dir). Never `eprintln!`, which panics
/// when the write fails: on a full disk that killed the supervisor, and the ends of its
/// kernels with it (issue 13).
fn log(what: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr(), "berth kernel-supervisor: {what}");
}

impl Supervisor {
    /// Accepts every waiting connection from this process's own user (root for a root agent;
    /// the socket file is 0600 too, the check covers the instant before its chmod).
    fn accept(&mut self) {
        while let Ok((stream, _)) = self.listener.accept() {
            let me = nix::unistd::geteuid().as_raw();
            match nix::sys::socket::getsockopt(&stream, sockopt::PeerCredentials) {
                Ok(c) if c.uid() == me => {}
                _ => continue,
            }
            let _ = stream.set_write_timeout(Some(Duration::from_secs(5)));
            self.conns.push(Conn { stream, role: None, buf: Vec::new(), fds: VecDeque::new(), dead: false });
        }
    }

    /// Reads what connection `i` sent and carries it out.
    fn read(&mut self, i: usize) {
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let conn = &mut self.conns[i];
            let mut cmsg = nix::cmsg_space!([RawFd; 16]);
            let mut iov = [std::io::IoSliceMut::new(&mut chunk)];
            let flags = MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_CMSG_CLOEXEC;
            let got = match recvmsg::<()>(conn.stream.as_raw_fd(), &mut iov, Some(&mut cmsg), flags) {
                Ok(m) => {
                    for c in m.cmsgs().into_iter().flatten() {
                        if let ControlMessageOwned::ScmRights(fds) = c {
                            // SAFETY: the kernel just gave this process these descriptors.
                            conn.fds.extend(fds.into_iter().map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }));
                        }
                    }
                    m.bytes
                }
                Err(nix::errno::Errno::EINTR) => continue,
                Err(nix::errno::Errno::EAGAIN) => break,
                Err(_) => 0,
            };
            if got == 0 {
                conn.dead = true;
                break;
            }
            conn.buf.extend_from_slice(&chunk[..got]);
        }
        loop {
            let conn = &mut self.conns[i];
            let msg = match decode::<Request>(&conn.buf) {
                Ok(Some((m, used))) => {
                    conn.buf.drain(..used);
                    m
                }
                Ok(None) => break,
                Err(e) => {
                    log(format_args!("dropping a connection: {e}"));
                    conn.dead = true;
                    break;
                }
            };
            self.handle(i, msg);
        }
    }

    fn handle(&mut self, i: usize, msg: Request) {
        match msg {
            Request::Hello { version, role } => {
                self.conns[i].role = Some(role);
                if role == Role::Control {
                    let live = self.kernels.values().map(|k| k.name.clone()).collect();
                    let now = Instant::now();
                    let fence_in_ms = self.lease.map(|(t, _)| t.saturating_duration_since(now).as_millis() as u64);
                    self.send(i, &Reply::Welcome { version: VERSION, live, fence_in_ms, keeps_terminals: true });
                }
                if version != VERSION {
                    self.conns[i].dead = true;
                }
            }
            Request::Lease { fence_in_ms, grace_ms } => {
                self.grace = Duration::from_millis(grace_ms);
                self.lease =
                    fence_in_ms.map(|ms| (Instant::now() + Duration::from_millis(ms), Duration::from_millis(grace_ms)));
            }
            Request::Keep { name } => {
                let Some(fd) = self.conns[i].fds.pop_front() else {
                    return log(format_args!("a keep request for {name} without its descriptor"));
                };
                if self.kernels.values().any(|k| k.name == name) {
                    self.kept.insert(name, fd);
                }
            }
            Request::Take { name } => {
                let fd = self.kept.get(&name).map(|f| f.as_raw_fd());
                let reply = encode(&Reply::Kept { found: fd.is_some() });
                let fds: Vec<RawFd> = fd.into_iter().collect();
                let rights = [nix::sys::socket::ControlMessage::ScmRights(&fds)];
                let cmsgs: &[nix::sys::socket::ControlMessage] = if fds.is_empty() { &[] } else { &rights };
                let conn = &mut self.conns[i];
                let iov = [std::io::IoSlice::new(&reply)];
                let sent =
                    nix::sys::socket::sendmsg::<()>(conn.stream.as_raw_fd(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None);
                match sent {
                    Ok(n) if n < reply.len() => conn.dead = conn.stream.write_all(&reply[n..]).is_err(),
                    Ok(_) => {}
                    Err(_) => conn.dead = true,
                }
            }
            Request::Spawn(req) => {
                let want = 2 + usize::from(req.stdin) + req.cgroup_fds;
                let conn = &mut self.conns[i];
                if conn.fds.len() < want {
                    let what = format!("spawn request without its {want} descriptors");
                    self.send(i, &Reply::Failed { errno: libc::EINVAL, what });
                    return;
                }
                let fds: Vec<OwnedFd> = conn.fds.drain(..want).collect();
                let reply = self.spawn(*req, fds);
                self.send(i, &reply);
            }
        }
    }

    fn send(&mut self, i: usize, reply: &Reply) {
        let conn = &mut self.conns[i];
        if conn.stream.write_all(&encode(reply)).is_err() {
            conn.dead = true;
        }
    }

    fn spawn(&mut self, req: SpawnRequest, fds: Vec<OwnedFd>) -> Reply {
        let mut fds = fds.into_iter();
        let (Some(stdout), Some(stderr)) = (fds.next(), fds.next()) else {
            return Reply::Failed { errno: libc::EINVAL, what: "no log descriptors".into() };
        };
        let stdin = match req.stdin {
            true => match fds.next() {
                Some(fd) => Stdio::from(fd),
                None => return Reply::Failed { errno: libc::EINVAL, what: "no stdin descriptor".into() },
            },
            false => Stdio::null(),
        };
        let ctty = req.ctty;
        let cgroups: Vec<OwnedFd> = fds.collect();
        let procs: Vec<RawFd> = cgroups.iter().map(|f| f.as_raw_fd()).collect();
        let mut cmd = Command::new(&req.program);
        cmd.arg0(&req.program)
            .args(&req.args)
            .env_clear()
            .envs(req.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&req.cwd)
            .stdin(stdin)
            .stdout(Stdio::from(stdout))
            .stderr(Stdio::from(stderr));
        // The child mounts as root (private mounts), then switches to the user itself and
        // enters the work dir as that user.
        let private = match super::super::private_tmp::child_plan(req.private_tmp.as_ref(), req.user.as_ref(), &req.cwd)
        {
            Ok(p) => p,
            Err(e) => return Reply::Failed { errno: libc::EINVAL, what: e.to_string() },
        };
        // SAFETY: between fork and exec only async-signal-safe calls (setsid, write, and the
        // mounts and user switch of `Plan::enter`).
        unsafe {
            cmd.pre_exec(move || {
                super::super::child_setup(&procs)?;
                if ctty {
                    super::super::pty::take_ctty()?;
                }
                // In the cgroup first, so that the private mounts' pages are charged to it.
                if let Some(p) = &private {
                    p.enter()?;
                }
                Ok(())
            })
        };
        let reply = match cmd.spawn() {
            Ok(child) => {
                let pid = child.id();
                // Reaped through SIGCHLD (`reap`), not through the handle.
                drop(child);
                self.kernels.insert(pid as i32, Kernel { name: req.name, exit_file: req.exit_file, fenced: false });
                Reply::Spawned { pid }
            }
            Err(e) => Reply::Failed { errno: e.raw_os_error().unwrap_or(libc::EIO), what: e.to_string() },
        };
        drop(cgroups);
        reply
    }

    /// Reaps ended children: the exit file first, then the event to every agent.
    fn reap(&mut self) {
        loop {
            let mut raw = 0;
            // SAFETY: plain waitpid on this process's children.
            let pid = unsafe { libc::waitpid(-1, &mut raw, libc::WNOHANG) };
            if pid <= 0 {
                break;
            }
            let Some(k) = self.kernels.remove(&pid) else { continue };
            self.kept.remove(&k.name);
            // 0600: only the agent reads it. A full disk loses the file, not the end: the
            // event below carries the status to the agent that waits for it.
            if let Err(e) = super::super::stale::write_private(&k.exit_file, exit_text(raw, k.fenced).as_bytes()) {
                log(format_args!("cannot record the end of kernel {} in `{}`: {e}", k.name, k.exit_file.display()));
            }
            let event = Reply::Exited { name: k.name, raw, fenced: k.fenced };
            for i in 0..self.conns.len() {
                if self.conns[i].role == Some(Role::Events) {
                    self.send(i, &event);
                }
            }
        }
        if self.kernels.is_empty() {
            self.kill_at = None;
        }
    }

    /// Stops the kernels when no agent can reach this supervisor any more (its data dir is
    /// gone, see [`super::home`]) and none is connected: nobody else could ever stop them.
    fn look_home(&mut self, now: Instant) {
        if !self.conns.is_empty() || self.kernels.is_empty() || self.kill_at.is_some() || now < self.look_at {
            return;
        }
        self.look_at = now + LOOK_EVERY;
        let Some(why) = self.home.as_ref().and_then(Home::lost) else { return };
        log(format_args!(
            "{why}, so no agent can reach this supervisor any more: stopping {} kernels",
            self.kernels.len()
        ));
        // Once: the kernels end, then so does the supervisor.
        self.home = None;
        self.lease = None;
        self.stop_all(now, self.grace);
    }

    /// SIGTERM to each kernel's group now, marked fenced; SIGKILL after `grace`.
    fn stop_all(&mut self, now: Instant, grace: Duration) {
        for (pid, k) in &mut self.kernels {
            k.fenced = true;
            let _ = killpg(Pid::from_raw(*pid), Signal::SIGTERM);
        }
        self.kill_at = Some(now + grace);
    }

    /// Stops the kernels once the lease ran out with no agent connected: SIGTERM to each
    /// kernel's group now, SIGKILL after the grace.
    fn fence(&mut self, now: Instant) {
        if self.conns.is_empty()
            && let Some((deadline, grace)) = self.lease
            && now >= deadline
        {
            self.lease = None;
            log(format_args!("no agent within its lease: stopping {} kernels", self.kernels.len()));
            self.stop_all(now, grace);
        }
        if let Some(t) = self.kill_at
            && now >= t
        {
            self.kill_at = None;
            for pid in self.kernels.keys() {
                let _ = killpg(Pid::from_raw(*pid), Signal::SIGKILL);
            }
        }
    }
}
