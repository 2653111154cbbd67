//! What a kernel's environment is built from, and so which cached environment it may use: the
//! job's spec, the node's uv and interpreter, the admin's index settings and, for a private
//! environment, its user ([`BuildInputs::key`]).
//!
//! A shared build runs with a configuration the agent controls: no user's or system's uv
//! configuration files (`UV_NO_CONFIG`), none of the agent's own `UV_*`/`PIP_*` variables, HOME
//! a fresh directory of the build; only the admin's index settings ([`IndexSettings`]). A job
//! that brings build settings of its own (`UV_*` in its environment) gets them, and
//! its user's uv configuration, but in an environment private to its user: nobody else's
//! job reuses what those settings built.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use berth_model::environment::{BuildInputs, EnvSpec, sha256_hex};

use super::python::{self, Found};
use super::{EnvCache, EnvError};
use crate::runtime::RunUser;

/// How one kernel's environment is built, and under which key it is cached.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub key: String,
    pub inputs: BuildInputs,
    /// The interpreter the venv is made from (an absolute path).
    pub python: PathBuf,
    /// Why the environment is private to its user, when it is.
    pub private_why: Option<String>,
}

impl Plan {
    /// Whether the build takes the job's own settings (and its user's uv configuration).
    pub fn user_configured(&self) -> bool {
        !self.inputs.user_settings.is_empty()
    }
}

/// Variables uv reads that a build sets itself (they would change nothing).
const SET_BY_THE_BUILD: [&str; 5] =
    ["UV_CACHE_DIR", "UV_PYTHON_DOWNLOADS", "UV_NO_PROGRESS", "UV_NO_CONFIG", "UV_PYTHON"];

/// The job's own build settings: its `UV_*` variables (uv reads no `PIP_*` ones, which many
/// sites export from login profiles: they would make every environment private for nothing).
pub(crate) fn user_settings(env: &BTreeMap<String, String>) -> Vec<(String, String)> {
    env.iter()
        .filter(|(k, _)| k.starts_with("UV_") && !SET_BY_THE_BUILD.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Resolves the inputs of `spec`'s build for `user` with the job's `settings`.
pub(crate) async fn plan(
    cache: &EnvCache,
    spec: &EnvSpec,
    user: &RunUser,
    settings: &[(String, String)],
) -> Result<Plan, EnvError> {
    let uv = cache.uv_program();
    let uv_version = cache.pythons.uv_version(&uv).await?;
    let found: Vec<Found> = cache.pythons.find(&uv, &spec.python).await?;
    let (chosen, everyone) = python::choose(&found, user, &spec.python)?;
    let index = cache.opts.index.clone();
    let mut why = Vec::new();
    if !settings.is_empty() {
        let names: Vec<&str> = settings.iter().map(|(k, _)| k.as_str()).collect();
        why.push(format!("the job sets {}", names.join(", ")));
    }
    if let Some(line) = spec.local_reference() {
        why.push(format!("`{line}` names a local path"));
    }
    if !everyone {
        why.push(format!("{} is not runnable by every user", chosen.interpreter.path));
    }
    let inputs = BuildInputs {
        spec: spec.key(),
        uv: uv_version,
        interpreter: chosen.interpreter.clone(),
        find_links_state: find_links_state(&index.find_links),
        index,
        private_to: (!why.is_empty()).then_some(user.uid),
        user_settings: settings.to_vec(),
    };
    Ok(Plan {
        key: inputs.key(),
        python: PathBuf::from(&chosen.interpreter.path),
        private_why: (!why.is_empty()).then(|| why.join("; ")),
        inputs,
    })
}

/// A digest of what the local find-links directories hold (name, size, modification time of
/// each entry): a wheel the admin adds makes new environments, it does not change old ones'
/// keys' meaning. URLs count by name only.
fn find_links_state(links: &[String]) -> String {
    let local: Vec<&Path> = links.iter().filter(|l| !l.contains("://")).map(Path::new).collect();
    if local.is_empty() {
        return String::new();
    }
    let mut h: Vec<u8> = Vec::new();
    for dir in local {
        let mut entries: Vec<(String, u64, i64)> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let m = e.metadata().ok()?;
                Some((e.file_name().to_string_lossy().into_owned(), m.len(), m.mtime()))
            })
            .collect();
        entries.sort();
        h.extend(dir.as_os_str().as_encoded_bytes());
        h.push(0);
        for (name, len, mtime) in entries {
            h.extend(format!("{name}\0{len}\0{mtime}\0").as_bytes());
        }
    }
    sha256_hex(&h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_jobs_uv_variables_are_its_build_settings() {
        let env: BTreeMap<String, String> = [
            ("UV_INDEX_URL", "x"),
            ("UV_FIND_LINKS", "y"),
            ("PIP_FIND_LINKS", "y"),
            ("UV_CACHE_DIR", "c"),
            ("MY_UV", "z"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let names: Vec<String> = user_settings(&env).into_iter().map(|(k, _)| k).collect();
        assert_eq!(names, ["UV_FIND_LINKS", "UV_INDEX_URL"]);
    }

    #[test]
    fn a_wheel_added_to_a_local_find_links_dir_changes_the_state() {
        let dir = tempfile::tempdir().unwrap();
        let links = vec![dir.path().display().to_string(), "https://host/wheels".into()];
        let empty = find_links_state(&links);
        assert_eq!(empty, find_links_state(&links));
        std::fs::write(dir.path().join("six-1.16.0-py2.py3-none-any.whl"), b"x").unwrap();
        assert_ne!(empty, find_links_state(&links));
        assert_eq!(find_links_state(&["https://host/wheels".into()]), "");
    }
}
