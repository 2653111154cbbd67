//! Files in data folders: `GET /v1/folders/{name}/list` (with checksums), `GET .../files/{path}`
//! (a download, with `Range` for a resume), `PUT .../files/{path}` (one piece of a resumable
//! upload, the last with the file's sha256) and `GET .../uploads/{path}` (how much of an
//! interrupted upload the server has). Bodies stream: the API's 1 MiB limit is for JSON.
//!
//! Each request takes one of its user's folder slots (`folders::gate`) for as long as it
//! touches the disk, so one user's requests cannot take the blocking threads everyone shares:
//! 429 when the user's are taken, 503 when all are. Uploads reserve their size of the quota
//! from the first piece (`folders::partials`).

use std::io::{Seek, SeekFrom};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use berth_model::folder::{FileEntry, FolderAccess, FolderQuery, ListFilesQuery, UploadQuery, UploadState};
use futures_util::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::folders::reference;
use crate::auth::Auth;
use crate::error::{ApiError, Path, Query};
use crate::folders::files::{self, FileError};
use crate::folders::gate::Slot;
use crate::folders::qualified;
use crate::manager::Manager;

/// The most bytes one upload piece may carry (clients send 16 MiB).
const MAX_PIECE: u64 = 1 << 30;

impl From<FileError> for ApiError {
    fn from(e: FileError) -> ApiError {
        match e {
            FileError::Bad(m) => ApiError::bad_request(m),
            FileError::NotFound(m) => ApiError::not_found(m),
            e @ FileError::Offset { .. } => ApiError::conflict(e.to_string()),
            e @ FileError::Checksum { .. } => ApiError::unprocessable(e.to_string()),
            FileError::TooDeep(m) => ApiError::unprocessable(m),
            FileError::Moved(m) => ApiError::conflict(m),
            FileError::Io(e) => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the folder storage failed: {}", e.to_string().to_lowercase()),
            ),
        }
    }
}

/// Runs `f` on a blocking thread, holding `slot` until it ends (even if the client is gone).
async fn blocking<T: Send + 'static>(
    slot: &Slot,
    f: impl FnOnce() -> Result<T, FileError> + Send + 'static,
) -> Result<T, ApiError> {
    let slot = slot.clone();
    tokio::task::spawn_blocking(move || {
        let _slot = slot;
        f()
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("a folder task failed: {e}")))?
    .map_err(ApiError::from)
}

/// The entries at and under `path` (`?sha256=true`: with each file's checksum).
#[utoipa::path(get, path = "/v1/folders/{name}/list", tag = "folders",
    params(("name" = String, Path, description = "folder name"), ListFilesQuery),
    responses((status = 200, body = Vec<FileEntry>), (status = 400, body = berth_model::api::ErrorBody),
        (status = 404, body = berth_model::api::ErrorBody), (status = 409, body = berth_model::api::ErrorBody),
        (status = 422, body = berth_model::api::ErrorBody), (status = 429, body = berth_model::api::ErrorBody),
        (status = 503, body = berth_model::api::ErrorBody)))]
pub async fn list(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    Path(name): Path<String>,
    Query(q): Query<ListFilesQuery>,
) -> Result<axum::Json<Vec<FileEntry>>, ApiError> {
    let r = reference(&name, &FolderQuery { project: q.project.clone() })?;
    let (f, _) = m.folders.resolve(&user, &r).await?;
    let rel = files::clean(&q.path)?;
    let dir = m.folders.dir(f.id);
    let slot = m.folders.enter(&user)?;
    Ok(axum::Json(blocking(&slot, move || files::list(&dir, &rel, q.sha256)).await?))
}

/// Download one file; `Range: bytes=N-` (or `N-M`) sends part of it.
#[utoipa::path(get, path = "/v1/folders/{name}/files/{path}", tag = "folders",
    params(("name" = String, Path, description = "folder name"), ("path" = String, Path, description = "file in the folder"), FolderQuery),
    responses((status = 200, body = Vec<u8>, content_type = "application/octet-stream"),
        (status = 206, body = Vec<u8>, content_type = "application/octet-stream"),
        (status = 400, body = berth_model::api::ErrorBody), (status = 404, body = berth_model::api::ErrorBody),
        (status = 416, body = berth_model::api::ErrorBody), (status = 429, body = berth_model::api::ErrorBody),
        (status = 503, body = berth_model::api::ErrorBody), (status = 409, description = "the folder name is ambiguous (several folders you may use have it): name it as OWNER/NAME", body = berth_model::api::ErrorBody)))]
