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
//!
//! Contexts (several clusters, like kubectl's): the file's top-level fields are the context
//! named `default` (all a file had before contexts), `[contexts.NAME]` tables hold the others
//! with the same fields, and `current_context` names the one in use. [`load`] is the one place
//! that picks it: the context asked for (`berth --context`, `BERTH_CONTEXT`), else
//! `current_context`, else `default`; [`FileContents`] reads and edits the file (`berth context`).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::Error;

/// The manager's address, the caller's API token, and the extra certificates to trust it by.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credentials {
    pub url: String,
    /// `None` only over the socket, where the caller's Unix account identifies it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// PEM certificates trusted besides the public roots (see `berth_tls::client`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// The manager's unix socket, used instead of `url` when it exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<PathBuf>,
    /// The data dir of the berth that wrote the file (`berth up`, `berth manager`), so that
    /// another one does not take the file over silently (the CLI's `cred_guard.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
}

/// One context as written; every field optional so that a file with only a token still
/// combines with `BERTH_URL`.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
}

impl Entry {
    /// Whether it says anything (the `default` context of a file with only named ones does not).
    pub fn is_set(&self) -> bool {
        self.url.is_some() || self.token.is_some() || self.socket.is_some()
    }
}

impl From<Credentials> for Entry {
    fn from(c: Credentials) -> Entry {
        Entry { url: Some(c.url), token: c.token, ca_file: c.ca_file, socket: c.socket, data_dir: c.data_dir }
    }
}

/// The whole file: the `default` context's fields at the top (as before contexts, so older
/// files read unchanged and older berths still read the default), then the others.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct FileContents {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ca_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    socket: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    data_dir: Option<PathBuf>,
    /// The context in use; absent: `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_context: Option<String>,
    /// The named contexts besides `default`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub contexts: BTreeMap<String, Entry>,
}

/// The name of the context held in the file's top-level fields.
pub const DEFAULT_CONTEXT: &str = "default";

impl FileContents {
    /// The `default` context (the top-level fields).
    pub fn default_entry(&self) -> Entry {
        Entry {
            url: self.url.clone(),
            token: self.token.clone(),
            ca_file: self.ca_file.clone(),
            socket: self.socket.clone(),
            data_dir: self.data_dir.clone(),
        }
    }

    /// The context `name`, when the file has it.
    pub fn get(&self, name: &str) -> Option<Entry> {
        if name == DEFAULT_CONTEXT {
            Some(self.default_entry()).filter(Entry::is_set)
        } else {
            self.contexts.get(name).cloned()
        }
    }

    /// Sets (adds or replaces) the context `name`.
    pub fn set(&mut self, name: &str, e: Entry) {
        if name == DEFAULT_CONTEXT {
            (self.url, self.token, self.ca_file, self.socket, self.data_dir) =
                (e.url, e.token, e.ca_file, e.socket, e.data_dir);
        } else {
            self.contexts.insert(name.to_string(), e);
        }
    }

    /// Removes the context `name`; whether it was there.
    pub fn remove(&mut self, name: &str) -> bool {
        if name == DEFAULT_CONTEXT {
            let had = self.default_entry().is_set();
            self.set(DEFAULT_CONTEXT, Entry::default());
            had
        } else {
            self.contexts.remove(name).is_some()
        }
    }

    /// The name of the current context.
    pub fn current(&self) -> &str {
        self.current_context.as_deref().unwrap_or(DEFAULT_CONTEXT)
    }

    /// Every context's name, `default` first when the file has it.
    pub fn names(&self) -> Vec<String> {
        let default = self.default_entry().is_set().then(|| DEFAULT_CONTEXT.to_string());
        default.into_iter().chain(self.contexts.keys().cloned()).collect()
    }

