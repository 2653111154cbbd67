//! Slurm's associations (a user in an account, on a cluster) as berth has them, for the
//! read-only queries tools make of `sacctmgr` and `sshare`: every berth user has a personal
//! account named after them (a job without a project is charged to it, as sacct's `Account`
//! and `SLURM_JOB_ACCOUNT` say) and is in the account of each project they belong to, on the
//! one cluster `berth`. Admins see every user (`/v1/admin/users`), others themselves.
//!
//! A user name asked for is a berth user's, or the caller's own Unix account (tools ask for
//! `getpass.getuser()`, `root` for berth's admin over the socket), which stands for the
//! caller. Also the tables both commands print: `format=Name%width` fields, Slurm's columns
//! (`%N` right-justified, `%-N` left) or `|`-separated with `-p`/`-P`.

use berth_client::Client;
use clap::Args;

use crate::{Error, Result};

/// The cluster every association is on: `SLURM_CLUSTER_NAME` in jobs.
pub const CLUSTER: &str = "berth";

/// A user and their accounts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserAccounts {
    /// The name to print: the berth user's, or the Unix account it was asked for by.
    pub shown: String,
    /// The berth user.
    pub user: String,
    pub admin: bool,
    /// The personal account first (the default account), then the projects'.
    pub accounts: Vec<String>,
}

/// Every user the caller may see, with their accounts, and the name of the caller's own Unix
/// account when it has one.
pub async fn users(client: &Client) -> Result<Vec<UserAccounts>> {
    let me = client.whoami().await?;
    let of = |name: &str, role: &str, projects: &[String]| UserAccounts {
        shown: name.to_string(),
        user: name.to_string(),
        admin: role == "admin",
        accounts: std::iter::once(name.to_string()).chain(projects.iter().cloned()).collect(),
    };
    if me.role == "admin" {
        let all = client.users().await?;
        return Ok(all.iter().map(|u| of(&u.name, &u.role, &u.projects)).collect());
    }
    Ok(vec![of(&me.user, &me.role, &me.projects)])
}

/// The users a command asks for, with their accounts: those `wanted` names (every one the
/// caller may see when empty), or with `None` the caller alone.
pub async fn asked(client: &Client, wanted: Option<&[String]>) -> Result<Vec<UserAccounts>> {
    let me = client.whoami().await?.user;
    let all = users(client).await?;
    Ok(match wanted {
        Some(w) => select(&all, w, &me, unix_me().as_deref()),
        None => select(&all, std::slice::from_ref(&me), &me, None),
    })
}

/// The caller's own Unix account name, if this process's uid has one.
pub fn unix_me() -> Option<String> {
    nix::unistd::User::from_uid(nix::unistd::getuid()).ok().flatten().map(|u| u.name)
}

/// The users named in `wanted` (all when empty): a berth user's name, or `caller_unix` (the
/// caller's Unix account) for the caller, who is `caller`; shown by the name asked for.
pub fn select(all: &[UserAccounts], wanted: &[String], caller: &str, caller_unix: Option<&str>) -> Vec<UserAccounts> {
    if wanted.is_empty() {
        return all.to_vec();
    }
    let mut out = Vec::new();
    for w in wanted {
        let found = all
            .iter()
            .find(|u| u.user == *w)
            .or_else(|| (Some(w.as_str()) == caller_unix).then(|| all.iter().find(|u| u.user == caller)).flatten());
        if let Some(u) = found {
            out.push(UserAccounts { shown: w.clone(), ..u.clone() });
        }
    }
    out
}

/// One column: its header, its width (negative: left-justified) and what fills it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column<F> {
    pub field: F,
    pub header: &'static str,
    pub width: i32,
}

