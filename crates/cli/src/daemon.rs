//! The daemon subcommands: `berth up` (manager + local agent in one process), `berth manager`
//! and `berth agent`.

use std::path::PathBuf;

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use berth_agent::AgentConfig;
use berth_manager::{Bootstrap, ManagerConfig};

pub use crate::daemon_args::*;

/// How long a manager that lost the leadership waits for its shutdown before it exits.
const DEPOSED_SHUTDOWN: Duration = Duration::from_secs(10);

/// How long `berth up` waits for the local agent to stop its kernels on Ctrl-C.
const AGENT_STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// Grace between SIGTERM and SIGKILL when kernels are stopped.
const STOP_GRACE: Duration = Duration::from_secs(10);

pub async fn up(args: UpArgs) -> anyhow::Result<()> {
    // Kernels' dirs live below it (`agent/kernels`), so their users must be able to pass.
    let data_dir = crate::datadir::resolve(args.data_dir, crate::datadir::Role::Manager)?;
    let data_dir = prepare_data_dir(&data_dir, Traverse::Allowed)?;
    let trusted_cert = args.manager.tls.trusted_cert();
    let cache = args.cache.start(&data_dir, args.manager.tls.files().as_ref(), trusted_cert.as_deref()).await?;
    let cache_env = cache.as_ref().map(|c| c.env.clone());
    // `berth up` is one machine: its store is always SQLite in its data dir.
    // One machine, one manager: a `berth up` whose store another manager leads (a second
    // `berth up` on the same data dir) stops instead of standing by.
    let refuse = berth_manager::OnStandby(std::sync::Arc::new(|leader: &str| {
        eprintln!(
            "error: another berth already serves this data dir (at {leader}): stop it first, or give this one \
             another --data-dir"
        );
        std::process::exit(1);
    }));
    let handle = start_manager(&data_dir, None, &args.manager, cache_env, Some(refuse), None).await?;
    let url = handle.url.clone();
    let handle_apps = handle.apps_addr;
    let token = remember_admin_token(&data_dir, handle.bootstrap.as_ref())?;
    let creds = match &token {
        Some(t) => Some(
            crate::cred_guard::install(credentials_of(&url, t, trusted_cert.as_deref(), &handle), &data_dir).await?,
        ),
        None => None,
    };

    let stop_jobs = args.shim.stop_jobs;
    let agent = AgentConfig {
        manager_url: url.clone(),
        join_token: handle.join_token.clone(),
        name: host_name(),
        queue: berth_model::DEFAULT_QUEUE.to_string(),
        data_dir: data_dir.join("agent"),
        sysfs_root: PathBuf::from("/sys"),
        fake_gpus: args.fake_gpus,
        topology_file: args.topology,
        run_as: None,
        user_map: args.users.user_map,
        stop_grace: STOP_GRACE,
        address: None,
        labels: Default::default(),
        ca_file: trusted_cert,
        docker: args.docker.options(),
        kernel_shim: Some(kernel_supervisor()),
        stop_jobs: args.shim.stop_jobs,
        favor_dynmods: !args.shim.no_favordynmods,
        local_manager: true,
        cache_url: cache.as_ref().map(|c| c.url.clone()),
        cache_weight: 1,
        metrics_listen: args.metrics_listen,
        usage_interval: args.usage.interval(),
        envs: args.envs.options(),
    };
    // Discover before printing "up" so a bad --topology file fails the command at once.
    berth_agent::discover(&agent).context("cannot discover this machine's hardware")?;
    let (stop_agent, agent_stopped) = tokio::sync::oneshot::channel::<()>();
    let mut agent_task = tokio::spawn(berth_agent::run(agent, async move {
        let _ = agent_stopped.await;
    }));

    match &creds {
        Some(c) => println!("berth is up: {url}  {}", c.describe()),
        None => println!("berth is up: {url}  (no admin token on record: set BERTH_URL and BERTH_TOKEN)"),
    }
    println!("data dir: {}", data_dir.display());
    if let Some(a) = handle_apps {
        println!("app proxy: {a} (jobs' web apps: berth apps ID, berth open ID APP)");
    }
    if let Some(s) = &handle.socket {
        // SAFETY: geteuid cannot fail and touches no memory.
        let who = if unsafe { libc::geteuid() } == 0 { "every local user" } else { "you" };
        println!("local socket: {} ({who}; jobs run as the Unix user who submits them)", s.display());
        // Local users find a root berth's socket at the system path by themselves; anywhere
        // else they need the line that points them at it.
        if s.as_path() != std::path::Path::new(crate::client::credentials::SYSTEM_SOCKET) {
            println!("  other local users: export BERTH_SOCKET={}", s.display());
        }
    }
    if let Some(c) = &cache {
        println!(
            "dataset cache: {} (jobs get BERTH_CACHE_URL and a job token; admin token: berth cache token --admin --key-file {})",
            c.url,
            c.key_file.display()
        );
    }
    if let Some(hint) = path_hint(std::env::current_exe().ok().as_deref(), std::env::var_os("PATH").as_deref()) {
        println!("{hint}");
    }
    println!("press Ctrl-C to stop");
    let stop = shutdown_signal();
    crate::service::ready(&format!("serving {url}"));

    tokio::select! {
        _ = stop => crate::service::stopping(),
        why = handle.deposed() => {
            // Only a second manager on the same store can take the lease over.
            let _ = stop_agent.send(());
            let _ = tokio::time::timeout(AGENT_STOP_TIMEOUT, agent_task).await;
            handle.shutdown().await;
            anyhow::bail!("the manager lost the leadership ({why})");
        }
        res = &mut agent_task => {
            handle.shutdown().await;
            return match res {
                Ok(Ok(())) => Err(anyhow::anyhow!("the local agent stopped unexpectedly")),
                Ok(Err(e)) => Err(e.context("the local agent failed")),
                Err(e) => Err(anyhow::anyhow!("the local agent crashed: {e}")),
            };
        }
    }
    // Bounded: a store that does not answer must not hold up the stop.
    let kept = match stop_jobs {
        true => 0,
        false => tokio::time::timeout(Duration::from_secs(5), handle.jobs_running_on(&host_name())).await.unwrap_or(0),
    };
    if stop_jobs {
        tracing::info!("stopping berth: stopping running kernels, then the manager");
    } else if kept > 0 {
        println!("{}", kept_jobs_note(kept));
    } else {
        tracing::info!("stopping berth");
    }
    let _ = stop_agent.send(());
    match tokio::time::timeout(AGENT_STOP_TIMEOUT, agent_task).await {
        Ok(Ok(Err(e))) => tracing::warn!("agent stopped with an error: {e:#}"),
        Err(_) => tracing::warn!("agent did not stop within {}s", AGENT_STOP_TIMEOUT.as_secs()),
        _ => {}
    }
    handle.shutdown().await;
    if let Some(c) = cache {
        c.task.abort();
    }
    tracing::info!("berth stopped");
    Ok(())
}