    /// The context `chosen` (`--context`, `BERTH_CONTEXT`), else the current one, with its
    /// name; an unknown name is an error that lists the known ones. The `default` context
    /// may be empty unless chosen by name.
    pub fn select(&self, chosen: Option<&str>) -> Result<(String, Entry), Error> {
        let name = chosen.unwrap_or(self.current());
        if let Some(e) = self.get(name) {
            return Ok((name.to_string(), e));
        }
        if name == DEFAULT_CONTEXT && chosen.is_none() {
            return Ok((name.to_string(), Entry::default()));
        }
        Err(Error::UnknownContext { name: name.to_string(), chosen: chosen.is_some(), known: self.names() })
    }
}

/// The socket of a `berth up` run by root (its default data dir): any local user reaches it
/// without credentials, and their jobs run as them.
pub const SYSTEM_SOCKET: &str = "/var/lib/berth/berth.sock";

/// The URL requests over a unix socket carry (the host is not used).
pub const SOCKET_URL: &str = "http://localhost";

/// "No manager" with where berth looked, and how to point it at a manager elsewhere.
fn not_configured(file: &Path, system_socket: &Path) -> Error {
    Error::NotConfigured {
        looked: format!(
            "\n  looked in: the credentials file {} (none; BERTH_CREDENTIALS names another), the \
             socket {} (none)\n  a `berth up` with another data dir: export BERTH_SOCKET=<its data dir>/berth.sock",
            file.display(),
            system_socket.display()
        ),
    }
}

/// The credentials file path (it may not exist yet): `BERTH_CREDENTIALS`, else the user's.
pub fn path() -> Result<PathBuf, Error> {
    if let Some(p) = std::env::var_os("BERTH_CREDENTIALS").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    path_from(std::env::var_os("XDG_CONFIG_HOME"), std::env::var_os("HOME"))
}

fn path_from(xdg: Option<std::ffi::OsString>, home: Option<std::ffi::OsString>) -> Result<PathBuf, Error> {
    // The XDG spec says a relative XDG_CONFIG_HOME is invalid and must be ignored.
    let base = match (xdg.map(PathBuf::from).filter(|p| p.is_absolute()), home) {
        (Some(x), _) => x,
        (None, Some(h)) if !h.is_empty() => PathBuf::from(h).join(".config"),
        _ => return Err(Error::NoConfigDir),
    };
    Ok(base.join("berth").join("credentials"))
}

/// Writes `creds` as the context `name` of the credentials file (the other contexts stay as
/// they are) and returns its path.
pub fn write_context(name: &str, creds: &Credentials) -> Result<PathBuf, Error> {
    let p = path()?;
    let mut file = read_all(&p)?;
    file.set(name, creds.clone().into());
    write_all(&p, &file)?;
    Ok(p)
}

/// Writes `creds` to `p` as its `default` context, keeping the others (a file that cannot be
/// read works for nobody: it is replaced).
pub fn write_to(p: &Path, creds: &Credentials) -> Result<(), Error> {
    let mut file = read_all(p).unwrap_or_default();
    file.set(DEFAULT_CONTEXT, creds.clone().into());
    write_all(p, &file)
}

/// Writes the whole file `p`. The directory is created `0700` and the file `0600` (tokens are
/// passwords); the write goes to a temporary file renamed into place, so a reader never sees
/// half a file.
pub fn write_all(p: &Path, file: &FileContents) -> Result<(), Error> {
    let dir = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
    }
    let body = toml::to_string(file).map_err(|e| Error::internal("cannot encode credentials", e))?;
    let body = format!("# written by berth (`up`, `login`, `context`); keep it private (it holds API tokens)\n{body}");
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
    result.map_err(|e| Error::io(format!("cannot write {}", p.display()), e))
}

/// Finds the manager from the environment and the credentials file, in the context
/// `BERTH_CONTEXT` names (else the file's current one).
pub fn load() -> Result<Credentials, Error> {
    load_context(std::env::var("BERTH_CONTEXT").ok().filter(|v| !v.is_empty()).as_deref())
}

/// Finds the manager from the environment and the credentials file, in the context `context`
/// (`None`: the file's current one).
pub fn load_context(context: Option<&str>) -> Result<Credentials, Error> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let vars = Vars {
        url: env("BERTH_URL"),
        token: env("BERTH_TOKEN"),
        socket: env("BERTH_SOCKET").map(PathBuf::from),
        context: context.map(str::to_string),
    };
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
    /// `--context` or `BERTH_CONTEXT`.
    context: Option<String>,
}

