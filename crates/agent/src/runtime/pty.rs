//! Pseudo-terminals and pipes for commands whose input and output go through the agent
//! (`berth exec -t`, jobs submitted with `berth run -i/-t`): the pair is opened here, the
//! child gets the slave (or the pipes' far ends) as its standard streams and, on a terminal,
//! as its controlling terminal ([`take_ctty`] after `setsid`), and the agent reads and writes
//! its ends without blocking a thread.
//!
//! Every descriptor is opened close-on-exec: a master leaked into another child (the kernel
//! supervisor, an exec'd command) would keep the terminal open after its command ended, and
//! the session would never see its end.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use berth_model::stream::WindowSize;
use nix::fcntl::{FcntlArg, FdFlag, OFlag, fcntl};
use tokio::net::unix::pipe;

/// A pseudo-terminal: the agent's end and the command's.
pub struct Pty {
    pub master: OwnedFd,
    pub slave: OwnedFd,
}

/// The size a terminal starts with before a client says its own.
const DEFAULT_SIZE: WindowSize = WindowSize { rows: 24, cols: 80 };

impl Pty {
    /// Opens a pseudo-terminal of the default size, both ends close-on-exec.
    pub fn open() -> std::io::Result<Pty> {
        let pair = nix::pty::openpty(None, None).map_err(std::io::Error::from)?;
        for fd in [&pair.master, &pair.slave] {
            cloexec(fd)?;
        }
        let pty = Pty { master: pair.master, slave: pair.slave };
        resize(pty.master.as_raw_fd(), DEFAULT_SIZE)?;
        Ok(pty)
    }
}

/// A pipe, both ends close-on-exec: (read end, write end).
pub fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(std::io::Error::from)
}

fn cloexec(fd: &OwnedFd) -> std::io::Result<()> {
    fcntl(fd.as_raw_fd(), FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)).map(|_| ()).map_err(std::io::Error::from)
}

/// Sets the window size of the terminal whose master (or slave) is `fd`; its foreground
/// process group gets SIGWINCH when the size changes.
pub fn resize(fd: RawFd, size: WindowSize) -> std::io::Result<()> {
    let ws = libc::winsize { ws_row: size.rows.max(1), ws_col: size.cols.max(1), ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCSWINSZ reads one winsize from the pointer, which outlives the call.
    if unsafe { libc::ioctl(fd, libc::TIOCSWINSZ, &ws) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// In the child, between fork and exec, after `setsid`: makes standard input (the slave) the
/// session's controlling terminal, so that Ctrl-C, job control and SIGHUP work as in a login.
/// Only async-signal-safe calls.
pub fn take_ctty() -> std::io::Result<()> {
    // SAFETY: ioctl on descriptor 0 with an integer argument.
    if unsafe { libc::ioctl(0, libc::TIOCSCTTY as _, 0) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// An async reader over `fd` (a pipe's read end or a terminal master).
pub fn reader(fd: OwnedFd) -> std::io::Result<pipe::Receiver> {
    // The unchecked constructor: a terminal master is no FIFO, but epoll serves it the same.
    pipe::Receiver::from_owned_fd_unchecked(fd)
}

/// An async writer over `fd` (a pipe's write end or a terminal master).
pub fn writer(fd: OwnedFd) -> std::io::Result<pipe::Sender> {
    pipe::Sender::from_owned_fd_unchecked(fd)
}

/// Whether a read error is how a stream ends: a terminal master answers EIO once no process
/// has the slave open any more.
pub fn is_end(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::EIO)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A byte written to the master comes out of the slave (echo on) and back; the master
    /// ends with EIO once the slave is closed; a resize is what the slave reports.
    #[tokio::test]
    async fn a_terminal_echoes_resizes_and_ends() {
        let pty = Pty::open().unwrap();
        resize(pty.master.as_raw_fd(), WindowSize { rows: 40, cols: 100 }).unwrap();
        let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::ioctl(pty.slave.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) }, 0);
        assert_eq!((ws.ws_row, ws.ws_col), (40, 100));
        let mut w = writer(pty.master.try_clone().unwrap()).unwrap();
        let mut r = reader(pty.master).unwrap();
        w.write_all(b"hi\n").await.unwrap();
        let mut buf = [0u8; 64];
        let n = r.read(&mut buf).await.unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("hi"), "{:?}", &buf[..n]);
        drop(pty.slave);
        let end = loop {
            match r.read(&mut buf).await {
                Ok(0) => break true,
                Ok(_) => continue,
                Err(e) => break is_end(&e),
            }
        };
        assert!(end);
    }
}
