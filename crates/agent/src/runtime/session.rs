//! Sessions: the input and output of a main kernel submitted with `berth run -i/-t`, held by
//! the agent so that clients can attach and detach while the kernel runs on (`berth attach`).
//!
//! The agent holds the terminal master (with `tty`) or its ends of the stdin, stdout and
//! stderr pipes. Output is copied to the kernel's log files as it comes (so `berth logs` works
//! as for any job) and to every attached client. Until the first client attaches, output is
//! kept (up to [`BACKLOG_MAX`]) and handed to it, so `berth run -t -- echo hi` shows `hi` even
//! when the job ends before its client attaches. Input from any attached client goes in.
//!
//! A session ends when its output does (every process holding the slave or the pipes exited);
//! attached clients then get the end of their stream. It is dropped when the kernel is
//! forgotten. Agent restarts: the kernel supervisor keeps a duplicate of a terminal's master
//! (`Request::Keep`), so the terminal outlives the agent and the next agent resumes the
//! session ([`Session::resume`]; output written meanwhile waits in the terminal, up to its
//! buffer). Pipes are not kept (a kept write end would never let the kernel's stdin end): an
//! agent that exits closes them, so the job ends rather than wait for a client that can no
//! longer come.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

use berth_model::protocol::KernelKey;
use berth_model::stream::{self, MAX_CHUNK, WindowSize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{broadcast, mpsc};

use super::pty;

/// The most output kept for the first client while none has attached yet; older output is
/// dropped first (it is in the log).
pub const BACKLOG_MAX: usize = 1 << 20;

/// Output frames buffered per attached client before a slow one starts losing them.
const CLIENT_BUFFER: usize = 1024;

/// The sessions of this agent's kernels, by kernel (shared by the runtime, which makes them,
/// and the streams, which attach to them).
#[derive(Clone, Default)]
pub struct Sessions(Arc<Mutex<HashMap<KernelKey, Arc<Session>>>>);

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.0.lock().unwrap_or_else(|e| e.into_inner()).len();
        write!(f, "Sessions({n})")
    }
}

impl Sessions {
    pub fn get(&self, key: &KernelKey) -> Option<Arc<Session>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).get(key).cloned()
    }

    pub fn insert(&self, key: KernelKey, session: Arc<Session>) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).insert(key, session);
    }

    /// Forgets a kernel's session (its tasks end with its output; dropping it closes the input).
    pub fn remove(&self, key: &KernelKey) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
    }
}

/// What a client sends into a session.
#[derive(Debug)]
pub enum Input {
    Data(Vec<u8>),
    /// The client's input ended: the stdin pipe is closed (a terminal ignores it).
    Eof,
    Resize(WindowSize),
}

/// One kernel's session.
pub struct Session {
    /// The terminal's master, when the kernel runs on one (a duplicate the supervisor keeps
    /// for the next agent).
    master: Option<OwnedFd>,
    shared: Mutex<Shared>,
    input: mpsc::UnboundedSender<Input>,
}

struct Shared {
    /// Output frames kept for the first client; `None` once one has attached.
    backlog: Option<VecDeque<Vec<u8>>>,
    backlog_bytes: usize,
    /// Where output goes to attached clients; `None` once the output has ended.
    out: Option<broadcast::Sender<Vec<u8>>>,
}

/// What an attaching client gets: the output kept for it, then the live output (`None`: the
/// session has ended).
pub struct Attached {
    pub backlog: Vec<Vec<u8>>,
    pub live: Option<broadcast::Receiver<Vec<u8>>>,
}

/// One output of the kernel: the channel it goes out on, the agent's end, and its log file.
pub struct Output {
    pub channel: u8,
    pub from: OwnedFd,
    pub log: std::fs::File,
}

