//! Where user commands find the manager: `BERTH_URL`, `BERTH_TOKEN` and `BERTH_CA_FILE` from
//! the environment, else the credentials file that `berth up` writes
//! (`$XDG_CONFIG_HOME/berth/credentials` or `~/.config/berth/credentials`, TOML with `url`,
//! `token` and, for a manager serving TLS, `ca_file`: the PEM file to trust it by).
//!
//! Each environment variable overrides its own field, so `BERTH_URL=... berth ps` reaches
//! another manager with the token from the file, and a CI job can set both and need no file.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

/// The manager's address, the caller's API token, and the extra certificates to trust it by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credentials {
    pub url: String,
    pub token: String,
    /// PEM certificates trusted besides the public roots (see `berth_agent::tls`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
}

/// The file as written; every field optional so that a file with only a token still combines
/// with `BERTH_URL`.
#[derive(Debug, Default, Deserialize)]
struct FileContents {
    url: Option<String>,
    token: Option<String>,
    ca_file: Option<PathBuf>,
}

const NOT_CONFIGURED: &str = "no berth manager configured: run `berth up`, or set BERTH_URL and BERTH_TOKEN";

/// The credentials file path (it may not exist yet).
pub fn path() -> anyhow::Result<PathBuf> {
    path_from(std::env::var_os("XDG_CONFIG_HOME"), std::env::var_os("HOME"))
}

fn path_from(xdg: Option<std::ffi::OsString>, home: Option<std::ffi::OsString>) -> anyhow::Result<PathBuf> {
    // The XDG spec says a relative XDG_CONFIG_HOME is invalid and must be ignored.
    let base = match (xdg.map(PathBuf::from).filter(|p| p.is_absolute()), home) {
        (Some(x), _) => x,
        (None, Some(h)) if !h.is_empty() => PathBuf::from(h).join(".config"),
        _ => bail!("cannot find the credentials file: neither XDG_CONFIG_HOME nor HOME is set"),
    };
    Ok(base.join("berth").join("credentials"))
}

/// Writes the credentials file for `url`, `token` and `ca_file` and returns its path. The directory is
/// created `0700` and the file `0600` (the token is a password); the write goes to a temporary
/// file renamed into place, so a reader never sees half a file.
#[allow(dead_code)] // called by `berth up` in daemon.rs
pub fn write(url: &str, token: &str, ca_file: Option<&Path>) -> anyhow::Result<PathBuf> {
    let p = path()?;
    write_to(&p, url, token, ca_file)?;
    Ok(p)
}

fn write_to(p: &Path, url: &str, token: &str, ca_file: Option<&Path>) -> anyhow::Result<()> {
    let dir = p.parent().context("credentials path has no directory")?;
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let creds = Credentials { url: url.to_string(), token: token.to_string(), ca_file: ca_file.map(Path::to_path_buf) };
    let body = toml::to_string(&creds).context("cannot encode credentials")?;
    let body = format!("# written by `berth up`; keep it private (it holds your API token)\n{body}");
    let tmp = dir.join(format!(".credentials.{}.tmp", std::process::id()));
    let result = (|| -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
        // `mode` only applies when the file is created; a stale temp file keeps its old mode.
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        f.write_all(body.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, p)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.with_context(|| format!("cannot write {}", p.display()))
}

/// Finds the manager for a user command.
pub fn load() -> anyhow::Result<Credentials> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let mut creds = resolve(env("BERTH_URL"), env("BERTH_TOKEN"), &path()?)?;
    if let Some(ca) = env("BERTH_CA_FILE") {
        creds.ca_file = Some(PathBuf::from(ca));
    }
    Ok(creds)
}

fn resolve(env_url: Option<String>, env_token: Option<String>, file: &Path) -> anyhow::Result<Credentials> {
    let from_file = if env_url.is_some() && env_token.is_some() {
        // Both set: the file is not needed, and a broken one must not get in the way.
        FileContents::default()
    } else {
        read_file(file)?
    };
    let url = env_url.or(from_file.url);
    let token = env_token.or(from_file.token);
    match (url, token) {
        (Some(url), Some(token)) => {
            Ok(Credentials { url: url.trim_end_matches('/').to_string(), token, ca_file: from_file.ca_file })
        }
        (None, None) => bail!(NOT_CONFIGURED),
        (Some(_), None) => bail!("BERTH_URL is set but no token is: set BERTH_TOKEN too ({NOT_CONFIGURED})"),
        (None, Some(_)) => bail!("BERTH_TOKEN is set but no manager URL is: set BERTH_URL too ({NOT_CONFIGURED})"),
    }
}

fn read_file(file: &Path) -> anyhow::Result<FileContents> {
    match std::fs::read_to_string(file) {
        Ok(s) => toml::from_str(&s).with_context(|| format!("invalid credentials file {}", file.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(FileContents::default()),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", file.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_prefers_absolute_xdg() {
        let p = path_from(Some("/x/cfg".into()), Some("/home/a".into())).unwrap();
        assert_eq!(p, PathBuf::from("/x/cfg/berth/credentials"));
        let p = path_from(Some("relative".into()), Some("/home/a".into())).unwrap();
        assert_eq!(p, PathBuf::from("/home/a/.config/berth/credentials"));
        assert!(path_from(None, None).is_err());
    }

    #[test]
    fn write_is_private_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("cfg/berth/credentials");
        write_to(&p, "http://127.0.0.1:7070", "tok1", None).unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dmode = std::fs::metadata(p.parent().unwrap()).unwrap().permissions().mode() & 0o777;
        assert_eq!(dmode, 0o700);
        // Overwriting keeps the mode and replaces the contents.
        write_to(&p, "https://h:7070/", "tok2", Some(Path::new("/etc/berth/ca.pem"))).unwrap();
        let c = resolve(None, None, &p).unwrap();
        let ca_file = Some(PathBuf::from("/etc/berth/ca.pem"));
        assert_eq!(c, Credentials { url: "https://h:7070".into(), token: "tok2".into(), ca_file });
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        // No temp file left behind.
        assert_eq!(std::fs::read_dir(p.parent().unwrap()).unwrap().count(), 1);
    }

    #[test]
    fn environment_overrides_the_file_field_by_field() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("credentials");
        write_to(&p, "http://file:7070", "filetok", None).unwrap();
        let c = resolve(Some("http://env:1".into()), None, &p).unwrap();
        assert_eq!(c, Credentials { url: "http://env:1".into(), token: "filetok".into(), ca_file: None });
        let c = resolve(Some("http://env:1".into()), Some("envtok".into()), &p).unwrap();
        assert_eq!(c.token, "envtok");
        // Both variables set: even a broken file is not read.
        std::fs::write(&p, "not toml [").unwrap();
        assert!(resolve(Some("http://e".into()), Some("t".into()), &p).is_ok());
    }

    #[test]
    fn missing_everything_says_how_to_fix_it() {
        let dir = tempfile::tempdir().unwrap();
        let e = resolve(None, None, &dir.path().join("none")).unwrap_err();
        assert_eq!(e.to_string(), NOT_CONFIGURED);
        let e = resolve(Some("http://x".into()), None, &dir.path().join("none")).unwrap_err();
        assert!(e.to_string().contains("BERTH_TOKEN"), "{e}");
    }
}
