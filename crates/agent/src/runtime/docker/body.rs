//! What a kernel's container looks like, as pure functions of the job and its binding: the
//! create body (limits, user, environment, mounts, GPUs, network), its labels, and the checks
//! against the admin's mount allow-list. No Docker calls here, so all of it is unit-tested.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use berth_model::protocol::KernelKey;
use berth_model::{Binding, JobSpec, Mount};
use bollard::models::{ContainerCreateBody, DeviceRequest, EndpointSettings, HostConfig, NetworkingConfig};

use super::EngineError;
use super::labels::{
    LABEL_BINDING, LABEL_CACHE_FORWARD, LABEL_DEADLINE, LABEL_JOB, LABEL_KERNEL, LABEL_LIMIT, LABEL_NETWORK,
    LABEL_SCOPE,
};
use crate::runtime::RunUser;

/// Variables of the process environment that the image must define for itself: the host's
/// PATH or HOME mean nothing inside the container.
const HOST_ONLY: [&str; 4] = ["PATH", "HOME", "USER", "LOGNAME"];

/// The variable through which the NVIDIA container runtime picks the GPUs a container sees.
/// Only the agent sets it, from the binding: a job's `--env NVIDIA_VISIBLE_DEVICES=all` or an
/// image's `ENV` would otherwise hand the container every GPU of the node (with `nvidia` as
/// Docker's default runtime, the device request is not the only way in).
pub const NVIDIA_VISIBLE_DEVICES: &str = "NVIDIA_VISIBLE_DEVICES";

/// The [`NVIDIA_VISIBLE_DEVICES`] of a kernel: its bound GPUs' uuids, or `void` (no GPU, no
/// driver files: the NVIDIA runtime then acts as plain runc) for a kernel without GPUs and
/// for fake GPUs, which no runtime could find.
fn nvidia_visible_devices(binding: &Binding, fake_gpus: bool) -> String {
    if binding.gpus.is_empty() || fake_gpus {
        return "void".to_string();
    }
    binding.gpus.iter().map(|g| g.uuid.as_str()).collect::<Vec<_>>().join(",")
}

/// The container name of a kernel: stable, so a repeated create finds the old one.
pub fn container_name(scope: &str, key: &KernelKey) -> String {
    format!("berth-{scope}-{}.{}.{}", key.job_id, key.attempt, key.index)
}

/// Parses `<job>.<attempt>.<index>` back into a key.
pub fn parse_key(s: &str) -> Option<KernelKey> {
    let mut it = s.split('.');
    let k = KernelKey {
        job_id: it.next()?.parse().ok()?,
        attempt: it.next()?.parse().ok()?,
        index: it.next()?.parse().ok()?,
    };
    it.next().is_none().then_some(k)
}

/// Everything `create` needs besides the job.
pub struct Inputs<'a> {
    pub scope: &'a str,
    pub key: KernelKey,
    pub spec: &'a JobSpec,
    pub binding: &'a Binding,
    /// The full environment the process runtime would give (`build_env`).
    pub env: BTreeMap<String, String>,
    pub user: &'a RunUser,
    /// The image's own `USER`, if it sets one (then it wins over the run user).
    pub image_user: Option<&'a str>,
    /// With output files: the entrypoint that redirects into them
    /// ([`crate::runtime::output_files::WRAPPER`]) and the image's own entrypoint, which then
    /// runs with the job's command.
    pub output: Option<(Vec<String>, Vec<String>)>,
    pub pids_max: i64,
    /// Fake GPUs (tests, `--fake-gpus`): no device requests, the environment only.
    pub fake_gpus: bool,
    pub deadline_ms: Option<i64>,
    /// The job's private network ([`super::network`]) when it has several kernels on the
    /// node; `None`: host networking.
    pub network: Option<&'a str>,
    /// The [`LABEL_CACHE_FORWARD`] value when the kernel's cache is forwarded.
    pub cache_forward: Option<String>,
    /// Data folders bound into the container (read-only ones with `ro`, all `nosuid,nodev`
    /// as Docker's binds are).
    pub folders: &'a [berth_model::folder::FolderBind],
    /// Resource limits to ask for (Podman's, see `runtime::podman::ulimits`); `None`: the
    /// engine's own (Docker's containers inherit dockerd's).
    pub ulimits: Option<Vec<bollard::models::ResourcesUlimits>>,
}

