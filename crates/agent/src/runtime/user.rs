//! The Unix user kernels run as: an unprivileged one when the agent is root (`--run-as`,
//! default `nobody`), otherwise the agent's own user (it cannot switch).

use berth_model::UnixId;
use nix::unistd::{Gid, Uid, User};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum UserError {
    #[error("run-as user `{0}` does not exist on this node")]
    Unknown(String),
    #[error("cannot look up user `{0}`: {1}")]
    Lookup(String, nix::Error),
    /// A job of another Unix user on an agent that cannot switch users.
    #[error(
        "the job was submitted by uid {submitter} but the agent runs as uid {agent} and cannot switch users: \
         run the agent as root, or submit as uid {agent}"
    )]
    CannotSwitch { submitter: u32, agent: u32 },
    #[error("refusing to run a kernel of {0} as root")]
    Root(String),
    #[error("user {0} has no Unix account on this node (--user-map passwd)")]
    NoAccount(String),
    #[error("cannot look up user {0}: {1}")]
    LookupOwner(String, nix::Error),
    #[error("berth user {name} (id {id}) is outside the agent's uid range of {count} ids: widen --user-map")]
    OutOfRange { name: String, id: i64, count: u32 },
}

/// A `--user-map` berth does not know.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BadUserMap {
    #[error("invalid user map `{0}`: use submitter, range:FIRST-LAST (e.g. range:200000-299999), passwd or fixed")]
    Unknown(String),
    #[error(
        "invalid user map `{0}`: the range must start at 1000 or above (system accounts live below) and end after it starts"
    )]
    Range(String),
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
    /// Supplementary groups: the account's groups on this node (none for a uid without one).
    pub groups: Vec<u32>,
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
                groups: Vec::new(),
            }),
        }
    }

    fn from_user(u: User, switch: bool) -> RunUser {
        RunUser::account(u, None, switch)
    }

    /// The account `u` with primary group `gid` (its own by default) and, as `initgroups`
    /// gives a login, its supplementary groups on this node.
    fn account(u: User, gid: Option<u32>, switch: bool) -> RunUser {
        let gid = gid.unwrap_or(u.gid.as_raw());
        let groups = std::ffi::CString::new(u.name.as_str())
            .ok()
            .and_then(|n| nix::unistd::getgrouplist(&n, Gid::from_raw(gid)).ok())
            .map(|g| g.into_iter().map(Gid::as_raw).collect())
            .unwrap_or_else(|| vec![gid]);
        RunUser { name: u.name, uid: u.uid.as_raw(), gid, home: u.dir.to_string_lossy().into_owned(), switch, groups }
    }

    /// How the kernel's child switches to this user; `None` when the agent cannot switch.
    pub(crate) fn switch_to(&self) -> Option<super::private_tmp::UserSwitch> {
        self.switch.then(|| super::private_tmp::UserSwitch {
            uid: self.uid,
            gid: self.gid,
            groups: self.groups.clone(),
        })
    }
}

/// How a root agent maps berth users to Unix users (`berth agent --user-map`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UserMap {
    /// The default, as Slurm does: the Unix user who ran `berth submit` when the manager's
    /// host vouched for it (a submit over its unix socket); else the node's account with the
    /// berth user's name (passwd, LDAP/SSSD through NSS); else a uid of the default range.
    #[default]
    Submitter,
    /// One unprivileged uid per berth user: `first + <berth user id>` (gid the same), while it
    /// stays below `first + count`. Users are kept apart without any account on the node.
    Range { first: u32, count: u32 },
    /// The node's Unix account with the berth user's name (sites where both come from LDAP).
    Passwd,
    /// Every kernel as the agent's `--run-as` user (default `nobody`): no separation.
    Fixed,
}

/// The uids `range` and `submitter` give berth users without an account: 200000-299999.
const DEFAULT_RANGE: (u32, u32) = berth_model::DEFAULT_UID_RANGE;

impl std::str::FromStr for UserMap {
    type Err = BadUserMap;

    /// `submitter`, `range:FIRST-LAST`, `passwd` or `fixed`.
    fn from_str(s: &str) -> Result<Self, BadUserMap> {
        let bad = || BadUserMap::Unknown(s.to_string());
        match s {
            "submitter" => Ok(UserMap::Submitter),
            "passwd" => Ok(UserMap::Passwd),
            "fixed" => Ok(UserMap::Fixed),
            _ => {
                let (a, b) = s.strip_prefix("range:").and_then(|r| r.split_once('-')).ok_or_else(bad)?;
                let (first, last): (u32, u32) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                if first < 1000 || last < first || last >= u32::MAX - 1 {
                    return Err(BadUserMap::Range(s.to_string()));
                }
                Ok(UserMap::Range { first, count: last - first + 1 })
            }
        }
    }
}

