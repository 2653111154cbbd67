//! Writing a freshly started berth's credentials without silently taking the file over from
//! another berth that still works (a second `berth up` on another data dir, a `berth login`
//! to a remote manager): that one keeps the user's credentials file, and the new one's go
//! beside its store, to be used with `BERTH_CREDENTIALS`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::client::Client;
use crate::client::credentials::{self, Credentials};

/// How long the berth named in the old file has to answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// What happened to the credentials file.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Written (new, or this same berth's on another address).
    Written(PathBuf),
    /// Written over another berth's that no longer works (down, or the token refused).
    Replaced { path: PathBuf, old_url: String },
    /// Another berth's working credentials were kept; this berth's are in `ours`.
    Kept { path: PathBuf, other: String, ours: PathBuf },
}

impl Outcome {
    /// The lines `berth up` prints about it.
    pub fn describe(&self) -> String {
        let text = match self {
            Outcome::Written(p) => format!("token written to {}", p.display()),
            Outcome::Replaced { path, old_url } => {
                format!("token written to {} (it named the berth at {old_url}, which does not answer)", path.display())
            }
            Outcome::Kept { path, other, ours } => format!(
                "kept {} (it names the berth at {other}, which is up); this berth's credentials are in {}: \
                 use them with `export BERTH_CREDENTIALS={}`",
                path.display(),
                ours.display(),
                ours.display()
            ),
        };
        // Written as the `default` context while the user works in another one.
        let current = match self {
            Outcome::Written(p) | Outcome::Replaced { path: p, .. } => credentials::read_all(p).ok(),
            Outcome::Kept { .. } => None,
        };
        match current.as_ref().map(|f| f.current()) {
            Some(c) if c != credentials::DEFAULT_CONTEXT => {
                format!(
                    "{text} as context default; the current context is {c}: `berth context use default` to use this berth"
                )
            }
            _ => text,
        }
    }
}

/// Writes `creds` (of the berth with data dir `data_dir`) to the user's credentials file,
/// unless it names another berth that answers with its token.
pub async fn install(creds: Credentials, data_dir: &Path) -> anyhow::Result<Outcome> {
    let path = credentials::path()?;
    let creds = Credentials { data_dir: Some(data_dir.to_path_buf()), ..creds };
    // A file that cannot be read works for nobody: replace it.
    let old = credentials::read(&path).unwrap_or_default();
    // The same data dir, or the same admin token (a file from before data dirs were
    // recorded): this berth's own file, on another address maybe.
    let theirs = |o: &Credentials| o.data_dir.as_deref() != Some(data_dir) && o.token != creds.token;
    let Some(old) = old.filter(theirs) else {
        credentials::write_to(&path, &creds)?;
        return Ok(Outcome::Written(path));
    };
    let shown = match &old.data_dir {
        Some(d) => format!("{} (data dir {})", old.url, d.display()),
        None => old.url.clone(),
    };
    if answers(old.clone()).await {
        let ours = data_dir.join("credentials");
        credentials::write_to(&ours, &creds)?;
        return Ok(Outcome::Kept { path, other: shown, ours });
    }
    credentials::write_to(&path, &creds)?;
    Ok(Outcome::Replaced { path, old_url: shown })
}

/// Whether the berth of `creds` answers and accepts its token.
async fn answers(mut creds: Credentials) -> bool {
    // Its socket only when it is there (as the CLI would use it).
    creds.socket = creds.socket.filter(|s| s.exists());
    let Ok(client) = Client::new(creds) else { return false };
    matches!(tokio::time::timeout(PROBE_TIMEOUT, client.whoami()).await, Ok(Ok(_)))
}