/// The create body of a kernel's container.
pub fn create_body(i: &Inputs) -> ContainerCreateBody {
    let mut labels = HashMap::new();
    labels.insert(LABEL_SCOPE.to_string(), i.scope.to_string());
    labels.insert(LABEL_KERNEL.to_string(), crate::logs::key_name(&i.key));
    labels.insert(LABEL_JOB.to_string(), i.key.job_id.to_string());
    labels.insert(LABEL_BINDING.to_string(), serde_json::to_string(i.binding).expect("bindings serialise"));
    if let Some(d) = i.deadline_ms {
        labels.insert(LABEL_DEADLINE.to_string(), d.to_string());
    }
    if let Some(f) = &i.cache_forward {
        labels.insert(LABEL_CACHE_FORWARD.to_string(), f.clone());
    }
    if let Some(l) = i.spec.time_limit_secs {
        labels.insert(LABEL_LIMIT.to_string(), l.to_string());
    }
    if let Some(n) = i.network {
        labels.insert(LABEL_NETWORK.to_string(), n.to_string());
    }
    // On a job network the kernel is `main`, `sub1`, ... by host name and by alias, so the
    // others reach it by that name (Docker's embedded DNS resolves aliases).
    let role = i.network.map(|_| berth_model::job::kernel_role(i.key.index));
    let networking_config = i.network.zip(role.clone()).map(|(n, r)| NetworkingConfig {
        endpoints_config: Some(HashMap::from([(
            n.to_string(),
            EndpointSettings { aliases: Some(vec![r]), ..Default::default() },
        )])),
    });
    // The device variable comes last and once, so it wins over the job's and (a container's
    // variables override the image's) over the image's.
    let devices = nvidia_visible_devices(i.binding, i.fake_gpus);
    let env: Vec<String> = i
        .env
        .iter()
        .filter(|(k, _)| !HOST_ONLY.contains(&k.as_str()) || i.spec.env.contains_key(*k))
        .filter(|(k, _)| k.as_str() != NVIDIA_VISIBLE_DEVICES)
        .map(|(k, v)| format!("{k}={v}"))
        .chain(std::iter::once(format!("{NVIDIA_VISIBLE_DEVICES}={devices}")))
        .collect();
    let user = match i.image_user.filter(|u| !u.is_empty()) {
        Some(_) => None,
        None => Some(format!("{}:{}", i.user.uid, i.user.gid)),
    };
    let device_requests = (!i.binding.gpus.is_empty() && !i.fake_gpus).then(|| {
        vec![DeviceRequest {
            driver: Some("nvidia".into()),
            device_ids: Some(i.binding.gpus.iter().map(|g| g.uuid.clone()).collect()),
            capabilities: Some(vec![vec!["gpu".into()]]),
            ..Default::default()
        }]
    });
    let mem = i.binding.mem_bytes as i64;
    // The run user's supplementary groups too (shared project dirs in mounts), unless the
    // image names its own user.
    let group_add = user
        .as_ref()
        .map(|_| i.user.groups.iter().filter(|g| **g != i.user.gid).map(u32::to_string).collect::<Vec<_>>())
        .filter(|g| !g.is_empty());
    let host_config = HostConfig {
        ulimits: i.ulimits.clone(),
        group_add,
        cpuset_cpus: (!i.binding.cpus.is_empty()).then(|| i.binding.cpuset()),
        cpuset_mems: (!i.binding.mems.is_empty()).then(|| i.binding.memset()),
        memory: (mem > 0).then_some(mem),
        // No swap, like the process runtime's cgroups.
        memory_swap: (mem > 0).then_some(mem),
        pids_limit: Some(i.pids_max),
        // Host networking: kernels see the node's network like processes do, and multi-node
        // jobs rendezvous on MASTER_ADDR:MASTER_PORT of the node. Several kernels of a job on
        // one node get the job's network instead (host names cannot work on the host's).
        network_mode: Some(i.network.unwrap_or("host").to_string()),
        // An init as PID 1 forwards SIGTERM to the command and reaps zombies, so stop and
        // time limit end a container with the same exit codes as a process.
        init: Some(true),
        binds: Some(
            i.spec
                .mounts
                .iter()
                .map(bind_text)
                .chain(
                    i.folders
                        .iter()
                        .map(|f| format!("{}:{}:{}", f.source, f.target, if f.read_only { "ro" } else { "rw" })),
                )
                .collect(),
        ),
        // A private /dev/shm and /tmp, as for processes: tmpfs charged to the container's
        // memory cgroup, bounded by its limit, removed with the container.
        shm_size: Some(if mem > 0 { mem } else { DEFAULT_SHM_BYTES }),
        tmpfs: tmp_tmpfs(i.spec, i.binding.mem_bytes),
        device_requests,
        ..Default::default()
    };
    let interactive = i.spec.interactive() && i.key.index == 0;
    // A holding kernel's wait must run whatever ENTRYPOINT the image names.
    let (entrypoint, cmd) = if i.spec.holds_only(i.key.index) {
        (Some(crate::runtime::HOLD_COMMAND.iter().map(|s| s.to_string()).collect()), Some(Vec::new()))
    } else if let Some((wrapper, image_entrypoint)) = &i.output {
        (Some(wrapper.clone()), Some(image_entrypoint.iter().chain(&i.spec.command).cloned().collect()))
    } else {
        (None, Some(i.spec.command.clone()))
    };
    ContainerCreateBody {
        image: i.spec.image.clone(),
        entrypoint,
        cmd,
        hostname: role,
        networking_config,
        env: Some(env),
        working_dir: i.spec.workdir.clone(),
        user,
        labels: Some(labels),
        attach_stdin: Some(false),
        attach_stdout: Some(false),
        attach_stderr: Some(false),
        // The main kernel of a `berth run -i/-t` job: Docker holds its terminal (or keeps its
        // stdin open) and clients attach through Docker (`streams::attach`).
        tty: Some(interactive && i.spec.tty),
        open_stdin: Some(interactive),
        // Plain input ends with the first client's (`echo data | berth run -i`); a terminal
        // stays open for the next attach.
        stdin_once: Some(interactive && !i.spec.tty),
        host_config: Some(host_config),
        ..Default::default()
    }
}

