//! Where user commands find the manager: `BERTH_URL`, `BERTH_TOKEN`, `BERTH_SOCKET` and
//! `BERTH_CA_FILE` from the environment, else the credentials file that `berth up` writes
//! (`$XDG_CONFIG_HOME/berth/credentials` or `~/.config/berth/credentials`, TOML with `url`,
//! `token`, the manager's unix `socket` and, for a manager serving TLS, `ca_file`: the PEM
//! file to trust it by), else the socket of a system `berth up` ([`SYSTEM_SOCKET`]).
//!
//! On the manager's own machine the socket is preferred: the kernel tells the manager who is
//! calling, so jobs run as the Unix user who submitted them (a token, if any, still says which
//! berth user acts). Each environment variable overrides its own field, so `BERTH_URL=...
//! berth ps` reaches another manager (over TCP) with the token from the file, and a CI job can
//! set both and need no file. A `url` (or `BERTH_URL`) may name several managers,
//! comma-separated, that stand by for each other: requests follow the leader (`managers.rs`).

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

/// The manager's address, the caller's API token, and the extra certificates to trust it by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credentials {
    pub url: String,
    /// `None` only over the socket, where the caller's Unix account identifies it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// PEM certificates trusted besides the public roots (see `berth_agent::tls`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// The manager's unix socket, used instead of `url` when it exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<PathBuf>,
    /// The data dir of the berth that wrote the file (`berth up`, `berth manager`), so that
    /// another one does not take the file over silently (`cred_guard.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
}

/// The file as written; every field optional so that a file with only a token still combines
/// with `BERTH_URL`.
#[derive(Debug, Default, Deserialize)]
struct FileContents {
    url: Option<String>,
    token: Option<String>,
    ca_file: Option<PathBuf>,
    socket: Option<PathBuf>,
    data_dir: Option<PathBuf>,
}

/// The socket of a `berth up` run by root (its default data dir): any local user reaches it
/// without credentials, and their jobs run as them.
pub const SYSTEM_SOCKET: &str = "/var/lib/berth/berth.sock";

/// The URL requests over a unix socket carry (the host is not used).
pub const SOCKET_URL: &str = "http://localhost";

const NOT_CONFIGURED: &str = "no berth manager configured: run `berth up`, or set BERTH_URL and BERTH_TOKEN";

/// The credentials file path (it may not exist yet): `BERTH_CREDENTIALS`, else the user's.
pub fn path() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("BERTH_CREDENTIALS").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
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

/// Writes `creds` to the credentials file and returns its path.
pub fn write(creds: &Credentials) -> anyhow::Result<PathBuf> {
    let p = path()?;
    write_to(&p, creds)?;
    Ok(p)
}

/// Writes `creds` to `p`. The directory is created `0700` and the file `0600` (the token is a
/// password); the write goes to a temporary file renamed into place, so a reader never sees
/// half a file.
pub fn write_to(p: &Path, creds: &Credentials) -> anyhow::Result<()> {
    let dir = p.parent().context("credentials path has no directory")?;
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let body = toml::to_string(creds).context("cannot encode credentials")?;
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
    let vars =
        Vars { url: env("BERTH_URL"), token: env("BERTH_TOKEN"), socket: env("BERTH_SOCKET").map(PathBuf::from) };
    let mut creds = resolve(vars, &path()?, Path::new(SYSTEM_SOCKET))?;
    if let Some(ca) = env("BERTH_CA_FILE") {
        creds.ca_file = Some(PathBuf::from(ca));
    }
    Ok(creds)
}

/// The environment variables that say where the manager is.
#[derive(Debug, Default)]
struct Vars {
    url: Option<String>,
    token: Option<String>,
    socket: Option<PathBuf>,
}

/// Picks the way to the manager: `BERTH_URL` (TCP), else `BERTH_SOCKET`, else the file's
/// socket when it exists, else the file's URL, else the system socket when it exists.
fn resolve(vars: Vars, file: &Path, system_socket: &Path) -> anyhow::Result<Credentials> {
    let from_file = if vars.url.is_some() && vars.token.is_some() {
        // Both set: the file is not needed, and a broken one must not get in the way.
        FileContents::default()
    } else {
        read_file(file)?
    };
    let token = vars.token.or(from_file.token);
    // The URL stays what others reach the manager at (shown in messages), when known.
    let file_url = from_file.url.clone();
    let via_socket = |socket: PathBuf, token: Option<String>| Credentials {
        url: file_url.clone().unwrap_or_else(|| SOCKET_URL.into()),
        token,
        ca_file: None,
        socket: Some(socket),
        data_dir: None,
    };
    if vars.url.is_none() {
        if let Some(s) = vars.socket {
            return Ok(via_socket(s, token));
        }
        if let Some(s) = from_file.socket.filter(|s| s.exists()) {
            return Ok(via_socket(s, token));
        }
    }
    let url = vars.url.or(from_file.url);
    if url.is_none() && token.is_none() && system_socket.exists() {
        return Ok(via_socket(system_socket.to_path_buf(), None));
    }
    match (url, token) {
        (Some(url), Some(token)) => Ok(Credentials {
            url: url.trim_end_matches('/').to_string(),
            token: Some(token),
            ca_file: from_file.ca_file,
            socket: None,
            data_dir: None,
        }),
        (None, None) => bail!(NOT_CONFIGURED),
        (Some(_), None) => bail!("BERTH_URL is set but no token is: set BERTH_TOKEN too ({NOT_CONFIGURED})"),
        (None, Some(_)) => bail!("BERTH_TOKEN is set but no manager URL is: set BERTH_URL too ({NOT_CONFIGURED})"),
    }
}

