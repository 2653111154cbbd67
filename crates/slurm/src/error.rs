//! What can stop a Slurm command, as one enum: the manager's answer (the client's [`Error`],
//! whose words the commands print as they are), a mistake in how the command was called, or a
//! failure in Slurm's words (`Invalid job id specified`). The commands print it after
//! `TOOL: error: `, with its causes, and exit 1 (2 for a [`Error::Usage`]).
//!
//! [`Error`]: berth_client::Error

/// Why a Slurm command failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The manager refused, failed or could not be reached; its words as they are.
    #[error(transparent)]
    Client(#[from] berth_client::Error),
    /// A mistake in how the command was called (exit 2, like clap's own errors).
    #[error("{0}")]
    Usage(String),
    /// What went wrong, in the words the command prints (Slurm's where it has some).
    #[error("{0}")]
    Failed(String),
    /// The job's own credential (its step token) does not make a client.
    #[error("cannot reach the manager with the job's step token")]
    StepToken {
        #[source]
        source: berth_client::Error,
    },
    /// A file or stream could not be read or written: which, and the system's reason.
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// Standard output (or error) could not be written: a closed pipe, a full disk.
    #[error(transparent)]
    Output(#[from] std::io::Error),
}

impl Error {
    /// A failure said in `words`.
    pub fn failed(words: impl Into<String>) -> Error {
        Error::Failed(words.into())
    }

    /// The status of a request the manager refused (4xx but 401), if this is one.
    pub fn refused_status(&self) -> Option<reqwest::StatusCode> {
        match self {
            Error::Client(e) => e.refused_status(),
            _ => None,
        }
    }

    /// Whether the caller, not the cluster, was wrong: a usage mistake, or a context that
    /// does not exist (the client's).
    pub fn is_usage(&self) -> bool {
        match self {
            Error::Usage(_) => true,
            Error::Client(e) => e.is_usage(),
            _ => false,
        }
    }
}

/// An error and its causes on one line, `error: cause: cause` (as anyhow's `{:#}` prints
/// them, and so the `berth` binary prints every error).
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
