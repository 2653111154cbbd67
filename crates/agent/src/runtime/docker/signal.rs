//! Signals sent now to a container kernel (`scancel --signal`). A container's main process
//! is the engine's init, which passes a signal on to the job's command alone: `batch` and
//! `all` go through `docker kill --signal`, so `all` reaches the command but not its children
//! there. Its steps are the commands `docker exec` started.

use berth_model::signal::{SignalTarget, signal_name};

use super::Docker;
use crate::runtime::signal_now::Reached;
use crate::runtime::warning::{StepOwner, signal_steps_of};

/// Sends `sig` to the container kernel `name`.
pub(super) async fn container(docker: &Docker, name: &str, sig: u8, target: SignalTarget) -> Reached {
    let mut batch = false;
    if target != SignalTarget::Steps {
        let opts = bollard::query_parameters::KillContainerOptions { signal: format!("SIG{}", signal_name(sig)) };
        batch = match docker.api().await {
            Ok(api) => match api.kill_container(name, Some(opts)).await {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!("cannot signal container {name}: {e}");
                    false
                }
            },
            Err(e) => {
                tracing::warn!("cannot signal container {name}: {e}");
                false
            }
        };
    }
    let steps = match target {
        SignalTarget::Batch => 0,
        _ => signal_steps_of(&StepOwner::Container(name.to_string()), i32::from(sig)),
    };
    Reached { batch, steps }
}
