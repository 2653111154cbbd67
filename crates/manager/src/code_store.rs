//! The code store (`berth submit --code`): files of users' code snapshots kept by content
//! (`<folder root>/.code/blobs/ab/<sha256>`), so a file sent once is never sent again, and
//! each snapshot's manifest (`.code/snapshots/<id>.json`, its id the manifest's sha256). It
//! lives on the folder storage because agents read it there to copy a job's code.

use std::path::{Path, PathBuf};

use axum::body::Body;
use axum::http::StatusCode;
use berth_model::code::{CodeCopy, CodeManifest, SnapshotMade, valid_sha256};
use berth_model::format_bytes;
use futures_util::StreamExt;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use crate::error::ApiError;

/// Snapshots are at most this large unless the admin says (`--code-limit`).
pub const DEFAULT_CODE_LIMIT: u64 = 1 << 30;

pub struct CodeStore {
    root: PathBuf,
    limit: u64,
}

fn io(what: &str, e: std::io::Error) -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("the code store cannot {what}: {e}"))
}

fn too_big(bytes: u64, limit: u64) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "the code is {}, over the limit of {} the admin set (--code-limit): list what the job does not \
             need (data, checkpoints, environments) in .gitignore or .berthignore, and put data in a folder \
             (berth upload)",
            format_bytes(bytes),
            format_bytes(limit)
        ),
    )
}

impl CodeStore {
    /// The store under `folder_root`, snapshots at most `limit` bytes.
    pub fn new(folder_root: &Path, limit: u64) -> CodeStore {
        CodeStore { root: folder_root.join(".code"), limit }
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    fn blob(&self, sha: &str) -> PathBuf {
        self.root.join("blobs").join(&sha[..2]).join(sha)
    }

    fn manifest(&self, id: &str) -> PathBuf {
        self.root.join("snapshots").join(format!("{id}.json"))
    }

    /// The ones of `blobs` the store lacks.
    pub fn missing(&self, blobs: &[String]) -> Result<Vec<String>, ApiError> {
        if let Some(bad) = blobs.iter().find(|b| !valid_sha256(b)) {
            return Err(ApiError::bad_request(format!("`{bad}` is not a sha256 (64 lowercase hex digits)")));
        }
        Ok(blobs.iter().filter(|b| !self.blob(b).is_file()).cloned().collect())
    }

    /// Stores a blob that must hash to `sha`; returns its size.
    pub async fn put_blob(&self, sha: &str, body: Body) -> Result<u64, ApiError> {
        if !valid_sha256(sha) {
            return Err(ApiError::bad_request(format!("`{sha}` is not a sha256 (64 lowercase hex digits)")));
        }
        let dest = self.blob(sha);
        let tmp_dir = self.root.join("tmp");
        std::fs::create_dir_all(&tmp_dir).map_err(|e| io("make its directories", e))?;
        let tmp = tmp_dir.join(format!("{sha}.{}", rand::random::<u64>()));
        let mut file = tokio::fs::File::create(&tmp).await.map_err(|e| io("write a blob", e))?;
        let mut h = Sha256::new();
        let mut size = 0u64;
        let mut stream = body.into_data_stream();
        let result = async {
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| ApiError::bad_request(format!("the upload was cut off: {e}")))?;
                size += chunk.len() as u64;
                if size > self.limit {
                    return Err(too_big(size, self.limit));
                }
                h.update(&chunk);
                file.write_all(&chunk).await.map_err(|e| io("write a blob", e))?;
            }
            file.flush().await.map_err(|e| io("write a blob", e))?;
            let got = hex::encode(h.finalize());
            if got != sha {
                return Err(ApiError::unprocessable(format!("the blob's sha256 is {got}, not {sha}: send it again")));
            }
            std::fs::create_dir_all(dest.parent().expect("a parent")).map_err(|e| io("make its directories", e))?;
            std::fs::rename(&tmp, &dest).map_err(|e| io("keep a blob", e))?;
            Ok(size)
        }
        .await;
        let _ = std::fs::remove_file(&tmp);
        result
    }

    /// Records a snapshot whose files are all stored; refused past the limit.
    pub fn make_snapshot(&self, m: &CodeManifest) -> Result<SnapshotMade, ApiError> {
        m.validate().map_err(|e| ApiError::bad_request(e.0))?;
        let bytes = m.bytes();
        if bytes > self.limit {
            return Err(too_big(bytes, self.limit));
        }
        if let Some(f) = m.files.iter().find(|f| f.link.is_none() && !self.blob(&f.sha256).is_file()) {
            return Err(ApiError::bad_request(format!(
                "the code store has no file with sha256 {} (`{}`): send the missing files first (POST /v1/code/missing)",
                f.sha256, f.path
            )));
        }
        let json = serde_json::to_vec(m).expect("a manifest serialises");
        let id = hex::encode(Sha256::digest(&json));
        let path = self.manifest(&id);
        if !path.is_file() {
            let dir = path.parent().expect("a parent");
            std::fs::create_dir_all(dir).map_err(|e| io("make its directories", e))?;
            let tmp = dir.join(format!(".{id}.{}", rand::random::<u64>()));
            std::fs::write(&tmp, &json).map_err(|e| io("write a manifest", e))?;
            std::fs::rename(&tmp, &path).map_err(|e| io("keep a manifest", e))?;
        }
        Ok(SnapshotMade { id, files: m.files.len() as u64, bytes })
    }

    /// Whether snapshot `id` exists.
    pub fn exists(&self, id: &str) -> bool {
        valid_sha256(id) && self.manifest(id).is_file()
    }

    /// Where an agent finds snapshot `id`.
    pub fn copy_for(&self, id: &str) -> CodeCopy {
        CodeCopy {
            manifest: self.manifest(id).to_string_lossy().into_owned(),
            blobs: self.root.join("blobs").to_string_lossy().into_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::code::CodeFile;

    #[tokio::test]
    async fn blobs_are_checked_and_snapshots_need_them_all() {
        let d = tempfile::tempdir().unwrap();
        let s = CodeStore::new(d.path(), 1000);
        let sha = hex::encode(Sha256::digest(b"print(1)\n"));
        assert_eq!(s.missing(std::slice::from_ref(&sha)).unwrap(), vec![sha.clone()]);
        let file = CodeFile { path: "a.py".into(), sha256: sha.clone(), size: 9, executable: false, link: None };
        let m = CodeManifest { files: vec![file] };
        assert!(s.make_snapshot(&m).is_err(), "its file is not stored yet");
        let wrong = s.put_blob(&sha, Body::from("print(2)\n")).await.unwrap_err();
        assert_eq!(wrong.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(s.put_blob(&sha, Body::from("print(1)\n")).await.unwrap(), 9);
        assert!(s.missing(std::slice::from_ref(&sha)).unwrap().is_empty());
        let made = s.make_snapshot(&m).unwrap();
        assert!(s.exists(&made.id) && made.bytes == 9);
        assert_eq!(s.make_snapshot(&m).unwrap().id, made.id, "the same files make the same snapshot");
        let big = CodeFile { path: "b".into(), sha256: sha.clone(), size: 5000, executable: false, link: None };
        let e = s.make_snapshot(&CodeManifest { files: vec![big] }).unwrap_err();
        assert!(e.status == StatusCode::PAYLOAD_TOO_LARGE && e.message.contains("--code-limit"), "{e:?}");
    }
}
