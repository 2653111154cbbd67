//! TLS of the CLI's servers: the `--tls-cert`/`--tls-key` flags of the daemons and of
//! `berth cache serve`, and the TLS a cache node serves and reaches other members with.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use berth_cache::server::NodeTls;
use clap::Args;

/// `--tls-cert`/`--tls-key` of `berth up`, `berth manager` and `berth cache serve`: both or
/// neither.
#[derive(Debug, Args)]
pub struct TlsArgs {
    /// Serve HTTPS/WSS only, with this PEM certificate (the server's first, then intermediates).
    #[arg(long, value_name = "CERT.pem", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "KEY.pem", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

impl TlsArgs {
    pub(crate) fn files(&self) -> Option<berth_tls::server::TlsFiles> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(berth_tls::server::TlsFiles { cert: cert.clone(), key: key.clone() }),
            _ => None,
        }
    }

    /// The certificate as an absolute path, for the credentials file and the local agent: a
    /// certificate in a CA file is trusted as itself (see `berth_agent::tls`), so `berth up`
    /// and the CLI on this host trust this manager whatever its certificate's issuer.
    pub(crate) fn trusted_cert(&self) -> Option<PathBuf> {
        self.tls_cert.as_ref().map(|c| std::path::absolute(c).unwrap_or_else(|_| c.clone()))
    }
}

/// The TLS of a cache node: serve with `tls` (cert and key files) when given, reach https://
/// members trusting berth's roots plus `ca_file`. The manager's and agents' loaders.
pub(crate) fn node_tls(tls: Option<&berth_tls::server::TlsFiles>, ca_file: Option<&Path>) -> anyhow::Result<NodeTls> {
    let server = tls.map(berth_tls::server::server_config).transpose()?;
    let client = Arc::new(berth_tls::client::client_config(ca_file)?);
    Ok(NodeTls { server, client: Some(client) })
}
