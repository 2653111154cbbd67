//! Python environments of process jobs (docs/environments.md): what a job asks for (`[environment]`
//! in a job file, `--python` and `--requirements` flags), the key its nodes cache the built
//! environment under, and the setup steps a kernel goes through before it runs (PREPARING).
//!
//! The key is computed here, and only here, so the CLI, the manager and every agent agree on
//! which specs share an environment.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use utoipa::ToSchema;

mod inputs;

pub use inputs::{BuildInputs, IndexSettings, Interpreter, redact_url, sha256_hex};

/// An environment spec that cannot be built, with the fix (`JobSpec::validate` passes it on).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EnvError(pub String);

/// The most bytes of a requirements or pyproject file a job may carry: a long pinned lock file
/// is tens of KiB; anything larger is not a list of requirements.
pub const MAX_ENV_FILE_BYTES: usize = 256 * 1024;

/// Which kind of file lists the packages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum EnvKind {
    /// A pip requirements file (`requirements.txt`, `uv pip compile` output).
    Requirements,
    /// A `pyproject.toml`; its `[project] dependencies` are installed.
    Pyproject,
}

impl EnvKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EnvKind::Requirements => "requirements",
            EnvKind::Pyproject => "pyproject",
        }
    }

    /// The file name the build gives the contents (uv tells the two kinds apart by it).
    pub fn file_name(self) -> &'static str {
        match self {
            EnvKind::Requirements => "requirements.txt",
            EnvKind::Pyproject => "pyproject.toml",
        }
    }
}

/// A job's Python environment: built with uv on each node that runs it, once per node for all
/// jobs with the same inputs (see [`EnvSpec::key`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct EnvSpec {
    /// The Python version (`3.11`, `3.12.4`); the node must have it installed.
    pub python: String,
    pub kind: EnvKind,
    /// The file's contents, read by the CLI at submit (the nodes need not see the file).
    pub contents: String,
}

impl EnvSpec {
    /// The environment's key: the hex sha256 of the Python version, the kind and the contents,
    /// each length-prefixed so that no two different specs hash the same bytes.
    pub fn key(&self) -> String {
        let mut h = Sha256::new();
        h.update(b"berth-env-v1\0");
        for part in [self.python.as_bytes(), self.kind.as_str().as_bytes(), self.contents.as_bytes()] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part);
        }
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Checks the version's syntax, the contents' size and that the contents are text.
    pub fn validate(&self) -> Result<(), EnvError> {
        if !valid_python_version(&self.python) {
            return Err(EnvError(format!(
                "invalid python version `{}`: use MAJOR.MINOR or MAJOR.MINOR.PATCH, e.g. 3.11",
                self.python
            )));
        }
        let what = self.kind.file_name();
        if self.contents.len() > MAX_ENV_FILE_BYTES {
            return Err(EnvError(format!(
                "the environment's {what} is {} KiB, over the limit of {} KiB: list only the direct \
                 requirements, or bake large environments into an image",
                self.contents.len().div_ceil(1024),
                MAX_ENV_FILE_BYTES / 1024
            )));
        }
        if self.contents.contains('\0') {
            return Err(EnvError(format!("the environment's {what} holds a NUL byte: give a text file")));
        }
        Ok(())
    }
}

impl EnvSpec {
    /// The first line of the contents that names something on the node's disk outside the
    /// contents (`-r`/`-c` files, local `--find-links`, `file:` URLs, `pkg @ /path`, editable or
    /// path sources), if any: what such a line reads is not in the key and may change, or be
    /// readable only by the builder, so the environment is private to its user.
    pub fn local_reference(&self) -> Option<&str> {
        self.contents.lines().map(str::trim).find(|l| refers_to_local(l))
    }
}

/// Options of a requirements file whose value is a file or a directory (long forms first).
const FILE_OPTIONS: [&str; 9] =
    ["--requirement", "--constraint", "--override", "--editable", "--find-links", "-r", "-c", "-e", "-f"];

/// Whether one line of a requirements or pyproject file names a local file or directory.
fn refers_to_local(line: &str) -> bool {
    let line = line.split(" #").next().unwrap_or_default().trim();
    if line.is_empty() || line.starts_with('#') {
        return false;
    }
    let is_url = |w: &str| w.starts_with("http://") || w.starts_with("https://");
    if line.contains("file:") || line.starts_with(['/', '.', '~']) {
        return true;
    }
    for o in FILE_OPTIONS {
        if let Some(rest) = line.strip_prefix(o) {
            let separated = rest.starts_with([' ', '\t', '=']);
            if separated || (o.len() == 2 && !rest.is_empty()) {
                return !is_url(rest.trim_start_matches([' ', '\t', '=']));
            }
        }
    }
    line.split_once(" @ ").is_some_and(|(_, at)| !is_url(at.trim())) || line.replace(' ', "").contains("path=")
}

/// `3`, `3.11` or `3.11.4`: digits separated by dots, at most three parts.
pub fn valid_python_version(v: &str) -> bool {
    let parts: Vec<&str> = v.split('.').collect();
    !v.is_empty()
        && parts.len() <= 3
        && parts.iter().all(|p| !p.is_empty() && p.len() <= 4 && p.chars().all(|c| c.is_ascii_digit()))
}

/// Whether `s` is an environment key as [`EnvSpec::key`] makes them (64 lowercase hex
/// digits), or a prefix of one of at least 4 (`berth env rm 3fa2`).
pub fn valid_key_prefix(s: &str) -> bool {
    (4..=64).contains(&s.len()) && s.chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
}

