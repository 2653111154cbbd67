//! Data folders (`/v1/folders`): the folders themselves, their listings, the pieces of
//! resumable uploads and downloads; and the code store (`/v1/code`) that `submit --code` fills.

use berth_model::folder::{CreateFolder, FileEntry, FolderRef, FolderView, ShareFolder, UploadState};
use percent_encoding::{AsciiSet, utf8_percent_encode};
use reqwest::{Method, StatusCode};

use crate::{Client, Error};

/// What a path segment or query value must escape: a cache key's set, and the separators.
const SEGMENT: &AsciiSet =
    &berth_model::dataset::KEY_ESCAPE.add(b'/').add(b'&').add(b'+').add(b'=').add(b';').add(b'[').add(b']');

fn enc(s: &str) -> String {
    utf8_percent_encode(s, SEGMENT).to_string()
}

/// `/v1/folders/NAME` and the `project=` query of a reference.
fn base(r: &FolderRef) -> (String, String) {
    let q = r.project.as_deref().map(|p| format!("project={}", enc(p))).unwrap_or_default();
    (format!("/v1/folders/{}", enc(&r.name)), q)
}

/// `path?query` with `extra` query parts.
fn url(path: &str, q: &str, extra: &[String]) -> String {
    let parts: Vec<&str> =
        std::iter::once(q).chain(extra.iter().map(String::as_str)).filter(|s| !s.is_empty()).collect();
    if parts.is_empty() { path.to_string() } else { format!("{path}?{}", parts.join("&")) }
}

/// A file path in a folder, each segment escaped.
fn file_path(p: &str) -> String {
    p.split('/').map(enc).collect::<Vec<_>>().join("/")
}

impl Client {
    pub async fn create_folder(&self, req: &CreateFolder) -> Result<FolderView, Error> {
        self.json(self.request(Method::POST, "/v1/folders").json(req)).await
    }

    pub async fn folders(&self, usage: bool, all: bool) -> Result<Vec<FolderView>, Error> {
        self.json(self.request(Method::GET, &format!("/v1/folders?usage={usage}&all={all}"))).await
    }

    pub async fn folder(&self, r: &FolderRef) -> Result<FolderView, Error> {
        let (p, q) = base(r);
        self.json(self.request(Method::GET, &url(&p, &q, &[]))).await
    }

    pub async fn remove_folder(&self, r: &FolderRef) -> Result<(), Error> {
        let (p, q) = base(r);
        self.send(self.request(Method::DELETE, &url(&p, &q, &[]))).await.map(|_| ())
    }

    pub async fn share_folder(&self, r: &FolderRef, req: &ShareFolder) -> Result<FolderView, Error> {
        let (p, q) = base(r);
        self.json(self.request(Method::POST, &url(&format!("{p}/shares"), &q, &[])).json(req)).await
    }

    pub async fn unshare_folder(&self, r: &FolderRef, project: &str) -> Result<FolderView, Error> {
        let (p, q) = base(r);
        self.json(self.request(Method::DELETE, &url(&format!("{p}/shares/{}", enc(project)), &q, &[]))).await
    }

    pub async fn set_folder_quota(&self, r: &FolderRef, quota: Option<u64>) -> Result<FolderView, Error> {
        let (p, q) = base(r);
        let body = serde_json::json!({ "quota_bytes": quota });
        self.json(self.request(Method::PUT, &url(&format!("{p}/quota"), &q, &[])).json(&body)).await
    }

    /// The entries at and under `path`; `None` when there is nothing there.
    pub async fn folder_list(&self, r: &FolderRef, path: &str, sha256: bool) -> Result<Option<Vec<FileEntry>>, Error> {
        let (p, q) = base(r);
        let extra = [format!("path={}", enc(path)), format!("sha256={sha256}")];
        match self.json(self.request(Method::GET, &url(&format!("{p}/list"), &q, &extra))).await {
            Ok(l) => Ok(Some(l)),
            Err(e) if e.refused_status() == Some(StatusCode::NOT_FOUND) => {
                // The folder itself missing is an error; only a missing path is "nothing there".
                self.folder(r).await?;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// How much of an interrupted upload of `path` the server has.
    pub async fn upload_state(&self, r: &FolderRef, path: &str) -> Result<UploadState, Error> {
        let (p, q) = base(r);
        self.json(self.request(Method::GET, &url(&format!("{p}/uploads/{}", file_path(path)), &q, &[]))).await
    }

    /// One piece of an upload of `path` at `offset`; the last one with the file's `sha256`.
    pub async fn upload_piece(
        &self,
        r: &FolderRef,
        path: &str,
        piece: Piece,
        body: bytes::Bytes,
    ) -> Result<UploadState, Error> {
        let (p, q) = base(r);
        let mut extra = vec![format!("offset={}", piece.offset), format!("size={}", piece.size)];
        if let Some(h) = piece.sha256 {
            extra.push(format!("sha256={h}"));
        }
        if let Some(t) = piece.mtime {
            extra.push(format!("mtime={t}"));
        }
        let u = url(&format!("{p}/files/{}", file_path(path)), &q, &extra);
        self.json(self.request(Method::PUT, &u).header("content-type", "application/octet-stream").body(body)).await
    }

    /// A download of `path` from byte `from` on.
    pub async fn download_from(&self, r: &FolderRef, path: &str, from: u64) -> Result<reqwest::Response, Error> {
        let (p, q) = base(r);
        let mut req = self.request(Method::GET, &url(&format!("{p}/files/{}", file_path(path)), &q, &[]));
        if from > 0 {
            req = req.header("range", format!("bytes={from}-"));
        }
        self.send(req).await
    }
}

/// Where a piece of an upload goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    pub offset: u64,
    pub size: u64,
    pub sha256: Option<String>,
    pub mtime: Option<i64>,
}

impl Client {
    /// Which of these blobs the code store lacks.
    pub async fn code_missing(&self, req: &berth_model::code::BlobList) -> Result<berth_model::code::BlobList, Error> {
        self.json(self.request(Method::POST, "/v1/code/missing").json(req)).await
    }

    /// Stores one file of code by its sha256.
    pub async fn code_blob(&self, sha256: &str, body: bytes::Bytes) -> Result<(), Error> {
        let req = self
            .request(Method::PUT, &format!("/v1/code/blobs/{sha256}"))
            .header("content-type", "application/octet-stream");
        self.send(req.body(body)).await.map(|_| ())
    }

    /// Records a snapshot of stored files.
    pub async fn code_snapshot(
        &self,
        m: &berth_model::code::CodeManifest,
    ) -> Result<berth_model::code::SnapshotMade, Error> {
        self.json(self.request(Method::POST, "/v1/code/snapshots").json(m)).await
    }
}