impl Session {
    /// Starts copying `outputs` to their logs and clients, and clients' input to `input`
    /// (resizing `terminal`, the master, when there is one). Must run inside a tokio runtime.
    pub fn start(outputs: Vec<Output>, input: OwnedFd, terminal: Option<OwnedFd>) -> std::io::Result<Arc<Session>> {
        let (tx, rx) = mpsc::unbounded_channel();
        let (out, _) = broadcast::channel(CLIENT_BUFFER);
        let master = terminal.as_ref().map(OwnedFd::try_clone).transpose()?;
        let session = Arc::new(Session {
            master,
            shared: Mutex::new(Shared { backlog: Some(VecDeque::new()), backlog_bytes: 0, out: Some(out) }),
            input: tx,
        });
        let writer = pty::writer(input)?;
        let readers = outputs
            .into_iter()
            .map(|o| Ok((o.channel, pty::reader(o.from)?, o.log)))
            .collect::<std::io::Result<Vec<_>>>()?;
        tokio::spawn(feed(writer, terminal, rx));
        let weak = Arc::downgrade(&session);
        tokio::spawn(async move {
            let copies = readers.into_iter().map(|(channel, from, log)| copy_out(weak.clone(), channel, from, log));
            futures_util::future::join_all(copies).await;
            if let Some(s) = weak.upgrade() {
                s.lock().out = None;
                let _ = s.input.send(Input::Eof);
            }
        });
        Ok(session)
    }

    /// A session for a terminal an earlier agent held (the supervisor kept its master): its
    /// output goes on to the end of the stdout log `log`.
    pub fn resume(master: OwnedFd, log: std::fs::File) -> std::io::Result<Arc<Session>> {
        let outputs = vec![Output { channel: stream::STDOUT, from: master.try_clone()?, log }];
        Session::start(outputs, master.try_clone()?, Some(master))
    }

    /// The terminal's master, when the kernel runs on one.
    pub fn terminal(&self) -> Option<std::os::fd::RawFd> {
        self.master.as_ref().map(AsRawFd::as_raw_fd)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A client attaches: the first one takes the kept output.
    pub fn attach(&self) -> Attached {
        let mut s = self.lock();
        let backlog = s.backlog.take().map(Vec::from).unwrap_or_default();
        s.backlog_bytes = 0;
        Attached { backlog, live: s.out.as_ref().map(broadcast::Sender::subscribe) }
    }

    /// Input from a client (dropped once the session has ended).
    pub fn send(&self, input: Input) {
        let _ = self.input.send(input);
    }

    fn publish(&self, frame: Vec<u8>) {
        let mut s = self.lock();
        let s = &mut *s;
        match (&mut s.backlog, &s.out) {
            (Some(kept), _) => {
                s.backlog_bytes += frame.len();
                kept.push_back(frame);
                while s.backlog_bytes > BACKLOG_MAX
                    && let Some(old) = kept.pop_front()
                {
                    s.backlog_bytes -= old.len();
                }
            }
            (None, Some(out)) => {
                // No receiver (everyone detached) is fine: the log has it.
                let _ = out.send(frame);
            }
            (None, None) => {}
        }
    }
}

/// The standard streams of a kernel's process: its log files, or its ends of a session.
pub struct KernelStdio {
    /// `None`: `/dev/null`.
    pub stdin: Option<OwnedFd>,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    /// Standard input is a terminal the kernel takes as its controlling terminal.
    pub ctty: bool,
}

impl KernelStdio {
    /// A batch kernel: no input, output straight to its logs.
    pub fn logs(stdout: std::fs::File, stderr: std::fs::File) -> KernelStdio {
        KernelStdio { stdin: None, stdout: stdout.into(), stderr: stderr.into(), ctty: false }
    }

    /// An interactive kernel: a terminal (`tty`) or pipes whose other ends a new session
    /// holds, copying output on to the log files.
    pub fn session(
        tty: bool,
        stdout: std::fs::File,
        stderr: std::fs::File,
    ) -> std::io::Result<(KernelStdio, Arc<Session>)> {
        if tty {
            let p = pty::Pty::open()?;
            let outputs = vec![Output { channel: stream::STDOUT, from: p.master.try_clone()?, log: stdout }];
            let session = Session::start(outputs, p.master.try_clone()?, Some(p.master))?;
            let stdio = KernelStdio {
                stdin: Some(p.slave.try_clone()?),
                stdout: p.slave.try_clone()?,
                stderr: p.slave,
                ctty: true,
            };
            return Ok((stdio, session));
        }
        let (in_r, in_w) = pty::pipe()?;
        let (out_r, out_w) = pty::pipe()?;
        let (err_r, err_w) = pty::pipe()?;
        let outputs = vec![
            Output { channel: stream::STDOUT, from: out_r, log: stdout },
            Output { channel: stream::STDERR, from: err_r, log: stderr },
        ];
        let session = Session::start(outputs, in_w, None)?;
        Ok((KernelStdio { stdin: Some(in_r), stdout: out_w, stderr: err_w, ctty: false }, session))
    }
}

/// Copies one output to its log and the session's clients until it ends.
async fn copy_out(
    session: std::sync::Weak<Session>,
    channel: u8,
    mut from: tokio::net::unix::pipe::Receiver,
    mut log: std::fs::File,
) {
    let mut buf = vec![0u8; MAX_CHUNK];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                if !pty::is_end(&e) {
                    tracing::warn!("a session's output broke: {e}");
                }
                break;
            }
        };
        // The log is a local file: a short blocking write, as the kernel's own would be.
        if let Err(e) = log.write_all(&buf[..n]) {
            tracing::warn!("cannot write a session's output to its log: {e}");
        }
        match session.upgrade() {
            Some(s) => s.publish(stream::frame(channel, &buf[..n])),
            None => continue,
        }
    }
}

