//! Whether the router reaches a replica directly (`apps::direct`) or through its agent's
//! tunnel, decided once per replica, when a probe first passes (before it takes traffic):
//!
//! - the agent said where the replica's port listens on the node's own network (its first
//!   forward's `ForwardOpened::listen`; a kernel on a private network, a container's, says
//!   nothing, and stays on the tunnel);
//! - on every address: the node's address (what its agent reported); on the loopback only:
//!   the loopback, if the node is this machine (its agent reached the manager over the
//!   loopback); on one address: that one;
//! - and a connection to it opens within `apps::direct::CONNECT_TIMEOUT`: a node behind NAT
//!   or a firewall fails here and keeps the tunnel.
//!
//! Who may call the endpoint is decided before routing, the same on both paths (`router`).

use std::net::{IpAddr, SocketAddr};

use crate::apps::proxy::{AppKey, Proxy};
use crate::manager::Manager;

/// Decides how replica `key` (on node `node`) is reached from now on.
pub async fn decide(m: &Manager, proxy: &Proxy, key: &AppKey, node: Option<&str>) {
    let opened = proxy.opened(key);
    let address = match node {
        Some(n) => m.jobs.lock().await.nodes().get(n).and_then(|n| n.address.clone()),
        None => None,
    };
    let target = opened
        .as_ref()
        .and_then(|o| Some(SocketAddr::new(target(o.listen?, address.as_deref()?.parse().ok()?)?, o.port)));
    let route = match target {
        Some(addr) => match crate::apps::direct::connect(addr).await {
            Ok(_) => Some(addr),
            Err(e) => {
                tracing::info!(job = key.job, "replica reached through its agent: {e}");
                None
            }
        },
        None => None,
    };
    if let Some(addr) = route {
        tracing::debug!(job = key.job, %addr, "replica reached directly");
    }
    proxy.routes().set(key, route, opened.and_then(|o| o.token));
}

/// Where to connect to a port listening at `listen` on a node at `node`.
fn target(listen: IpAddr, node: IpAddr) -> Option<IpAddr> {
    if listen.is_unspecified() {
        Some(node)
    } else if listen.is_loopback() {
        // The node's loopback is ours only when the node is this machine.
        node.is_loopback().then_some(listen)
    } else {
        Some(listen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loopback_port_is_reached_only_from_its_own_machine() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(target(ip("0.0.0.0"), ip("10.0.0.5")), Some(ip("10.0.0.5")));
        assert_eq!(target(ip("::"), ip("10.0.0.5")), Some(ip("10.0.0.5")));
        assert_eq!(target(ip("10.0.0.5"), ip("192.168.1.2")), Some(ip("10.0.0.5")));
        assert_eq!(target(ip("127.0.0.1"), ip("10.0.0.5")), None, "another machine's loopback");
        assert_eq!(target(ip("127.0.0.1"), ip("127.0.0.1")), Some(ip("127.0.0.1")));
        assert_eq!(target(ip("::1"), ip("127.0.0.1")), Some(ip("::1")));
    }
}
