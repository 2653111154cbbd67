//! The folders service (docs/folders.md): who may use which data folder, where each lives on the
//! storage backend, and what jobs mount.
//!
//! A folder is a row in the store (name, owner, project, quota, shares) and a directory
//! `<root>/<id>` on the backend: a local directory for one machine, a shared filesystem
//! mounted at the same path on every node for a cluster. The root is private (0700): host
//! users reach a folder only through a job that mounts it, in the job's own mount namespace.
//! Inside, directories are 0777 and uploaded files 0666, so the jobs of every member of a
//! shared folder (each under its own uid) may read and write them. File access lives in
//! [`files`] (trees walked by [`walk`]); [`gate`] bounds the blocking work each user's folder
//! requests do, and [`partials`] holds unfinished uploads to quotas, a count and an age.

pub mod files;
pub mod gate;
mod limits;
pub mod partials;
mod usage;
mod walk;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use berth_model::folder::{FolderAccess, FolderBind, FolderRef, FolderShareView, FolderView, valid_folder_name};
use berth_model::{JobSpec, format_bytes};
use berth_store::{FolderRow, Store, StoreError};

use crate::error::ApiError;
use crate::identity::User;

pub use usage::Usage;

/// The folders service.
pub struct Folders {
    store: Arc<dyn Store>,
    root: PathBuf,
    usage: usage::UsageCache,
    /// How the root's filesystem holds jobs to quotas (looked at once, at start).
    limits: std::sync::OnceLock<limits::Limits>,
    /// Slots for folder requests' blocking work, per user.
    gate: gate::Gate,
    /// Unfinished uploads and what they reserve.
    partials: Arc<partials::Partials>,
}

impl Folders {
    pub fn new(store: Arc<dyn Store>, root: PathBuf) -> Folders {
        Folders {
            store,
            root,
            usage: Default::default(),
            limits: Default::default(),
            gate: Default::default(),
            partials: Default::default(),
        }
    }

    /// Looks at what the root's filesystem can enforce (after [`Folders::prepare`]) and says
    /// it in the log; starts sweeping abandoned partial uploads every few minutes.
    pub async fn detect_limits(&self) {
        let (known, root) = (self.partials.clone(), self.root.clone());
        tokio::spawn(async move {
            let mut every = tokio::time::interval(partials::SWEEP_EVERY);
            loop {
                every.tick().await;
                let (p, r) = (known.clone(), root.clone());
                let _ = tokio::task::spawn_blocking(move || p.sweep(&r, partials::MAX_AGE)).await;
            }
        });
        let l = limits::Limits::detect(&self.root).await;
        match &l {
            limits::Limits::BtrfsQgroups => tracing::info!(
                root = %self.root.display(),
                "folder quotas hold jobs' writes too: folders are btrfs subvolumes with qgroup limits"
            ),
            limits::Limits::UploadsOnly(why) => {
                tracing::info!(root = %self.root.display(), "folder quotas limit uploads only: {why}")
            }
        }
        let _ = self.limits.set(l);
    }

    fn limits(&self) -> &limits::Limits {
        static NONE: std::sync::LazyLock<limits::Limits> =
            std::sync::LazyLock::new(|| limits::Limits::UploadsOnly("not looked at".into()));
        self.limits.get().unwrap_or(&NONE)
    }

    /// Sets (or lifts) folder `f`'s limit on the filesystem, where it holds jobs; an error
    /// says what failed (nothing stored yet).
    pub async fn apply_quota(&self, f: &FolderRow, quota: Option<u64>) -> Result<(), ApiError> {
        self.limits().set(&self.dir(f.id), quota).await.map(|_| ()).map_err(|e| {
            ApiError::new(
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot set the quota of folder {} on its filesystem: {e}", qualified(f)),
            )
        })
    }

    /// The storage backend's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Makes the root (0700) and its upload area, and reads back the partial uploads there;
    /// run at start.
    pub fn prepare(&self) -> std::io::Result<()> {
        files::make_root(&self.root)?;
        self.partials.load(&self.root);
        Ok(())
    }

    /// A slot for a folder request of `user` that touches the disk (see [`gate`]).
    pub fn enter(&self, user: &User) -> Result<gate::Slot, ApiError> {
        self.gate.enter(user.id)
    }

    /// The unfinished uploads.
    pub fn partials(&self) -> &partials::Partials {
        &self.partials
    }

    /// Deletes the partial uploads untouched for [`partials::MAX_AGE`] (at each new upload).
    pub async fn sweep_partials(&self, slot: gate::Slot) {
        let (p, r) = (self.partials.clone(), self.root.clone());
        let _ = tokio::task::spawn_blocking(move || {
            let _slot = slot;
            p.sweep(&r, partials::MAX_AGE)
        })
        .await;
    }

    /// The directory of folder `id`.
    pub fn dir(&self, id: i64) -> PathBuf {
        self.root.join(id.to_string())
    }

