//! Copying a kernel's log to a local writer by byte offset, shared by `berth logs [-f]` and
//! `berth submit --wait`: bytes go out raw (a log need not be UTF-8) and, when following, the
//! copy ends only once the job has ended and the log has been read to its final size, so
//! nothing is lost or printed twice.

use std::collections::VecDeque;
use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use berth_model::JobId;
use berth_model::protocol::LogStream;

use crate::client::{Client, LogChunk};

/// How long a follower waits before asking again when nothing new came.
pub const FOLLOW_INTERVAL: Duration = Duration::from_millis(200);

/// How a copy ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// At the log's current end (`berth logs`).
    Now,
    /// When the job has ended and every byte has been copied (`logs -f`, `submit --wait`).
    JobDone,
}

/// One kernel's log of one job.
#[derive(Debug, Clone, Copy)]
pub struct LogRef {
    pub id: JobId,
    pub stream: LogStream,
    pub kernel: u32,
}

/// Copies the log to `out` from offset 0, flushing after each piece so that output shows as it
/// comes. A failed fetch (the node briefly away, the manager restarting) is retried `retries`
/// times in a row before the copy ends with its error, so that `submit --wait` rides out a
/// hiccup without printing a byte twice (the offset only moves past bytes that were written).
pub async fn copy(client: &Client, log: LogRef, until: Until, retries: u32, out: &mut dyn Write) -> anyhow::Result<()> {
    copy_from(client, log, until, retries, 0, out).await.map(|_| ())
}

/// [`copy`] from byte `from` of the log; returns the offset it stopped at.
pub async fn copy_from(
    client: &Client,
    log: LogRef,
    until: Until,
    retries: u32,
    from: u64,
    out: &mut dyn Write,
) -> anyhow::Result<u64> {
    let mut cursor = Cursor { offset: from, attempt: None };
    let mut failures = 0;
    loop {
        let chunk = match client.logs(log.id, log.stream, log.kernel, cursor.offset).await {
            Ok(c) => c,
            Err(e) if failures >= retries => return Err(e.into()),
            Err(_) => {
                failures += 1;
                tokio::time::sleep(FOLLOW_INTERVAL * failures).await;
                continue;
            }
        };
        failures = 0;
        match step(&mut cursor, chunk, until, out)? {
            Next::Again => {}
            Next::Later => tokio::time::sleep(FOLLOW_INTERVAL).await,
            Next::Stop => return Ok(cursor.offset),
            Next::StartOver(attempt) => {
                let stream = log.stream.as_str();
                eprintln!("berth: job {} was requeued: its {stream} starts over (attempt {attempt})", log.id);
            }
        }
    }
}

/// Where a copy is: the next offset, of which attempt's log.
#[derive(Debug, Default)]
struct Cursor {
    offset: u64,
    attempt: Option<u32>,
}

/// What to do after a chunk.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// Ask again at once: bytes came, more may be waiting.
    Again,
    /// Nothing new yet: ask again after [`FOLLOW_INTERVAL`].
    Later,
    /// The copy is complete.
    Stop,
    /// The job was requeued: its new attempt's log is read from 0 (the chunk was dropped, as
    /// its bytes came from the old offset), and the user is told.
    StartOver(u32),
}

/// Writes one chunk and says what to do next.
fn step(cursor: &mut Cursor, chunk: LogChunk, until: Until, out: &mut dyn Write) -> anyhow::Result<Next> {
    match (cursor.attempt, chunk.attempt) {
        (Some(was), Some(now)) if was != now => {
            *cursor = Cursor { offset: 0, attempt: Some(now) };
            return Ok(Next::StartOver(now));
        }
        (None, now) => cursor.attempt = now,
        _ => {}
    }
    let got = !chunk.bytes.is_empty();
    if got {
        out.write_all(&chunk.bytes).and_then(|()| out.flush()).context("cannot write the job's output")?;
    }
    cursor.offset = chunk.next_offset.max(cursor.offset);
    if got {
        // The manager sends a log in pieces of at most 1 MiB: ask again at once while bytes come.
        return Ok(Next::Again);
    }
    // `done` was read before the bytes were, so an empty answer with it set means the log of
    // an ended job has been read to its end.
    if until == Until::Now || chunk.done {
        return Ok(Next::Stop);
    }
    Ok(Next::Later)
}