pub async fn download(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    Path((name, path)): Path<(String, String)>,
    Query(q): Query<FolderQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (f, _) = m.folders.resolve(&user, &reference(&name, &q)?).await?;
    let rel = files::clean(&path)?;
    let dir = m.folders.dir(f.id);
    let slot = m.folders.enter(&user)?;
    let file = blocking(&slot, move || files::open_file(&dir, &rel)).await?;
    let size = file.metadata().map_err(FileError::Io)?.len();
    let range = headers.get(header::RANGE).map(|v| parse_range(v, size)).transpose()?;
    let (start, end) = range.unwrap_or((0, size));
    let mut file = file;
    file.seek(SeekFrom::Start(start)).map_err(FileError::Io)?;
    let body = Body::from_stream(chunks(tokio::fs::File::from_std(file), end - start, slot));
    let mut res = Response::new(body);
    let h = res.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(end - start));
    if range.is_some() {
        let cr = format!("bytes {start}-{}/{size}", end.saturating_sub(1));
        h.insert(header::CONTENT_RANGE, HeaderValue::from_str(&cr).expect("ascii"));
        *res.status_mut() = StatusCode::PARTIAL_CONTENT;
    }
    Ok(res)
}

/// `bytes=N-` or `bytes=N-M` as `[start, end)` within `size`.
fn parse_range(v: &HeaderValue, size: u64) -> Result<(u64, u64), ApiError> {
    let bad = || {
        ApiError::new(
            StatusCode::RANGE_NOT_SATISFIABLE,
            format!("bad Range header: use bytes=START- or bytes=START-END within the file's {size} bytes"),
        )
    };
    let s = v.to_str().map_err(|_| bad())?.strip_prefix("bytes=").ok_or_else(bad)?;
    let (a, b) = s.split_once('-').ok_or_else(bad)?;
    let start: u64 = a.parse().map_err(|_| bad())?;
    let end: u64 = if b.is_empty() { size } else { b.parse::<u64>().map_err(|_| bad())?.saturating_add(1).min(size) };
    if start > size || start > end {
        return Err(bad());
    }
    Ok((start, end))
}

/// `len` bytes of `file` from where it stands, in pieces of 256 KiB; the download holds `slot`
/// until it ends (each read is a blocking task).
fn chunks(
    file: tokio::fs::File,
    len: u64,
    slot: Slot,
) -> impl futures_util::Stream<Item = std::io::Result<bytes::Bytes>> + Send + 'static {
    futures_util::stream::unfold((file, len, slot), |(mut file, left, slot)| async move {
        if left == 0 {
            return None;
        }
        let mut buf = vec![0u8; left.min(256 << 10) as usize];
        match file.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(bytes::Bytes::from(buf)), (file, left - n as u64, slot)))
            }
            Err(e) => Some((Err(e), (file, 0, slot))),
        }
    })
}

/// How much of an interrupted upload of `path` the server has.
#[utoipa::path(get, path = "/v1/folders/{name}/uploads/{path}", tag = "folders",
    params(("name" = String, Path, description = "folder name"), ("path" = String, Path, description = "file in the folder"), FolderQuery),
    responses((status = 200, body = UploadState), (status = 400, body = berth_model::api::ErrorBody),
        (status = 403, body = berth_model::api::ErrorBody), (status = 404, body = berth_model::api::ErrorBody),
        (status = 429, body = berth_model::api::ErrorBody), (status = 503, body = berth_model::api::ErrorBody), (status = 409, description = "the folder name is ambiguous (several folders you may use have it): name it as OWNER/NAME", body = berth_model::api::ErrorBody)))]
pub async fn upload_state(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    Path((name, path)): Path<(String, String)>,
    Query(q): Query<FolderQuery>,
) -> Result<axum::Json<UploadState>, ApiError> {
    let (f, _) = writable(&m, &user, &name, q.project.clone()).await?;
    let rel = files::clean(&path)?;
    let root = m.folders.root().to_path_buf();
    let slot = m.folders.enter(&user)?;
    let have = blocking(&slot, move || files::partial_len(&root, f.id, &rel)).await?;
    Ok(axum::Json(UploadState { have, done: false }))
}

async fn writable(
    m: &Manager,
    user: &crate::identity::User,
    name: &str,
    project: Option<String>,
) -> Result<(berth_store::FolderRow, FolderAccess), ApiError> {
    let (f, access) = m.folders.resolve(user, &reference(name, &FolderQuery { project })?).await?;
    if access == FolderAccess::ReadOnly {
        return Err(ApiError::forbidden(format!(
            "folder {} is shared with you read-only: ask {} for a read-write share to upload to it",
            qualified(&f),
            f.owner
        )));
    }
    Ok((f, access))
}

