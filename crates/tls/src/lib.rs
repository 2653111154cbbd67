//! berth's TLS, in one place for every side of a connection: [`client`] says whom a berth
//! client (the CLI, an agent, a cache node forwarding to another) trusts when it dials an
//! `https://` or `wss://` address, and [`server`] loads a certificate and key into a rustls
//! `ServerConfig` and wraps a TCP listener for the manager's API and the dataset cache.
//!
//! rustls with the ring provider, as everywhere in berth; no other crate of the workspace
//! builds a TLS config of its own.

pub mod client;
pub mod server;
