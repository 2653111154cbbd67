//! The way from a job network to the node's dataset cache. The manager hands kernels
//! `BERTH_CACHE_URL`, usually `http://127.0.0.1:PORT` (the cache of `berth up` listens on
//! loopback). A container on the host network reaches that; one on a job network
//! ([`super::network`]) does not: its 127.0.0.1 is its own. So for such a kernel the agent
//! listens on the job network's gateway address (the host's side of the bridge, which the
//! containers can reach), forwards every connection to the loopback address, and gives the
//! kernel `http://GATEWAY:PORT` instead.
//!
//! - One forwarder per kernel, owned by the task that launches and supervises it: dropping
//!   the [`Forward`] (the kernel ended, or its launch failed) closes the listener and every
//!   forwarded connection.
//! - Only `http://` URLs with a loopback host (127.0.0.0/8, `localhost`, `[::1]`) are
//!   rewritten: an `https://` URL names the cache's certificate, which the gateway address is
//!   not in; any other host is reached through the bridge's route like any address.
//! - Docker `internal` networks (`--internal-job-networks`) block forwarding off the bridge,
//!   not traffic to the gateway address itself (the host's INPUT chain), so the forwarder
//!   serves them too; a host firewall that drops input from Docker bridges stops it.
//! - The listener takes connections from whatever can reach the gateway address (the job's
//!   containers, the host, and by the host's routing other bridges); the cache checks its
//!   tokens as it does for everyone.
//! - The container keeps the forwarder's addresses in a label (`berth.cache-forward`): an
//!   agent that re-adopts the running container binds the same address again ([`resume`]).
//!   Until then (the agent is down) the kernel cannot reach the cache; if the address was
//!   taken meanwhile, or the cache moved to another port, it cannot after either.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use bollard::query_parameters::InspectNetworkOptions;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::{JoinHandle, JoinSet};

use super::{EngineError, text};

/// The variable the manager puts the cache's URL in.
pub(super) const CACHE_URL: &str = "BERTH_CACHE_URL";

/// Variables holding URLs of the cache besides [`CACHE_URL`], rewritten with it.
const DATASET_VARS: [&str; 2] = ["BERTH_DATASETS", "BERTH_DATASET_HTTP_CACHE"];

/// Connections one forwarder carries at once; more wait in the listen backlog (a data loader
/// opens a few per worker, far below this).
const MAX_CONNECTIONS: usize = 256;

/// A forwarder's listener and connections; dropping it stops them all.
#[derive(Debug)]
pub(super) struct Forward {
    at: SocketAddr,
    target: SocketAddr,
    task: JoinHandle<()>,
}

impl Forward {
    fn spawn(listener: TcpListener, at: SocketAddr, target: SocketAddr) -> Forward {
        Forward { at, target, task: tokio::spawn(serve(listener, target)) }
    }

    /// Where it listens and where it forwards to, as the container's label keeps it.
    pub fn label(&self) -> String {
        format!("{} {}", self.at, self.target)
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        // Aborting the accept loop drops its JoinSet, which aborts every connection.
        self.task.abort();
    }
}

/// A loopback `http://` URL, taken apart: where to connect, and the path to keep.
#[derive(Debug, PartialEq, Eq)]
struct Loopback {
    target: SocketAddr,
    path: String,
}

/// The loopback address and path (with any query) of `url` when it is an `http://` URL with
/// a loopback host and no user info; `None` for anything else.
fn loopback(url: &str) -> Option<Loopback> {
    let u = url::Url::parse(url).ok()?;
    if u.scheme() != "http" || !u.username().is_empty() || u.password().is_some() {
        return None;
    }
    let ip = match u.host()? {
        url::Host::Domain(d) if d.eq_ignore_ascii_case("localhost") => IpAddr::V4(Ipv4Addr::LOCALHOST),
        url::Host::Domain(_) => return None,
        url::Host::Ipv4(v4) => IpAddr::V4(v4),
        url::Host::Ipv6(v6) => IpAddr::V6(v6),
    };
    if !ip.is_loopback() {
        return None;
    }
    // `Url` writes an empty path as `/`: a URL given without one is rewritten without one
    let path = match u.query() {
        None if u.path() == "/" && !url.ends_with('/') => String::new(),
        None => u.path().to_string(),
        Some(q) => format!("{}?{q}", u.path()),
    };
    Some(Loopback { target: SocketAddr::new(ip, u.port_or_known_default()?), path })
}

