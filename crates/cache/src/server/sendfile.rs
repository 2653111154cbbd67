//! Sending an object's bytes from its file with `sendfile(2)` (the fast path, `fast.rs`),
//! and the open object files each worker thread keeps for it (objects held in memory; the
//! files of bigger objects are kept by the store, [`crate::files`]).
//!
//! `sendfile` hands page-cache pages to the socket: no copy of the body in this process (the
//! `writev` of a 64 KiB body from memory spent a quarter of the server's CPU copying it,
//! docs/perf.md). Opening, checking and closing the file for every GET then cost half as much
//! again (`perf`: openat, pread, close), so each worker keeps the last [`FILES_PER_WORKER`]
//! files it sent. A kept file is used only when its header names the version the index holds
//! now (same ETag and size): a PUT replaces an object's file by a rename, never writes into it,
//! so an open file always holds the bytes its header describes. The price: a replaced or
//! deleted object's disk space is freed only when its file leaves the cache (at most
//! `FILES_PER_WORKER` × 256 KiB per worker), and each worker holds that many descriptors (fewer
//! when the process may open few, see [`files_per_worker`]).

use std::cell::RefCell;
use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;
use std::sync::OnceLock;

use tokio::io::Interest;
use tokio::net::TcpStream;

use super::objects::Object;
use super::{Node, pagecache};
use crate::files::OpenFile;

/// Files each worker keeps open at most (fewer under a low descriptor limit).
const FILES_PER_WORKER: usize = 64;

thread_local!(static KEPT: RefCell<HashMap<u128, Arc<OpenFile>>> = RefCell::new(HashMap::new()));

/// How many files a worker may keep: an eighth of the descriptor limit shared by the worker
/// threads the machine can run, at most [`FILES_PER_WORKER`], so that connections never run
/// short of descriptors because of this cache.
fn files_per_worker() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| {
        let soft = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).map_or(1024, |l| l.0);
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
        (soft / 8 / threads).min(FILES_PER_WORKER as u64) as usize
    })
}

/// The open file holding `obj`'s current version, from this worker's cache or opened now;
/// `None` when the file is gone or holds another version (the caller sends from memory).
fn file_of(node: &Node, bucket: &str, key: &[u8], obj: &Object) -> Option<Arc<OpenFile>> {
    let id = obj.found.id;
    let cached = KEPT.with(|k| k.borrow().get(&id).filter(|f| f.etag == obj.etag && f.size == obj.size).cloned());
    if cached.is_some() {
        return cached;
    }
    let o = node.store.open_object(bucket, key, &obj.found, 0).ok()??;
    if o.header.etag != obj.etag || o.header.size != obj.size {
        return None;
    }
    let file = Arc::new(OpenFile::new(o.file, o.data_offset, o.header.etag, o.header.size));
    let max = files_per_worker();
    if max > 0 {
        KEPT.with(|k| {
            let mut k = k.borrow_mut();
            if k.len() >= max && !k.contains_key(&id) {
                // any one: the map's order is as good as random
                let old = *k.keys().next().expect("a full map has a key");
                k.remove(&old);
            }
            k.insert(id, file.clone());
        });
    }
    Some(file)
}

/// Sends `head` and then `len` bytes from `start` of `obj` (held in memory) from its file;
/// `Ok(false)` when its file could not be used and nothing was sent.
#[allow(clippy::too_many_arguments)]
pub async fn send_object(
    node: &Node,
    stream: &TcpStream,
    head: &[u8],
    bucket: &str,
    key: &[u8],
    obj: &Object,
    start: u64,
    len: u64,
) -> std::io::Result<bool> {
    let Some(file) = file_of(node, bucket, key, obj) else { return Ok(false) };
    send_file(stream, head, &file, start, len).await?;
    Ok(true)
}

/// Bodies up to this size are sent without asking whether they are in the page cache: objects
/// this small are read inline on the worker anyway (`objects.rs`), and the question would cost
/// a good part of what sending them does.
const CHECK_MIN: u64 = 256 * 1024;

/// The most one `sendfile` call sends (nginx's `sendfile_max_chunk`): after a call that sent
/// that much, the worker serves its other connections before the next, so one big body on a
/// fast client does not hold the thread while others wait. As much as the send buffer of a big
/// body's connection holds ([`grow_send_buffer`]), so that a 4 MiB body goes in one call: with
/// a 2 MiB cap it took two and a yield, and cost 0.86× nginx's CPU per request against 0.75×
/// in the same rounds (issue 42, fifth pass).
const CHUNK: usize = 8 << 20;

/// Bodies from this size on are sent on a connection whose send buffer was grown first
/// ([`grow_send_buffer`]); smaller ones showed no gain from it.
pub const BIG_BODY: u64 = 2 << 20;

/// The send buffer asked for ahead of a big body (the kernel doubles it for its bookkeeping).
const BIG_SNDBUF: usize = 4 << 20;

