//! Kernel log files: where they live and reading them by offset for `FetchLogs`.
//!
//! Logs live at `<data_dir>/kernels/<job>.<attempt>.<index>/{stdout,stderr}.log`, named by the
//! kernel key alone so they can be found after the kernel is forgotten or the agent restarts.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use berth_model::protocol::{KernelKey, LogStream};

/// The most bytes one `FetchLogs` answer carries, whatever the manager asks for, so a single
/// WebSocket frame stays small.
pub const MAX_LOG_CHUNK: u64 = 4 << 20;

/// `<job>.<attempt>.<index>`: the kernel's directory and cgroup name.
pub fn key_name(key: &KernelKey) -> String {
    format!("{}.{}.{}", key.job_id, key.attempt, key.index)
}

/// The kernel's directory under the data dir.
pub fn kernel_dir(data_dir: &Path, key: &KernelKey) -> PathBuf {
    data_dir.join("kernels").join(key_name(key))
}

/// The path of one of the kernel's logs.
pub fn log_path(data_dir: &Path, key: &KernelKey, stream: LogStream) -> PathBuf {
    kernel_dir(data_dir, key).join(match stream {
        LogStream::Stdout => "stdout.log",
        LogStream::Stderr => "stderr.log",
        LogStream::Setup => "setup.log",
    })
}

/// A piece of a log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogChunk {
    pub data: Vec<u8>,
    pub next_offset: u64,
    pub found: bool,
}

/// Reads at most `max_bytes` (capped at [`MAX_LOG_CHUNK`]) from `offset`. A missing file is
/// `found: false`; an offset at or past the end gives no data and the log's current size as
/// the next offset (a client that asked too far resumes from there). The offset is never
/// handed to `lseek` unchecked: past the file system's largest file (16 TiB on ext4) or
/// `i64::MAX` it fails with `EINVAL`, which once turned into a 404.
pub fn read_log(path: &Path, offset: u64, max_bytes: u64) -> std::io::Result<LogChunk> {
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(LogChunk { data: Vec::new(), next_offset: offset, found: false });
        }
        Err(e) => return Err(e),
    };
    let size = f.metadata()?.len();
    if offset >= size {
        return Ok(LogChunk { data: Vec::new(), next_offset: size, found: true });
    }
    f.seek(SeekFrom::Start(offset))?;
    let mut data = Vec::new();
    f.take(max_bytes.min(MAX_LOG_CHUNK)).read_to_end(&mut data)?;
    Ok(LogChunk { next_offset: offset + data.len() as u64, data, found: true })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_named_by_key() {
        let key = KernelKey { job_id: 17, attempt: 2, index: 0 };
        assert_eq!(log_path(Path::new("/d"), &key, LogStream::Stderr), Path::new("/d/kernels/17.2.0/stderr.log"));
    }

    #[test]
    fn reads_by_offset() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("stdout.log");
        std::fs::write(&p, b"hello world").unwrap();
        let c = read_log(&p, 0, 5).unwrap();
        assert_eq!((c.data.as_slice(), c.next_offset, c.found), (&b"hello"[..], 5, true));
        let c = read_log(&p, 5, 100).unwrap();
        assert_eq!((c.data.as_slice(), c.next_offset), (&b" world"[..], 11));
        let c = read_log(&p, 11, 100).unwrap();
        assert_eq!((c.data.len(), c.next_offset, c.found), (0, 11, true));
        let c = read_log(&p, 50, 100).unwrap();
        assert_eq!((c.data.len(), c.next_offset, c.found), (0, 11, true));
        let c = read_log(&dir.path().join("nope"), 3, 10).unwrap();
        assert_eq!((c.found, c.next_offset), (false, 3));
    }

    #[test]
    fn an_offset_far_past_the_end_is_an_empty_page_with_the_size() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("stdout.log");
        std::fs::write(&p, b"hello").unwrap();
        // The fuzzer's offset, past ext4's largest file, and past i64::MAX (EINVAL everywhere).
        for offset in [755_378_507_596_559, 1 << 63, u64::MAX] {
            let c = read_log(&p, offset, 100).unwrap();
            assert_eq!((c.data.len(), c.next_offset, c.found), (0, 5, true), "offset {offset}");
        }
    }
}
