//! Data folders (docs/folders.md): named directories on the manager's storage backend that users
//! upload to, share with projects and mount into jobs (`--folder NAME[:/data/NAME][:ro]`).
//!
//! Here: names and references, the spec's [`FolderMount`] with its parser and checks, what the
//! manager sends an agent to bind ([`FolderBind`]), and the REST bodies of `/v1/folders`.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::SpecError;

/// Where a folder is mounted when the job names no path: `/data/NAME`.
pub const DEFAULT_MOUNT_BASE: &str = "/data";

/// The most folders one job may mount.
pub const MAX_FOLDER_MOUNTS: usize = 32;

/// Whether `s` is a valid folder name: 1-64 letters, digits, `-`, `_` or `.`, not starting
/// with `.` (so never `.` or `..`, and never a hidden directory).
pub fn valid_folder_name(s: &str) -> bool {
    crate::valid_name(s) && !s.starts_with('.')
}

/// The error for a bad folder name, saying what is allowed.
pub fn folder_name_error(s: &str) -> SpecError {
    SpecError(format!(
        "invalid folder name `{s}`: use 1-64 letters, digits, `-`, `_` or `.`, not starting with `.` (no `/`)"
    ))
}

/// A reference to a folder as users write it: `NAME` (their own, or one a project of theirs
/// owns or was given) or `PROJECT/NAME` (the folder `NAME` of project `PROJECT`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FolderRef {
    pub project: Option<String>,
    pub name: String,
}

impl std::str::FromStr for FolderRef {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<FolderRef, SpecError> {
        let (project, name) = match s.split_once('/') {
            Some((p, n)) => {
                if !crate::valid_name(p) || p.starts_with('.') {
                    return Err(SpecError(format!(
                        "invalid folder reference `{s}`: use NAME or PROJECT/NAME with a valid project name"
                    )));
                }
                (Some(p.to_string()), n)
            }
            None => (None, s),
        };
        if !valid_folder_name(name) {
            return Err(folder_name_error(name));
        }
        Ok(FolderRef { project, name: name.to_string() })
    }
}

impl std::fmt::Display for FolderRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.project {
            Some(p) => write!(f, "{p}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// A folder a job mounts (`--folder NAME[:PATH][:ro|:rw]`, `folders = [...]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FolderMount {
    /// `NAME` or `PROJECT/NAME`.
    pub folder: String,
    /// Absolute path in the job; `None`: `/data/NAME`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Mounted read-only (also forced by a read-only share).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
    /// The folder's id, set by the manager when it accepts the job (what a client sends is
    /// replaced): the job keeps its folder even if another one takes the name later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<i64>,
}

impl std::str::FromStr for FolderMount {
    type Err = SpecError;

    /// `NAME`, `NAME:ro`, `NAME:/path`, `NAME:/path:ro` (or `:rw`); NAME may be `PROJECT/NAME`.
    fn from_str(s: &str) -> Result<FolderMount, SpecError> {
        let bad = || {
            SpecError(format!(
                "invalid folder mount `{s}`: use NAME[:/PATH][:ro|:rw], e.g. imagenet, imagenet:ro or imagenet:/data/in:ro"
            ))
        };
        let parts: Vec<&str> = s.split(':').collect();
        let (folder, path, mode) = match parts.as_slice() {
            [f] => (*f, None, None),
            [f, m @ ("ro" | "rw")] => (*f, None, Some(*m)),
            [f, p] => (*f, Some(*p), None),
            [f, p, m @ ("ro" | "rw")] => (*f, Some(*p), Some(*m)),
            _ => return Err(bad()),
        };
        let m = FolderMount {
            folder: folder.to_string(),
            path: path.map(str::to_string),
            read_only: mode == Some("ro"),
            id: None,
        };
        m.validate()?;
        Ok(m)
    }
}

impl FolderMount {
    /// The folder reference, parsed.
    pub fn reference(&self) -> Result<FolderRef, SpecError> {
        self.folder.parse()
    }

    /// Where the folder appears in the job.
    pub fn target(&self) -> String {
        match &self.path {
            Some(p) => p.clone(),
            None => {
                let name = self.folder.rsplit('/').next().unwrap_or(&self.folder);
                format!("{DEFAULT_MOUNT_BASE}/{name}")
            }
        }
    }

    /// The reference and the path are well formed: the path absolute and normal (no `.`,
    /// `..`, empty components or `,`), not `/`.
    pub fn validate(&self) -> Result<(), SpecError> {
        self.reference()?;
        let t = self.target();
        let normal = t.starts_with('/')
            && t.len() > 1
            && t.len() <= 4096
            && !t.ends_with('/')
            && t[1..].split('/').all(|c| !c.is_empty() && c != "." && c != "..")
            && !t.contains(['\0', ',', ':']);
        if !normal {
            return Err(SpecError(format!(
                "folder mount path `{t}` must be an absolute path without `.`, `..`, `,` or `:` components, \
                 and not `/`: e.g. /data/{}",
                self.folder.rsplit('/').next().unwrap_or("NAME")
            )));
        }
        Ok(())
    }

    /// Process kernels mount folders in the node's own file tree (in a private mount
    /// namespace): only under `/data` or `/mnt`, so that a folder can never stand in for
    /// system files (`/etc`, `/usr`) that programs running as root would trust.
    pub fn process_target_allowed(&self) -> bool {
        let t = self.target();
        ["/data/", "/mnt/"].iter().any(|b| t.starts_with(b))
    }
}

/// What the manager tells an agent to bind into a kernel: the folder's directory on the
/// storage backend (the same path on every node), where and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FolderBind {
    /// The folder's reference as the job named it (for messages).
    pub name: String,
    /// The folder's directory on the node (`<folder root>/<id>`).
    pub source: String,
    /// Where it appears in the kernel.
    pub target: String,
    pub read_only: bool,
}