    /// What `user` may do with `f`, if anything: admins and the creator own it, a project
    /// folder's members read and write, a share gives its projects' members what it says.
    pub fn access(user: &User, f: &FolderRow) -> Option<FolderAccess> {
        if user.is_admin() || f.owner_id == user.id {
            return Some(FolderAccess::Owner);
        }
        if f.project.as_deref().is_some_and(|p| user.member_of(p)) {
            return Some(FolderAccess::ReadWrite);
        }
        let shared: Vec<bool> = f.shares.iter().filter(|(p, _)| user.member_of(p)).map(|(_, ro)| *ro).collect();
        match shared.iter().any(|ro| !ro) {
            true => Some(FolderAccess::ReadWrite),
            false if !shared.is_empty() => Some(FolderAccess::ReadOnly),
            false => None,
        }
    }

    /// The folder `r` names for `user`: with a project, that project's folder; without, the
    /// user's own, else the one folder of that name among the folders of their projects and
    /// those shared with them. A folder the user may not use answers like a missing one.
    pub async fn resolve(&self, user: &User, r: &FolderRef) -> Result<(FolderRow, FolderAccess), ApiError> {
        let all = self.store.folders().await?;
        let usable = |f: &FolderRow| Self::access(user, f).map(|a| (f.clone(), a));
        let named = all.iter().filter(|f| f.name == r.name);
        let found = match &r.project {
            Some(p) => named.filter(|f| f.project.as_deref() == Some(p.as_str())).find_map(usable),
            None => {
                let own = all.iter().find(|f| f.name == r.name && f.project.is_none() && f.owner_id == user.id);
                match own {
                    Some(f) => Some((f.clone(), FolderAccess::Owner)),
                    None => {
                        let others: Vec<(FolderRow, FolderAccess)> =
                            named.filter(|f| f.project.is_some() || f.owner_id != user.id).filter_map(usable).collect();
                        if others.len() > 1 {
                            let names: Vec<String> = others.iter().map(|(f, _)| qualified(f)).collect();
                            return Err(ApiError::conflict(format!(
                                "folder name `{}` is ambiguous: you may use {}; name one of them",
                                r.name,
                                names.join(", ")
                            )));
                        }
                        others.into_iter().next()
                    }
                }
            }
        };
        found.ok_or_else(|| {
            ApiError::not_found(format!("no folder `{r}` that you may use: see `berth folder ls` for yours"))
        })
    }

    /// Like [`Folders::resolve`], for changes only the owner (or an admin) may make.
    pub async fn resolve_owned(&self, user: &User, r: &FolderRef, what: &str) -> Result<FolderRow, ApiError> {
        let (f, access) = self.resolve(user, r).await?;
        if access != FolderAccess::Owner {
            return Err(ApiError::forbidden(format!(
                "only {} (who created folder {}) or an admin may {what} it",
                f.owner,
                qualified(&f)
            )));
        }
        Ok(f)
    }

    /// A new folder of `user`'s (or of `project`, of which they must be a member) with its
    /// directory; the row goes again if the directory cannot be made.
    pub async fn create(
        &self,
        user: &User,
        name: &str,
        project: Option<&str>,
        quota: Option<u64>,
    ) -> Result<FolderRow, ApiError> {
        if !valid_folder_name(name) {
            return Err(ApiError::bad_request(berth_model::folder::folder_name_error(name).0));
        }
        if quota == Some(0) {
            return Err(ApiError::bad_request("a folder's quota must be more than 0 bytes: e.g. --quota 100GiB"));
        }
        let row = self.store.create_folder(name, user.id, project, quota, jiff::Timestamp::now()).await.map_err(
            |e| match e {
                StoreError::Duplicate(_) => ApiError::conflict(format!(
                    "folder `{name}` already exists{}: pick another name, or `berth folder rm` the old one",
                    project.map(|p| format!(" in project {p}")).unwrap_or_default()
                )),
                e => e.into(),
            },
        )?;
        let dir = self.dir(row.id);
        let made = async {
            self.limits().make_dir(&dir).await.map_err(|e| e.to_string())?;
            files::open_folder_dir(&dir).map_err(|e| e.to_string())?;
            self.limits().set(&dir, quota).await.map_err(|e| e.to_string())
        };
        if let Err(e) = made.await {
            let _ = self.store.delete_folder(row.id).await;
            files::remove_folder_dir(&self.root, row.id);
            return Err(ApiError::new(
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot make the folder's directory {}: {e}", dir.display()),
            ));
        }
        Ok(row)
    }

    /// Removes a folder: the row, then its directory (moved aside at once, deleted in the
    /// background). Refused while an unfinished job mounts it.
    pub async fn remove(&self, f: &FolderRow, in_use: &[i64]) -> Result<(), ApiError> {
        if !in_use.is_empty() {
            let ids: Vec<String> = in_use.iter().map(|i| i.to_string()).collect();
            return Err(ApiError::conflict(format!(
                "folder {} is mounted by unfinished jobs {}: cancel them or wait for them to end",
                qualified(f),
                ids.join(", ")
            )));
        }
        self.store.delete_folder(f.id).await?;
        self.usage.forget(f.id);
        self.partials.forget_folder(f.id);
        files::remove_folder_dir(&self.root, f.id);
        Ok(())
    }