/// Docker's own `/dev/shm` size, for containers without a memory limit.
const DEFAULT_SHM_BYTES: i64 = 64 << 20;

/// The container's `/tmp` as a tmpfs of at most `mem_bytes` (0: tmpfs's default), unless the
/// job mounts a host path there (Docker refuses two mounts on one target).
fn tmp_tmpfs(spec: &JobSpec, mem_bytes: u64) -> Option<HashMap<String, String>> {
    if spec.mounts.iter().any(|m| Path::new(&m.target) == Path::new("/tmp")) {
        return None;
    }
    let size = if mem_bytes > 0 { format!(",size={mem_bytes}") } else { String::new() };
    Some(HashMap::from([("/tmp".to_string(), format!("rw,nosuid,nodev,mode=1777{size}"))]))
}

/// `source:target:ro|rw`, the `Binds` entry of a mount.
fn bind_text(m: &Mount) -> String {
    format!("{}:{}:{}", m.source, m.target, if m.rw { "rw" } else { "ro" })
}

/// Checks every mount of the job against the admin's allow-list: the host path, with
/// symlinks resolved, must lie under an allowed path.
pub fn check_mounts(mounts: &[Mount], allowed: &[PathBuf], node: &str) -> Result<(), EngineError> {
    for m in mounts {
        let src = Path::new(&m.source);
        let real = src.canonicalize().map_err(|e| EngineError::MountSource {
            source_path: m.source.clone(),
            node: node.to_string(),
            why: e.to_string(),
        })?;
        if !allowed.iter().any(|a| real.starts_with(a.canonicalize().unwrap_or_else(|_| a.clone()))) {
            let list = if allowed.is_empty() {
                "none".to_string()
            } else {
                allowed.iter().map(|a| a.display().to_string()).collect::<Vec<_>>().join(", ")
            };
            return Err(EngineError::MountNotAllowed {
                source_path: m.source.clone(),
                node: node.to_string(),
                allowed: list,
            });
        }
    }
    Ok(())
}