impl RunUser {
    /// The user a kernel of berth user `owner` (name, id), submitted by the Unix user
    /// `submitter` when the manager's host vouched for one, runs as under `map`; `self` is
    /// the agent's default (`--run-as`, or the agent's own user when it is not root).
    pub fn for_owner(
        &self,
        map: UserMap,
        owner: Option<(&str, i64)>,
        submitter: Option<UnixId>,
    ) -> Result<RunUser, UserError> {
        if !self.switch {
            // A non-root agent runs everything as itself; a job of another Unix user must not
            // quietly run as the agent's.
            return match submitter {
                Some(s) if map == UserMap::Submitter && s.uid != self.uid => {
                    Err(UserError::CannotSwitch { submitter: s.uid, agent: self.uid })
                }
                _ => Ok(self.clone()),
            };
        }
        let Some((name, id)) = owner else {
            return match (map, submitter) {
                (UserMap::Submitter, Some(s)) => Ok(RunUser::vouched(s)),
                _ => Ok(self.clone()),
            };
        };
        match map {
            UserMap::Fixed => Ok(self.clone()),
            UserMap::Range { first, count } => RunUser::in_range(name, id, first, count),
            UserMap::Submitter => match submitter {
                Some(s) => Ok(RunUser::vouched(s)),
                None => match User::from_name(name) {
                    // Only a vouched submitter runs as root, never a name.
                    Ok(Some(u)) if !u.uid.is_root() => Ok(RunUser::from_user(u, true)),
                    _ => RunUser::in_range(name, id, DEFAULT_RANGE.0, DEFAULT_RANGE.1),
                },
            },
            UserMap::Passwd => match User::from_name(name) {
                Ok(Some(u)) if u.uid.is_root() => Err(UserError::Root(name.to_string())),
                Ok(Some(u)) => Ok(RunUser::from_user(u, true)),
                Ok(None) => Err(UserError::NoAccount(name.to_string())),
                Err(e) => Err(UserError::LookupOwner(name.to_string(), e)),
            },
        }
    }

    /// The Unix user the manager's host vouched for: its account on this node when the uid
    /// has one (name and home), with the group it submitted with.
    fn vouched(s: UnixId) -> RunUser {
        match User::from_uid(Uid::from_raw(s.uid)) {
            Ok(Some(u)) => RunUser::account(u, Some(s.gid), true),
            // No account here (a uid from another host's users): HOME is the work dir.
            _ => RunUser {
                name: s.uid.to_string(),
                uid: s.uid,
                gid: s.gid,
                home: String::new(),
                switch: true,
                groups: vec![s.gid],
            },
        }
    }

    /// Berth user `name` (id `id`) as uid `first + id` of a range of `count`.
    fn in_range(name: &str, id: i64, first: u32, count: u32) -> Result<RunUser, UserError> {
        let uid = u32::try_from(id)
            .ok()
            .filter(|i| *i < count)
            .map(|i| first + i)
            .ok_or_else(|| UserError::OutOfRange { name: name.to_string(), id, count })?;
        // No passwd entry: HOME is the kernel's work dir (set by the runtime).
        Ok(RunUser {
            name: format!("berth-{name}"),
            uid,
            gid: uid,
            home: String::new(),
            switch: true,
            groups: vec![uid],
        })
    }
}

