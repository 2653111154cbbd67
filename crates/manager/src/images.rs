//! Container images per node: what agents report about their Docker (`Register`,
//! `Containers`, applied by `Nodes::containers_changed`), the image sets the scheduler places image jobs by, the reasons of jobs
//! that wait for an image. `GET /v1/images` shows them (`api/images.rs`).

use berth_model::PendingKind;
use berth_model::protocol::ContainerInfo;
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
