//! Code snapshots (`berth submit --code DIR`): the files of a directory, stored by content on
//! the manager's storage (unchanged files are never sent twice), and a job's fresh copy of
//! them. Here: the manifest and its checks, what a job records, and the REST bodies.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::SpecError;

/// The most files one snapshot may hold.
pub const MAX_CODE_FILES: usize = 100_000;

/// One file of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CodeFile {
    /// Relative, `/`-separated, only normal components.
    pub path: String,
    /// sha256 of the contents (hex); empty for a link.
    #[serde(default)]
    pub sha256: String,
    #[serde(default)]
    pub size: u64,
    /// Made executable (0755) in the copy; others are 0644.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub executable: bool,
    /// A symbolic link with this target (kept as written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
}

/// `POST /v1/code/snapshots`: every file of a snapshot, sorted by path.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CodeManifest {
    pub files: Vec<CodeFile>,
}

/// What the git repository the code came from said, if it was one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct GitState {
    /// The commit checked out (`git rev-parse HEAD`).
    pub commit: String,
    /// There were changes not committed (`git status --porcelain` printed something).
    pub dirty: bool,
}

/// The code a job runs in (a fresh copy of a snapshot), as its spec records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CodeSnapshot {
    /// The snapshot's id: the sha256 of its manifest (hex).
    pub id: String,
    pub files: u64,
    pub bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitState>,
}

/// `POST /v1/code/missing`: blob ids asked about, and the answer: those the server lacks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BlobList {
    pub blobs: Vec<String>,
}

/// The answer to `POST /v1/code/snapshots`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SnapshotMade {
    pub id: String,
    pub files: u64,
    pub bytes: u64,
}

/// What the manager tells an agent about a job's code: where its manifest and blobs are on
/// the storage backend (the same path on every node).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CodeCopy {
    pub manifest: String,
    pub blobs: String,
}

/// Whether `s` is a sha256 in hex (64 lowercase hex digits).
pub fn valid_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl CodeSnapshot {
    pub fn validate(&self) -> Result<(), SpecError> {
        if !valid_sha256(&self.id) {
            return Err(SpecError("code snapshot id must be a sha256 (64 lowercase hex digits)".into()));
        }
        if let Some(g) = &self.git
            && (g.commit.len() > 64 || !g.commit.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            return Err(SpecError("code git commit must be a hex object id".into()));
        }
        Ok(())
    }
}

impl CodeManifest {
    /// Paths relative and normal, unique and sorted; blobs sha256s; at most
    /// [`MAX_CODE_FILES`] files.
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.files.len() > MAX_CODE_FILES {
            return Err(SpecError(format!(
                "a code snapshot may hold at most {MAX_CODE_FILES} files: add what the job does not need to .gitignore or .berthignore"
            )));
        }
        for (i, f) in self.files.iter().enumerate() {
            let normal = !f.path.is_empty()
                && f.path.len() <= 4096
                && !f.path.contains('\0')
                && f.path.split('/').all(|c| !c.is_empty() && c != "." && c != "..");
            if !normal {
                return Err(SpecError(format!(
                    "invalid path `{}` in the code snapshot: use relative paths without `..`",
                    f.path
                )));
            }
            match &f.link {
                Some(t) if t.is_empty() || t.contains('\0') => {
                    return Err(SpecError(format!("the link `{}` in the code snapshot has a bad target", f.path)));
                }
                // A link has no contents; a hash sent with one must still be a hash, as the
                // schema says, so a malformed manifest is refused whatever its kind.
                Some(_) if !f.sha256.is_empty() && !valid_sha256(&f.sha256) => {
                    return Err(SpecError(format!(
                        "the link `{}` in the code snapshot has a bad sha256: leave it empty for a link",
                        f.path
                    )));
                }
                Some(_) => {}
                None if !valid_sha256(&f.sha256) => {
                    return Err(SpecError(format!("file `{}` in the code snapshot needs its sha256", f.path)));
                }
                None => {}
            }
            if i > 0 && self.files[i - 1].path >= f.path {
                return Err(SpecError("the code snapshot's files must be sorted by path, each once".into()));
            }
        }
        Ok(())
    }

    /// The bytes of its files.
    pub fn bytes(&self) -> u64 {
        self.files.iter().filter(|f| f.link.is_none()).map(|f| f.size).fold(0, u64::saturating_add)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str) -> CodeFile {
        CodeFile { path: path.into(), sha256: "a".repeat(64), size: 3, executable: false, link: None }
    }

    #[test]
    fn manifests_must_be_clean_and_sorted() {
        let ok = CodeManifest { files: vec![file("a/b.py"), file("c.py")] };
        assert!(ok.validate().is_ok());
        assert_eq!(ok.bytes(), 6);
        for bad in ["../x", "/etc/passwd", "a//b", "a/./b", ""] {
            let m = CodeManifest { files: vec![file(bad)] };
            assert!(m.validate().is_err(), "{bad}");
        }
        assert!(CodeManifest { files: vec![file("b"), file("a")] }.validate().is_err());
        assert!(CodeManifest { files: vec![file("a"), file("a")] }.validate().is_err());
        let mut nohash = file("x");
        nohash.sha256 = "XYZ".into();
        assert!(CodeManifest { files: vec![nohash] }.validate().is_err());
    }

    /// Regression: the API fuzzer's ST201 (stop 54) — a link whose sha256 was 64 hex digits and
    /// a `*` was recorded, though the schema says a sha256 is empty or 64 hex digits.
    #[test]
    fn a_link_with_a_malformed_sha256_is_refused() {
        let link = |sha: &str| CodeFile {
            path: "l".into(),
            sha256: sha.into(),
            size: 0,
            executable: false,
            link: Some("target".into()),
        };
        assert!(CodeManifest { files: vec![link("")] }.validate().is_ok());
        assert!(CodeManifest { files: vec![link(&"e".repeat(64))] }.validate().is_ok());
        let bad = format!("{}*", "e".repeat(64));
        let err = CodeManifest { files: vec![link(&bad)] }.validate().unwrap_err();
        assert!(err.0.contains("bad sha256"), "{}", err.0);
    }
}