/// The last `n` lines of one log as it stands (`berth show` of a failed job).
pub(crate) async fn last_lines(client: &Client, log: LogRef, n: usize) -> anyhow::Result<Vec<u8>> {
    let mut last = LastLines::new(n);
    copy_from(client, log, Until::Now, 0, 0, &mut last).await?;
    Ok(last.into_bytes())
}

/// A writer that keeps only the last `n` lines written to it (a last line without its newline
/// counts as one).
pub(crate) struct LastLines {
    n: usize,
    lines: VecDeque<Vec<u8>>,
}

impl LastLines {
    pub(crate) fn new(n: usize) -> Self {
        LastLines { n, lines: VecDeque::new() }
    }

    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.lines.into_iter().flatten().collect()
    }
}

impl Write for LastLines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        for piece in buf.split_inclusive(|&b| b == b'\n') {
            match self.lines.back_mut() {
                // the rest of a line the last write left open
                Some(open) if open.last() != Some(&b'\n') => open.extend_from_slice(piece),
                _ => self.lines.push_back(piece.to_vec()),
            }
            // The open line may still be the one to drop: only whole lines beyond `n` go.
            while self.lines.len() > self.n {
                self.lines.pop_front();
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(bytes: &[u8], next_offset: u64, done: bool) -> LogChunk {
        LogChunk { bytes: bytes.to_vec(), next_offset, done, attempt: Some(0) }
    }

    #[test]
    fn a_follower_stops_only_on_an_empty_answer_for_an_ended_job() {
        let mut out = Vec::new();
        let off = &mut Cursor::default();
        // Bytes with `done`: the job ended, but the rest of the log may still be unread.
        assert_eq!(step(off, chunk(b"ab", 2, true), Until::JobDone, &mut out).unwrap(), Next::Again);
        assert_eq!(step(off, chunk(b"", 2, false), Until::JobDone, &mut out).unwrap(), Next::Later);
        assert_eq!(step(off, chunk(b"\xff\x00", 4, false), Until::JobDone, &mut out).unwrap(), Next::Again);
        assert_eq!(step(off, chunk(b"", 4, true), Until::JobDone, &mut out).unwrap(), Next::Stop);
        assert_eq!(out, b"ab\xff\x00", "raw bytes, each once");
        assert_eq!(off.offset, 4);
    }

    #[test]
    fn without_follow_the_copy_ends_at_the_current_end() {
        let mut out = Vec::new();
        let off = &mut Cursor::default();
        assert_eq!(step(off, chunk(b"", 0, false), Until::Now, &mut out).unwrap(), Next::Stop);
        // An offset never goes back, even if the manager answers with a smaller one.
        off.offset = 9;
        assert_eq!(step(off, chunk(b"", 3, false), Until::Now, &mut out).unwrap(), Next::Stop);
        assert_eq!(off.offset, 9);
    }

    #[test]
    fn a_requeued_jobs_log_is_read_again_from_its_start() {
        let mut out = Vec::new();
        let off = &mut Cursor::default();
        assert_eq!(step(off, chunk(b"first ", 6, false), Until::JobDone, &mut out).unwrap(), Next::Again);
        // Attempt 1's bytes from offset 6 are not its start: dropped, and the copy starts over.
        let later = LogChunk { bytes: b"xx".to_vec(), next_offset: 8, done: false, attempt: Some(1) };
        assert_eq!(step(off, later, Until::JobDone, &mut out).unwrap(), Next::StartOver(1));
        assert_eq!(off.offset, 0);
        let again = LogChunk { bytes: b"second".to_vec(), next_offset: 6, done: true, attempt: Some(1) };
        assert_eq!(step(off, again, Until::JobDone, &mut out).unwrap(), Next::Again);
        assert_eq!(out, b"first second");
    }

    fn last(n: usize, writes: &[&[u8]]) -> Vec<u8> {
        let mut l = LastLines::new(n);
        for w in writes {
            l.write_all(w).unwrap();
        }
        l.into_bytes()
    }

    #[test]
    fn tail_keeps_the_last_lines_across_writes() {
        assert_eq!(last(2, &[b"a\nb\nc\n"]), b"b\nc\n");
        assert_eq!(last(2, &[b"a\nb", b"b\nc"]), b"bb\nc", "a line split over writes is one line");
        assert_eq!(last(5, &[b"a\n"]), b"a\n", "fewer lines than asked: all of them");
        assert_eq!(last(0, &[b"a\nb\n"]), b"");
        assert_eq!(last(1, &[b"\xff\x00\n", b"tail"]), b"tail", "raw bytes");
    }
}