/// Writes clients' input into the kernel and applies their window sizes, until the session
/// is dropped or its output has ended.
async fn feed(
    mut to: tokio::net::unix::pipe::Sender,
    terminal: Option<OwnedFd>,
    mut rx: mpsc::UnboundedReceiver<Input>,
) {
    let mut open = true;
    while let Some(input) = rx.recv().await {
        match input {
            Input::Data(data) if open => {
                if to.write_all(&data).await.is_err() {
                    open = false;
                }
            }
            Input::Data(_) => {}
            // On a terminal the end of a client's input means nothing (another may attach).
            Input::Eof if terminal.is_some() => {}
            Input::Eof => break,
            Input::Resize(size) => {
                if let Some(t) = &terminal {
                    let _ = pty::resize(t.as_raw_fd(), size);
                }
            }
        }
    }
    // Dropping the writer closes the kernel's stdin pipe (EOF for it).
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::stream::{STDOUT, split};

    /// A `cat` on pipes: output before the first attach is kept for it, input goes in, the
    /// log gets everything, and the end reaches the client.
    #[tokio::test]
    async fn a_piped_session_keeps_output_for_the_first_client_and_ends() {
        let dir = tempfile::tempdir().unwrap();
        let log_path = dir.path().join("out");
        let log = std::fs::File::create(&log_path).unwrap();
        let (in_r, in_w) = pty::pipe().unwrap();
        let (out_r, out_w) = pty::pipe().unwrap();
        let mut child = std::process::Command::new("sh")
            .args(["-c", "echo first; cat"])
            .stdin(std::process::Stdio::from(in_r))
            .stdout(std::process::Stdio::from(out_w))
            .spawn()
            .unwrap();
        let s = Session::start(vec![Output { channel: STDOUT, from: out_r, log }], in_w, None).unwrap();
        let mut a = s.attach();
        let mut got = Vec::new();
        for f in &a.backlog {
            got.extend_from_slice(split(f).unwrap().1);
        }
        s.send(Input::Data(b"second\n".to_vec()));
        s.send(Input::Eof);
        let live = a.live.as_mut().unwrap();
        while let Ok(f) = live.recv().await {
            got.extend_from_slice(split(&f).unwrap().1);
        }
        assert_eq!(String::from_utf8_lossy(&got), "first\nsecond\n");
        assert!(child.wait().unwrap().success());
        assert_eq!(std::fs::read_to_string(&log_path).unwrap(), "first\nsecond\n");
        assert!(s.attach().live.is_none(), "ended");
        assert!(s.attach().backlog.is_empty(), "only the first client gets the kept output");
    }

    /// Output nobody has attached for is kept up to its cap, the newest first.
    #[tokio::test]
    async fn the_backlog_keeps_the_newest_output_up_to_its_cap() {
        let (_r, w) = pty::pipe().unwrap();
        let s = Session::start(Vec::new(), w, None).unwrap();
        let chunk = vec![b'x'; 64 * 1024];
        for i in 0..40u8 {
            s.publish(stream::frame(STDOUT, &[&[i][..], &chunk].concat()));
        }
        let kept = s.attach().backlog;
        let bytes: usize = kept.iter().map(Vec::len).sum();
        assert!(bytes <= BACKLOG_MAX && bytes > BACKLOG_MAX / 2, "{bytes}");
        assert_eq!(kept.last().map(|f| f[1]), Some(39), "the newest is kept");
    }
}