/// The credentials in `file` as written, when it holds a URL and a token.
pub fn read(file: &Path) -> anyhow::Result<Option<Credentials>> {
    let f = read_file(file)?;
    Ok(f.url.zip(f.token).map(|(url, token)| Credentials {
        url,
        token: Some(token),
        ca_file: f.ca_file,
        socket: f.socket,
        data_dir: f.data_dir,
    }))
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

    /// `resolve` with these variables and no system socket.
    fn res(url: Option<&str>, token: Option<&str>, file: &Path) -> anyhow::Result<Credentials> {
        let vars = Vars { url: url.map(Into::into), token: token.map(Into::into), socket: None };
        resolve(vars, file, Path::new("/nonexistent/berth.sock"))
    }

    fn http(url: &str, token: &str, ca_file: Option<PathBuf>) -> Credentials {
        Credentials { url: url.into(), token: Some(token.into()), ca_file, socket: None, data_dir: None }
    }

    fn write_to(p: &Path, url: &str, token: &str, ca_file: Option<&Path>, socket: Option<&Path>) -> anyhow::Result<()> {
        let c = Credentials {
            url: url.into(),
            token: Some(token.into()),
            ca_file: ca_file.map(Path::to_path_buf),
            socket: socket.map(Path::to_path_buf),
            data_dir: None,
        };
        super::write_to(p, &c)
    }

    #[test]
    fn write_is_private_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("cfg/berth/credentials");
        write_to(&p, "http://127.0.0.1:7070", "tok1", None, None).unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dmode = std::fs::metadata(p.parent().unwrap()).unwrap().permissions().mode() & 0o777;
        assert_eq!(dmode, 0o700);
        // Overwriting keeps the mode and replaces the contents.
        write_to(&p, "https://h:7070/", "tok2", Some(Path::new("/etc/berth/ca.pem")), None).unwrap();
        let c = res(None, None, &p).unwrap();
        assert_eq!(c, http("https://h:7070", "tok2", Some(PathBuf::from("/etc/berth/ca.pem"))));
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        // No temp file left behind.
        assert_eq!(std::fs::read_dir(p.parent().unwrap()).unwrap().count(), 1);
    }

    #[test]
    fn environment_overrides_the_file_field_by_field() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("credentials");
        write_to(&p, "http://file:7070", "filetok", None, None).unwrap();
        let c = res(Some("http://env:1"), None, &p).unwrap();
        assert_eq!(c, http("http://env:1", "filetok", None));
        let c = res(Some("http://env:1"), Some("envtok"), &p).unwrap();
        assert_eq!(c.token.as_deref(), Some("envtok"));
        // Both variables set: even a broken file is not read.
        std::fs::write(&p, "not toml [").unwrap();
        assert!(res(Some("http://e"), Some("t"), &p).is_ok());
    }

    #[test]
    fn the_managers_socket_is_preferred_on_its_machine() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("credentials");
        let sock = dir.path().join("berth.sock");
        write_to(&p, "http://127.0.0.1:7070", "tok", None, Some(&sock)).unwrap();
        assert_eq!(res(None, None, &p).unwrap().socket, None, "no socket file: the URL");
        std::fs::write(&sock, "").unwrap();
        let c = res(None, None, &p).unwrap();
        assert_eq!((c.socket.as_deref(), c.token.as_deref()), (Some(sock.as_path()), Some("tok")));
        assert_eq!(res(Some("http://other:1"), None, &p).unwrap().socket, None, "BERTH_URL means TCP");
        let vars = Vars { socket: Some("/run/b.sock".into()), ..Vars::default() };
        let c = resolve(vars, &dir.path().join("none"), Path::new("/nonexistent")).unwrap();
        assert_eq!((c.socket, c.token), (Some(PathBuf::from("/run/b.sock")), None), "BERTH_SOCKET needs no token");
        // Nothing configured: a system berth's socket, as the caller's own Unix user.
        let c = resolve(Vars::default(), &dir.path().join("none"), &sock).unwrap();
        assert_eq!((c.socket, c.token), (Some(sock.clone()), None));
    }

    #[test]
    fn missing_everything_says_how_to_fix_it() {
        let dir = tempfile::tempdir().unwrap();
        let e = res(None, None, &dir.path().join("none")).unwrap_err();
        assert_eq!(e.to_string(), NOT_CONFIGURED);
        let e = res(Some("http://x"), None, &dir.path().join("none")).unwrap_err();
        assert!(e.to_string().contains("BERTH_TOKEN"), "{e}");
    }
}
