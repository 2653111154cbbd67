//! A cache node in the test process: the real server (its workers on an ephemeral port of
//! 127.0.0.1, a store in a temp dir, the key file where `berth cache serve` keeps it), tokens
//! for it, and raw HTTP/1.1 requests over a `TcpStream` (so the tests control every byte).

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use berth_cache::Store;
use berth_cache::server::{self, Node, NodeTls};
use berth_cache::token::{Claims, Key, unix_now};

/// A running node.
pub struct Srv {
    pub addr: SocketAddr,
    pub node: Arc<Node>,
    pub key: Key,
    /// The node's data dir, `<tmp>/cache` (the temp dir above it is the test's).
    pub dir: PathBuf,
    pub tmp: tempfile::TempDir,
}

impl Srv {
    /// Starts a node of `capacity` bytes on a new data dir.
    pub fn start(capacity: u64) -> Srv {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("cache");
        Self::start_in(tmp, dir, capacity)
    }

    /// Starts a node on `dir` (inside `tmp`), which may hold an older node's data.
    pub fn start_in(tmp: tempfile::TempDir, dir: PathBuf, capacity: u64) -> Srv {
        Self::start_with(tmp, dir, capacity, NodeTls::default())
    }

    /// Starts `n` nodes sharing one key (tokens of any of them work on all), each routing
    /// over all of them.
    pub fn start_cluster(n: usize, capacity: u64) -> Vec<Srv> {
        let first = Srv::start(capacity);
        let mut nodes = vec![];
        for _ in 1..n {
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path().join("cache");
            std::fs::create_dir(&dir).unwrap();
            std::fs::copy(first.dir.join("cache.key"), dir.join("cache.key")).unwrap();
            nodes.push(Srv::start_in(tmp, dir, capacity));
        }
        nodes.insert(0, first);
        let members: Vec<serde_json::Value> =
            nodes.iter().map(|s| serde_json::json!({"name": format!("http://{}", s.addr)})).collect();
        let body = serde_json::to_vec(&members).unwrap();
        for s in &nodes {
            let (st, answer) = s.request("PUT", "/v1/members", Some(&s.token(&[], true)), &body);
            assert_eq!(st, 200, "{answer}");
        }
        nodes
    }

    /// Starts a node serving HTTPS with `tls`.
    pub fn start_tls(capacity: u64, tls: NodeTls) -> Srv {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("cache");
        Self::start_with(tmp, dir, capacity, tls)
    }

    fn start_with(tmp: tempfile::TempDir, dir: PathBuf, capacity: u64, tls: NodeTls) -> Srv {
        // in `berth cache serve`'s order: the store makes an older data dir private first
        let store = Arc::new(Store::open(&dir, capacity).unwrap());
        let key = Key::load_or_create(&dir.join("cache.key")).unwrap();
        let addr = "127.0.0.1:0".parse().unwrap();
        let (hold, addr) = server::reserve(addr).unwrap();
        let scheme = if tls.server.is_some() { "https" } else { "http" };
        let node = Arc::new(Node::new(store, key.clone(), format!("{scheme}://{addr}"), vec![], tls));
        let addr = server::spawn_workers(addr, node.clone(), 1).unwrap();
        drop(hold);
        Srv { addr, node, key, dir, tmp }
    }

    /// A token for `projects` (an admin token when `admin`).
    pub fn token(&self, projects: &[&str], admin: bool) -> String {
        let projects = projects.iter().map(|p| p.to_string()).collect();
        self.key.sign(&Claims { sub: "test".into(), projects, admin, exp: unix_now() + 3600 })
    }

    pub fn connect(&self) -> TcpStream {
        let c = TcpStream::connect(self.addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        c
    }

    /// One request on a new connection: its status and body.
    pub fn request(&self, method: &str, path: &str, token: Option<&str>, body: &[u8]) -> (u16, String) {
        let mut c = self.connect();
        let auth = token.map(|t| format!("authorization: Bearer {t}\r\n")).unwrap_or_default();
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nhost: x\r\n{auth}content-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        req.extend_from_slice(body);
        c.write_all(&req).unwrap();
        let mut answer = vec![];
        c.read_to_end(&mut answer).unwrap();
        split_answer(&answer)
    }
}

/// Status and body of a whole answer.
pub fn split_answer(answer: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(answer);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.get(9..12).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("not an answer: {text:?}"));
    (status, body.to_string())
}

/// Every directory and file under `root`, `root` included.
pub fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![root.to_path_buf()];
    let mut i = 0;
    while i < out.len() {
        if out[i].is_dir() {
            let mut more: Vec<PathBuf> = std::fs::read_dir(&out[i]).unwrap().map(|e| e.unwrap().path()).collect();
            more.sort();
            out.extend(more);
        }
        i += 1;
    }
    out
}

/// A node TLS config serving a self-signed certificate for `localhost`, and a client config
/// trusting it.
pub fn self_signed_tls() -> (NodeTls, Arc<rustls::ClientConfig>) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap().self_signed(&key).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let der = rustls::pki_types::PrivatePkcs8KeyDer::from(key.serialize_der());
    let server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], der.into())
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.der().clone()).unwrap();
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    (NodeTls { server: Some(Arc::new(server)), client: None }, Arc::new(client))
}
