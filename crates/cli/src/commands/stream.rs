//! The client's side of a stream into a kernel (`berth exec`, `berth attach`, `berth run`):
//! sends the request, then our standard input (through the detach watch) and, on a terminal,
//! our window size at the start and on every SIGWINCH; writes the kernel's output to ours;
//! and says how the stream ended. Raw mode is on while it runs with a terminal on both sides,
//! and off again on every way out (the end, a detach, an error, SIGTERM or SIGHUP).

use std::io::{Read, Write};

use anyhow::anyhow;
use berth_model::stream::{self, CONTROL, MAX_CHUNK, RESIZE, STDERR, STDIN, STDIN_EOF, STDOUT, StreamEnd, WindowSize};
use futures_util::{SinkExt, StreamExt};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use crate::client::Ws;
use crate::terminal::{self, DetachWatch, RawMode};

/// What the stream carries besides output.
pub struct Io {
    /// Send our standard input.
    pub stdin: bool,
    /// The kernel's side is a terminal: raw mode here (when ours is one), window sizes.
    pub tty: bool,
    /// Watch our input for this detach sequence (`attach`, `run`); `None`: never detach.
    pub detach: Option<Vec<u8>>,
    /// Make the program on the terminal redraw at the start (a reattach): the size goes out
    /// changed, then as it is, so it gets a SIGWINCH.
    pub redraw: bool,
}

/// How a stream ended.
#[derive(Debug)]
pub enum Outcome {
    /// The kernel's side ended it: its [`StreamEnd`], if it sent one.
    Ended(Option<StreamEnd>),
    /// The user typed the detach sequence.
    Detached,
    /// We got SIGINT, SIGTERM or SIGHUP (its number).
    Signalled(i32),
}

enum Event {
    Frame(Vec<u8>),
    Detach,
}

/// Runs the stream: `request` (JSON) first, then input and output until it ends.
pub async fn run(ws: Ws, request: String, io: Io) -> anyhow::Result<Outcome> {
    let (mut tx, mut rx) = ws.split();
    tx.send(Message::text(request)).await?;
    let raw = if io.tty && io.stdin { RawMode::enter()? } else { None };
    let (events_tx, mut events) = mpsc::channel::<Event>(16);
    if io.tty
        && let Some(size) = terminal::window_size()
    {
        // A failed send is read about below: the other side has closed, and says why.
        if io.redraw {
            let other = WindowSize { rows: size.rows, cols: if size.cols > 1 { size.cols - 1 } else { 2 } };
            let _ = tx.send(Message::binary(resize_frame(other))).await;
        }
        let _ = tx.send(Message::binary(resize_frame(size))).await;
        let mut winch = signal(SignalKind::window_change())?;
        let to = events_tx.clone();
        tokio::spawn(async move {
            while winch.recv().await.is_some() {
                if let Some(size) = terminal::window_size()
                    && to.send(Event::Frame(resize_frame(size))).await.is_err()
                {
                    break;
                }
            }
        });
    }
    if io.stdin {
        let watch = DetachWatch::new(io.detach.clone().unwrap_or_default());
        // A thread of its own, not the runtime's blocking pool: a read from a terminal blocks
        // until a key is typed, and the runtime would wait for it at exit.
        std::thread::spawn(move || read_stdin(watch, events_tx));
    } else {
        drop(events_tx);
    }
    // Caught only in raw mode, so that the terminal is restored before we go; otherwise they
    // end us as usual (and the stream with us): a handler, once installed, stays for good.
    // SIGINT always: `berth run` caught it while the job was queued, so it would be lost.
    let (mut term, mut hup) = match raw {
        Some(_) => (Some(signal(SignalKind::terminate())?), Some(signal(SignalKind::hangup())?)),
        None => (None, None),
    };
    let mut int = Some(signal(SignalKind::interrupt())?);
    let mut input_open = true;
    let outcome = loop {
        tokio::select! {
            msg = rx.next() => match msg {
                Some(Ok(Message::Binary(b))) => match stream::split(&b) {
                    Some((STDOUT, data)) => write_out(&mut std::io::stdout().lock(), data)?,
                    Some((STDERR, data)) => write_out(&mut std::io::stderr().lock(), data)?,
                    Some((CONTROL, data)) => break Outcome::Ended(serde_json::from_slice::<StreamEnd>(data).ok()),
                    _ => {}
                },
                Some(Ok(Message::Close(_))) | None => break Outcome::Ended(None),
                Some(Err(e)) => return Err(anyhow!("the stream broke: {e}")),
                Some(Ok(_)) => {}
            },
            ev = events.recv(), if input_open => match ev {
                Some(Event::Frame(f)) => {
                    if tx.send(Message::binary(f)).await.is_err() {
                        // Closed by the other side: its last words are still to be read.
                        input_open = false;
                    }
                }
                Some(Event::Detach) => {
                    let _ = tx.close().await;
                    break Outcome::Detached;
                }
                None => input_open = false,
            },
            Some(_) = recv(&mut term) => break Outcome::Signalled(libc::SIGTERM),
            Some(_) = recv(&mut hup) => break Outcome::Signalled(libc::SIGHUP),
            Some(_) = recv(&mut int) => break Outcome::Signalled(libc::SIGINT),
        }
    };
    drop(raw);
    Ok(outcome)
}

/// The next signal of `s`; never, without one.
async fn recv(s: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    match s {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}

fn resize_frame(size: WindowSize) -> Vec<u8> {
    stream::frame(RESIZE, &serde_json::to_vec(&size).unwrap_or_default())
}

fn write_out(w: &mut impl Write, data: &[u8]) -> anyhow::Result<()> {
    w.write_all(data)?;
    w.flush()?;
    Ok(())
}

/// Reads standard input until it ends (then [`STDIN_EOF`]) or the detach sequence comes.
fn read_stdin(mut watch: DetachWatch, to: mpsc::Sender<Event>) {
    let mut stdin = std::io::stdin().lock();
    let mut buf = vec![0u8; MAX_CHUNK];
    loop {
        let n = match stdin.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let (data, detach) = watch.feed(&buf[..n]);
        if !data.is_empty() && to.blocking_send(Event::Frame(stream::frame(STDIN, &data))).is_err() {
            return;
        }
        if detach {
            let _ = to.blocking_send(Event::Detach);
            return;
        }
    }
    let _ = to.blocking_send(Event::Frame(stream::frame(STDIN_EOF, &[])));
}