pub async fn manager(args: ManagerArgs) -> anyhow::Result<()> {
    // Bad store flags fail before anything is made.
    let store = crate::commands::store::url("--store", args.store.as_deref(), args.store_file.as_deref())?;
    let data_dir = crate::datadir::resolve(args.data_dir, crate::datadir::Role::Manager)?;
    // Local users pass through to the manager's socket (`berth.sock`); the store and the
    // tokens beside it are 0600.
    let data_dir = prepare_data_dir(&data_dir, Traverse::Allowed)?;
    let cache_env = args.cache.env()?;
    // A standby is a started service too: it serves (redirects to the leader) until it leads.
    let on_standby = berth_manager::OnStandby(std::sync::Arc::new(|leader: &str| {
        println!("berth manager stands by: the leader is {leader}");
        crate::service::ready(&format!("standing by for the leader at {leader}"));
    }));
    // The stop handlers go in before the start: it stands by for as long as another manager
    // leads, and SIGINT must end that as SIGTERM does (a handler installed only once it led
    // left a standby with whatever the shell gave it: a background job ignores SIGINT).
    let (stop_tx, mut stop) = tokio::sync::watch::channel(false);
    let signalled = shutdown_signal();
    tokio::spawn(async move {
        signalled.await;
        let _ = stop_tx.send(true);
    });
    let started = start_manager(&data_dir, store, &args.manager, cache_env, Some(on_standby), Some(stop.clone())).await;
    let handle = match started {
        Ok(h) => h,
        Err(e) if e.downcast_ref::<berth_manager::StoppedStandingBy>().is_some() => {
            crate::service::stopping();
            tracing::info!("stopping the berth manager (it stood by)");
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let url = handle.url.clone();
    let trusted_cert = args.manager.tls.trusted_cert();
    if let Some(token) = remember_admin_token(&data_dir, handle.bootstrap.as_ref())? {
        let creds = credentials_of(&url, &token, trusted_cert.as_deref(), &handle);
        let written = crate::cred_guard::install(creds, &data_dir).await?;
        println!("berth manager is up: {url}  {}", written.describe());
    } else {
        println!("berth manager is up: {url}");
    }
    println!("join token for agents: {}", handle.join_token);
    if let Some(a) = handle.apps_addr {
        println!("app proxy: {a} (jobs' web apps: berth apps ID, berth open ID APP)");
    }
    // With TLS, agents need the certificate (or its CA) unless a public CA signed it.
    let ca = trusted_cert.map(|c| format!(" --ca-file {}", c.display())).unwrap_or_default();
    // Listening on every address: other machines reach this one by its name, not loopback.
    let agent_url = if handle.local_addr.ip().is_unspecified() {
        let scheme = url.split("://").next().unwrap_or("http");
        format!("{scheme}://{}:{}", host_name(), handle.local_addr.port())
    } else {
        url.clone()
    };
    println!("  berth agent --manager {agent_url} --join-token {}{ca}", handle.join_token);
    crate::service::ready(&format!("serving {url}"));
    tokio::select! {
        _ = stop.wait_for(|s| *s) => {}
        why = handle.deposed() => {
            crate::service::stopping();
            // A manager cut off from its store may wait long on it: it has stopped acting
            // already, so a bounded shutdown loses nothing.
            if tokio::time::timeout(DEPOSED_SHUTDOWN, handle.shutdown()).await.is_err() {
                tracing::warn!("the shutdown did not finish in {}s: exiting anyway", DEPOSED_SHUTDOWN.as_secs());
            }
            // Non-zero, so that a service manager restarts it, as a standby.
            anyhow::bail!("this manager lost the leadership ({why}): exiting so that it comes back as a standby");
        }
    }
    crate::service::stopping();
    // Through the log, which may be JSON lines (`--log-format json`).
    tracing::info!("stopping the berth manager");
    handle.shutdown().await;
    Ok(())
}

pub async fn agent(args: AgentArgs) -> anyhow::Result<()> {
    let data_dir = crate::datadir::resolve(args.data_dir, crate::datadir::Role::Agent)?;
    let data_dir = prepare_data_dir(&data_dir, Traverse::Denied)?;
    let join_token = match (args.join_token, &args.join_token_file) {
        (_, Some(file)) => crate::service::read_secret_file(file, "join token")?,
        (Some(token), None) => token,
        (None, None) => anyhow::bail!("give the join token: --join-token-file FILE (or BERTH_JOIN_TOKEN)"),
    };
    let config = AgentConfig {
        manager_url: args.manager.trim_end_matches('/').to_string(),
        join_token,
        name: args.name.unwrap_or_else(host_name),
        queue: args.queue,
        data_dir,
        sysfs_root: args.sysfs_root,
        fake_gpus: args.fake_gpus,
        topology_file: args.topology,
        run_as: None,
        user_map: args.users.user_map,
        stop_grace: STOP_GRACE,
        address: args.address.map(|a| a.to_string()),
        labels: args.label.into_iter().collect(),
        ca_file: args.ca_file,
        docker: args.docker.options(),
        kernel_shim: Some(kernel_supervisor()),
        stop_jobs: args.shim.stop_jobs,
        favor_dynmods: !args.shim.no_favordynmods,
        local_manager: false,
        cache_url: args.cache_url,
        cache_weight: args.cache_weight,
        metrics_listen: args.metrics_listen,
        usage_interval: args.usage.interval(),
        envs: args.envs.options(),
    };
    berth_agent::discover(&config).context("cannot discover this machine's hardware")?;
    let stop = shutdown_signal();
    crate::service::ready("running kernels");
    let stopping = async {
        stop.await;
        crate::service::stopping();
    };
    berth_agent::run(config, stopping).await
}

async fn start_manager(
    data_dir: &Path,
    store: Option<berth_store::StoreUrl>,
    flags: &ManagerFlags,
    cache: Option<berth_manager::cache_env::CacheEnv>,
    on_standby: Option<berth_manager::OnStandby>,
    stop: Option<tokio::sync::watch::Receiver<bool>>,
) -> anyhow::Result<berth_manager::ManagerHandle> {
    let (listen, apps) = (flags.listen, &flags.apps);
    // Local users reach the manager over its unix socket, where the kernel vouches for who
    // they are, so their jobs run as them. Only a root manager's agents can run jobs as
    // other users, so only its socket is open to every local user.
    let socket = berth_manager::local::LocalSocket {
        path: berth_manager::local::socket_path(data_dir),
        // SAFETY: geteuid cannot fail and touches no memory.
        everyone: unsafe { libc::geteuid() } == 0,
    };
    let mut metrics = berth_manager::MetricsAccess { public: flags.public_metrics, token_hash: None };
    if let Some(file) = &flags.metrics_token_file {
        metrics = metrics.with_token(&crate::service::read_secret_file(file, "metrics token")?);
    }
    let config = ManagerConfig {
        metrics,
        stop,
        socket: Some(socket),
        data_dir: data_dir.to_path_buf(),
        store,
        listen,
        admin_user: std::env::var("USER").ok().filter(|u| !u.is_empty()).unwrap_or_else(|| "admin".into()),
        config_file: flags.config.clone(),
        heartbeat_timeout: flags.heartbeat_timeout,
        tls: flags.tls.files(),
        cache,
        apps_listen: apps.listen(listen),
        apps_url: apps.apps_url.clone(),
        apps_listen_defaulted: apps.apps_listen.is_none(),
        advertise_url: flags.advertise_url.clone(),
        lease_timeout: flags.lease_timeout,
        on_standby,
        retain: flags.retain,
        folder_root: flags.folder_root.clone(),
        code_limit: flags.code_limit,
    };
    berth_manager::start(config).await.with_context(|| format!("cannot start the manager on {listen}"))
}

/// The credentials of the manager `handle` serves at `url`, for its admin `token`.
fn credentials_of(
    url: &str,
    token: &str,
    ca_file: Option<&Path>,
    handle: &berth_manager::ManagerHandle,
) -> crate::client::credentials::Credentials {
    crate::client::credentials::Credentials {
        url: url.to_string(),
        token: Some(token.to_string()),
        ca_file: ca_file.map(Path::to_path_buf),
        socket: handle.socket.clone(),
        data_dir: None,
    }
}

/// Whether others may pass through a data dir (never list or change it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Traverse {
    Allowed,
    Denied,
}

/// Creates the data dir (0700) or tightens an existing one: nobody but the daemon lists,
/// reads or writes it (`berth.db` holds every job's environment, and the tokens sit beside
/// it); a manager's (`berth up`'s, whose kernels' own dirs are below too) lets others pass
/// (0711) to its unix socket.
fn prepare_data_dir(dir: &Path, traverse: Traverse) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create data directory {}", dir.display()))?;
    let dir = dir.canonicalize().with_context(|| format!("cannot resolve data directory {}", dir.display()))?;
    let mode = match traverse {
        Traverse::Allowed => 0o711,
        Traverse::Denied => 0o700,
    };
    let old = std::fs::metadata(&dir).with_context(|| format!("cannot read data directory {}", dir.display()))?;
    if old.permissions().mode() & 0o777 != mode {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("cannot make data directory {} private (mode {mode:o})", dir.display()))?;
    }
    Ok(dir)
}

