//! The berth manager: REST API, auth, job queue, scheduling loop and agent hub (DESIGN.md §2).
//!
//! CONTRACT (the `berth` binary builds against these names; keep them stable):
//! - `ManagerConfig` (fields below).
//! - `pub async fn start(config: ManagerConfig) -> anyhow::Result<ManagerHandle>`: opens the
//!   store, runs migrations, bootstraps the admin, binds the listener, spawns everything.
//! - `ManagerHandle { pub url: String, pub local_addr: SocketAddr, pub bootstrap: Option<Bootstrap>,
//!   pub join_token: String, .. }` with `pub async fn shutdown(self)` and `pub async fn wait(self)`.
//! - `Bootstrap { pub user: String, pub token: String }` is `Some` only on the first start of a
//!   data dir: the admin user and its API token, shown once.

use std::net::SocketAddr;
use std::path::PathBuf;

/// How to start a manager.
#[derive(Debug, Clone)]
pub struct ManagerConfig {
    /// Data directory holding `berth.db` (SQLite, WAL).
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    /// Name of the admin user created on first start.
    pub admin_user: String,
    /// Optional TOML config file with queues (`[[queue]] name = "default" head_of_line = "strict"`).
    pub config_file: Option<PathBuf>,
    /// Seconds without heartbeat before a node is `lost`.
    pub heartbeat_timeout: std::time::Duration,
}