/// A reference as Docker lists it: `busybox` is `busybox:latest`, and Docker Hub's
/// `docker.io/library/` prefix is dropped.
pub fn normalize_image(image: &str) -> String {
    berth_model::job::image_key(image)
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::GpuShare;

    fn inputs<'a>(spec: &'a JobSpec, binding: &'a Binding, user: &'a RunUser) -> Inputs<'a> {
        Inputs {
            scope: "n1-abcd",
            key: KernelKey { job_id: 7, attempt: 1, index: 0 },
            spec,
            binding,
            env: [("PATH", "/host/bin"), ("BERTH_JOB_ID", "7"), ("HOME", "/nonexistent")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            user,
            image_user: None,
            output: None,
            pids_max: 99,
            fake_gpus: false,
            deadline_ms: Some(1000),
            network: None,
            cache_forward: None,
            folders: &[],
            ulimits: None,
        }
    }

    #[test]
    fn a_users_nvidia_visible_devices_never_reaches_a_container() {
        let mut spec = JobSpec::command(["nvidia-smi"]);
        spec.image = Some("cuda:12".into());
        spec.env.insert(NVIDIA_VISIBLE_DEVICES.into(), "all".into());
        let user =
            RunUser { name: "nobody".into(), uid: 65534, gid: 65534, home: "/".into(), switch: true, groups: vec![] };
        let none = Binding::default();
        let mut i = inputs(&spec, &none, &user);
        i.env.insert(NVIDIA_VISIBLE_DEVICES.into(), "all".into());
        let devices = |body: &ContainerCreateBody| -> Vec<String> {
            let env = body.env.as_ref().unwrap();
            assert!(env.last().unwrap().starts_with("NVIDIA_VISIBLE_DEVICES="), "set last: {env:?}");
            env.iter().filter(|e| e.starts_with("NVIDIA_VISIBLE_DEVICES=")).cloned().collect()
        };
        // No GPU: none, and no driver files either (also over an image's `ENV ...=all`).
        assert_eq!(devices(&create_body(&i)), ["NVIDIA_VISIBLE_DEVICES=void"]);
        let binding = Binding {
            gpus: vec![
                GpuShare { uuid: "GPU-a".into(), index: 0, milli: 1000 },
                GpuShare { uuid: "GPU-b".into(), index: 1, milli: 1000 },
            ],
            ..Binding::default()
        };
        let mut i = inputs(&spec, &binding, &user);
        i.env.insert(NVIDIA_VISIBLE_DEVICES.into(), "all".into());
        assert_eq!(devices(&create_body(&i)), ["NVIDIA_VISIBLE_DEVICES=GPU-a,GPU-b"], "the binding's, only");
        i.fake_gpus = true;
        assert_eq!(devices(&create_body(&i)), ["NVIDIA_VISIBLE_DEVICES=void"], "fake GPUs are no devices");
    }

    #[test]
    fn the_body_carries_limits_user_env_mounts_and_gpus() {
        let mut spec = JobSpec::command(["python", "train.py"]);
        spec.image = Some("pytorch:2.4".into());
        spec.mounts.push("/data/imagenet:/data".parse().unwrap());
        spec.mounts.push("/scratch:/scratch:rw".parse().unwrap());
        let binding = Binding {
            node: "n1".into(),
            cpus: vec![0, 1, 2, 3],
            cpu_milli: 4000,
            mems: vec![0],
            mem_bytes: 1 << 30,
            gpus: vec![GpuShare { uuid: "GPU-abc".into(), index: 0, milli: 500 }],
            port: None,
        };
        let user =
            RunUser { name: "nobody".into(), uid: 65534, gid: 65534, home: "/".into(), switch: true, groups: vec![] };
        let body = create_body(&inputs(&spec, &binding, &user));
        let hc = body.host_config.as_ref().unwrap();
        assert_eq!(hc.cpuset_cpus.as_deref(), Some("0-3"));
        assert_eq!(hc.cpuset_mems.as_deref(), Some("0"));
        assert_eq!((hc.memory, hc.memory_swap, hc.pids_limit), (Some(1 << 30), Some(1 << 30), Some(99)));
        assert_eq!(hc.network_mode.as_deref(), Some("host"));
        assert_eq!(hc.shm_size, Some(1 << 30), "/dev/shm is bounded by the memory limit");
        let tmpfs = hc.tmpfs.as_ref().unwrap();
        assert_eq!(tmpfs["/tmp"], format!("rw,nosuid,nodev,mode=1777,size={}", 1u64 << 30));
        assert_eq!(hc.binds.as_ref().unwrap(), &["/data/imagenet:/data:ro", "/scratch:/scratch:rw"]);
        let dr = &hc.device_requests.as_ref().unwrap()[0];
        assert_eq!(dr.device_ids.as_ref().unwrap(), &["GPU-abc"]);
        assert_eq!(body.user.as_deref(), Some("65534:65534"));
        assert_eq!(
            body.env.as_ref().unwrap(),
            &["BERTH_JOB_ID=7", "NVIDIA_VISIBLE_DEVICES=GPU-abc"],
            "host PATH/HOME stay out"
        );
        let labels = body.labels.as_ref().unwrap();
        assert_eq!(labels[LABEL_KERNEL], "7.1.0");
        assert_eq!(parse_key(&labels[LABEL_KERNEL]), Some(KernelKey { job_id: 7, attempt: 1, index: 0 }));
        assert_eq!(serde_json::from_str::<Binding>(&labels[LABEL_BINDING]).unwrap(), binding);

        let mut i = inputs(&spec, &binding, &user);
        i.image_user = Some("trainer");
        i.fake_gpus = true;
        let body = create_body(&i);
        assert_eq!(body.user, None, "the image's USER wins");
        assert!(body.host_config.unwrap().device_requests.is_none());
        assert_eq!(body.hostname, None, "host networking keeps the node's host name");

        // A job that mounts a host path on /tmp keeps it; no limit: Docker's default /dev/shm.
        spec.mounts.push("/scratch:/tmp:rw".parse().unwrap());
        let body = create_body(&inputs(&spec, &Binding::default(), &user));
        let hc = body.host_config.unwrap();
        assert_eq!((hc.tmpfs, hc.shm_size), (None, Some(64 << 20)));
    }

    #[test]
    fn a_holding_container_runs_the_wait_over_the_images_entrypoint() {
        let mut spec = JobSpec::command(["python", "train.py"]);
        spec.image = Some("pytorch:2.4".into());
        spec.launch = berth_model::Launch::First;
        let user = RunUser { name: "u".into(), uid: 1, gid: 1, home: "/".into(), switch: false, groups: vec![] };
        let binding = Binding::default();
        let body = create_body(&inputs(&spec, &binding, &user));
        assert_eq!((body.entrypoint, body.cmd), (None, Some(spec.command.clone())), "kernel 0 runs the command");
        let mut i = inputs(&spec, &binding, &user);
        i.key.index = 1;
        let body = create_body(&i);
        assert_eq!(body.entrypoint.unwrap(), crate::runtime::HOLD_COMMAND);
        assert_eq!(body.cmd, Some(vec![]));
    }

    #[test]
    fn output_files_wrap_the_images_entrypoint_and_the_command() {
        let mut spec = JobSpec::command(["train.py", "--lr", "1"]);
        spec.image = Some("pytorch:2.4".into());
        let user = RunUser { name: "u".into(), uid: 1, gid: 1, home: "/".into(), switch: false, groups: vec![] };
        let binding = Binding::default();
        let mut i = inputs(&spec, &binding, &user);
        let paths = berth_model::output::Paths { stdout: Some("o".into()), stderr: Some("o".into()) };
        let wrapper = crate::runtime::output_files::wrapper_entrypoint(&paths, berth_model::output::OpenMode::Append);
        i.output = Some((wrapper.clone(), vec!["python".into()]));
        let body = create_body(&i);
        assert_eq!(body.entrypoint.as_ref(), Some(&wrapper));
        assert_eq!(&wrapper[..2], ["/bin/sh", "-c"]);
        assert_eq!(&wrapper[3..], ["berth-output", "o", "o", "append"]);
        assert_eq!(body.cmd.unwrap(), ["python", "train.py", "--lr", "1"], "the image's entrypoint, then the command");
    }

    #[test]
    fn kernels_on_a_job_network_are_named_by_role() {
        let mut spec = JobSpec::command(["sh"]);
        spec.image = Some("busybox".into());
        spec.kernels = 3;
        let binding = Binding::default();
        let user =
            RunUser { name: "nobody".into(), uid: 65534, gid: 65534, home: "/".into(), switch: true, groups: vec![] };
        let mut i = inputs(&spec, &binding, &user);
        i.network = Some("berth-n1-abcd-job-7.1");
        i.key.index = 2;
        let body = create_body(&i);
        assert_eq!(body.host_config.as_ref().unwrap().network_mode.as_deref(), Some("berth-n1-abcd-job-7.1"));
        assert_eq!(body.hostname.as_deref(), Some("sub2"));
        let eps = body.networking_config.unwrap().endpoints_config.unwrap();
        assert_eq!(eps["berth-n1-abcd-job-7.1"].aliases.as_deref(), Some(&["sub2".to_string()][..]));
        assert_eq!(body.labels.unwrap()[LABEL_NETWORK], "berth-n1-abcd-job-7.1");
        i.key.index = 0;
        assert_eq!(create_body(&i).hostname.as_deref(), Some("main"));
    }

    #[test]
    fn mounts_outside_the_allow_list_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ok = dir.path().join("data");
        let other = dir.path().join("other");
        std::fs::create_dir_all(ok.join("imagenet")).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        let m = |s: &Path| Mount { source: s.display().to_string(), target: "/x".into(), rw: false };
        assert!(check_mounts(&[m(&ok.join("imagenet"))], std::slice::from_ref(&ok), "n1").is_ok());
        let e = check_mounts(&[m(&other)], std::slice::from_ref(&ok), "n1").unwrap_err().to_string();
        assert!(e.contains("is not allowed on node n1") && e.contains("--allow-mount"), "{e}");
        // A symlink inside the allowed tree that points out of it is refused too.
        std::os::unix::fs::symlink(&other, ok.join("escape")).unwrap();
        assert!(check_mounts(&[m(&ok.join("escape"))], std::slice::from_ref(&ok), "n1").is_err());
        assert!(check_mounts(&[m(&ok)], &[], "n1").unwrap_err().to_string().contains("allowed: none"));
    }
}
