//! What the manager keeps about data folders (docs/folders.md): each folder's name, owner,
//! project and quota, and the projects it is shared with. The files themselves live on the
//! storage backend (a directory named by the folder's id), not here. A supertrait of
//! [`crate::Store`], like [`crate::Tenancy`].

use async_trait::async_trait;
use jiff::Timestamp;

use crate::Result;

/// One folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FolderRow {
    pub id: i64,
    pub name: String,
    pub owner_id: i64,
    /// The owner's user name.
    pub owner: String,
    /// The project it belongs to; `None`: a personal folder.
    pub project: Option<String>,
    pub quota_bytes: Option<u64>,
    pub created_at: Timestamp,
    /// Projects it is shared with, by name, and whether read-only; sorted by project.
    pub shares: Vec<(String, bool)>,
}

/// The folders table and its shares.
#[async_trait]
pub trait Folders: Send + Sync {
    /// A new folder; `Duplicate` when the owner (personal) or the project already has one of
    /// that name.
    async fn create_folder(
        &self,
        name: &str,
        owner_id: i64,
        project: Option<&str>,
        quota_bytes: Option<u64>,
        at: Timestamp,
    ) -> Result<FolderRow>;
    /// Every folder with its shares, by id.
    async fn folders(&self) -> Result<Vec<FolderRow>>;
    /// The folder with this id.
    async fn folder(&self, id: i64) -> Result<Option<FolderRow>>;
    /// Removes a folder and its shares; `NotFound` when there is none.
    async fn delete_folder(&self, id: i64) -> Result<()>;
    /// Shares a folder with a project (replacing the read-only flag of an existing share).
    async fn share_folder(&self, id: i64, project: &str, read_only: bool, at: Timestamp) -> Result<()>;
    /// Ends a share; `NotFound` when the folder is not shared with that project.
    async fn unshare_folder(&self, id: i64, project: &str) -> Result<()>;
    /// Sets or (with `None`) lifts a folder's quota; `NotFound` for an unknown folder.
    async fn set_folder_quota(&self, id: i64, quota_bytes: Option<u64>) -> Result<()>;
}