    /// The folders `user` may use (admins with `all`: every one), with what they may do.
    pub async fn list(&self, user: &User, all: bool) -> Result<Vec<(FolderRow, FolderAccess)>, ApiError> {
        let rows = self.store.folders().await?;
        Ok(rows
            .into_iter()
            .filter_map(|f| {
                let a = Self::access(user, &f)?;
                let mine = f.owner_id == user.id
                    || f.project.as_deref().is_some_and(|p| user.member_of(p))
                    || f.shares.iter().any(|(p, _)| user.member_of(p));
                (all || mine).then_some((f, a))
            })
            .collect())
    }

    /// What folder `id` holds now (cached for a few seconds; jobs write too), however deep.
    pub async fn usage(&self, id: i64) -> Result<Usage, ApiError> {
        self.measure(id, None).await
    }

    /// What folder `id` holds now: measured after this call began (a user asking to see it
    /// must not get a figure from before the job that just wrote to it ended).
    pub async fn usage_now(&self, id: i64) -> Result<Usage, ApiError> {
        self.measure(id, Some(std::time::Instant::now())).await
    }

    async fn measure(&self, id: i64, since: Option<std::time::Instant>) -> Result<Usage, ApiError> {
        self.usage.get(id, &self.dir(id), since).await.map_err(|e| match e {
            usage::UsageError::Moved => ApiError::conflict(format!("cannot measure folder {id}: {e}")),
            usage::UsageError::Io(e) => ApiError::new(
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot measure folder {id}: {}", e.to_string().to_lowercase()),
            ),
        })
    }

    /// After an upload put `bytes` more in folder `id`.
    pub fn grew(&self, id: i64, bytes: u64, files: u64) {
        self.usage.grew(id, bytes, files);
    }

    /// Resolves the folders of a job being submitted by `user`: each reference to a folder
    /// they may use (its id is recorded in the spec; what a client sent is replaced) and
    /// read-only where their access is.
    pub async fn resolve_mounts(&self, user: &User, spec: &mut JobSpec) -> Result<(), ApiError> {
        for m in &mut spec.folders {
            let r = m.reference().map_err(|e| ApiError::bad_request(e.0))?;
            let (f, access) = self.resolve(user, &r).await?;
            m.id = Some(f.id);
            if access == FolderAccess::ReadOnly {
                m.read_only = true;
            }
        }
        Ok(())
    }

    /// What an agent binds for `spec`'s folders.
    pub fn binds(&self, spec: &JobSpec) -> Vec<FolderBind> {
        spec.folders
            .iter()
            .filter_map(|m| {
                Some(FolderBind {
                    name: m.folder.clone(),
                    source: self.dir(m.id?).to_string_lossy().into_owned(),
                    target: m.target(),
                    read_only: m.read_only,
                })
            })
            .collect()
    }
}

/// `NAME` for a personal folder, `PROJECT/NAME` for a project's.
pub fn qualified(f: &FolderRow) -> String {
    match &f.project {
        Some(p) => format!("{p}/{}", f.name),
        None => f.name.clone(),
    }
}

/// The API's view of `f` for a caller with `access`.
pub fn view(folders: &Folders, f: &FolderRow, access: FolderAccess, usage: Option<Usage>) -> FolderView {
    FolderView {
        quota_holds_jobs: folders.limits().holds(&folders.dir(f.id)),
        id: f.id,
        name: f.name.clone(),
        owner: f.owner.clone(),
        project: f.project.clone(),
        quota_bytes: f.quota_bytes,
        shares: f.shares.iter().map(|(p, ro)| FolderShareView { project: p.clone(), read_only: *ro }).collect(),
        access,
        created_at: f.created_at,
        used_bytes: usage.map(|u| u.bytes),
        files: usage.map(|u| u.files),
    }
}

/// The refusal of `incoming` more bytes for `f`, which holds `used` of its quota and has
/// `pending` bytes reserved by other unfinished uploads, if they do not fit.
pub fn over_quota_with(f: &FolderRow, used: u64, pending: u64, incoming: u64) -> Option<ApiError> {
    let quota = f.quota_bytes?;
    (used.saturating_add(pending).saturating_add(incoming) > quota).then(|| {
        let (reserved, finish) = match pending {
            0 => (String::new(), ""),
            p => (format!(", {} more are reserved by unfinished uploads", format_bytes(p)), " finish those uploads,"),
        };
        ApiError::new(
            axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "folder {} is over its quota: it holds {} of its {} quota{reserved}, and this upload needs {} more; \
                 free some space,{finish} or ask its owner to raise the quota (`berth folder quota {} SIZE`)",
                qualified(f),
                format_bytes(used),
                format_bytes(quota),
                format_bytes(incoming),
                qualified(f)
            ),
        )
    })
}
