//! `GET /v1/images`: which node has which container image, and where Docker is down (from
//! what the agents report, `images.rs`).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use berth_model::api::{DockerDown, ImageView, ImagesView};
use berth_model::protocol::ANY_IMAGE;

use crate::auth::Auth;
use crate::manager::Manager;

/// Which node has which container image, and where Docker is down.
#[utoipa::path(get, path = "/v1/images", tag = "nodes", responses((status = 200, body = ImagesView)))]
pub async fn list(State(m): State<Arc<Manager>>, Auth(_user): Auth) -> axum::Json<ImagesView> {
    let st = m.jobs.lock().await;
    let mut by_image: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut view = ImagesView::default();
    for (name, n) in st.nodes() {
        if !n.ready {
            continue;
        }
        if !n.containers.docker_ok {
            let error = n.containers.error.clone().unwrap_or_else(|| "docker is not available".into());
            view.docker_down.push(DockerDown { node: name.clone(), error });
            continue;
        }
        for image in &n.containers.images {
            if image == ANY_IMAGE {
                view.pulling_nodes.push(name.clone());
            } else {
                by_image.entry(image).or_default().push(name.clone());
            }
        }
    }
    view.images = by_image
        .into_iter()
        .map(|(image, mut nodes)| {
            nodes.sort();
            ImageView { image: image.to_string(), nodes }
        })
        .collect();
    view.pulling_nodes.sort();
    view.docker_down.sort_by(|a, b| a.node.cmp(&b.node));
    axum::Json(view)
}
