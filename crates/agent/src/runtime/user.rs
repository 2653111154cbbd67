//! The Unix user kernels run as: an unprivileged one when the agent is root (`--run-as`,
//! default `nobody`), otherwise the agent's own user (it cannot switch).

use nix::unistd::{Gid, Uid, User};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum UserError {
    #[error("run-as user `{0}` does not exist on this node")]
    Unknown(String),
    #[error("cannot look up user `{0}`: {1}")]
    Lookup(String, nix::Error),
}

/// Who kernels run as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: String,
    /// Whether the agent must switch to this user (it runs as root).
    pub switch: bool,
}

impl RunUser {
    /// Resolves the run user for an agent with effective uid `euid`.
    pub fn resolve(run_as: Option<&str>) -> Result<RunUser, UserError> {
        let euid = Uid::effective();
        if euid.is_root() {
            let name = run_as.unwrap_or("nobody");
            let u = User::from_name(name)
                .map_err(|e| UserError::Lookup(name.into(), e))?
                .ok_or_else(|| UserError::Unknown(name.into()))?;
            return Ok(RunUser::from_user(u, true));
        }
        if let Some(name) = run_as {
            tracing::warn!("agent is not root: kernels run as the agent's own user, not `{name}`");
        }
        match User::from_uid(euid) {
            Ok(Some(u)) => Ok(RunUser::from_user(u, false)),
            // A uid without a passwd entry (common in containers) still runs kernels.
            _ => Ok(RunUser {
                name: std::env::var("USER").unwrap_or_else(|_| euid.to_string()),
                uid: euid.as_raw(),
                gid: Gid::effective().as_raw(),
                home: std::env::var("HOME").unwrap_or_else(|_| "/".into()),
                switch: false,
            }),
        }
    }

    fn from_user(u: User, switch: bool) -> RunUser {
        RunUser {
            name: u.name,
            uid: u.uid.as_raw(),
            gid: u.gid.as_raw(),
            home: u.dir.to_string_lossy().into_owned(),
            switch,
        }
    }
}
