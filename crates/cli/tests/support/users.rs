//! Throwaway Unix accounts for tests that run berth as another local user (root only).

use std::path::Path;
use std::process::{Command, Output, Stdio};

use super::{BIN, text};

/// A throwaway Unix account (and its extra group, if any) for the life of the value.
pub struct UnixUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// A supplementary group made for it: name and gid.
    pub extra: Option<(String, u32)>,
}

impl UnixUser {
    pub fn create(tag: &str) -> UnixUser {
        Self::create_in(tag, false)
    }

    /// With `extra_group`, also a group of its own that it is a supplementary member of.
    pub fn create_in(tag: &str, extra_group: bool) -> UnixUser {
        let name = format!("bt{}{tag}", std::process::id() % 100_000);
        let group = format!("{name}g");
        let mut add = Command::new("useradd");
        add.args(["--no-create-home", "--shell", "/bin/sh"]);
        if extra_group {
            assert!(Command::new("groupadd").arg(&group).status().unwrap().success(), "groupadd {group}");
            add.args(["--groups", &group]);
        }
        let ok = add.arg(&name).status().unwrap();
        assert!(ok.success(), "useradd {name}");
        let id = |flag: &str| -> u32 {
            let o = Command::new("id").args([flag, &name]).output().unwrap();
            text(&o.stdout).trim().parse().unwrap()
        };
        let (uid, gid) = (id("-u"), id("-g"));
        let extra = extra_group.then(|| {
            let o = Command::new("getent").args(["group", &group]).output().unwrap();
            let gid = text(&o.stdout).split(':').nth(2).unwrap().trim().parse().unwrap();
            (group, gid)
        });
        UnixUser { name, uid, gid, extra }
    }

    /// `berth <args>` as this user from `dir`, with no credentials: the system's way in is
    /// the socket (`BERTH_SOCKET`, where a system berth would be found by default).
    pub fn berth(&self, socket: &Path, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut c = self.command(dir, args);
        c.env("BERTH_SOCKET", socket);
        for (k, v) in env {
            c.env(k, v);
        }
        c.stdin(Stdio::null()).output().unwrap()
    }

    /// `berth <args>` as this user in `dir`, with HOME `dir` and a clean environment.
    pub fn command(&self, dir: &Path, args: &[&str]) -> Command {
        let mut c = Command::new("setpriv");
        c.args(["--reuid", &self.uid.to_string(), "--regid", &self.gid.to_string(), "--init-groups", "--"]);
        c.arg(BIN).args(args).current_dir(dir).env_clear();
        c.env("PATH", "/usr/local/bin:/usr/bin:/bin").env("HOME", dir).env("USER", &self.name);
        c
    }
}

impl Drop for UnixUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.name).status();
        if let Some((group, _)) = &self.extra {
            let _ = Command::new("groupdel").arg(group).status();
        }
    }
}
