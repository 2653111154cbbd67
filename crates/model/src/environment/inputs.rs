//! What a node's build of an environment depends on besides the job's spec (issue 40 item 2):
//! the admin's index settings, the interpreter, uv, and who may reuse the result. The node's
//! cache keys environments by [`BuildInputs::key`], so a build is reused exactly by the jobs
//! whose build would take the same inputs.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Where a node's builds take packages from: set by the node's admin (`berth agent
/// --uv-index-url`, `--uv-extra-index-url`, `--uv-find-links`, `--uv-no-index`), never by a
/// user's uv configuration. All defaults: uv's default index (PyPI).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index_url: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_index_urls: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub find_links: Vec<String>,
    #[serde(default)]
    pub no_index: bool,
}

impl IndexSettings {
    /// The `uv pip install` arguments that say the same.
    pub fn uv_args(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(u) = &self.index_url {
            out.extend(["--index-url".to_string(), u.clone()]);
        }
        for u in &self.extra_index_urls {
            out.extend(["--extra-index-url".to_string(), u.clone()]);
        }
        for f in &self.find_links {
            out.extend(["--find-links".to_string(), f.clone()]);
        }
        if self.no_index {
            out.push("--no-index".into());
        }
        out
    }

    /// The same with the credentials of every URL (`https://user:token@host`) left out: what
    /// an environment's record, readable by every user, may say.
    pub fn redacted(&self) -> IndexSettings {
        IndexSettings {
            index_url: self.index_url.as_deref().map(redact_url),
            extra_index_urls: self.extra_index_urls.iter().map(|u| redact_url(u)).collect(),
            find_links: self.find_links.iter().map(|u| redact_url(u)).collect(),
            no_index: self.no_index,
        }
    }
}

/// `https://user:token@host/x` as `https://***@host/x`; anything else as it is.
pub fn redact_url(u: &str) -> String {
    let Some((scheme, rest)) = u.split_once("://") else { return u.to_string() };
    let host_end = rest.find('/').unwrap_or(rest.len());
    match rest[..host_end].rfind('@') {
        Some(at) => format!("{scheme}://***{}", &rest[at..]),
        None => u.to_string(),
    }
}

/// The interpreter a build runs on, as the node resolved it: its real path and `sys.version`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interpreter {
    pub path: String,
    pub version: String,
}

/// Everything that can change what a node's build of an environment produces, and who may
/// reuse it: the node's cache keeps each environment under [`BuildInputs::key`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildInputs {
    /// [`EnvSpec::key`]: the Python version asked for, the kind, the contents.
    pub spec: String,
    /// `uv --version`.
    pub uv: String,
    pub interpreter: Interpreter,
    pub index: IndexSettings,
    /// A digest of what the local `find_links` directories hold (names, sizes, times): a wheel
    /// added there changes what a build picks.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub find_links_state: String,
    /// The uid whose environment it is, when nobody else may reuse it (the job's own build
    /// settings, local paths in its contents, an interpreter not everyone can run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_to: Option<u32>,
    /// The job's own `UV_*` variables, name and value (values only in the key: they
    /// may hold an index's credentials).
    #[serde(default, skip_serializing)]
    pub user_settings: Vec<(String, String)>,
}

impl BuildInputs {
    /// The environment's key on its node: the hex sha256 of every field, each length-prefixed
    /// (lists with their length first) so that no two different inputs hash the same bytes.
    pub fn key(&self) -> String {
        let mut h = Sha256::new();
        let mut part = |b: &[u8]| {
            h.update((b.len() as u64).to_le_bytes());
            h.update(b);
        };
        part(b"berth-env-v2");
        for s in [&self.spec, &self.uv, &self.interpreter.path, &self.interpreter.version] {
            part(s.as_bytes());
        }
        let i = &self.index;
        part(if i.index_url.is_some() { b"index" } else { b"default-index" });
        part(i.index_url.as_deref().unwrap_or_default().as_bytes());
        for list in [&i.extra_index_urls, &i.find_links] {
            part(&(list.len() as u64).to_le_bytes());
            for s in list {
                part(s.as_bytes());
            }
        }
        part(if i.no_index { b"no-index" } else { b"" });
        part(self.find_links_state.as_bytes());
        part(self.private_to.map(|u| format!("uid {u}")).unwrap_or_default().as_bytes());
        part(&(self.user_settings.len() as u64).to_le_bytes());
        for (k, v) in &self.user_settings {
            part(k.as_bytes());
            part(v.as_bytes());
        }
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// The hex sha256 of `data` (agents hash environments' records with it).
pub fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data).iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::environment::{EnvKind, EnvSpec, valid_key_prefix};

