//! The store's admin routes. `POST /v1/admin/backup` (`berth admin backup FILE`): a
//! consistent copy of the store, taken while the manager runs, streamed back as the answer.
//! The copy is written in the data dir (private) and unlinked at once: the open file streams
//! on, and nothing is left behind if the client goes away. `POST /v1/admin/store/purge`
//! (`berth admin store purge --older-than`): one retention pass by hand (`retention.rs`).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use tokio::io::AsyncReadExt;

use berth_model::api::{PurgeRequest, PurgeResult};

use crate::auth::Admin;
use crate::error::ApiError;
use crate::manager::Manager;

/// Back up the store (admin only): a SQLite database file.
#[utoipa::path(post, path = "/v1/admin/backup", tag = "admin",
    responses((status = 200, description = "the store as a SQLite database file", content_type = "application/octet-stream"),
        (status = 403, body = berth_model::api::ErrorBody),
        (status = 409, description = "the store is backed up with its server's tools", body = berth_model::api::ErrorBody)))]
pub async fn backup(State(m): State<Arc<Manager>>, Admin(admin): Admin) -> Result<Response, ApiError> {
    let path = m.data_dir.join(format!("backup-{}.db.tmp", crate::token::new_token()));
    if let Err(e) = m.store.backup(&path).await {
        let _ = std::fs::remove_file(&path);
        return Err(ApiError::new(StatusCode::CONFLICT, format!("cannot back up the store: {e}")));
    }
    let file = tokio::fs::File::open(&path).await;
    let _ = std::fs::remove_file(&path);
    let file =
        file.map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("cannot read the backup: {e}")))?;
    let len = file.metadata().await.map(|md| md.len()).unwrap_or(0);
    m.tenancy.audit(&admin.name, "store.backup", "store", &format!("{len} bytes")).await;
    let chunks = futures_util::stream::unfold(Some(file), |file| async move {
        let mut file = file?;
        let mut buf = vec![0u8; 256 * 1024];
        match file.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok::<_, std::io::Error>(bytes::Bytes::from(buf)), Some(file)))
            }
            Err(e) => Some((Err(e), None)),
        }
    });
    let mut r = Body::from_stream(chunks.boxed()).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(r)
}

/// Archive the finished jobs that ended longer ago than `older_than` (admin only): they leave
/// `berth ps -a` and `berth show`, their usage stays in `berth usage`.
#[utoipa::path(post, path = "/v1/admin/store/purge", tag = "admin", request_body = PurgeRequest,
    responses((status = 200, body = PurgeResult), (status = 400, body = berth_model::api::ErrorBody),
        (status = 403, body = berth_model::api::ErrorBody)))]
pub async fn purge(
    State(m): State<Arc<Manager>>,
    Admin(admin): Admin,
    crate::error::Json(req): crate::error::Json<PurgeRequest>,
) -> Result<axum::Json<PurgeResult>, ApiError> {
    let secs =
        berth_model::parse_duration(&req.older_than).map_err(|e| ApiError::bad_request(format!("older_than: {e}")))?;
    let before = m.clock.now() - jiff::SignedDuration::from_secs(secs as i64);
    let archived = crate::retention::archive_before(&m, before).await?;
    let archive_total = m.store.archived_count().await?;
    let detail = format!("{archived} jobs that ended before {before}");
    m.tenancy.audit(&admin.name, "store.purge", "store", &detail).await;
    tracing::info!(jobs = archived, %before, by = %admin.name, "retention: archived finished jobs by hand");
    Ok(axum::Json(PurgeResult { archived, before, archive_total }))
}
