//! `berth-client`: a typed client of the berth manager's `/v1` REST and WebSocket API, for the
//! `berth` CLI and for any Rust program that drives a berth cluster.
//!
//! - **Where the manager is** ([`credentials`]): `BERTH_URL`, `BERTH_TOKEN`, `BERTH_SOCKET`,
//!   `BERTH_CA_FILE` and `BERTH_CONTEXT`, else the credentials file that `berth up` and
//!   `berth login` write (with its named contexts, one per cluster), else the socket of a
//!   system `berth up`. [`Client::from_env`] does all of that; [`Client::new`] takes explicit
//!   [`Credentials`].
//! - **Whom it trusts** over `https://`: the public roots, the system's store and the PEM CA
//!   file (`berth_tls::client`), as the agents do, so the CLI and the nodes accept the same
//!   managers. Over the manager's unix socket the kernel, not TLS, guards the connection.
//! - **Several managers** that stand by for each other (a comma-separated URL): requests follow
//!   the leader, and are sent again only when that cannot carry them out twice.
//! - **One method per route**, grouped by resource in modules that each add an `impl Client`
//!   block: `jobs.rs` (submit, list, cancel, signal, logs, apps), `nodes.rs` (nodes, queues,
//!   images, environments), `folders.rs` (data folders, uploads, the code store),
//!   `serving.rs` (endpoints), `tenancy.rs` (whoami, users, projects, tokens, quotas, usage,
//!   audit), `admin.rs` (join tokens, backups, the cache's buckets and members), `ws.rs`
//!   (WebSocket streams). A new route is a method in its resource's module, named after what
//!   it does, taking and returning `berth_model::api` types.
//! - **Errors** are one [`Error`] enum: the manager's refusal with its status, words and typed
//!   reason ([`Error::Refused`], [`Error::refused_status`], [`Error::refused_reason`]: decide
//!   by the reason, never by the words), a manager that cannot be reached (with
//!   its address), a certificate that is not trusted (and which variable fixes it), missing
//!   credentials (and how to log in).
//!
//! The calls are async (tokio). The client does its network I/O on tokio tasks, so a program
//! may keep `SIGPIPE` at its default on the main thread (as `berth ps | head` needs) and block
//! it on the runtime's threads.
//!
//! # Example
//!
//! List the running jobs of the cluster `berth login` (or `berth up`) configured:
//!
//! ```no_run
//! use berth_client::{Client, Error};
//! use berth_model::api::JobListQuery;
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Error> {
//!     let client = Client::from_env()?;
//!     let me = client.whoami().await?;
//!     println!("{} on {}", me.user, client.base_url());
//!     for job in client.jobs(&JobListQuery::default()).await? {
//!         println!("{} {} {:?}", job.id, job.name.as_deref().unwrap_or("-"), job.state);
//!     }
//!     match client.job(999_999).await {
//!         Err(e) if e.refused_status() == Some(reqwest::StatusCode::NOT_FOUND) => println!("no job 999999"),
//!         other => println!("{:?}", other.map(|j| j.job.id)),
//!     }
//!     Ok(())
//! }
//! ```
//!
//! `examples/jobs.rs` is the same as a program (`cargo run -p berth-client --example jobs`).

mod admin;
mod client;
pub mod credentials;
mod error;
mod folders;
mod jobs;
mod leader;
mod nodes;
mod preview;
mod serving;
mod tenancy;
mod ws;

pub use client::{Client, check_urls};
pub use credentials::Credentials;
pub use error::Error;
pub use folders::Piece;
pub use jobs::LogChunk;
pub use preview::SubmitPreview;
pub use ws::{Io, Ws};
