//! A test CA and server certificates it signed (rcgen, at test time), for the TLS tests.

/// A test CA and a server certificate it signed, as PEM files in a temp dir.
pub struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    /// `ca.pem`; `server.pem` + `server-key.pem` for `names`, signed by the CA.
    pub fn new(names: &[&str]) -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name.push(rcgen::DnType::CommonName, "berth test CA");
        ca.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::DigitalSignature];
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let ca = rcgen::CertifiedIssuer::self_signed(ca, ca_key).unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();

        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut server = rcgen::CertificateParams::new(names).unwrap();
        server.distinguished_name.push(rcgen::DnType::CommonName, "berth manager");
        server.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = server.signed_by(&key, &ca).unwrap();
        std::fs::write(dir.path().join("server.pem"), cert.pem()).unwrap();
        std::fs::write(dir.path().join("server-key.pem"), key.serialize_pem()).unwrap();
        Pki { dir }
    }

    pub fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    pub fn serve_flags(&self) -> [String; 4] {
        ["--tls-cert".into(), self.path("server.pem"), "--tls-key".into(), self.path("server-key.pem")]
    }
}
