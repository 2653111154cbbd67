//! `GET /v1/images`: which node has which container image, and where Docker is down (from
//! what the agents report, `images.rs`).

use std::sync::Arc;

use axum::extract::State;
use berth_model::api::ImagesView;

use crate::auth::Auth;
use crate::manager::Manager;

/// Which node has which container image, and where Docker is down.
#[utoipa::path(get, path = "/v1/images", tag = "nodes", responses((status = 200, body = ImagesView)))]
pub async fn list(State(m): State<Arc<Manager>>, Auth(_user): Auth) -> axum::Json<ImagesView> {
    axum::Json(m.nodes.images(&m.jobs).await)
}