/// A step of a kernel's setup before it runs (PREPARING).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SetupStep {
    /// Building (or waiting for another kernel's build of) the job's Python environment.
    Environment,
    /// Copying the job's datasets from their origin into the node's cache (bytes).
    Datasets,
}

impl SetupStep {
    /// How `berth ps` names it.
    pub fn label(self) -> &'static str {
        match self {
            SetupStep::Environment => "env build",
            SetupStep::Datasets => "prefetch",
        }
    }
}

/// How far a kernel's setup is: `done` of `total` units of `step` (for an environment, its
/// phases: venv, resolve, download, install; for datasets, bytes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SetupProgress {
    pub step: SetupStep,
    pub done: u64,
    pub total: u64,
    /// What it is doing, for people (`resolved 5 packages`); nothing reads it back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// When the kernel's setup began.
    pub since: jiff::Timestamp,
}

impl SetupProgress {
    /// `env build 2/4`, `prefetch 1.5 GiB/3.0 GiB`.
    pub fn short(&self) -> String {
        match self.step {
            SetupStep::Environment => format!("{} {}/{}", self.step.label(), self.done, self.total),
            SetupStep::Datasets => {
                format!("{} {}/{}", self.step.label(), crate::format_bytes(self.done), crate::format_bytes(self.total))
            }
        }
    }
}

/// One environment in a node's cache, as its agent reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct EnvEntry {
    /// The full key ([`EnvSpec::key`]).
    pub key: String,
    pub python: String,
    pub kind: EnvKind,
    /// Bytes on disk.
    pub size_bytes: u64,
    /// When a kernel last started with it (or it was built).
    pub last_used: jiff::Timestamp,
    /// Live kernels on the node that use it.
    pub in_use: u32,
}

/// `GET /v1/envs`: each node's cached environments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NodeEnvs {
    pub node: String,
    pub envs: Vec<EnvEntry>,
}

/// `DELETE /v1/envs/{key}`: the environment removed and the nodes told to delete it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct EnvRemoved {
    pub key: String,
    pub nodes: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const PINNED: &str = "5c0b730af7d75db9188a2fec21bdb879c7f518b91c04a324daf2f0b6165b663d";

    fn spec(python: &str, contents: &str) -> EnvSpec {
        EnvSpec { python: python.into(), kind: EnvKind::Requirements, contents: contents.into() }
    }

    #[test]
    fn the_key_depends_on_every_input_and_only_on_them() {
        let a = spec("3.11", "six==1.16.0\n");
        assert_eq!(a.key(), spec("3.11", "six==1.16.0\n").key());
        assert_eq!(a.key().len(), 64);
        assert!(valid_key_prefix(&a.key()));
        assert_ne!(a.key(), spec("3.12", "six==1.16.0\n").key());
        assert_ne!(a.key(), spec("3.11", "six==1.17.0\n").key());
        assert_ne!(a.key(), EnvSpec { kind: EnvKind::Pyproject, ..a.clone() }.key());
        // length prefixes: moving a byte between fields changes the key
        assert_ne!(spec("3.1", "1x").key(), spec("3.11", "x").key());
        // fixed: nodes of different versions must agree on it
        assert_eq!(spec("3.11", "six==1.16.0\n").key(), PINNED);
    }

    #[test]
    fn contents_that_name_local_files_are_found() {
        for local in [
            "-c /home/b/constraints.txt",
            "--constraint=/home/b/c.txt",
            "-r other.txt",
            "-rother.txt",
            "--find-links /home/b/wheels",
            "-f ./wheels",
            "-e .",
            "pkg @ file:///home/b/pkg",
            "pkg @ /home/b/pkg.whl",
            "./pkg",
            "/abs/pkg.whl",
            "mypkg = { path = \"../mypkg\" }",
        ] {
            assert!(spec("3.11", &format!("six==1.16.0\n{local}\n")).local_reference().is_some(), "{local}");
        }
        for remote in [
            "six==1.16.0",
            "# -r other.txt",
            "--index-url https://mirror/simple",
            "--find-links https://host/wheels",
            "-f https://host/wheels",
            "pkg @ https://host/pkg-1.0.tar.gz",
            "requests[socks]>=2 ; python_version >= '3.8'",
            "--config-settings x=y",
        ] {
            assert_eq!(spec("3.11", remote).local_reference(), None, "{remote}");
        }
    }

    #[test]
    fn versions_and_sizes_are_checked() {
        for ok in ["3", "3.11", "3.11.4"] {
            assert!(spec(ok, "").validate().is_ok(), "{ok}");
        }
        for bad in ["", "3.", "python3.11", "3.11.4.1", "3,11", "-3", "3.11 "] {
            let e = spec(bad, "").validate().unwrap_err().to_string();
            assert!(e.starts_with("invalid python version"), "{bad}: {e}");
        }
        let big = "x".repeat(MAX_ENV_FILE_BYTES + 1);
        let e = spec("3.11", &big).validate().unwrap_err().to_string();
        assert!(e.contains("over the limit of 256 KiB"), "{e}");
        assert!(spec("3.11", &"x".repeat(MAX_ENV_FILE_BYTES)).validate().is_ok());
        assert!(spec("3.11", "a\0b").validate().is_err());
    }

    #[test]
    fn progress_reads_short() {
        let p = SetupProgress {
            step: SetupStep::Environment,
            done: 2,
            total: 4,
            detail: None,
            since: jiff::Timestamp::UNIX_EPOCH,
        };
        assert_eq!(p.short(), "env build 2/4");
        let s = serde_json::to_string(&p).unwrap();
        assert!(s.contains(r#""step":"environment""#), "{s}");
    }
}
