//! `/v1/code`: code snapshots for `berth submit --code` (`code_store.rs`): which files the
//! store lacks, a file by its sha256, and a snapshot's manifest.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use berth_model::code::{BlobList, CodeManifest, MAX_CODE_FILES, SnapshotMade};

use crate::auth::Auth;
use crate::error::{ApiError, Json, Path};
use crate::manager::Manager;

/// Which of these files (by sha256) the code store lacks.
#[utoipa::path(post, path = "/v1/code/missing", tag = "code", request_body = BlobList,
    responses((status = 200, body = BlobList), (status = 400, body = berth_model::api::ErrorBody)))]
pub async fn missing(
    State(m): State<Arc<Manager>>,
    Auth(_user): Auth,
    Json(req): Json<BlobList>,
) -> Result<axum::Json<BlobList>, ApiError> {
    if req.blobs.len() > MAX_CODE_FILES {
        return Err(ApiError::bad_request(format!("ask about at most {MAX_CODE_FILES} files at once")));
    }
    Ok(axum::Json(BlobList { blobs: m.code.missing(&req.blobs)? }))
}

/// Store one file of code; its contents must hash to `sha256`.
#[utoipa::path(put, path = "/v1/code/blobs/{sha256}", tag = "code",
    params(("sha256" = String, Path, description = "the file's sha256, hex")),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 201, body = SnapshotMade), (status = 400, body = berth_model::api::ErrorBody),
        (status = 413, body = berth_model::api::ErrorBody), (status = 422, body = berth_model::api::ErrorBody)))]
pub async fn put_blob(
    State(m): State<Arc<Manager>>,
    Auth(_user): Auth,
    Path(sha): Path<String>,
    body: Body,
) -> Result<(StatusCode, axum::Json<SnapshotMade>), ApiError> {
    let size = m.code.put_blob(&sha, body).await?;
    Ok((StatusCode::CREATED, axum::Json(SnapshotMade { id: sha, files: 1, bytes: size })))
}

/// Record a snapshot (its manifest: every file, sorted by path); its id is the manifest's sha256.
#[utoipa::path(post, path = "/v1/code/snapshots", tag = "code", request_body = CodeManifest,
    responses((status = 201, body = SnapshotMade), (status = 400, body = berth_model::api::ErrorBody),
        (status = 413, body = berth_model::api::ErrorBody)))]
pub async fn snapshot(
    State(m): State<Arc<Manager>>,
    Auth(_user): Auth,
    Json(req): Json<CodeManifest>,
) -> Result<(StatusCode, axum::Json<SnapshotMade>), ApiError> {
    let made = m.code.make_snapshot(&req)?;
    Ok((StatusCode::CREATED, axum::Json(made)))
}
