//! Which store a manager uses: [`StoreUrl`] (`sqlite:PATH` or `postgres://USER@HOST/DB`), read
//! from a command line, a config file or a private file, and [`open`] for either.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::{PgStore, Result, SqliteStore, Store, StoreError};

/// A store to open.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreUrl {
    Sqlite(PathBuf),
    /// The URL as given (it may hold a password: see [`StoreUrl::has_password`]).
    Postgres(String),
}

impl StoreUrl {
    /// Parses `sqlite:PATH` (or `sqlite://PATH`) and `postgres://...` (or `postgresql://...`).
    pub fn parse(s: &str) -> Result<StoreUrl> {
        let s = s.trim();
        if let Some(path) = s.strip_prefix("sqlite://").or_else(|| s.strip_prefix("sqlite:")) {
            if path.is_empty() {
                return Err(StoreError::BadUrl("the store URL sqlite: names no file: write sqlite:PATH".into()));
            }
            return Ok(StoreUrl::Sqlite(PathBuf::from(path)));
        }
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            return Ok(StoreUrl::Postgres(s.to_string()));
        }
        let shown = StoreUrl::Postgres(s.to_string()).to_string();
        Err(StoreError::BadUrl(format!(
            "unknown store URL `{shown}`: write sqlite:PATH or postgres://USER@HOST[:PORT]/DATABASE"
        )))
    }

    /// Reads the URL from `path`, which must be private to its owner (mode 0600 or stricter):
    /// a URL may hold a password, which must not sit on a command line nor in a readable file.
    pub fn from_file(path: &Path) -> Result<StoreUrl> {
        use std::os::unix::fs::PermissionsExt;
        let bad = |why: String| StoreError::BadUrl(format!("store file {}: {why}", path.display()));
        let meta = std::fs::metadata(path).map_err(|e| bad(e.to_string()))?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(bad(format!("mode {mode:o} lets other users read it: chmod 600 {}", path.display())));
        }
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        StoreUrl::parse(&text).map_err(|e| bad(e.to_string()))
    }

    /// Whether the URL carries a password (then it belongs in a store file, not on a command line).
    pub fn has_password(&self) -> bool {
        match self {
            StoreUrl::Sqlite(_) => false,
            StoreUrl::Postgres(u) => userinfo(u).is_some_and(|i| i.contains(':')),
        }
    }
}

/// The `user[:password]` part of a URL, if any.
fn userinfo(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?']).next()?;
    authority.rsplit_once('@').map(|(info, _)| info)
}

/// Shown without its password.
impl std::fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreUrl::Sqlite(p) => write!(f, "sqlite:{}", p.display()),
            StoreUrl::Postgres(u) => match userinfo(u).and_then(|i| i.split_once(':')) {
                Some((user, _)) => {
                    let (scheme, rest) = u.split_once("://").expect("userinfo found a scheme");
                    let after = rest.rsplit_once('@').map_or(rest, |(_, a)| a);
                    write!(f, "{scheme}://{user}:***@{after}")
                }
                None => f.write_str(u),
            },
        }
    }
}

impl std::fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StoreUrl({self})")
    }
}

/// Opens (creating or migrating as needed) the store at `url`.
pub async fn open(url: &StoreUrl) -> Result<Arc<dyn Store>> {
    Ok(match url {
        StoreUrl::Sqlite(p) => Arc::new(SqliteStore::open(p).await?),
        StoreUrl::Postgres(u) => Arc::new(PgStore::open(u).await?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_kinds_and_refuses_others() {
        assert_eq!(
            StoreUrl::parse("sqlite:/var/lib/berth/berth.db").unwrap(),
            StoreUrl::Sqlite("/var/lib/berth/berth.db".into())
        );
        assert_eq!(StoreUrl::parse("sqlite://rel.db").unwrap(), StoreUrl::Sqlite("rel.db".into()));
        assert!(matches!(StoreUrl::parse("postgresql://u@h/db").unwrap(), StoreUrl::Postgres(_)));
        let e = StoreUrl::parse("mysql://u:secret@h/db").unwrap_err().to_string();
        assert!(e.contains("write sqlite:PATH or postgres://"), "{e}");
        assert!(!e.contains("secret"), "{e}");
        assert!(StoreUrl::parse("sqlite:").is_err());
    }

    #[test]
    fn a_password_is_noticed_and_never_shown() {
        let u = StoreUrl::parse("postgres://berth:s3cret@db.example:5433/berth").unwrap();
        assert!(u.has_password());
        assert_eq!(u.to_string(), "postgres://berth:***@db.example:5433/berth");
        assert!(!format!("{u:?}").contains("s3cret"));
        assert!(!StoreUrl::parse("postgres://berth@db/berth").unwrap().has_password());
    }

    #[test]
    fn a_store_file_must_be_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("store");
        std::fs::write(&f, "postgres://berth:pw@db/berth\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = StoreUrl::from_file(&f).unwrap_err().to_string();
        assert!(e.contains("chmod 600"), "{e}");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(StoreUrl::from_file(&f).unwrap().has_password());
    }
}
