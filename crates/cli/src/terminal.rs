//! The user's terminal during `berth exec -t`, `berth run -t` and `berth attach`: raw mode
//! (restored when the guard drops, on every way out), its window size, and the detach key
//! sequence (`--detach-keys`, Ctrl-P Ctrl-Q by default, as in Docker).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use berth_model::stream::WindowSize;
use nix::sys::termios::{self, SetArg, Termios};

/// The default detach sequence, in `--detach-keys` form.
pub const DEFAULT_DETACH_KEYS: &str = "ctrl-p,ctrl-q";

/// Whether standard input is a terminal.
pub fn stdin_is_tty() -> bool {
    nix::unistd::isatty(std::io::stdin().as_raw_fd()).unwrap_or(false)
}

/// The window size of our terminal (standard input's, else output's), if either is one.
pub fn window_size() -> Option<WindowSize> {
    [0, 1].into_iter().find_map(|fd| {
        let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
        // SAFETY: TIOCGWINSZ writes one winsize into the pointer, which outlives the call.
        let ok = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) } == 0 && ws.ws_row > 0 && ws.ws_col > 0;
        ok.then_some(WindowSize { rows: ws.ws_row, cols: ws.ws_col })
    })
}

/// Standard input in raw mode (no echo, no line editing, Ctrl-C a byte like any other) while
/// this lives; the saved mode comes back when it drops, on a return, an error or a panic. A
/// signal that would end us is caught by the caller, which returns through here.
pub struct RawMode {
    saved: Termios,
}

impl RawMode {
    /// Puts standard input in raw mode; `None` when it is no terminal.
    pub fn enter() -> anyhow::Result<Option<RawMode>> {
        if !stdin_is_tty() {
            return Ok(None);
        }
        let stdin = std::io::stdin();
        let saved = termios::tcgetattr(stdin.as_fd())?;
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &raw)?;
        Ok(Some(RawMode { saved }))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // SAFETY: descriptor 0 stays open for the life of the process.
        let fd = unsafe { BorrowedFd::borrow_raw(0) };
        let _ = termios::tcsetattr(fd, SetArg::TCSANOW, &self.saved);
    }
}

/// Parses a detach sequence in Docker's form: comma-separated keys, each a character or
/// `ctrl-X` (X: a letter or one of `@[\]^_`). An empty text turns detaching off.
pub fn parse_detach_keys(text: &str) -> Result<Vec<u8>, String> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    text.split(',')
        .map(|key| {
            let bad = || {
                format!("invalid detach key `{key}` in `{text}`: use characters or ctrl-a..ctrl-z, ctrl-@, ctrl-[, ctrl-\\, ctrl-], ctrl-^, ctrl-_ separated by commas (e.g. ctrl-p,ctrl-q)")
            };
            match key.strip_prefix("ctrl-") {
                Some(c) if c.len() == 1 => {
                    let c = c.as_bytes()[0].to_ascii_lowercase();
                    match c {
                        b'a'..=b'z' => Ok(c - b'a' + 1),
                        b'@' => Ok(0),
                        b'[' => Ok(27),
                        b'\\' => Ok(28),
                        b']' => Ok(29),
                        b'^' => Ok(30),
                        b'_' => Ok(31),
                        _ => Err(bad()),
                    }
                }
                None if key.len() == 1 => Ok(key.as_bytes()[0]),
                _ => Err(bad()),
            }
        })
        .collect()
}

/// Watches typed input for the detach sequence. Bytes that might start it are held back
/// until the next one shows whether they do (as Docker does); the sequence itself never
/// reaches the job.
#[derive(Debug, Clone)]
pub struct DetachWatch {
    keys: Vec<u8>,
    matched: usize,
}

impl DetachWatch {
    pub fn new(keys: Vec<u8>) -> DetachWatch {
        DetachWatch { keys, matched: 0 }
    }

    /// The bytes of `input` to send on, and whether the sequence is now complete.
    pub fn feed(&mut self, input: &[u8]) -> (Vec<u8>, bool) {
        let mut out = Vec::with_capacity(input.len() + self.matched);
        if self.keys.is_empty() {
            out.extend_from_slice(input);
            return (out, false);
        }
        for &b in input {
            if b == self.keys[self.matched] {
                self.matched += 1;
                if self.matched == self.keys.len() {
                    self.matched = 0;
                    return (out, true);
                }
                continue;
            }
            out.extend_from_slice(&self.keys[..self.matched]);
            self.matched = usize::from(b == self.keys[0]);
            if self.matched == 0 {
                out.push(b);
            }
        }
        (out, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detach_keys_parse_like_dockers() {
        assert_eq!(parse_detach_keys(DEFAULT_DETACH_KEYS).unwrap(), [16, 17]);
        assert_eq!(parse_detach_keys("ctrl-a,x,ctrl-@,ctrl-_").unwrap(), [1, b'x', 0, 31]);
        assert_eq!(parse_detach_keys("").unwrap(), Vec::<u8>::new());
        assert!(parse_detach_keys("ctrl-1").unwrap_err().contains("invalid detach key `ctrl-1`"));
        assert!(parse_detach_keys("ab").is_err());
    }

    #[test]
    fn the_sequence_is_held_back_and_never_sent() {
        let mut w = DetachWatch::new(vec![16, 17]);
        assert_eq!(w.feed(b"ab"), (b"ab".to_vec(), false));
        assert_eq!(w.feed(&[16]), (vec![], false), "held: it may start the sequence");
        assert_eq!(w.feed(b"x"), (vec![16, b'x'], false), "not the sequence after all");
        assert_eq!(w.feed(&[16, 16]), (vec![16], false));
        assert_eq!(w.feed(&[17, b'z']), (vec![], true));
        let mut off = DetachWatch::new(vec![]);
        assert_eq!(off.feed(&[16, 17]), (vec![16, 17], false));
    }
}
