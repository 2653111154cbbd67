//! Whom a berth client trusts when it dials an `https://` manager (docs/cluster.md): the agent's
//! `wss://` connection, and the CLI's REST calls, which build on the same config.
//!
//! Trusted are the webpki roots (public CAs), the system's trust store (what `update-ca-
//! certificates` installs, or `SSL_CERT_FILE`/`SSL_CERT_DIR`: a site's own CA installed once
//! for the whole machine), plus the certificates of a CA file (`--ca-file`, `BERTH_CA_FILE`). A certificate in the CA file is trusted in two ways: as a CA (the usual
//! chain and host-name checks), and as itself: a manager presenting exactly that certificate
//! (and proving it holds its key, which the handshake always checks) is accepted whatever
//! host name was dialed. That is what makes a self-signed manager certificate work when the
//! agent dials an IP address or another name of the head node, and lets `berth up` trust its
//! own certificate.
//!
//! rustls with the ring provider, as everywhere in berth.

use std::error::Error as StdError;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, InvalidMessage, RootCertStore, SignatureScheme};
use thiserror::Error;

/// Why a CA file cannot be used.
#[derive(Debug, Error)]
pub enum CaFileError {
    #[error("cannot read the CA file {}: {source}: check the path and its permissions", path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("the CA file {} is not valid PEM ({source}): pass the CA certificate as PEM (`-----BEGIN CERTIFICATE-----`)", path.display())]
    BadPem { path: PathBuf, source: pem::Error },
    #[error(
        "the CA file {} holds no certificate: pass the PEM certificate (`-----BEGIN CERTIFICATE-----`) of the CA that signed the manager's certificate",
        path.display()
    )]
    Empty { path: PathBuf },
    #[error("the CA file {} holds a certificate that cannot be a trust anchor ({source}): pass the PEM certificate of the CA that signed the manager's certificate", path.display())]
    BadCertificate { path: PathBuf, source: rustls::Error },
    #[error("cannot set up TLS: {0}")]
    Setup(String),
}

/// The certificates of a PEM CA file, in file order.
pub fn load_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, CaFileError> {
    let bytes = std::fs::read(path).map_err(|source| CaFileError::Read { path: path.to_path_buf(), source })?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| CaFileError::BadPem { path: path.to_path_buf(), source })?;
    if certs.is_empty() {
        return Err(CaFileError::Empty { path: path.to_path_buf() });
    }
    Ok(certs)
}

/// A client config that trusts the webpki roots, the system's store and `ca_file` (see the
/// module comment).
pub fn client_config(ca_file: Option<&Path>) -> Result<ClientConfig, CaFileError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    // A missing or partly unreadable system store is no reason to fail: the other roots stay.
    let system = rustls_native_certs::load_native_certs();
    for e in &system.errors {
        tracing::debug!("system trust store: {e}");
    }
    let (_, unusable) = roots.add_parsable_certificates(system.certs);
    if unusable > 0 {
        tracing::debug!("system trust store: {unusable} certificates are not usable as roots");
    }
    let mut pinned = Vec::new();
    if let Some(path) = ca_file {
        for cert in load_ca_file(path)? {
            roots
                .add(cert.clone())
                .map_err(|source| CaFileError::BadCertificate { path: path.to_path_buf(), source })?;
            pinned.push(cert);
        }
    }
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| CaFileError::Setup(e.to_string()))?;
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| CaFileError::Setup(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Verifier { webpki, pinned }))
        .with_no_client_auth();
    Ok(config)
}

/// webpki verification, plus exact matches of the CA file's certificates.
#[derive(Debug)]
struct Verifier {
    webpki: Arc<WebPkiServerVerifier>,
    pinned: Vec<CertificateDer<'static>>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self.pinned.iter().any(|c| c.as_ref() == end_entity.as_ref()) {
            // The signature checks below still prove the server holds this certificate's key.
            return Ok(ServerCertVerified::assertion());
        }
        self.webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// A TLS failure a user can act on, found in a dial or request error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsFailure {
    /// The manager's certificate was refused; why, e.g. `signed by an unknown CA`.
    Untrusted(String),
    /// The certificate is trusted but names other hosts than the one dialed; rustls's words.
    WrongName(String),
    /// The other end does not speak TLS (a plain `http://` manager dialed as `https://`).
    NotTls,
}

/// The [`TlsFailure`] behind `err` (or an error under it), if there is one.
pub fn classify(err: &(dyn StdError + 'static)) -> Option<TlsFailure> {
    let mut next = Some(err);
    while let Some(e) = next {
        match e.downcast_ref::<rustls::Error>() {
            Some(rustls::Error::InvalidCertificate(
                c @ (CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }),
            )) => return Some(TlsFailure::WrongName(c.to_string())),
            Some(rustls::Error::InvalidCertificate(c)) => {
                return Some(TlsFailure::Untrusted(match c {
                    CertificateError::UnknownIssuer => "signed by an unknown CA".to_string(),
                    CertificateError::BadSignature => "bad signature".to_string(),
                    other => other.to_string(),
                }));
            }
            Some(rustls::Error::InvalidMessage(InvalidMessage::InvalidContentType)) => return Some(TlsFailure::NotTls),
            _ => {}
        }
        // tokio-rustls and hyper carry the rustls error inside an io::Error.
        next = match e.downcast_ref::<io::Error>().and_then(|io| io.get_ref()) {
            Some(inner) => Some(inner as &(dyn StdError + 'static)),
            None => e.source(),
        };
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ca_file_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = |n: &str| dir.path().join(n);
        let e = client_config(Some(&p("missing.pem"))).unwrap_err().to_string();
        assert!(e.starts_with(&format!("cannot read the CA file {}", p("missing.pem").display())), "{e}");

        let key = rcgen::KeyPair::generate().unwrap();
        std::fs::write(p("key.pem"), key.serialize_pem()).unwrap();
        let e = client_config(Some(&p("key.pem"))).unwrap_err().to_string();
        assert!(e.contains("key.pem holds no certificate"), "{e}");

        std::fs::write(p("empty.pem"), "").unwrap();
        let e = client_config(Some(&p("empty.pem"))).unwrap_err().to_string();
        assert!(e.contains("empty.pem holds no certificate"), "{e}");

        std::fs::write(p("cut.pem"), "-----BEGIN CERTIFICATE-----\nMIIB\n").unwrap();
        let e = client_config(Some(&p("cut.pem"))).unwrap_err().to_string();
        assert!(e.contains("cut.pem is not valid PEM"), "{e}");

        std::fs::write(p("junk.pem"), "-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n").unwrap();
        let e = client_config(Some(&p("junk.pem"))).unwrap_err().to_string();
        assert!(e.contains("junk.pem holds a certificate that cannot be a trust anchor"), "{e}");

        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap().self_signed(&key).unwrap();
        std::fs::write(p("ca.pem"), cert.pem()).unwrap();
        assert!(client_config(Some(&p("ca.pem"))).is_ok());
        assert!(client_config(None).is_ok());
    }

    #[test]
    fn tls_failures_are_found_under_io_errors() {
        let inner = rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
        let io = io::Error::new(io::ErrorKind::InvalidData, inner);
        assert_eq!(classify(&io), Some(TlsFailure::Untrusted("signed by an unknown CA".into())));
        let inner = rustls::Error::InvalidMessage(InvalidMessage::InvalidContentType);
        assert_eq!(classify(&io::Error::new(io::ErrorKind::InvalidData, inner)), Some(TlsFailure::NotTls));
        let other = io::Error::new(io::ErrorKind::ConnectionRefused, "refused");
        assert_eq!(classify(&other), None);
    }
}
