//! Container images per node: what agents report about their Docker (`Register`,
//! `Containers`, applied by `Nodes::containers_changed`), the image sets the scheduler places image jobs by, the reasons of jobs
//! that wait for an image. `GET /v1/images` shows them (`api/images.rs`).

use std::collections::BTreeMap;

use berth_model::PendingKind;
use berth_model::api::{DockerDown, ImageView, ImagesView};
use berth_model::protocol::{ANY_IMAGE, ContainerInfo};
use berth_sched::PassOutput;

use crate::state::State;

/// The images a node can run now: none while its Docker is down.
pub fn ledger_images(info: &ContainerInfo) -> Vec<String> {
    if info.docker_ok { info.images.iter().map(|i| berth_model::job::image_key(i)).collect() } else { Vec::new() }
}

/// Adds to each `image:` reason the nodes of the job's queue whose Docker is down, since
/// that, not a missing image, may be what to fix.
pub fn explain_waits(st: &State, out: &mut PassOutput) {
    for w in out.waiting.iter_mut().filter(|w| w.reason.kind == PendingKind::Image) {
        let Some(job) = st.job(w.job) else { continue };
        let mut down: Vec<String> = st
            .nodes()
            .iter()
            .filter(|(_, n)| n.queue == job.queue && n.ready && !n.containers.docker_ok)
            .map(|(name, n)| match &n.containers.error {
                Some(e) => format!("{name} ({e})"),
                None => name.clone(),
            })
            .collect();
        down.sort();
        if !down.is_empty() {
            w.reason.message = format!("{}; docker is not usable on {}", w.reason.message, down.join(", "));
        }
    }
}

/// Which node has which image, and where Docker is down (`GET /v1/images`), from the nodes'
/// reports; nodes not ready are left out.
pub fn view(st: &State) -> ImagesView {
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
    view
}
