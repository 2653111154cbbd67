//! Who a user's jobs run as on a node whose agent is root and maps users the default way
//! (`--user-map submitter`, docs/node.md), said from the manager host's accounts (which a
//! cluster's nodes share, as they must for Slurm): for a submit's preview and the dashboard.

use serde::Serialize;
use utoipa::ToSchema;

use crate::identity::User;

/// The first uid of the range the nodes' agents give berth users without an account by
/// default (`berth agent --user-map`, agent `runtime/user.rs`).
const RANGE_FIRST: u64 = berth_model::DEFAULT_UID_RANGE.0 as u64;

/// The Unix user a job of the caller's runs as on a node whose agent is root and maps users
/// the default way (`--user-map submitter`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RunAs {
    /// The account name (`berth-NAME` for a uid of the nodes' range, which has no account).
    pub user: String,
    /// Its uid, when the manager's host knows the account.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// Its home directory; `None`: the job's own fresh work dir is its HOME.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub home: Option<String>,
    /// Whether `home` is a directory on the manager's host (the dashboard's default working
    /// directory then).
    pub home_exists: bool,
    /// Why this user, and when a node runs the job as another.
    pub how: String,
}

/// Who `user`'s jobs run as, by the rule of a root agent's default user map: the Unix user
/// who submitted over the manager's socket, else the account named like the berth user (never
/// root), else a uid of the nodes' range.
pub fn run_as(user: &User, submitter: Option<berth_model::UnixId>) -> RunAs {
    use nix::unistd::{Uid, User as Account};
    let caveat = "on a node whose agent is root with the default --user-map; an agent that is not root runs \
                  every job as its own user";
    let account = match submitter {
        Some(s) => Account::from_uid(Uid::from_raw(s.uid)).ok().flatten().map(|a| (a, "the Unix user who submitted")),
        None => Account::from_name(&user.name)
            .ok()
            .flatten()
            .filter(|a| !a.uid.is_root())
            .map(|a| (a, "the Unix account named like your berth user")),
    };
    match account {
        Some((a, why)) => {
            let home = a.dir.to_string_lossy().into_owned();
            RunAs {
                user: a.name,
                uid: Some(a.uid.as_raw()),
                home_exists: a.dir.is_dir(),
                home: Some(home),
                how: format!("{why}, {caveat}"),
            }
        }
        None => RunAs {
            user: format!("berth-{}", user.name),
            uid: u32::try_from(RANGE_FIRST + user.id.max(0) as u64).ok(),
            home: None,
            home_exists: false,
            how: format!(
                "no Unix account is named {}: a uid of the nodes' range for berth users ({RANGE_FIRST} + your berth \
                 user id), whose HOME is the job's own work dir, {caveat}",
                user.name
            ),
        },
    }
}