/// `Name%width,...` against `known` (name, header, default width, field), names in any case
/// and by any unambiguous prefix (`acc` for `Account`), as Slurm matches them; an unknown or
/// ambiguous one is named in the error.
pub fn columns<F: Copy>(spec: &str, known: &[(&str, &'static str, i32, F)]) -> Result<Vec<Column<F>>> {
    spec.split(',')
        .map(str::trim)
        .filter(|f| !f.is_empty())
        .map(|f| {
            let (name, width) = f.split_once('%').unwrap_or((f, ""));
            let lower = name.to_ascii_lowercase();
            let exact = known.iter().find(|k| k.0.eq_ignore_ascii_case(name));
            let prefixed: Vec<_> = known.iter().filter(|k| k.0.to_ascii_lowercase().starts_with(&lower)).collect();
            let k = match (exact, &prefixed[..]) {
                (Some(k), _) => k,
                (None, [k]) if !lower.is_empty() => *k,
                _ => return Err(Error::Usage(format!("Invalid field requested: \"{name}\""))),
            };
            let width = match width {
                "" => k.2,
                w => w.parse().map_err(|_| Error::Usage(format!("invalid field width in `{f}`: give Name%N")))?,
            };
            Ok(Column { field: k.3, header: k.1, width })
        })
        .collect()
}

/// How rows are printed: Slurm's columns, or `|`-separated (with a trailing `|`: `-p`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    Columns,
    Parsable { trailing: bool },
}

/// The table options sacctmgr and sshare share.
#[derive(Debug, Clone, Args)]
pub struct TableFlags {
    /// No header
    #[arg(short = 'n', long)]
    pub noheader: bool,
    /// `|`-separated, with a `|` at the end of each line
    #[arg(short = 'p', long)]
    pub parsable: bool,
    /// `|`-separated
    #[arg(short = 'P', long)]
    pub parsable2: bool,
}

impl TableFlags {
    pub fn layout(&self) -> Layout {
        match (self.parsable2, self.parsable) {
            (true, _) => Layout::Parsable { trailing: false },
            (false, true) => Layout::Parsable { trailing: true },
            _ => Layout::Columns,
        }
    }
}

/// The table of `rows` (each cell `value` of its column's field): a header (unless
/// `noheader`; in columns also the dashes under it), then the rows.
pub fn render<F: Copy, R>(
    columns: &[Column<F>],
    rows: &[R],
    value: impl Fn(F, &R) -> String,
    layout: Layout,
    noheader: bool,
) -> String {
    let line = |cells: Vec<String>| -> String {
        match layout {
            Layout::Parsable { trailing } => {
                let mut s = cells.join("|");
                if trailing {
                    s.push('|');
                }
                s
            }
            Layout::Columns => columns
                .iter()
                .zip(cells)
                .map(|(c, v)| {
                    let w = c.width.unsigned_abs() as usize;
                    crate::format::pad(&v, w, c.width > 0) + " "
                })
                .collect(),
        }
    };
    let mut out = String::new();
    if !noheader {
        out += &line(columns.iter().map(|c| c.header.to_string()).collect());
        out.push('\n');
        if layout == Layout::Columns {
            out += &line(columns.iter().map(|c| "-".repeat(c.width.unsigned_abs() as usize)).collect());
            out.push('\n');
        }
    }
    for r in rows {
        out += &line(columns.iter().map(|c| value(c.field, r)).collect());
        out.push('\n');
    }
    out
}

/// A user of the tests' (the admin when named `admin`) in their personal account and `projects`.
#[cfg(test)]
pub(crate) fn test_user(name: &str, projects: &[&str]) -> UserAccounts {
    UserAccounts {
        shown: name.into(),
        user: name.into(),
        admin: name == "admin",
        accounts: std::iter::once(name).chain(projects.iter().copied()).map(str::to_string).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, projects: &[&str]) -> UserAccounts {
        test_user(name, projects)
    }

    #[test]
    fn the_callers_unix_name_stands_for_the_caller() {
        let all = [user("admin", &[]), user("alice", &["vision"])];
        let got = select(&all, &["root".into()], "admin", Some("root"));
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].shown.as_str(), got[0].user.as_str()), ("root", "admin"));
        assert_eq!(select(&all, &["alice".into()], "admin", Some("root"))[0].accounts, ["alice", "vision"]);
        assert!(select(&all, &["bob".into()], "admin", Some("root")).is_empty(), "nobody of that name");
        assert_eq!(select(&all, &[], "admin", None).len(), 2);
    }

    #[test]
    fn fields_by_any_case_and_prefix_with_widths() {
        let known = [("Account", "Account", 10, 'a'), ("Admin", "Admin", 9, 'd'), ("User", "User", 10, 'u')];
        let c = columns("account%256,USER,adm%-5", &known).unwrap();
        assert_eq!(c.iter().map(|c| (c.field, c.width)).collect::<Vec<_>>(), [('a', 256), ('u', 10), ('d', -5)]);
        let e = columns("a", &known).unwrap_err().to_string();
        assert!(e.contains("Invalid field requested: \"a\""), "ambiguous: {e}");
        assert!(columns("bogus", &known).is_err());
    }

    #[test]
    fn tables_as_slurm_prints_them() {
        let cols =
            vec![Column { field: 0, header: "User", width: 6 }, Column { field: 1, header: "Account", width: -8 }];
        let rows = [["ada", "vision"]];
        let table =
            |layout, noheader| render(&cols, &rows, |f: usize, r: &[&str; 2]| r[f].to_string(), layout, noheader);
        assert_eq!(table(Layout::Columns, false), "  User Account  \n------ -------- \n   ada vision   \n");
        assert_eq!(table(Layout::Parsable { trailing: false }, true), "ada|vision\n");
        assert_eq!(table(Layout::Parsable { trailing: true }, false), "User|Account|\nada|vision|\n");
    }
}
