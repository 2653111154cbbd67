//! `berth`: one binary for every role. The daemons (`up`, `manager`, `agent`) live in
//! `daemon.rs`; the user commands talk to a manager over its REST API (the `berth-client`
//! crate, `client.rs`). Called
//! by another name (`sbatch`, `squeue`, `scancel`, `sacct`, `sinfo`, `scontrol`: links to berth), it is
//! that Slurm command (`slurm/`).
//!
//! Errors print as `error: <message>` with the whole cause chain; usage mistakes exit 2 like
//! clap's own errors, everything else 1 (or, for `submit --wait`, the job's exit code).

mod args;
mod client;
mod commands;
mod completion;
mod cred_guard;
mod daemon;
mod daemon_args;
mod datadir;
mod export;
mod help;
mod jobfile;
mod output;
mod placement;
mod run_as;
mod script;
mod servefile;
mod serveflags;
mod service;
mod slurm;
mod specflags;
mod terminal;
mod tls;
mod transfer;

use std::process::ExitCode;

// Job ids as users write them, a job list's columns, and times as typed and printed: the
// same for berth's commands as for Slurm's.
use berth_slurm::{job_ref, jobfields, when};
use clap::{Parser, Subcommand};

/// berth: a GPU/HPC cluster scheduler (batch queues, exact CPU/GPU placement, multi-tenancy)
#[derive(Debug, Parser)]
#[command(name = "berth", version, propagate_version = true, max_term_width = 100)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Which cluster of the credentials file to talk to for this command (`berth context ls`)
    #[arg(long, global = true, env = "BERTH_CONTEXT", value_name = "NAME")]
    context: Option<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start a manager and a local agent in one process (all-in-one)
    Up(daemon::UpArgs),
    /// Run the manager: REST API, scheduler and agent hub
    Manager(daemon::ManagerArgs),
    /// Run a node's agent, which dials the manager and runs its kernels
    Agent(daemon::AgentArgs),
    /// Submit a job: flags and a command, a job file (job.toml) or a batch script
    Submit(commands::submit::SubmitArgs),
    /// Submit a job and attach to it once it starts: a terminal (-t), input (-i) (like srun --pty)
    Run(commands::run::RunArgs),
    /// Attach to a job started by `berth run -i/-t` (or follow another job's output)
    Attach(commands::attach::AttachArgs),
    /// List jobs with their state, queue position and why they wait
    Ps(commands::ps::PsArgs),
    /// Show a job in full: spec, devices per kernel, history, exit code
    Show(commands::show::ShowArgs),
    /// How well a job used its CPUs, memory and GPUs (like seff)
    Eff(commands::eff::EffArgs),
    /// Run a command inside a running job, with its output and exit code (like kubectl exec)
    Exec(commands::exec::ExecArgs),
    /// Inside a job: run a step's tasks over the job's nodes (Slurm's srun)
    Srun(commands::srun::SrunArgs),
    /// List the web apps a job serves (Jupyter, TensorBoard, --app) and their URLs
    Apps(commands::apps::AppsArgs),
    /// Print a one-time link that opens a job's web app in a browser
    Open(commands::apps::OpenArgs),
    /// Forward local ports to ports inside a running job (like kubectl port-forward)
    PortForward(commands::port_forward::PortForwardArgs),
    /// Print a job's output
    Logs(commands::logs::LogsArgs),
    /// Cancel jobs
    Cancel(commands::cancel::CancelArgs),
    /// Wait for jobs to end; the exit code is the job's (of several, the worst), like `wait`
    Wait(commands::wait::WaitArgs),
    /// Stop running jobs and queue them again, keeping their ids (Slurm's scontrol requeue)
    Requeue(commands::requeue::RequeueArgs),
    /// Keep pending jobs from starting until released (Slurm's scontrol hold)
    Hold(commands::hold::HoldArgs),
    /// Let held jobs run (Slurm's scontrol release)
    Release(commands::hold::ReleaseArgs),
    /// List nodes and their GPUs with what is used and free
    Nodes(commands::nodes::NodesArgs),
    /// List the configured managers: which one leads, which stand by, which are down
    Managers(commands::control_plane::ManagersArgs),
    /// List queues with their scheduling policy, nodes and load
    Queues(commands::queues::QueuesArgs),
    /// Show the quotas that apply to you (admins: all) with what is in use
    Quotas(commands::quota::QuotasArgs),
    /// GPU-hours, CPU-hours, jobs by final state and mean wait per user or project (sreport)
    Usage(commands::usage::UsageArgs),
    /// List the container images each node has (for jobs with --image)
    Images(commands::images::ImagesArgs),
    /// Serve a model or any HTTP server: replicas behind /serve/NAME/, probes, autoscaling, tokens
    Serve(commands::serve::ServeArgs),
    /// Data folders: create, list, share, quota, usage (mount them with --folder)
    Folder(commands::folder::FolderArgs),
    /// Upload a file or directory into a data folder (resumable, checked by sha256)
    Upload(commands::transfer::UploadArgs),
    /// Download a file or directory from a data folder (resumable, checked by sha256)
    Download(commands::transfer::DownloadArgs),
    /// List or remove the Python environments nodes built for jobs ([environment], --python)
    Env(commands::envs::EnvArgs),
    /// Show who the configured token belongs to, and their projects
    Whoami(commands::admin::WhoamiArgs),
    /// Store a manager's URL and your API token (read from stdin) in the credentials file
    Login(commands::login::LoginArgs),
    /// Several clusters: add, switch between (use), list and remove their URLs and tokens
    #[command(subcommand)]
    Context(commands::context::ContextCommand),
    /// Create, list and revoke your API tokens
    Token(commands::token::TokenArgs),
    /// Print a one-time link that logs your browser in to the web dashboard
    Ui(commands::ui::UiArgs),
    /// Administration: users, projects, join tokens, queues and the audit log
    Admin(commands::admin::AdminArgs),
    /// Dataset cache: run a node, manage buckets, warm a dataset, show hit ratios
    Cache(commands::cache::CacheArgs),
    /// Replay a job trace (Philly CSV, SWF) in virtual time and compare queue policies
    Sim(commands::sim::SimArgs),
    /// Print a shell completion script: bash, zsh, fish, elvish or powershell
    Completions(commands::generate::CompletionsArgs),
    /// Write the manual pages (berth.1 and one per subcommand)
    Man(commands::generate::ManArgs),
    /// Jobs that ran or waited in a time window, finished or not (like sacct)
    History(commands::history::HistoryArgs),
    /// Link sbatch, squeue, scancel, sacct, sinfo, scontrol, srun, sacctmgr and sshare in DIR to this berth (Slurm's commands)
    InstallSlurmCommands(slurm::install::InstallArgs),
}