/// How a user may use a folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum FolderAccess {
    /// The creator of a personal folder, or an admin: everything.
    Owner,
    /// Read and write (a project folder's members, a read-write share).
    ReadWrite,
    /// Read only (a read-only share): mounts are read-only, uploads refused.
    ReadOnly,
}

/// `POST /v1/folders`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CreateFolder {
    pub name: String,
    /// The project the folder belongs to (its members may use it); `None`: the caller's own.
    #[serde(default)]
    pub project: Option<String>,
    /// The most bytes the folder may hold; `None`: no limit.
    #[serde(default)]
    pub quota_bytes: Option<u64>,
}

/// `POST /v1/folders/{name}/shares`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ShareFolder {
    pub project: String,
    #[serde(default)]
    pub read_only: bool,
}

/// One project a folder is shared with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FolderShareView {
    pub project: String,
    pub read_only: bool,
}

/// A folder as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FolderView {
    pub id: i64,
    pub name: String,
    /// The user who created it.
    pub owner: String,
    /// The project it belongs to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_bytes: Option<u64>,
    #[serde(default)]
    pub shares: Vec<FolderShareView>,
    /// What the caller may do with it.
    pub access: FolderAccess,
    pub created_at: jiff::Timestamp,
    /// Bytes and files in it (only when asked for, `?usage=true`: it walks the folder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<u64>,
    /// Whether the filesystem holds jobs' writes to the quota too (btrfs qgroups); otherwise
    /// the quota limits uploads only.
    #[serde(default)]
    pub quota_holds_jobs: bool,
}

/// Which folder a request means: `?project=P` picks project P's folder of that name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct FolderQuery {
    #[serde(default)]
    pub project: Option<String>,
}

/// `GET /v1/folders`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct FolderListQuery {
    /// Add each folder's use (walks every folder: slower).
    #[serde(default)]
    pub usage: bool,
    /// Admins: every folder, not only those they may use.
    #[serde(default)]
    pub all: bool,
}

/// What kind of entry a folder listing shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum EntryKind {
    File,
    Dir,
    /// A symbolic link (made by a job): listed, never followed, never downloaded.
    Symlink,
    /// A FIFO, socket or device (made by a job): listed, never opened, never downloaded.
    Other,
}

/// One entry of a folder listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FileEntry {
    /// Relative to the folder, `/`-separated.
    pub path: String,
    pub kind: EntryKind,
    pub size: u64,
    /// Seconds since the epoch.
    pub mtime: i64,
    /// sha256 of a file's contents, hex (only with `?sha256=true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// `GET /v1/folders/{name}/list`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListFilesQuery {
    #[serde(default)]
    pub project: Option<String>,
    /// A directory or file in the folder; empty: the whole folder.
    #[serde(default)]
    pub path: String,
    /// Add each file's sha256 (reads every file).
    #[serde(default)]
    pub sha256: bool,
}

/// `PUT /v1/folders/{name}/files/{path}`: a piece of an upload.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct UploadQuery {
    #[serde(default)]
    pub project: Option<String>,
    /// Where this piece starts; must be what the server has of the file so far.
    #[serde(default)]
    pub offset: u64,
    /// The whole file's sha256 (hex) on its last piece: the server checks it and only then
    /// puts the file in place.
    #[serde(default)]
    pub sha256: Option<String>,
    /// The whole file's size, so that a quota refuses it before any byte is written.
    #[serde(default)]
    pub size: Option<u64>,
    /// The file's modification time (seconds since the epoch), set when it is put in place.
    #[serde(default)]
    pub mtime: Option<i64>,
}

/// The answer to an upload piece (and `GET .../upload-state`): how much the server has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UploadState {
    /// Bytes of the file received so far.
    pub have: u64,
    /// The file is in place (its last piece came with a matching checksum).
    pub done: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folder_mounts_parse() {
        let m: FolderMount = "data".parse().unwrap();
        assert_eq!((m.target(), m.read_only), ("/data/data".to_string(), false));
        let m: FolderMount = "data:ro".parse().unwrap();
        assert!(m.read_only);
        let m: FolderMount = "vision/imagenet:/mnt/in:ro".parse().unwrap();
        assert_eq!(m.reference().unwrap(), FolderRef { project: Some("vision".into()), name: "imagenet".into() });
        assert_eq!((m.target().as_str(), m.read_only), ("/mnt/in", true));
        assert_eq!(m.target(), "/mnt/in");
        let m: FolderMount = "x:/data/x:rw".parse().unwrap();
        assert!(!m.read_only && m.process_target_allowed());
    }

    #[test]
    fn bad_folder_mounts_are_refused() {
        for bad in [
            "",
            "a/b/c",
            "../x",
            ".hidden",
            "x:relative",
            "x:/",
            "x:/data/../etc",
            "x:/data//y",
            "x:/a:b:c",
            "x:/a:ro:rw",
        ] {
            assert!(bad.parse::<FolderMount>().is_err(), "{bad} must be refused");
        }
        let etc: FolderMount = "x:/etc".parse().unwrap();
        assert!(!etc.process_target_allowed(), "never over system files");
    }

    #[test]
    fn folder_names() {
        assert!(valid_folder_name("imagenet-1k_v2.0"));
        for bad in ["", ".", "..", ".x", "a/b", "a b", &"x".repeat(65)] {
            assert!(!valid_folder_name(bad), "{bad:?}");
        }
    }
}