impl RunUser {
    /// Who kernels run as under `map`, for the agent's start-up log: the mode, not just the
    /// default user (which only jobs without an owner get when users are mapped).
    pub fn describe(&self, map: UserMap) -> String {
        let fallback = format!("{} uid={}", self.name, self.uid);
        if !self.switch {
            return format!("the agent's own user {fallback} (the agent is not root, so it cannot switch users)");
        }
        match map {
            UserMap::Submitter => format!(
                "the submitter (user map submitter: the Unix user who ran `berth submit` on the manager's host, \
                 vouched for over its unix socket; else the node's account of the berth user's name; else uid \
                 {} + the berth user's id; jobs without an owner as {fallback})",
                DEFAULT_RANGE.0
            ),
            UserMap::Range { first, count } => format!(
                "each berth user's own uid (user map range:{first}-{}: uid {first} + the berth user's id; jobs without an owner as {fallback})",
                first as u64 + count as u64 - 1
            ),
            UserMap::Passwd => format!(
                "each berth user's Unix account of the same name (user map passwd; jobs without an owner as {fallback})"
            ),
            UserMap::Fixed => format!("the fixed user {fallback} for every job (user map fixed)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_as_log_line_says_the_mode_not_just_the_default_user() {
        let submitter = root_default().describe(UserMap::default());
        assert!(submitter.starts_with("the submitter (user map submitter"), "{submitter}");
        let range = root_default().describe("range:200000-299999".parse().unwrap());
        assert!(range.starts_with("each berth user's own uid (user map range:200000-299999"), "{range}");
        assert!(range.contains("without an owner as nobody uid=65534"), "{range}");
        assert!(root_default().describe(UserMap::Passwd).contains("Unix account of the same name"));
        assert!(root_default().describe(UserMap::Fixed).starts_with("the fixed user nobody uid=65534"));
        let not_root = RunUser { switch: false, ..root_default() };
        assert!(not_root.describe(UserMap::default()).starts_with("the agent's own user nobody"));
    }

    fn root_default() -> RunUser {
        RunUser {
            name: "nobody".into(),
            uid: 65534,
            gid: 65534,
            home: "/nonexistent".into(),
            switch: true,
            groups: vec![65534],
        }
    }

    #[test]
    fn user_maps_parse_and_map() {
        assert_eq!("range:200000-299999".parse(), Ok(UserMap::Range { first: 200_000, count: 100_000 }));
        assert_eq!("passwd".parse(), Ok(UserMap::Passwd));
        assert!("range:0-10".parse::<UserMap>().is_err(), "system uids are refused");
        assert!("range:5000".parse::<UserMap>().is_err());
        assert!("ldap".parse::<UserMap>().unwrap_err().to_string().contains("range:FIRST-LAST"));

        let map = UserMap::Range { first: 200_000, count: 10 };
        let bob = root_default().for_owner(map, Some(("bob", 3)), None).unwrap();
        assert_eq!((bob.uid, bob.gid, bob.name.as_str()), (200_003, 200_003, "berth-bob"));
        assert!(root_default().for_owner(map, Some(("eve", 10)), None).unwrap_err().to_string().contains("outside"));
        assert_eq!(root_default().for_owner(UserMap::Fixed, Some(("bob", 3)), None).unwrap().uid, 65534);
        assert_eq!(root_default().for_owner(map, None, None).unwrap().uid, 65534, "no owner: the default user");
        let not_root = RunUser { switch: false, ..root_default() };
        assert_eq!(
            not_root.for_owner(map, Some(("bob", 3)), None).unwrap(),
            not_root,
            "a non-root agent cannot switch"
        );
        assert!(root_default().for_owner(UserMap::Passwd, Some(("no-such-user-here", 3)), None).is_err());
    }

    #[test]
    fn the_submitter_map_runs_jobs_as_who_submitted_them() {
        let m = UserMap::Submitter;
        assert_eq!("submitter".parse(), Ok(m));
        assert_eq!(UserMap::default(), m);
        // Vouched by the manager's host: that uid and group, its account when it has one.
        let root = root_default().for_owner(m, Some(("admin", 1)), Some(UnixId { uid: 0, gid: 0 })).unwrap();
        assert_eq!((root.uid, root.gid, root.name.as_str(), root.home.as_str()), (0, 0, "root", "/root"));
        let stranger = UnixId { uid: 4_000_000, gid: 4_000_001 };
        let s = root_default().for_owner(m, Some(("alice", 2)), Some(stranger)).unwrap();
        assert_eq!((s.uid, s.gid, s.home.as_str()), (4_000_000, 4_000_001, ""), "no account: HOME is the work dir");
        // Not vouched: the node's account of that name, never root; else the default range.
        let nobody = root_default().for_owner(m, Some(("nobody", 2)), None).unwrap();
        assert_eq!(nobody.uid, 65534);
        let not_root = root_default().for_owner(m, Some(("root", 5)), None).unwrap();
        assert_eq!((not_root.uid, not_root.name.as_str()), (200_005, "berth-root"), "a name never maps to root");
        assert_eq!(root_default().for_owner(m, Some(("no-such-user-here", 7)), None).unwrap().uid, 200_007);
        // An agent that cannot switch refuses a vouched job of another uid instead of
        // running it as itself.
        let agent = RunUser { switch: false, uid: 1000, ..root_default() };
        let e = agent.for_owner(m, Some(("bob", 3)), Some(UnixId { uid: 1001, gid: 1001 })).unwrap_err();
        assert!(matches!(e, UserError::CannotSwitch { submitter: 1001, agent: 1000 }), "{e}");
        let e = e.to_string();
        assert!(e.contains("submitted by uid 1001") && e.contains("cannot switch users"), "{e}");
        assert_eq!(agent.for_owner(m, Some(("bob", 3)), Some(UnixId { uid: 1000, gid: 1000 })).unwrap(), agent);
    }
}