/// One piece of an upload of `path`, appended at `offset` (0 starts over); the last piece
/// carries `sha256`, and the file is put in place only if it matches. `size`, the whole
/// file's, lets a quota refuse it (413) before a byte is written: the first piece reserves
/// it, and unfinished uploads count against the quota until they end or expire. One user may
/// have a few unfinished uploads at once (429 past them).
#[utoipa::path(put, path = "/v1/folders/{name}/files/{path}", tag = "folders",
    params(("name" = String, Path, description = "folder name"), ("path" = String, Path, description = "file in the folder"), UploadQuery),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 200, body = UploadState), (status = 201, body = UploadState),
        (status = 400, body = berth_model::api::ErrorBody), (status = 403, body = berth_model::api::ErrorBody),
        (status = 404, body = berth_model::api::ErrorBody), (status = 409, body = berth_model::api::ErrorBody),
        (status = 413, body = berth_model::api::ErrorBody), (status = 422, body = berth_model::api::ErrorBody),
        (status = 429, body = berth_model::api::ErrorBody), (status = 503, body = berth_model::api::ErrorBody)))]
pub async fn upload(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    Path((name, path)): Path<(String, String)>,
    Query(q): Query<UploadQuery>,
    body: Body,
) -> Result<(StatusCode, axum::Json<UploadState>), ApiError> {
    // As the spec states them (a size past i64 could never be stored, nor counted).
    crate::error::in_range("offset", q.offset, 0, i64::MAX as u64)?;
    if let Some(size) = q.size {
        crate::error::in_range("size", size, 0, i64::MAX as u64)?;
    }
    let (f, _) = writable(&m, &user, &name, q.project.clone()).await?;
    let rel = files::clean(&path)?;
    if let Some(h) = &q.sha256
        && (h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        return Err(ApiError::bad_request("sha256 must be 64 hex digits"));
    }
    let slot = m.folders.enter(&user)?;
    let name = files::partial_name(&rel);
    if q.offset == 0 {
        // A new upload: the abandoned ones go first.
        m.folders.sweep_partials(slot.clone()).await;
    }
    // What the folder holds (with a quota only: it may walk the folder).
    let used = match f.quota_bytes {
        Some(_) => m.folders.usage(f.id).await?.bytes,
        None => 0,
    };
    let partials = m.folders.partials();
    let new = partials.reserve(&f, &name, user.id, q.size.unwrap_or(0).max(q.offset), used, q.offset == 0)?;
    let root = m.folders.root().to_path_buf();
    let (r2, rel2, offset) = (root.clone(), rel.clone(), q.offset);
    let file = match blocking(&slot, move || files::open_partial(&r2, f.id, &rel2, offset)).await {
        Ok(file) => file,
        Err(e) => {
            if new {
                partials.release(f.id, &name);
            }
            return Err(e);
        }
    };
    let mut file = tokio::fs::File::from_std(file);
    let mut have = q.offset;
    let mut piece = 0u64;
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ApiError::bad_request(format!("the upload was cut off: {e}")))?;
        piece += chunk.len() as u64;
        have += chunk.len() as u64;
        if let Some(size) = q.size.filter(|s| have > *s) {
            return Err(ApiError::bad_request(format!(
                "the upload holds more than the {size} bytes its `size` announced: send the file's real size"
            )));
        }
        if piece > MAX_PIECE {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "the piece is larger than 1 GiB: send the file in pieces of at most 1 GiB",
            ));
        }
        // A client that announced no size is held to the quota as the bytes come; refused,
        // what it sent is dropped (it reserved nothing more).
        if let Err(e) = partials.grow(&f, &name, used, have) {
            drop(file);
            drop_upload(&m, &slot, f.id, rel).await?;
            return Err(e);
        }
        file.write_all(&chunk).await.map_err(FileError::Io)?;
    }
    file.flush().await.map_err(FileError::Io)?;
    drop(file);
    let Some(want) = q.sha256 else {
        return Ok((StatusCode::OK, axum::Json(UploadState { have, done: false })));
    };
    let dir = m.folders.dir(f.id);
    let mtime = q.mtime;
    let (r2, rel2) = (root.clone(), rel.clone());
    match blocking(&slot, move || files::commit(&r2, f.id, &dir, &rel2, &want, mtime)).await {
        Ok(size) => {
            partials.release(f.id, &name);
            m.folders.grew(f.id, size, 1);
            Ok((StatusCode::CREATED, axum::Json(UploadState { have: size, done: true })))
        }
        Err(e) => {
            drop_upload(&m, &slot, f.id, rel).await?;
            Err(e)
        }
    }
}

/// Ends upload `rel` to folder `id`, refused: its partial file and its reservation go.
async fn drop_upload(m: &Manager, slot: &Slot, id: i64, rel: std::path::PathBuf) -> Result<(), ApiError> {
    m.folders.partials().release(id, &files::partial_name(&rel));
    let root = m.folders.root().to_path_buf();
    blocking(slot, move || {
        files::drop_partial(&root, id, &rel);
        Ok(())
    })
    .await
}