    fn spec(python: &str, contents: &str) -> EnvSpec {
        EnvSpec { python: python.into(), kind: EnvKind::Requirements, contents: contents.into() }
    }

    fn inputs() -> BuildInputs {
        BuildInputs {
            spec: spec("3.11", "six==1.16.0\n").key(),
            uv: "uv 0.9.0".into(),
            interpreter: Interpreter { path: "/usr/bin/python3.11".into(), version: "3.11.2 (main)".into() },
            ..BuildInputs::default()
        }
    }

    #[test]
    fn a_nodes_key_covers_the_index_the_interpreter_and_the_owner() {
        let base = inputs();
        let key = base.key();
        assert_eq!(key, inputs().key());
        assert!(valid_key_prefix(&key));
        let changed = |f: &dyn Fn(&mut BuildInputs)| {
            let mut i = inputs();
            f(&mut i);
            i.key()
        };
        let variants = [
            changed(&|i| i.spec = spec("3.11", "six==1.17.0\n").key()),
            changed(&|i| i.uv = "uv 0.9.1".into()),
            changed(&|i| i.interpreter.path = "/opt/python/bin/python3.11".into()),
            changed(&|i| i.interpreter.version = "3.11.9 (main)".into()),
            changed(&|i| i.index.index_url = Some("https://mirror/simple".into())),
            // the default index and an explicit empty one are not the same
            changed(&|i| i.index.index_url = Some(String::new())),
            changed(&|i| i.index.extra_index_urls = vec!["https://extra/simple".into()]),
            changed(&|i| i.index.find_links = vec!["/srv/wheels".into()]),
            changed(&|i| i.index.no_index = true),
            changed(&|i| i.find_links_state = "abc".into()),
            changed(&|i| i.private_to = Some(1003)),
            changed(&|i| i.private_to = Some(0)),
            changed(&|i| i.user_settings = vec![("UV_INDEX_URL".into(), "https://b/simple".into())]),
        ];
        let mut all: Vec<&String> = variants.iter().chain([&key]).collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), variants.len() + 1, "two inputs share a key");
        // each user's private environment is their own
        assert_ne!(changed(&|i| i.private_to = Some(1003)), changed(&|i| i.private_to = Some(1004)));
        // list boundaries count: one find-links entry is not two extra indexes
        let a = changed(&|i| i.index.extra_index_urls = vec!["a".into(), "b".into()]);
        let b = changed(&|i| {
            i.index.extra_index_urls = vec!["a".into()];
            i.index.find_links = vec!["b".into()];
        });
        assert_ne!(a, b);
    }

    #[test]
    fn the_record_never_carries_credentials() {
        assert_eq!(redact_url("https://u:tok@host/simple"), "https://***@host/simple");
        assert_eq!(redact_url("https://host/a@b"), "https://host/a@b");
        assert_eq!(redact_url("/srv/wheels"), "/srv/wheels");
        let mut i = inputs();
        i.user_settings = vec![("UV_INDEX_URL".into(), "https://u:secret@b/simple".into())];
        i.index.index_url = Some("https://admin:pw@mirror/simple".into());
        i.index = i.index.redacted();
        let json = serde_json::to_string(&i).unwrap();
        assert!(!json.contains("secret") && !json.contains("pw@"), "{json}");
        let args = IndexSettings { find_links: vec!["/w".into()], no_index: true, ..Default::default() }.uv_args();
        assert_eq!(args, ["--find-links", "/w", "--no-index"]);
    }
}
