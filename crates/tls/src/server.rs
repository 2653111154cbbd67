//! HTTPS/WSS for the manager (`--tls-cert`/`--tls-key`, docs/cluster.md): loading the PEM files
//! into a rustls `ServerConfig`, and a TLS listener that `axum::serve` drives like a plain
//! `TcpListener`, so the REST API and the agents' WebSocket endpoint share one code path.
//!
//! Handshakes run in their own tasks: a slow or silent client must not hold up everyone
//! else's accept. A client that speaks plain HTTP to the TLS port gets a short `400` that says
//! to use `https://` instead of a reset connection it cannot explain.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::ServerConfig;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use thiserror::Error;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// The certificate chain and private key the manager serves (both PEM).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The server certificate first, then any intermediates.
    pub cert: PathBuf,
    /// PKCS#8, PKCS#1 (RSA) or SEC1 (EC) private key of the first certificate.
    pub key: PathBuf,
}

/// Why the certificate or key cannot be served.
#[derive(Debug, Error)]
pub enum TlsError {
    #[error("cannot read {}: {source}: check the path and its permissions", path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("{} is not valid PEM ({source}): pass a PEM file (`-----BEGIN CERTIFICATE-----`)", path.display())]
    BadPem { path: PathBuf, source: pem::Error },
    #[error(
        "{} is not a PEM file: the certificate must be PEM (`-----BEGIN CERTIFICATE-----`); convert a DER file with `openssl x509 -inform der -in FILE -out FILE.pem`",
        path.display()
    )]
    NotPem { path: PathBuf },
    #[error("{} holds no certificate (no `-----BEGIN CERTIFICATE-----` section): pass the certificate file to --tls-cert", path.display())]
    NoCertificate { path: PathBuf },
    #[error(
        "{} holds no private key (no `-----BEGIN PRIVATE KEY-----`, `RSA PRIVATE KEY` or `EC PRIVATE KEY` section): pass the key file to --tls-key",
        path.display()
    )]
    NoKey { path: PathBuf },
    #[error("the key in {} does not match the certificate in {}: pass the key that was made with this certificate", key.display(), cert.display())]
    KeyMismatch { cert: PathBuf, key: PathBuf },
    #[error("cannot serve the certificate in {} with the key in {}: {source}", cert.display(), key.display())]
    Unusable { cert: PathBuf, key: PathBuf, source: rustls::Error },
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read { path: path.to_path_buf(), source })
}

/// The certificates of a PEM file, in file order.
fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::BadPem { path: path.to_path_buf(), source })?;
    if certs.is_empty() {
        let is_pem = bytes.windows(11).any(|w| w == b"-----BEGIN ");
        return Err(if is_pem {
            TlsError::NoCertificate { path: path.to_path_buf() }
        } else {
            TlsError::NotPem { path: path.to_path_buf() }
        });
    }
    Ok(certs)
}

fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read(path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| match e {
        pem::Error::NoItemsFound => TlsError::NoKey { path: path.to_path_buf() },
        source => TlsError::BadPem { path: path.to_path_buf(), source },
    })
}

/// Reads and checks `files`: PEM, a certificate, a key, and the key belonging to the first
/// certificate. The ring provider, as for every TLS use in berth.
pub fn server_config(files: &TlsFiles) -> Result<Arc<ServerConfig>, TlsError> {
    let certs = load_certs(&files.cert)?;
    let key = load_key(&files.key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let unusable = |source| TlsError::Unusable { cert: files.cert.clone(), key: files.key.clone(), source };
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(unusable)?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| match e {
            rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => {
                TlsError::KeyMismatch { cert: files.cert.clone(), key: files.key.clone() }
            }
            e => unusable(e),
        })?;
    // The API offers HTTP/1.1 only (the agents' and CLI's WebSocket upgrades need it); the app
    // listener adds h2 to its copy.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// How long a client may take to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// TLS connections that finished their handshake, for `axum::serve`.
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local_addr: SocketAddr,
    accepting: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    /// Starts accepting on `tcp`; each connection is handshaken in its own task.
    pub fn new(tcp: TcpListener, config: Arc<ServerConfig>) -> io::Result<Self> {
        let local_addr = tcp.local_addr()?;
        let (tx, ready) = mpsc::channel(64);
        let acceptor = TlsAcceptor::from(config);
        let accepting = tokio::spawn(async move {
            loop {
                let (stream, peer) = match tcp.accept().await {
                    Ok(c) => c,
                    Err(e) if is_connection_error(&e) => continue,
                    Err(e) => {
                        // Out of file descriptors and the like: wait rather than spin.
                        tracing::error!("cannot accept a connection: {e}");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                };
                // Small WebSocket frames to agents must not wait for delayed ACKs (Nagle).
                let _ = stream.set_nodelay(true);
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    if let Ok(Some(tls)) =
                        tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake(&acceptor, stream, peer)).await
                    {
                        let _ = tx.send((tls, peer)).await;
                    }
                });
            }
        });
        Ok(Self { ready, local_addr, accepting })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        // Closes the socket: `axum::serve` drops the listener when it shuts down.
        self.accepting.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(c) => c,
            // The accept task holds a sender until it is aborted, which happens on drop only.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local_addr)
    }
}

fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    )
}

/// The first byte of every TLS connection: a handshake record.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

async fn handshake(acceptor: &TlsAcceptor, stream: TcpStream, peer: SocketAddr) -> Option<TlsStream<TcpStream>> {
    let mut first = [0u8; 1];
    match stream.peek(&mut first).await {
        Ok(1) => {}
        _ => return None,
    }
    if first[0] != TLS_HANDSHAKE_RECORD {
        answer_plain_http(stream).await;
        return None;
    }
    match acceptor.accept(stream).await {
        Ok(tls) => Some(tls),
        Err(e) => {
            // An agent or CLI that does not trust the certificate ends up here (its alert).
            tracing::info!(%peer, "tls handshake failed: {e}");
            None
        }
    }
}

/// Answers a plain-HTTP request with `400` and the URL to use, in the API's error body.
async fn answer_plain_http(mut stream: TcpStream) {
    // Read the request head first: closing with unread data would reset the connection
    // before the client reads the answer.
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let body = serde_json::json!({ "error": plain_http_message(&head) }).to_string();
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(answer.as_bytes()).await;
    let _ = stream.shutdown().await;
}

fn plain_http_message(head: &[u8]) -> String {
    let head = String::from_utf8_lossy(head);
    let host = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("host"))
        .map(|(_, v)| v.trim().to_string())
        .filter(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_graphic()));
    match host {
        Some(h) => format!("this berth manager serves https only: use https://{h} instead of http://{h}"),
        None => "this berth manager serves https only: use https:// instead of http://".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Pair {
        dir: tempfile::TempDir,
    }

    impl Pair {
        fn path(&self, name: &str) -> PathBuf {
            self.dir.path().join(name)
        }
        fn files(&self, cert: &str, key: &str) -> TlsFiles {
            TlsFiles { cert: self.path(cert), key: self.path(key) }
        }
    }

    /// `cert.pem`/`key.pem` (a self-signed certificate for localhost) and `other-key.pem`.
    fn pair() -> Pair {
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap().self_signed(&key).unwrap();
        std::fs::write(dir.path().join("cert.pem"), cert.pem()).unwrap();
        std::fs::write(dir.path().join("key.pem"), key.serialize_pem()).unwrap();
        std::fs::write(dir.path().join("other-key.pem"), rcgen::KeyPair::generate().unwrap().serialize_pem()).unwrap();
        std::fs::write(dir.path().join("cert.der"), cert.der().as_ref()).unwrap();
        Pair { dir }
    }

    fn err(files: &TlsFiles) -> String {
        server_config(files).map(|_| ()).unwrap_err().to_string()
    }

    #[test]
    fn a_matching_pair_loads() {
        let p = pair();
        let config = server_config(&p.files("cert.pem", "key.pem")).unwrap();
        assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }

    #[test]
    fn bad_files_say_which_file_and_what_is_wrong() {
        let p = pair();
        let e = err(&p.files("missing.pem", "key.pem"));
        assert!(e.starts_with(&format!("cannot read {}", p.path("missing.pem").display())), "{e}");

        let e = err(&p.files("cert.der", "key.pem"));
        assert!(e.contains("cert.der is not a PEM file"), "{e}");

        // Cert and key swapped: the "cert" file has only a key.
        let e = err(&p.files("key.pem", "cert.pem"));
        assert!(e.contains("key.pem holds no certificate"), "{e}");
        let e = err(&p.files("cert.pem", "cert.pem"));
        assert!(e.contains("cert.pem holds no private key") && e.contains("--tls-key"), "{e}");

        let e = err(&p.files("cert.pem", "other-key.pem"));
        assert!(e.starts_with("the key in") && e.contains("other-key.pem does not match the certificate"), "{e}");

        let truncated = std::fs::read_to_string(p.path("cert.pem")).unwrap().replace("-----END CERTIFICATE-----", "");
        std::fs::write(p.path("truncated.pem"), truncated).unwrap();
        let e = err(&p.files("truncated.pem", "key.pem"));
        assert!(e.contains("truncated.pem is not valid PEM"), "{e}");
    }

    #[test]
    fn plain_http_is_told_the_https_url() {
        let m = plain_http_message(b"GET /v1/health HTTP/1.1\r\nHost: head:7070\r\n\r\n");
        assert_eq!(m, "this berth manager serves https only: use https://head:7070 instead of http://head:7070");
        let m = plain_http_message(b"GET / HTTP/1.0\r\n\r\n");
        assert!(m.ends_with("use https:// instead of http://"), "{m}");
    }
}
