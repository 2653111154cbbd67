//! Who a job will run as, said before it is submitted when that is not the person at the
//! keyboard. Over the manager's unix socket the kernel vouches for the caller's uid and the job
//! runs as them; with a token, the node runs it as its account of the *berth* user's name, else
//! as a uid of its own (`berth agent --user-map`, default `submitter`). A Unix user `nc2`
//! logged in as berth user `bob` would otherwise learn this from a job that cannot write its
//! own directory.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use berth_model::JobSpec;
use nix::unistd::{Uid, User};

use crate::client::Client;

/// The uid a node gives a berth user without an account there, by default: this plus their id.
const DEFAULT_RANGE_FIRST: i64 = berth_model::DEFAULT_UID_RANGE.0 as i64;

/// Whom a token's job runs as on a node with the default user map.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// The node's account of the berth user's name, when it is not the caller.
    Account(u32),
    /// No account of that name: a uid of the default range (`None`: an older manager that does
    /// not say the berth user's id).
    Range(Option<u32>),
}

/// Prints on stderr, before `spec` is submitted through `client`, whom the job will run as when
/// that is not the caller; says nothing over the unix socket or when the names agree.
pub async fn note_before_submit(client: &Client, spec: &JobSpec) {
    if client.socket().is_some() {
        return;
    }
    let Ok(who) = client.whoami().await else { return };
    let me = Uid::current();
    let target = match User::from_name(&who.user) {
        Ok(Some(u)) if u.uid == me => return,
        // A name never maps to root (the agent refuses it): such a user gets a range uid.
        Ok(Some(u)) if !u.uid.is_root() => Target::Account(u.uid.as_raw()),
        _ => Target::Range(who.id.and_then(|id| u32::try_from(DEFAULT_RANGE_FIRST + id).ok())),
    };
    let me_name = User::from_uid(me).ok().flatten().map(|u| u.name).unwrap_or_else(|| me.to_string());
    let dir = spec.workdir.as_deref().map(Path::new);
    eprintln!("{}", text(&who.user, &target, &me_name, me.as_raw(), dir));
}

/// The note: whom the job runs as, what that means for the directory it runs in, and how to run
/// as yourself instead.
fn text(berth_user: &str, target: &Target, me_name: &str, me: u32, dir: Option<&Path>) -> String {
    let (as_whom, uid) = match target {
        Target::Account(uid) => (format!("the Unix account `{berth_user}` (uid {uid})"), Some(*uid)),
        Target::Range(Some(uid)) => (
            format!("uid {uid} (no Unix account is named `{berth_user}`, so berth gives it a uid of its own)"),
            Some(*uid),
        ),
        Target::Range(None) => (format!("a uid of its own (no Unix account is named `{berth_user}`)"), None),
    };
    let mut s = format!(
        "note: you are logged in as berth user `{berth_user}`, so this job runs as {as_whom}, not as you \
         (`{me_name}`, uid {me}), on a node with berth's default user map"
    );
    if let (Some(dir), Some(uid)) = (dir, uid)
        && let Ok(m) = std::fs::metadata(dir)
        && !writable_by(m.uid(), m.mode(), uid)
    {
        s.push_str(&format!(
            ": it cannot write its directory {} (owner uid {}, mode {:o})",
            dir.display(),
            m.uid(),
            m.mode() & 0o7777
        ));
    }
    s.push_str(&format!(
        ". To run jobs as yourself, submit on the manager's machine over its unix socket (unset BERTH_URL and \
         BERTH_TOKEN, or set BERTH_SOCKET), or log in as a berth user named `{me_name}`"
    ));
    s
}

/// Whether `uid` may write a directory owned by `owner` with `mode`, by its owner and other
/// bits (its group is not known to the client; a group-writable directory counts as not).
fn writable_by(owner: u32, mode: u32, uid: u32) -> bool {
    (owner == uid && mode & 0o200 != 0) || mode & 0o002 != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_note_names_the_uid_and_the_directory_it_cannot_write() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let s = text("bob", &Target::Range(Some(200_003)), "nc2", 1002, Some(dir.path()));
        assert!(s.contains("runs as uid 200003") && s.contains("not as you (`nc2`, uid 1002)"), "{s}");
        assert!(s.contains("it cannot write its directory") && s.contains("mode 755"), "{s}");
        assert!(s.contains("log in as a berth user named `nc2`"), "{s}");
        let s = text("bob", &Target::Account(1003), "nc2", 1002, None);
        assert!(s.contains("the Unix account `bob` (uid 1003)") && !s.contains("cannot write"), "{s}");
    }

    #[test]
    fn writable_by_owner_or_everyone() {
        assert!(writable_by(5, 0o755, 5));
        assert!(!writable_by(5, 0o755, 6));
        assert!(writable_by(5, 0o1777, 6));
        assert!(!writable_by(5, 0o555, 5));
    }
}