/// A mistake in how berth was called (not in the cluster): exits 2, like a clap error.
#[derive(Debug)]
pub struct UsageError(String);

impl UsageError {
    pub fn error(msg: impl Into<String>) -> anyhow::Error {
        anyhow::Error::new(UsageError(msg.into()))
    }
}

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

fn main() -> ExitCode {
    // The kernel supervisor (started by the agent, forks its process kernels) skips
    // everything else: no argument parsing, logging or async runtime in a process that lives
    // as long as the node's jobs.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == berth_agent::runtime::SUPERVISOR_SUBCOMMAND) {
        berth_agent::runtime::supervisor_main(&args[2..]);
    }
    // Called as `srun` (a link to berth): a job step, or an allocation running one.
    if std::path::Path::new(args.first().map(|a| a.as_os_str()).unwrap_or_default()).file_name()
        == Some("srun".as_ref())
    {
        return commands::srun::slurm_srun_main(args);
    }
    // Called as `sacctmgr` or `sshare`: the read-only account queries tools make.
    if let Some(name) = args.first().and_then(|a| berth_slurm::accounting_as(a)) {
        return slurm::accounting_main(name, args);
    }
    // Called as `sbatch`, `squeue`, ... (a link to berth): that command, with Slurm's flags.
    if let Some(tool) = args.first().and_then(|a| slurm::invoked_as(a)) {
        return slurm::main(tool, args);
    }
    // A shell's TAB (`BERTH_COMPLETE=bash berth -- ...`, see `berth completions`): answered, then exit.
    completion::complete_if_asked(|| help::grouped(<Cli as clap::CommandFactory>::command()));
    let matches = help::grouped(<Cli as clap::CommandFactory>::command()).get_matches();
    let cli = <Cli as clap::FromArgMatches>::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // BERTH_PARSE_ONLY: check the command line against these definitions and stop (the
    // README's and docs' commands are checked this way, tests/e2e_readme.rs).
    if std::env::var_os("BERTH_PARSE_ONLY").is_some() {
        return ExitCode::SUCCESS;
    }
    let log_format = match &cli.command {
        Command::Up(a) => Some(a.log.log_format),
        Command::Manager(a) => Some(a.log.log_format),
        Command::Agent(a) => Some(a.log.log_format),
        Command::Cache(c) => c.log_format(),
        _ => None,
    };
    let daemon = log_format.is_some();
    service::init_logging(if daemon { "info" } else { "warn" }, log_format.unwrap_or_default());
    client::choose(cli.context.clone());
    let runtime = match runtime(daemon) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(dispatch(cli.command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            if is_usage_error(&e) { ExitCode::from(2) } else { ExitCode::FAILURE }
        }
    }
}

