//! `berth whoami` and the admin commands: users (a new user's token is shown once), projects,
//! join tokens for new agents, queues and the audit log (the tenancy ones in `tenancy.rs`).

use std::path::PathBuf;
use std::process::ExitCode;

use berth_model::api::{CreateUserRequest, QueueUpdate};
use clap::{Args, Subcommand};

use crate::output::{self, OutputArgs};

#[derive(Debug, Args)]
pub struct WhoamiArgs {
    #[command(flatten)]
    pub output: OutputArgs,
}

pub async fn whoami(args: WhoamiArgs) -> anyhow::Result<ExitCode> {
    let client = crate::client::from_env()?;
    let me = client.whoami().await?;
    if args.output.json() {
        output::print_json(&me)?;
    } else {
        let projects =
            if me.projects.is_empty() { String::new() } else { format!(", projects {}", me.projects.join(",")) };
        println!("{} ({}) at {}{projects}", me.user, me.role, client.base_url());
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub struct AdminArgs {
    #[command(subcommand)]
    pub command: AdminCommand,
}

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Manage users
    User {
        #[command(subcommand)]
        command: UserCommand,
    },
    /// Set or remove quotas of users and projects
    Quota {
        #[command(subcommand)]
        command: crate::commands::quota::QuotaCommand,
    },
    /// Manage projects and their members
    Project {
        #[command(subcommand)]
        command: crate::commands::tenancy::ProjectCommand,
    },
    /// Show the audit log of admin actions and token events, newest first
    Audit {
        /// Only entries newer than this, e.g. 7d
        #[arg(long, value_name = "DURATION")]
        since: Option<String>,
        /// At most this many entries (1 to 10000)
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        limit: u32,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Manage join tokens for agents
    JoinToken {
        #[command(subcommand)]
        command: JoinTokenCommand,
    },
    /// Manage queues and their scheduling policies
    Queue {
        #[command(subcommand)]
        command: QueueCommand,
    },
    /// Write a consistent copy of the running manager's store to FILE (SQLite; private)
    Backup {
        /// Where to write it (a SQLite database file)
        file: PathBuf,
    },
    /// Put a backup back as the manager's store; the manager must be stopped (the old store
    /// is kept as berth.db.before-restore)
    Restore {
        /// The backup (from `berth admin backup`)
        file: PathBuf,
        /// The manager's data directory [default: as for `berth manager`]
        #[arg(long, env = "BERTH_DATA_DIR", value_name = "DIR")]
        data_dir: Option<PathBuf>,
    },
    /// Move the manager's store to another database (run on its host, the manager stopped),
    /// or archive old finished jobs (retention)
    Store {
        #[command(subcommand)]
        command: crate::commands::store::StoreCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// Create a queue or change its policy; options left out keep their value. The change is
    /// stored and survives restarts until the queue's entry in the config file changes
    Set(Box<QueueSetArgs>),
    /// Create a queue (fails if it exists); options left out take the recommended policy (as
    /// the default queue's)
    Create(Box<QueueSetArgs>),
    /// Change an existing queue (fails if it does not exist); options left out keep their value
    Update(Box<QueueSetArgs>),
}

#[derive(Debug, Args)]
pub struct QueueSetArgs {
    /// The queue's name
    pub name: String,
    /// Order within a priority band: fifo, lifo, drf, fair-share, las (least attained
    /// service) or qssf (shortest expected service first)
    #[arg(long, value_name = "ORDERING")]
    pub ordering: Option<String>,
    /// What a blocked head job does to the jobs behind it: strict, skip-after-N or backfill
    #[arg(long, value_name = "POLICY")]
    pub head_of_line: Option<String>,
    /// Jobs a pass tries after the first one that cannot start (skip-after, backfill), like
    /// Slurm's bf_max_job_test; at least 1
    #[arg(long, value_name = "N")]
    pub backfill_window: Option<u32>,
    /// Node scoring: binpack or spread
    #[arg(long, value_name = "SCORING")]
    pub scoring: Option<String>,
    /// Time limit assumed for jobs without one (backfill), e.g. 1h
    #[arg(long, value_name = "DURATION")]
    pub default_time_limit: Option<String>,
    /// What happens to a preemptible job stopped for a higher-priority one: off, requeue or cancel
    #[arg(long, value_name = "ACTION")]
    pub preemption: Option<String>,
    /// A job that has run less than this is never preempted, e.g. 10m
    #[arg(long, value_name = "DURATION")]
    pub preempt_min_runtime: Option<String>,
    /// Projects whose jobs may use the queue, comma-separated; `all` opens it to everyone
    #[arg(long, value_name = "P1,P2")]
    pub projects: Option<String>,
    /// Longest time limit a job may ask for, e.g. 24h (`none`: no maximum); jobs without a
    /// limit get the default one
    #[arg(long, value_name = "DURATION")]
    pub max_time_limit: Option<String>,
    /// Nodes the queue takes by name, comma-separated (`none` to clear), whatever queue their
    /// agent asked for
    #[arg(long, value_name = "N1,N2")]
    pub nodes: Option<String>,
    /// Nodes the queue takes by label: KEY=VALUE,... all must match (`none` to clear)
    #[arg(long, value_name = "K=V,...")]
    pub node_labels: Option<String>,
    /// End interactive sessions (jobs serving apps) with no client attached and no app
    /// traffic for this long, e.g. 30m (`none`: never)
    #[arg(long, value_name = "DURATION")]
    pub idle_timeout: Option<String>,
    /// The longest an interactive session may run, e.g. 8h (`none`: as other jobs); sessions
    /// without a time limit get it as theirs
    #[arg(long, value_name = "DURATION")]
    pub max_session: Option<String>,
    /// Blocked jobs that hold a backfill reservation in each pass (1: EASY backfill); at least 1
    #[arg(long, value_name = "N")]
    pub reservations: Option<u32>,
    /// The wait bound: a job pending this long goes first with a firm reservation, e.g. 12h
    /// (`off`: no bound)
    #[arg(long, value_name = "DURATION")]
    pub reserve_after: Option<String>,
    /// The las ordering's levels: device time (1h: one GPU for an hour) at which a job moves
    /// down a level, ascending and comma-separated, e.g. 1h,10h
    #[arg(long, value_name = "D1,D2")]
    pub las_thresholds: Option<String>,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Create a user and print their first API token (shown only once)
    Create {
        /// The user's name
        name: String,
        /// The user's role
        #[arg(long, default_value = "user", value_parser = ["admin", "user"])]
        role: String,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// List users with their role, state and projects
    List {
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Disable a user: their tokens stop working at once (their jobs stay)
    Disable { name: String },
    /// Enable a disabled user again
    Enable { name: String },
}

#[derive(Debug, Subcommand)]
pub enum JoinTokenCommand {
    /// Create a token with which an agent joins the cluster
    Create {
        #[command(flatten)]
        output: OutputArgs,
    },
}

pub async fn run(args: AdminArgs) -> anyhow::Result<ExitCode> {
    let command = match args.command {
        // The store copy opens databases itself, and a restore runs with the manager stopped:
        // no manager to call, no credentials (a purge finds its manager itself).
        AdminCommand::Store { command } => return crate::commands::store::run(command).await,
        AdminCommand::Restore { file, data_dir } => return crate::commands::backup::restore(&file, data_dir).await,
        other => other,
    };
    let client = crate::client::from_env()?;
    match command {
        AdminCommand::Backup { file } => return crate::commands::backup::backup(&client, &file).await,
        // Taken above, before a client is needed.
        AdminCommand::Store { .. } | AdminCommand::Restore { .. } => {
            anyhow::bail!("this admin command runs without a manager")
        }
        AdminCommand::User { command: UserCommand::Create { name, role, output } } => {
            let u = client.create_user(&CreateUserRequest { name, role: Some(role) }).await?;
            if output.json() {
                output::print_json(&u)?;
            } else {
                // The token alone on stdout, so `berth admin user create bob | berth login URL`
                // works; what people read goes to stderr.
                eprintln!("created user {} ({})", u.user, u.role);
                println!("{}", u.token);
                eprintln!(
                    "note: this token is shown only once; give it to {} privately: they set BERTH_URL={} and \
                     BERTH_TOKEN=<token>, or put both in ~/.config/berth/credentials",
                    u.user,
                    client.base_url()
                );
            }
        }
        AdminCommand::User { command: UserCommand::List { output } } => {
            crate::commands::tenancy::list_users(&client, &output).await?;
        }
        AdminCommand::User { command: UserCommand::Disable { name } } => {
            client.set_user_disabled(&name, true).await?;
            println!("user {name} disabled: their tokens no longer work");
        }
        AdminCommand::User { command: UserCommand::Enable { name } } => {
            client.set_user_disabled(&name, false).await?;
            println!("user {name} enabled");
        }
        AdminCommand::Quota { command } => crate::commands::quota::admin(command).await?,
        AdminCommand::Project { command } => crate::commands::tenancy::project(&client, command).await?,
        AdminCommand::Audit { since, limit, output } => {
            crate::commands::tenancy::audit(&client, since.as_deref(), limit, &output).await?;
        }
        AdminCommand::Queue { command } => {
            let (a, must_exist) = match command {
                QueueCommand::Set(a) => (a, None),
                QueueCommand::Create(a) => (a, Some(false)),
                QueueCommand::Update(a) => (a, Some(true)),
            };
            if let Some(must) = must_exist {
                let exists = client.queues().await?.iter().any(|q| q.name == a.name);
                if exists != must {
                    let why = if must {
                        "does not exist: create it with `berth admin queue create`"
                    } else {
                        "already exists: change it with `berth admin queue update`"
                    };
                    anyhow::bail!("queue `{}` {why}", a.name);
                }
            }
            let projects = a.projects.as_deref().map(|p| match p.trim() {
                "all" | "" => Vec::new(),
                p => p.split(',').map(|s| s.trim().to_string()).collect(),
            });
            let list = |s: &str| -> Vec<String> {
                match s.trim() {
                    "none" | "" => Vec::new(),
                    s => s.split(',').map(|x| x.trim().to_string()).collect(),
                }
            };
            let node_labels = match a.node_labels.as_deref().map(list) {
                None => None,
                Some(pairs) => Some(
                    pairs
                        .iter()
                        .map(|p| match p.split_once('=') {
                            Some((k, v)) => Ok((k.to_string(), v.to_string())),
                            None => Err(crate::UsageError::error(format!(
                                "invalid node label `{p}`: use KEY=VALUE, e.g. --node-labels gpu=a100"
                            ))),
                        })
                        .collect::<Result<std::collections::BTreeMap<_, _>, _>>()?,
                ),
            };
            let update = QueueUpdate {
                nodes: a.nodes.as_deref().map(list),
                node_labels,
                projects,
                max_time_limit: a.max_time_limit,
                ordering: a.ordering,
                head_of_line: a.head_of_line,
                backfill_window: a.backfill_window,
                scoring: a.scoring,
                default_time_limit: a.default_time_limit,
                preemption: a.preemption,
                preempt_min_runtime: a.preempt_min_runtime,
                idle_timeout: a.idle_timeout,
                max_session: a.max_session,
                reservations: a.reservations,
                reserve_after: a.reserve_after,
                las_thresholds: a
                    .las_thresholds
                    .as_deref()
                    .map(|s| s.split(',').map(|x| x.trim().to_string()).collect()),
            };
            let q = client.put_queue(&a.name, &update).await?;
            if a.output.json() {
                output::print_json(&q)?;
            } else {
                output::print_table(crate::commands::queues::table(std::slice::from_ref(&q)));
            }
        }
        AdminCommand::JoinToken { command: JoinTokenCommand::Create { output } } => {
            let t = client.create_join_token().await?;
            if output.json() {
                output::print_json(&t)?;
            } else {
                println!("join token: {}", t.token);
                eprintln!(
                    "note: on each new node run `berth agent --manager {} --join-token <token>`",
                    client.base_url()
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