/// Picks the way to the manager: `BERTH_URL` (TCP), else `BERTH_SOCKET`, else the file's
/// socket when it exists, else the file's URL, else the system socket when it exists; the
/// file's fields are those of the context chosen, else its current one.
fn resolve(vars: Vars, file: &Path, system_socket: &Path) -> Result<Credentials, Error> {
    let from_file = if vars.url.is_some() && vars.token.is_some() {
        // Both set: the file is not needed, and a broken one must not get in the way.
        Entry::default()
    } else {
        read_all(file)?.select(vars.context.as_deref())?.1
    };
    let explicit_token = vars.token.clone();
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
            // The socket the user named wins over the file, whose token is for its own manager
            // (sent here it reads as an invalid token): only an explicit BERTH_TOKEN goes along.
            return Ok(Credentials {
                url: SOCKET_URL.into(),
                token: explicit_token,
                ca_file: None,
                socket: Some(s),
                data_dir: None,
            });
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
        (None, None) => Err(not_configured(file, system_socket)),
        (Some(_), None) => Err(Error::NoToken),
        (None, Some(_)) => Err(Error::NoUrl),
    }
}

/// The credentials in `file` as written, when it holds a URL and a token.
pub fn read(file: &Path) -> Result<Option<Credentials>, Error> {
    let f = read_all(file)?.default_entry();
    Ok(f.url.zip(f.token).map(|(url, token)| Credentials {
        url,
        token: Some(token),
        ca_file: f.ca_file,
        socket: f.socket,
        data_dir: f.data_dir,
    }))
}

/// A context name: 1 to 63 letters, digits, `.`, `_`, `-`, starting with a letter or digit.
pub fn check_context_name(name: &str) -> Result<(), Error> {
    let ok = name.len() < 64
        && name.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if ok { Ok(()) } else { Err(Error::InvalidContextName(name.to_string())) }
}

