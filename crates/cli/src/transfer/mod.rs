//! `berth upload` and `berth download`: files between this machine and a data folder,
//! recursive, several at once, resumable, checked by sha256; and `submit --code` (`code`).
//!
//! Both sides compare first (sizes, then checksums) and move only what differs: a file the
//! other side already has whole is skipped, a file interrupted midway continues from where it
//! stopped (the server keeps the partial upload; a download keeps `NAME.berth-part`), and the
//! result is checked against the source's sha256 before it takes the file's name.

pub mod code;
pub mod download;
mod progress;
pub mod upload;

/// Files of at most this many bytes go in one request; larger ones in pieces of this size.
pub const PIECE: u64 = 16 << 20;

/// Transfers at once.
pub const PARALLEL: usize = 4;

/// What a transfer did, for its last line and for tests.
#[derive(Debug, Default, Clone, Copy)]
pub struct Summary {
    pub files: u64,
    pub bytes_sent: u64,
    pub skipped: u64,
    pub resumed: u64,
}

impl Summary {
    fn add(&mut self, o: Summary) {
        self.files += o.files;
        self.bytes_sent += o.bytes_sent;
        self.skipped += o.skipped;
        self.resumed += o.resumed;
    }

    /// `uploaded 12 files (1.2 GiB) in 3.1s, 40.0 MiB/s; 3 already there; 1 resumed`.
    pub fn line(&self, verb: &str, secs: f64) -> String {
        let rate = if secs > 0.0 { self.bytes_sent as f64 / secs } else { 0.0 };
        let mut s = format!(
            "{verb} {} file{} ({}) in {secs:.1}s, {}/s",
            self.files,
            if self.files == 1 { "" } else { "s" },
            berth_model::format_bytes(self.bytes_sent),
            berth_model::format_bytes(rate as u64)
        );
        if self.skipped > 0 {
            s.push_str(&format!("; {} already there (same sha256)", self.skipped));
        }
        if self.resumed > 0 {
            s.push_str(&format!("; {} resumed where it stopped", self.resumed));
        }
        s
    }
}

/// Adds up the files' results, prints the summary line (`verb` since `started`) and fails
/// naming every file that failed.
pub fn tally(
    results: Vec<anyhow::Result<Summary>>,
    verb: &str,
    started: std::time::Instant,
) -> anyhow::Result<Summary> {
    let mut sum = Summary::default();
    let mut failed = Vec::new();
    for res in results {
        match res {
            Ok(s) => sum.add(s),
            Err(e) => failed.push(format!("{e:#}")),
        }
    }
    eprintln!("{}", sum.line(verb, started.elapsed().as_secs_f64()));
    if !failed.is_empty() {
        anyhow::bail!("{} file(s) failed: {}", failed.len(), failed.join("; "));
    }
    Ok(sum)
}

/// The sha256 of a local file, hex.
pub fn hash_file(p: &std::path::Path) -> std::io::Result<String> {
    use sha2::Digest;
    use std::io::Read;
    let mut f = std::fs::File::open(p)?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

/// `a/b` joined with `c` as a folder path (`/`-separated, no leading `/`).
pub fn join(a: &str, b: &str) -> String {
    match (a.trim_matches('/'), b.trim_matches('/')) {
        ("", b) => b.to_string(),
        (a, "") => a.to_string(),
        (a, b) => format!("{a}/{b}"),
    }
}
