//! Whether a range of an object's file is in the page cache, and reading it in when it is not,
//! so that the fast path (`fast.rs`) can `sendfile` big objects on its async worker without
//! ever waiting there for the disk.
//!
//! `sendfile(2)` on a non-blocking socket never waits for room in the socket, but it does
//! wait for a file page that is not in memory: a read from disk inside it would stall every
//! other connection of the worker thread. So before each [`WINDOW`] of a big body the sender
//! asks the kernel whether the window's pages are all cached ([`resident`]: `cachestat(2)`,
//! Linux 6.5, one syscall and no copy; older kernels, or a seccomp filter that refuses it,
//! `mincore(2)` over a short-lived mapping) and, when they are not, reads them once on the
//! blocking pool ([`warm`]) first. Between the check and the `sendfile` the kernel may drop a
//! page again under memory pressure; that costs one short stall, never a wrong byte.

use std::cell::RefCell;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::libc;

use crate::files::OpenFile;

/// Bytes checked (and read in when not cached) at a time.
pub const WINDOW: u64 = 4 << 20;
/// Bytes read at a time when warming a window (into a buffer each blocking thread reuses).
const WARM_READ: usize = 1 << 20;

/// `struct cachestat_range` of `<linux/mman.h>`.
#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

/// `struct cachestat` of `<linux/mman.h>`.
#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// `cachestat`'s number: the same on every architecture (new syscalls share one table since
/// Linux 5.1), and not in the `libc` crate for all of them.
const SYS_CACHESTAT: libc::c_long = 451;

/// Set once `cachestat` failed as unsupported or forbidden: [`resident`] then uses `mincore`.
static NO_CACHESTAT: AtomicBool = AtomicBool::new(false);

fn page_size() -> u64 {
    static P: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *P.get_or_init(|| {
        nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE).ok().flatten().map_or(4096, |p| p as u64)
    })
}

/// Whether every page of `file` holding bytes `off..off + len` is in the page cache (`len` >
/// 0). Pages past the end of the file are never cached, so a range past a truncated file's end
/// reads as not resident (and the warm read then finds the end).
pub fn resident(file: &File, off: u64, len: u64) -> bool {
    let page = page_size();
    let pages = (off + len - 1) / page - off / page + 1;
    if !NO_CACHESTAT.load(Ordering::Relaxed) {
        match cachestat(file, off, len) {
            Ok(cached) => return cached >= pages,
            Err(nix::errno::Errno::ENOSYS | nix::errno::Errno::EPERM) => NO_CACHESTAT.store(true, Ordering::Relaxed),
            Err(_) => return false,
        }
    }
    mincore(file, off, len).is_ok_and(|cached| cached >= pages)
}

/// Pages of `off..off + len` in the page cache, by `cachestat(2)`.
fn cachestat(file: &File, off: u64, len: u64) -> nix::Result<u64> {
    let range = CachestatRange { off, len };
    let mut cs = Cachestat::default();
    // SAFETY: both structs are laid out as the kernel's; it reads `range` and writes `cs`
    let r = unsafe {
        libc::syscall(SYS_CACHESTAT, file.as_raw_fd(), &range as *const CachestatRange, &mut cs as *mut Cachestat, 0)
    };
    nix::errno::Errno::result(r).map(|_| cs.nr_cache)
}

thread_local!(static CORE: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) });

/// Pages of `off..off + len` in the page cache, by `mincore(2)` on a mapping of the range made
/// for the question (never touched, so no page is read or faulted in).
pub(super) fn mincore(file: &File, off: u64, len: u64) -> nix::Result<u64> {
    let page = page_size();
    let start = off / page * page;
    let map_len = (off + len - start) as usize;
    let pages = map_len.div_ceil(page as usize);
    // SAFETY: a fresh read-only mapping that nothing reads through; unmapped below
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            start as libc::off_t,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(nix::errno::Errno::last());
    }
    let cached = CORE.with(|v| {
        let mut v = v.borrow_mut();
        v.clear();
        v.resize(pages, 0);
        // SAFETY: `p` maps `map_len` bytes and `v` has one byte per page of them
        let r = unsafe { libc::mincore(p, map_len, v.as_mut_ptr()) };
        nix::errno::Errno::result(r).map(|_| v.iter().filter(|b| *b & 1 == 1).count() as u64)
    });
    // SAFETY: the mapping made above, used by nothing else
    unsafe { libc::munmap(p, map_len) };
    cached
}

thread_local!(static WARM_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) });

/// Reads `off..off + len` of `file` once on the blocking pool, so that its pages are cached
/// when `sendfile` sends them; stops early at the end of the file (a truncated file is then
/// found short by `sendfile` itself).
pub async fn warm(file: Arc<OpenFile>, off: u64, len: u64) -> std::io::Result<()> {
    let task = tokio::task::spawn_blocking(move || {
        WARM_BUF.with(|b| {
            let mut b = b.borrow_mut();
            // zeroed once per blocking thread, then reused
            b.resize(WARM_READ, 0);
            let mut at = off;
            while at < off + len {
                let n = WARM_READ.min((off + len - at) as usize);
                match file.file.read_at(&mut b[..n], at) {
                    Ok(0) => break,
                    Ok(got) => at += got as u64,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        })
    });
    task.await.map_err(std::io::Error::other)?
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn evict(f: &File) {
        f.sync_all().unwrap();
        nix::fcntl::posix_fadvise(f.as_raw_fd(), 0, 0, nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED).unwrap();
    }

    #[test]
    fn cachestat_and_mincore_agree_on_what_is_cached() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("obj");
        let mut f = File::create(&path).unwrap();
        f.write_all(&vec![7u8; 3 << 20]).unwrap();
        let f = File::open(&path).unwrap();
        let mut b = vec![0u8; 3 << 20];
        f.read_exact_at(&mut b, 0).unwrap();
        let page = page_size();
        assert!(resident(&f, 0, 3 << 20) && resident(&f, 100, 5000));
        assert_eq!(mincore(&f, 100, 5000).unwrap(), 5100u64.div_ceil(page));
        assert!(!resident(&f, (3 << 20) - 10, 100), "bytes past the end are never cached");
        evict(&f);
        if cachestat(&f, 0, 3 << 20).is_ok_and(|n| n > 0) {
            return; // a tmpfs, whose pages cannot be dropped: nothing more to see here
        }
        assert!(!resident(&f, 0, 3 << 20) && !resident(&f, 1 << 20, 1));
        assert_eq!(mincore(&f, 0, 3 << 20).unwrap(), 0);
        f.read_exact_at(&mut b[..4096], 1 << 20).unwrap();
        assert!(resident(&f, 1 << 20, 4096) && !resident(&f, 0, 3 << 20));
        assert_eq!(mincore(&f, (1 << 20) - 1, 2).unwrap(), 1, "of the two pages, the one read");
    }
}