/// The admin token of this data dir. The manager stores only its hash and shows the plain
/// token once, on the first start; `berth up` keeps a copy (mode 0600) beside the store so
/// that later starts on another address can still write a working credentials file.
fn remember_admin_token(data_dir: &Path, bootstrap: Option<&Bootstrap>) -> anyhow::Result<Option<String>> {
    let path = data_dir.join("admin-token");
    if let Some(b) = bootstrap {
        write_private(&path, &b.token)?;
        return Ok(Some(b.token.clone()));
    }
    match std::fs::read_to_string(&path) {
        Ok(t) => Ok(Some(t.trim().to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

fn write_private(path: &Path, content: &str) -> anyhow::Result<()> {
    // A new 0600 file renamed over the old one: truncating an existing file keeps its mode.
    berth_cache::private::write_atomic(path, content.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))
}

/// The kernel supervisor that forks process kernels: this very binary (`berth
/// kernel-supervisor`), by `/proc/self/exe` so that it keeps working when the file is replaced
/// (a rebuild, an upgrade) while the agent runs.
fn kernel_supervisor() -> PathBuf {
    PathBuf::from("/proc/self/exe")
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// What a stopping `berth up` says of the `n` jobs it leaves running (by design: the next
/// start takes them over), with the commands that end them.
fn kept_jobs_note(n: usize) -> String {
    let (jobs, keep) = if n == 1 { ("1 job".to_string(), "keeps") } else { (format!("{n} jobs"), "keep") };
    format!(
        "berth: {jobs} {keep} running: the next `berth up` on this data dir takes over running jobs. To stop \
         jobs, start it again and run `berth cancel --state RUNNING`, or start it with --stop-jobs, which stops \
         its jobs when it stops"
    )
}

/// Resolves on Ctrl-C or SIGTERM.
/// Resolves on SIGINT or SIGTERM. The handlers are installed by the call, not the first
/// poll: a daemon that has told systemd it is ready must not die of a SIGTERM sent right
/// after.
pub(crate) fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("install SIGINT handler");
    async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
    }
}

/// When no `berth` on `PATH` is this very binary (`cargo run --release -- up` leaves it in
/// `target/release`), where it is and the one line that puts it on `PATH`.
fn path_hint(exe: Option<&Path>, path: Option<&std::ffi::OsStr>) -> Option<String> {
    let exe = exe?.canonicalize().ok()?;
    let on_path = path
        .map(|p| std::env::split_paths(p).any(|d| d.join("berth").canonicalize().is_ok_and(|b| b == exe)))
        .unwrap_or(false);
    if on_path {
        return None;
    }
    let dir = exe.parent()?;
    Some(format!(
        "the berth CLI is {}; to run `berth` from any shell: export PATH=\"{}:$PATH\" (or: cargo install --path crates/cli)",
        exe.display(),
        dir.display()
    ))
}

#[cfg(test)]
mod path_hint_tests {
    use super::path_hint;

    #[test]
    fn a_binary_not_on_path_gets_the_line_that_puts_it_there() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("berth");
        std::fs::write(&exe, "").unwrap();
        let hint = path_hint(Some(&exe), Some(std::ffi::OsStr::new("/usr/bin:/bin"))).unwrap();
        let real = dir.path().canonicalize().unwrap();
        assert!(hint.contains(&format!("export PATH=\"{}:$PATH\"", real.display())), "{hint}");
        let path = std::env::join_paths([std::path::Path::new("/usr/bin"), dir.path()]).unwrap();
        assert_eq!(path_hint(Some(&exe), Some(&path)), None, "already on PATH");
    }
}