/// Whether `e` is a mistake in how berth was called: a [`UsageError`] (or `berth-slurm`'s), or
/// a context that does not exist or cannot be named so (the client library's words for them).
pub(crate) fn is_usage_error(e: &anyhow::Error) -> bool {
    e.downcast_ref::<UsageError>().is_some()
        || e.downcast_ref::<berth_client::Error>().is_some_and(|e| e.is_usage())
        || e.downcast_ref::<berth_slurm::Error>().is_some_and(|e| e.is_usage())
}

/// The async runtime of a daemon, or of a client command (which also ends quietly on a
/// closed stdout); call before any other thread starts.
pub(crate) fn runtime(daemon: bool) -> std::io::Result<tokio::runtime::Runtime> {
    if !daemon {
        // Let `berth ps | head` end quietly on a closed pipe instead of panicking in
        // `println!`; daemons keep the default so that a dropped socket is an error, not death.
        // SAFETY: called before any thread starts; resetting a signal to its default is sound.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if !daemon {
        // A client makes a few requests one after the other: one worker is enough, and
        // sizing a pool from the machine's CPUs (cgroup quota files included) was ~1 ms of
        // every `berth submit` (issue 15's idle start is measured through the CLI).
        builder.worker_threads(1);
        // ...but a socket write to a peer that hung up must stay an error (EPIPE), not death:
        // rustls writes alerts with writev, which has no MSG_NOSIGNAL. The runtime's threads
        // block SIGPIPE and the client does its network I/O there (see `client::Client::send`).
        builder.on_thread_start(|| {
            // SAFETY: changes only this thread's signal mask.
            unsafe {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, libc::SIGPIPE);
                libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            }
        });
    }
    builder.enable_all().build()
}

async fn dispatch(command: Command) -> anyhow::Result<ExitCode> {
    use commands::*;
    match command {
        Command::Up(a) => daemon::up(a).await.map(|()| ExitCode::SUCCESS),
        Command::Manager(a) => daemon::manager(a).await.map(|()| ExitCode::SUCCESS),
        Command::Agent(a) => daemon::agent(a).await.map(|()| ExitCode::SUCCESS),
        Command::Submit(a) => submit::run(a).await,
        Command::Run(a) => run::run(a).await,
        Command::Attach(a) => attach::run(a).await,
        Command::Ps(a) => ps::run(a).await,
        Command::Show(a) => show::run(a).await,
        Command::Eff(a) => eff::run(a).await,
        Command::Exec(a) => exec::run(a).await,
        Command::Srun(a) => srun::run(a).await,
        Command::PortForward(a) => port_forward::run(a).await,
        Command::Apps(a) => apps::list(a).await,
        Command::Open(a) => apps::open(a).await,
        Command::Logs(a) => logs::run(a).await,
        Command::Cancel(a) => cancel::run(a).await,
        Command::Wait(a) => commands::wait::run(a).await,
        Command::Requeue(a) => commands::requeue::run(a).await,
        Command::Hold(a) => commands::hold::hold(a).await,
        Command::Release(a) => commands::hold::release(a).await,
        Command::Nodes(a) => nodes::run(a).await,
        Command::Managers(a) => commands::control_plane::run(a).await,
        Command::Queues(a) => queues::run(a).await,
        Command::Quotas(a) => quota::list(a).await,
        Command::Usage(a) => usage::run(a).await,
        Command::Images(a) => commands::images::run(a).await,
        Command::Serve(a) => commands::serve::run(a).await,
        Command::Folder(a) => commands::folder::run(a).await,
        Command::Upload(a) => commands::transfer::upload(a).await,
        Command::Download(a) => commands::transfer::download(a).await,
        Command::Env(a) => commands::envs::run(a).await,
        Command::Whoami(a) => admin::whoami(a).await,
        Command::Login(a) => login::run(a).await,
        Command::Context(a) => commands::context::run(a).await,
        Command::Token(a) => token::run(a).await,
        Command::Ui(a) => commands::ui::run(a).await,
        Command::Admin(a) => admin::run(a).await,
        Command::Cache(a) => cache::run(a).await,
        Command::Sim(a) => sim::run(a),
        Command::Completions(a) => generate::completions(a),
        Command::Man(a) => generate::man(a, help::grouped(<Cli as clap::CommandFactory>::command())),
        Command::History(a) => commands::history::run(a).await,
        Command::InstallSlurmCommands(a) => slurm::install::run(a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
