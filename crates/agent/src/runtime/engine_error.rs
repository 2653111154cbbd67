//! Why the container engine (Docker, or Podman through the same API) could not do what a
//! kernel needed: unreachable, switched off, an image it lacks, a mount the node does not
//! allow, a network or container it could not make. The text is what the job's
//! `LaunchFailed` message (or a refused stream) says: what was wrong and how to fix it.

use std::path::PathBuf;

/// What went wrong with the node's container engine (Docker or Podman).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    #[error("the docker runtime is off on this node (berth agent --no-docker)")]
    Off,
    #[error("cannot reach the Docker daemon ({why}): start dockerd (or set DOCKER_HOST) on this node")]
    DockerUnreachable { why: String },
    #[error(
        "cannot reach podman's API service at `{}` ({why}): install podman on this node (apt-get install podman), \
         or start `podman system service --time=0` there",
        sock.display()
    )]
    PodmanUnreachable { sock: PathBuf, why: String },
    /// A job's mount source the node cannot resolve.
    #[error("mount source `{source_path}` on node {node}: {why}")]
    MountSource { source_path: String, node: String, why: String },
    #[error(
        "mount `{source_path}` is not allowed on node {node} (allowed: {allowed}): ask the admin to add it with `berth agent --allow-mount`"
    )]
    MountNotAllowed { source_path: String, node: String, allowed: String },
    #[error(
        "image `{image}` is not on node {node}: load it there ({tool} load / {tool} pull) or run the agent with --pull"
    )]
    ImageMissing { image: String, node: String, tool: &'static str },
    #[error("cannot inspect image `{image}`: {why}")]
    InspectImage { image: String, why: String },
    #[error("cannot pull image `{image}`: {why}")]
    Pull { image: String, why: String },
    #[error(
        "a Docker network named {name} exists that this agent did not create: remove it (docker network rm {name})"
    )]
    ForeignNetwork { name: String },
    #[error("cannot inspect network {name}: {why}")]
    InspectNetwork { name: String, why: String },
    #[error("cannot create network {name}: {why}")]
    CreateNetwork { name: String, why: String },
    #[error("cannot create the container: {why}")]
    CreateContainer { why: String },
    /// The kernel's log dir or files, or its output files (their text says which and why).
    #[error("{0}")]
    Prepare(String),
}
