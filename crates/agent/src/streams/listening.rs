//! Where a kernel's port listens on the node's own network, for the manager's direct path to
//! serving replicas: a kernel that shares the node's network namespace (a process, a container
//! on the host network) and listens on every address (`0.0.0.0`, `::`) can be reached at the
//! node's address without the agent's tunnel; one that listens on the loopback only, from this
//! machine only. A kernel on a network of its own (a container's private network) is not
//! reachable this way, and [`listening`] is not asked.
//!
//! Read from the kernel's (here: the node's) `/proc/net/tcp` and `tcp6`, the sockets in
//! `LISTEN` state on the port. The address reported is the one to connect to, never a guess: a
//! socket bound to every address takes the port on all of them, so no other server can sit on
//! `node:port`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// `st` of a listening socket in `/proc/net/tcp`.
const LISTEN: &str = "0A";

/// The address `port` listens on in this network namespace: every address (the unspecified
/// one) when any socket there takes them all, else the first bound one; `None` when nothing
/// listens (or the tables cannot be read).
pub(super) fn listening(port: u16) -> Option<IpAddr> {
    let v4 = std::fs::read_to_string("/proc/self/net/tcp").unwrap_or_default();
    let v6 = std::fs::read_to_string("/proc/self/net/tcp6").unwrap_or_default();
    pick(port, &v4, &v6)
}

fn pick(port: u16, v4: &str, v6: &str) -> Option<IpAddr> {
    let all: Vec<IpAddr> = listeners(v4, port).chain(listeners(v6, port)).collect();
    all.iter().find(|a| a.is_unspecified()).or(all.first()).copied()
}

/// The local addresses of the sockets listening on `port` in one table.
fn listeners(table: &str, port: u16) -> impl Iterator<Item = IpAddr> + '_ {
    table.lines().skip(1).filter_map(move |line| {
        let mut fields = line.split_whitespace();
        let local = fields.nth(1)?;
        let state = fields.nth(1)?;
        let (addr, p) = local.split_once(':')?;
        (state == LISTEN && u16::from_str_radix(p, 16).ok()? == port).then(|| parse_addr(addr)).flatten()
    })
}

/// An address as the kernel prints it: the bytes of each 32-bit word in host order, in hex.
fn parse_addr(hex: &str) -> Option<IpAddr> {
    let word = |i: usize| hex.get(i * 8..i * 8 + 8).and_then(|w| u32::from_str_radix(w, 16).ok()).map(u32::to_ne_bytes);
    match hex.len() {
        8 => Some(IpAddr::V4(Ipv4Addr::from(word(0)?))),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            let v6 = Ipv6Addr::from(b);
            // A v4-mapped address (`::ffff:a.b.c.d`) is that v4 address.
            Some(v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str =
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n";

    fn row(local: &str, state: &str) -> String {
        format!("   0: {local} 00000000:0000 {state} 00000000:00000000 00:00000000 00000000     0        0 632 1\n")
    }

    #[test]
    fn a_port_on_every_address_wins_over_a_loopback_one() {
        // 127.0.0.1:8080 listening, 0.0.0.0:8080 listening, a connection from port 8080
        let v4 =
            format!("{HEAD}{}{}{}", row("0100007F:1F90", "0A"), row("00000000:1F90", "0A"), row("0100007F:1F90", "01"));
        let all = pick(8080, &v4, "");
        assert_eq!(all, Some(IpAddr::V4(Ipv4Addr::UNSPECIFIED)), "{v4}");
        let lo = format!("{HEAD}{}", row("0100007F:1F90", "0A"));
        assert_eq!(pick(8080, &lo, ""), Some(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        assert_eq!(pick(8081, &lo, ""), None, "another port");
        let connected = format!("{HEAD}{}", row("0100007F:1F90", "01"));
        assert_eq!(pick(8080, &connected, ""), None, "a connection is no listener");
    }

    #[test]
    fn v6_tables_are_read_word_by_word() {
        let any = format!("{HEAD}{}", row("00000000000000000000000000000000:1F90", "0A"));
        assert_eq!(pick(8080, "", &any), Some(IpAddr::V6(Ipv6Addr::UNSPECIFIED)));
        let lo = format!("{HEAD}{}", row("00000000000000000000000001000000:1F90", "0A"));
        assert_eq!(pick(8080, "", &lo), Some(IpAddr::V6(Ipv6Addr::LOCALHOST)));
        let mapped = format!("{HEAD}{}", row("0000000000000000FFFF00000100007F:1F90", "0A"));
        assert_eq!(pick(8080, "", &mapped), Some(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    }

    #[test]
    fn this_processes_own_listener_is_found() {
        let l = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        assert_eq!(listening(port), Some(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        drop(l);
        assert_eq!(listening(port), None);
    }
}