/// The URL a kernel on the job network uses instead: the forwarder's address, same path.
fn rewritten(at: SocketAddr, path: &str) -> String {
    format!("http://{at}{path}")
}

/// The gateway IPv4 address of a Docker network (its IPAM config), if it has one.
async fn gateway(client: &bollard::Docker, network: &str) -> Result<Option<Ipv4Addr>, EngineError> {
    let n = client
        .inspect_network(network, None::<InspectNetworkOptions>)
        .await
        .map_err(|e| EngineError::InspectNetwork { name: network.to_string(), why: text(&e) })?;
    let configs = n.ipam.and_then(|i| i.config).unwrap_or_default();
    Ok(configs.into_iter().filter_map(|c| c.gateway?.parse::<Ipv4Addr>().ok()).next())
}

/// When `env` points the kernel at a loopback cache, starts a forwarder on `network`'s
/// gateway and points `env` at it. Anything that stands in the way (no gateway, the address
/// cannot be bound) leaves `env` as it was, with a warning: the kernel runs, without the
/// cache.
pub(super) async fn start(
    client: &bollard::Docker,
    network: &str,
    env: &mut BTreeMap<String, String>,
) -> Option<Forward> {
    let Loopback { target, path } = env.get(CACHE_URL).and_then(|u| loopback(u))?;
    let gw = match gateway(client, network).await {
        Ok(Some(gw)) => gw,
        Ok(None) => {
            tracing::warn!(network, "the job network has no IPv4 gateway: its kernels cannot reach the dataset cache");
            return None;
        }
        Err(e) => {
            tracing::warn!(network, "{e}: its kernels cannot reach the dataset cache");
            return None;
        }
    };
    let listener = match TcpListener::bind((gw, 0)).await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(
                network,
                "cannot listen on the job network's gateway {gw} ({e}): its kernels cannot reach the dataset cache; is the agent in the Docker daemon's network namespace?"
            );
            return None;
        }
    };
    let at = listener.local_addr().ok()?;
    tracing::debug!(network, %at, %target, "forwarding the dataset cache onto a job network");
    let new = rewritten(at, &path);
    // The dataset variables name the cache by the same URL (`crate::datasets`).
    if let Some(old) = env.insert(CACHE_URL.to_string(), new.clone()) {
        for var in DATASET_VARS {
            if let Some(v) = env.get_mut(var) {
                *v = v.replace(old.trim_end_matches('/'), new.trim_end_matches('/'));
            }
        }
    }
    Some(Forward::spawn(listener, at, target))
}

/// The forwarder of a re-adopted kernel, from its container's label: bound again on the same
/// address (the kernel's environment names it); `None`, with a warning, when that fails.
pub(super) async fn resume(label: &str) -> Option<Forward> {
    let parsed = label.split_once(' ').and_then(|(a, t)| Some((a.parse().ok()?, t.parse().ok()?)));
    let Some((at, target)) = parsed else {
        tracing::warn!(label, "cannot read a container's dataset cache forwarder label");
        return None;
    };
    match TcpListener::bind(at).await {
        Ok(l) => Some(Forward::spawn(l, at, target)),
        Err(e) => {
            tracing::warn!(%at, "cannot listen on {at} again ({e}): a re-adopted kernel cannot reach the dataset cache");
            None
        }
    }
}

