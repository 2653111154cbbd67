//! The CLI's side of `berth-client` (the typed client of the manager's API, its credentials
//! and contexts): the context this command runs in (`--context`, `BERTH_CONTEXT`), the
//! client for it, and the client's errors as the CLI acts on them (a refusal's status).

use std::sync::OnceLock;

pub use berth_client::{Client, LogChunk, Piece, Ws, credentials};
use reqwest::StatusCode;

/// The context named by `--context` or `BERTH_CONTEXT` for this command, if any.
static CHOSEN: OnceLock<Option<String>> = OnceLock::new();

/// Names the context this command uses (`--context`, `BERTH_CONTEXT`); main calls it once.
pub fn choose(name: Option<String>) {
    let _ = CHOSEN.set(name.filter(|n| !n.is_empty()));
}

/// The context named for this command, if any.
pub fn chosen() -> Option<&'static str> {
    CHOSEN.get().and_then(|c| c.as_deref())
}

/// A client for the manager of the context this command runs in (see [`choose`]).
pub fn from_env() -> anyhow::Result<Client> {
    Ok(Client::new(credentials::load_context(chosen())?)?)
}

/// The status of a request the manager refused (4xx but 401), if `e` is one.
pub fn refused_with(e: &anyhow::Error) -> Option<StatusCode> {
    e.downcast_ref::<berth_client::Error>().and_then(berth_client::Error::refused_status)
}