/// Fixes the send buffer of a connection about to send a big body at [`BIG_SNDBUF`], when the
/// host allows that much (`net.core.wmem_max`) and it is more than TCP's autotuning would grow
/// it to (`net.ipv4.tcp_wmem`'s maximum); otherwise leaves it to the autotuning, since a fixed
/// smaller buffer costs more (a 1 MiB one: 1.3× nginx's CPU at 4 MiB). Why: with the buffer
/// autotuned, a 4 MiB body did not fit, so the worker sent it in several calls with a wait for
/// room between them and transmitted more of it in its own context; with the whole body queued
/// at once the rest leaves as the client's ACKs come in. Measured beside nginx at 4 MiB (issue
/// 42, fifth pass): 0.75× its CPU per request (0.72-0.82 in five rounds) against 0.96×
/// (0.89-0.97) without.
pub fn grow_send_buffer(stream: &TcpStream) {
    static SIZE: OnceLock<Option<usize>> = OnceLock::new();
    let size = SIZE.get_or_init(|| {
        let read = |p: &str| std::fs::read_to_string(p).ok();
        let wmem_max = read("/proc/sys/net/core/wmem_max")?.trim().parse::<usize>().ok()?;
        let autotuned = read("/proc/sys/net/ipv4/tcp_wmem")?.split_whitespace().nth(2)?.parse::<usize>().ok()?;
        let size = BIG_SNDBUF.min(wmem_max);
        // the kernel doubles what is asked for; autotuning's maximum is the size it reaches
        (2 * size > autotuned).then_some(size)
    });
    if let Some(size) = size {
        let _ = nix::sys::socket::setsockopt(stream, nix::sys::socket::sockopt::SndBuf, size);
    }
}

/// `head` (held back by `MSG_MORE` so that it leaves in the body's first segment), then `len`
/// bytes of the object's data from `start` with `sendfile`, at most [`CHUNK`] bytes a call,
/// each [`pagecache::WINDOW`] of a bigger body read into the page cache on the blocking pool
/// first when it is not there (so the worker never waits for the disk). An object found wholly
/// cached moments ago is not asked about again ([`OpenFile::recently_resident`]). A file
/// shorter than its header says (truncated under the cache) ends the connection: the client
/// sees a cut body, never a short one passed off as whole.
///
/// Not corked (`TCP_CORK`, nginx's `tcp_nopush`): measured beside this (issue 42, third pass),
/// a corked 1 MiB body cost berth 1.1-1.3× nginx's CPU per request against 0.6× without (not
/// profiled; likely the cork holds the body until the send buffer fills, so the worker waits
/// for room more often).
pub async fn send_file(
    stream: &TcpStream,
    head: &[u8],
    file: &Arc<OpenFile>,
    start: u64,
    len: u64,
) -> std::io::Result<()> {
    use nix::sys::socket::{MsgFlags, send};
    let more = MsgFlags::from_bits_retain(nix::libc::MSG_MORE | nix::libc::MSG_NOSIGNAL);
    let offset = file.data_offset + start;
    let end = offset + len;
    // bytes before this offset were found in the page cache (or are too few to ask about)
    let mut checked = if len < CHECK_MIN || file.recently_resident() { end } else { offset };
    // an object of one window: asked about whole, so that the answer serves its ranges too
    if checked < end
        && file.size <= pagecache::WINDOW
        && pagecache::resident(&file.file, file.data_offset, file.size.max(1))
    {
        file.found_resident();
        checked = end;
    }
    // whether every window asked about below was cached
    let mut all_cached = true;
    let mut done = 0;
    while done < head.len() {
        match stream.try_io(Interest::WRITABLE, || Ok(send(stream.as_raw_fd(), &head[done..], more)?)) {
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => stream.writable().await?,
            Err(e) => return Err(e),
        }
    }
    let mut off = offset;
    while off < end {
        if off >= checked {
            let n = pagecache::WINDOW.min(end - off);
            if !pagecache::resident(&file.file, off, n) {
                all_cached = false;
                pagecache::warm(file.clone(), off, n).await?;
            }
            checked = off + n;
        }
        let mut at = off as nix::libc::off_t;
        let left = ((checked - off) as usize).min(CHUNK);
        match stream.try_io(Interest::WRITABLE, || {
            Ok(nix::sys::sendfile::sendfile(stream, file.file.as_fd(), Some(&mut at), left)?)
        }) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                off += n as u64;
                // A whole chunk went and the socket may take more: the others' turn first.
                if n == CHUNK && off < end {
                    tokio::task::yield_now().await;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => stream.writable().await?,
            Err(e) => return Err(e),
        }
    }
    if all_cached && start == 0 && len == file.size && len >= CHECK_MIN {
        file.found_resident();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use tokio::io::AsyncReadExt;

    use super::*;

    #[tokio::test]
    async fn a_body_over_two_chunks_leaves_whole() {
        // Over two chunks, so that the sends are capped and the worker yields between them.
        let data: Vec<u8> = (0..(2 * CHUNK + 12345)).map(|i| (i % 251) as u8).collect();
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"HDR").unwrap();
        f.write_all(&data).unwrap();
        let file = Arc::new(OpenFile::new(f, 3, 1, data.len() as u64));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        server.set_nodelay(true).unwrap();
        let head = b"HTTP/1.1 200 OK\r\n\r\n";
        let want = head.len() + data.len();
        let reader = tokio::spawn(async move {
            let mut client = client;
            let mut got = Vec::new();
            while got.len() < want {
                let mut buf = vec![0; 1 << 16];
                let n = client.read(&mut buf).await.unwrap();
                assert!(n > 0, "closed early");
                got.extend_from_slice(&buf[..n]);
            }
            got
        });
        send_file(&server, head, &file, 0, data.len() as u64).await.unwrap();
        let got = reader.await.unwrap();
        assert_eq!(&got[..head.len()], head);
        assert!(got[head.len()..] == data[..], "the body arrives as the file holds it");
    }
}