/// Accepts connections and copies each both ways to `target`, at most [`MAX_CONNECTIONS`]
/// at a time.
async fn serve(listener: TcpListener, target: SocketAddr) {
    let limit = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut conns = JoinSet::new();
    loop {
        let Ok(permit) = limit.clone().acquire_owned().await else { return };
        while conns.try_join_next().is_some() {}
        let mut inbound = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                // Out of file descriptors and the like: wait instead of spinning.
                tracing::debug!("dataset cache forwarder cannot accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        conns.spawn(async move {
            let _permit = permit;
            match TcpStream::connect(target).await {
                Ok(mut outbound) => {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
                Err(e) => tracing::debug!(%target, "dataset cache forwarder cannot connect: {e}"),
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn target(url: &str) -> Option<(String, String)> {
        loopback(url).map(|l| (l.target.to_string(), l.path))
    }

    #[test]
    fn only_plain_http_on_loopback_is_rewritten() {
        let t = |a: &str, p: &str| Some((a.to_string(), p.to_string()));
        assert_eq!(target("http://127.0.0.1:7171"), t("127.0.0.1:7171", ""));
        assert_eq!(target("http://127.0.0.1:7171/"), t("127.0.0.1:7171", "/"));
        assert_eq!(target("HTTP://127.1.2.3:80/base/x"), t("127.1.2.3:80", "/base/x"));
        assert_eq!(target("http://localhost:9000"), t("127.0.0.1:9000", ""));
        assert_eq!(target("http://LOCALHOST"), t("127.0.0.1:80", ""));
        assert_eq!(target("http://[::1]:7171/p"), t("[::1]:7171", "/p"));
        assert_eq!(target("http://[::1]"), t("[::1]:80", ""));
        for not in [
            "https://127.0.0.1:7171",
            "http://10.0.0.5:7171",
            "http://cache.example:7171",
            "http://[fe80::1]:7171",
            "http://user@127.0.0.1:7171",
            "http://127.0.0.1:notaport",
            "http://127.0.0.1:70000",
            "http://::1",
            "http://[::1]x",
            "ftp://127.0.0.1/",
            "",
        ] {
            assert_eq!(loopback(not), None, "{not}");
        }
        let at: SocketAddr = "172.18.0.1:40001".parse().unwrap();
        assert_eq!(rewritten(at, "/base"), "http://172.18.0.1:40001/base");
        assert_eq!(rewritten(at, ""), "http://172.18.0.1:40001");
    }

    /// A forwarder (here from one loopback port to another) carries bytes both ways, dropping
    /// it closes its listener, and one resumed from its label serves the same address.
    #[tokio::test]
    async fn forwards_both_ways_until_dropped() {
        let upstream = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let target = upstream.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = upstream.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 5];
                    s.read_exact(&mut buf).await.unwrap();
                    s.write_all(&[b"ok:".as_slice(), &buf].concat()).await.unwrap();
                });
            }
        });
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let at = listener.local_addr().unwrap();
        let fwd = Forward::spawn(listener, at, target);
        let label = fwd.label();
        assert_eq!(label, format!("{at} {target}"));
        round_trips(at).await;
        drop(fwd);
        wait_closed(at).await;

        // A restarted agent binds it again from the container's label.
        let fwd = resume(&label).await.expect("the address is free again");
        round_trips(at).await;
        drop(fwd);
        wait_closed(at).await;
        assert!(resume("garbage").await.is_none());
    }

    async fn round_trips(at: SocketAddr) {
        for _ in 0..3 {
            let mut c = TcpStream::connect(at).await.unwrap();
            c.write_all(b"hello").await.unwrap();
            let mut got = Vec::new();
            c.read_to_end(&mut got).await.unwrap();
            assert_eq!(got, b"ok:hello");
        }
    }

    /// The abort lands at the accept loop's next poll; then nothing listens at `at`.
    async fn wait_closed(at: SocketAddr) {
        for _ in 0..500 {
            if TcpStream::connect(at).await.is_err() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        panic!("the listener at {at} outlived its forwarder");
    }
}
