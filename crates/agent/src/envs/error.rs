//! Why a kernel's Python environment cannot be had: no uv, or one the job's user cannot
//! run, no python that fits, a build that failed, an environment its user cannot run, or
//! one `berth env rm` may not remove. The text is the job's reason (and the setup log's
//! line): what was wrong and how to fix it.

use std::path::PathBuf;

/// How to give builds a uv their users can run.
pub(super) const UV_FIX: &str = "so install uv where every user can run it (e.g. `/usr/local/bin/uv`) and give its \
                                 path with `berth agent --uv PATH` (or `berth up --uv PATH`, BERTH_UV)";

/// What went wrong with an environment.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    #[error(
        "uv not found (`{}`): install it on the node (`pip install uv`, or https://docs.astral.sh/uv/) \
         and give its path with `berth agent --uv PATH` or BERTH_UV",
        uv.display()
    )]
    UvNotFound { uv: PathBuf },
    #[error("cannot run uv (`{}`): {source}: builds run uv as the job's user, {UV_FIX}", uv.display())]
    UvDenied { uv: PathBuf, source: std::io::Error },
    #[error("cannot run uv (`{}`): {source}", uv.display())]
    UvRun { uv: PathBuf, source: std::io::Error },
    #[error("cannot run uv (`{}`) to find python {request}: {source}", uv.display())]
    FindPython { uv: PathBuf, request: String, source: std::io::Error },
    #[error("uv cannot list the node's pythons: {0}")]
    ListPythons(String),
    #[error("uv listed the node's pythons unreadably: {0}")]
    ListUnreadable(serde_json::Error),
    #[error("uv (`{}`) does not tell its version", uv.display())]
    NoUvVersion { uv: PathBuf },
    /// `what`: the uv (and the file it links to) closed to `user`.
    #[error(
        "user {user} cannot run uv ({what}: the file or a directory above it is closed to them): builds run \
         uv as the job's user, {UV_FIX}"
    )]
    UvClosed { user: String, what: String },
    #[error(
        "no python {request} on this node: install it where the agent finds it (e.g. `python{request}` on \
         the agent's PATH, readable by every user); environments use no downloaded pythons"
    )]
    NoPython { request: String },
    /// `paths`: the interpreters found, none of which `user` can reach.
    #[error(
        "no python {request} on this node that user {user} can run ({paths} cannot be reached by them): install one \
         every user can run (e.g. the OS's python{request} in /usr/bin) on the agent's PATH"
    )]
    NoPythonFor { request: String, user: String, paths: String },
    /// The inputs of the build could not be resolved.
    #[error("environment build failed: {0}")]
    Plan(Box<EnvError>),
    /// uv failed: its message (its output is in the setup log).
    #[error("environment build failed: {message}")]
    Build { message: String },
    /// The environment's python does not run as the kernel's user; the text says what is
    /// closed to them and the fix (`check::unusable`).
    #[error("{0}")]
    Unusable(String),
    #[error("no environment {0} on this node")]
    NoSuchEnv(String),
    #[error("{0} names several environments: give more of the key")]
    Ambiguous(String),
    #[error("environment {0} is in use by a kernel on this node")]
    InUse(String),
    #[error("cannot remove environment {short}: {source}")]
    Remove { short: String, source: std::io::Error },
}

impl EnvError {
    /// What a missing or unrunnable uv says, for listing pythons and for builds alike.
    pub(super) fn uv_failed(uv: &std::path::Path, source: std::io::Error) -> EnvError {
        let uv = uv.to_path_buf();
        match source.kind() {
            std::io::ErrorKind::NotFound => EnvError::UvNotFound { uv },
            std::io::ErrorKind::PermissionDenied => EnvError::UvDenied { uv, source },
            _ => EnvError::UvRun { uv, source },
        }
    }
}