/// The whole file `file`; empty when there is none.
pub fn read_all(file: &Path) -> Result<FileContents, Error> {
    match std::fs::read_to_string(file) {
        Ok(s) => {
            toml::from_str(&s).map_err(|e| Error::BadCredentials { path: file.to_path_buf(), source: Box::new(e) })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(FileContents::default()),
        Err(e) => Err(Error::io(format!("cannot read {}", file.display()), e)),
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
    fn res(url: Option<&str>, token: Option<&str>, file: &Path) -> Result<Credentials, Error> {
        let vars = Vars { url: url.map(Into::into), token: token.map(Into::into), ..Vars::default() };
        resolve(vars, file, Path::new("/nonexistent/berth.sock"))
    }

    fn http(url: &str, token: &str, ca_file: Option<PathBuf>) -> Credentials {
        Credentials { url: url.into(), token: Some(token.into()), ca_file, socket: None, data_dir: None }
    }

    fn write_to(p: &Path, url: &str, token: &str, ca_file: Option<&Path>, socket: Option<&Path>) -> Result<(), Error> {
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
        // Issue 41: the socket the user names wins over a credentials file of another manager,
        // whose token it must not carry there.
        let vars = Vars { socket: Some("/run/b.sock".into()), ..Vars::default() };
        let c = resolve(vars, &p, Path::new("/nonexistent")).unwrap();
        assert_eq!((c.socket, c.token, c.url), (Some(PathBuf::from("/run/b.sock")), None, SOCKET_URL.to_string()));
        // Nothing configured: a system berth's socket, as the caller's own Unix user.
        let c = resolve(Vars::default(), &dir.path().join("none"), &sock).unwrap();
        assert_eq!((c.socket, c.token), (Some(sock.clone()), None));
    }

    #[test]
    fn missing_everything_says_how_to_fix_it() {
        let dir = tempfile::tempdir().unwrap();
        let e = res(None, None, &dir.path().join("none")).unwrap_err().to_string();
        assert!(e.starts_with(crate::error::NOT_CONFIGURED), "{e}");
        assert!(e.contains(&format!("{}", dir.path().join("none").display())), "names the file it read: {e}");
        assert!(e.contains("/nonexistent/berth.sock") && e.contains("BERTH_SOCKET="), "{e}");
        let e = res(Some("http://x"), None, &dir.path().join("none")).unwrap_err();
        assert!(e.to_string().contains("BERTH_TOKEN"), "{e}");
    }

    #[test]
    fn a_file_from_before_contexts_is_the_default_context() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("credentials");
        // As the release before contexts wrote it.
        let old = "# written by `berth up`; keep it private (it holds your API token)\n\
                   url = \"http://127.0.0.1:7070\"\ntoken = \"tok\"\ndata_dir = \"/d\"\n";
        std::fs::write(&p, old).unwrap();
        assert_eq!(res(None, None, &p).unwrap(), http("http://127.0.0.1:7070", "tok", None));
        let f = read_all(&p).unwrap();
        assert_eq!((f.names(), f.current()), (vec!["default".to_string()], "default"));
        // Rewriting the default context (berth up) keeps the named ones and the current one.
        let mut f = f;
        f.set("lab", Entry { url: Some("https://lab:7070".into()), token: Some("labtok".into()), ..Entry::default() });
        f.current_context = Some("lab".into());
        write_all(&p, &f).unwrap();
        write_to(&p, "http://127.0.0.1:7071", "tok2", None, None).unwrap();
        let f = read_all(&p).unwrap();
        assert_eq!((f.names(), f.current()), (vec!["default".to_string(), "lab".to_string()], "lab"));
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        // An older berth reads the top-level fields and ignores the rest.
        let t: toml::Table = toml::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(t["url"].as_str(), Some("http://127.0.0.1:7071"));
        assert_eq!(t["contexts"]["lab"]["token"].as_str(), Some("labtok"));
    }

    #[test]
    fn contexts_are_chosen_by_flag_then_by_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("credentials");
        let mut f = FileContents::default();
        f.set("default", Entry { url: Some("http://d:1".into()), token: Some("dt".into()), ..Entry::default() });
        f.set("lab", Entry { url: Some("https://lab:7070".into()), token: Some("lt".into()), ..Entry::default() });
        write_all(&p, &f).unwrap();
        let pick = |context: Option<&str>, url: Option<&str>| {
            let vars = Vars { context: context.map(Into::into), url: url.map(Into::into), ..Vars::default() };
            resolve(vars, &p, Path::new("/nonexistent"))
        };
        assert_eq!(pick(None, None).unwrap(), http("http://d:1", "dt", None));
        assert_eq!(pick(Some("lab"), None).unwrap(), http("https://lab:7070", "lt", None));
        assert_eq!(pick(Some("lab"), Some("http://env:1")).unwrap(), http("http://env:1", "lt", None), "variables win");
        f.current_context = Some("lab".into());
        write_all(&p, &f).unwrap();
        assert_eq!(pick(None, None).unwrap().token.as_deref(), Some("lt"));
        assert_eq!(pick(Some("default"), None).unwrap().token.as_deref(), Some("dt"));
        let e = pick(Some("nope"), None).unwrap_err().to_string();
        assert_eq!(e, "unknown context `nope`: known contexts: default, lab");
        f.current_context = Some("gone".into());
        write_all(&p, &f).unwrap();
        let e = pick(None, None).unwrap_err().to_string();
        assert!(e.contains("`gone` (the current context") && e.contains("default, lab"), "{e}");
        let e = FileContents::default().select(Some("x")).unwrap_err().to_string();
        assert!(e.contains("there are none"), "{e}");
    }

    #[test]
    fn context_names() {
        for ok in ["lab", "a", "site-1.gpu_b", "default"] {
            assert!(check_context_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-x", "a b", "a/b", "ä", &"x".repeat(64)] {
            assert!(check_context_name(bad).is_err(), "{bad}");
        }
    }
}
