//! `berth port-forward ID [LOCAL:]REMOTE... [--kernel N]`: listens on local ports and carries
//! every connection to them, through the manager and the node's agent, to a port on the
//! kernel's loopback (like `kubectl port-forward`). One WebSocket per connection, so many run
//! at once and a slow one holds up no other. It stops when the job ends.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use berth_model::stream::{self, CONTROL, MAX_CHUNK, OPENED, STDIN, STDIN_EOF, STDOUT, StreamEnd};
use berth_model::{JobId, JobState};
use clap::Args;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;

use crate::client::Client;

#[derive(Debug, Args)]
pub struct PortForwardArgs {
    /// The job's id
    #[arg(value_parser = clap::value_parser!(JobId).range(1..), add = crate::completion::job_ids_arg())]
    pub id: JobId,

    /// Ports: `REMOTE` (the same port here), `LOCAL:REMOTE`, or `:REMOTE` (any free port here)
    #[arg(required = true, value_name = "[LOCAL:]REMOTE")]
    pub ports: Vec<PortPair>,

    /// Which kernel of a job with several (0: `main`, 1: `sub1`, ...)
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub kernel: u32,

    /// The local address to listen on (other machines may connect if it is not loopback)
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST), value_name = "IP")]
    pub address: IpAddr,
}

/// A local port (0: any free one) and the kernel's port it goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortPair {
    pub local: u16,
    pub remote: u16,
}

impl FromStr for PortPair {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let port = |p: &str, zero_ok: bool| -> Result<u16, String> {
            match p.parse::<u16>() {
                Ok(0) if !zero_ok => Err(format!("invalid port `{p}` in `{s}`: expected 1 to 65535")),
                Ok(n) => Ok(n),
                Err(_) => Err(format!("invalid port `{p}` in `{s}`: expected [LOCAL:]REMOTE, e.g. 8080:80")),
            }
        };
        match s.split_once(':') {
            Some(("", remote)) => Ok(PortPair { local: 0, remote: port(remote, false)? }),
            Some((local, remote)) => Ok(PortPair { local: port(local, true)?, remote: port(remote, false)? }),
            None => {
                let p = port(s, false)?;
                Ok(PortPair { local: p, remote: p })
            }
        }
    }
}

/// How often the job's state is checked (the forward stops when it ends).
const JOB_POLL: Duration = Duration::from_secs(2);

pub async fn run(args: PortForwardArgs) -> anyhow::Result<ExitCode> {
    let client = crate::client::from_env()?;
    let job = client.job(args.id).await?;
    if job.job.state != JobState::Running {
        bail!("job {} is {}: port-forward needs a running job", args.id, job.job.state);
    }
    for pair in &args.ports {
        let addr = SocketAddr::new(args.address, pair.local);
        let listener = TcpListener::bind(addr).await.with_context(|| format!("cannot listen on {addr}"))?;
        let bound = listener.local_addr()?;
        println!("Forwarding from {bound} -> {} (job {}, kernel {})", pair.remote, args.id, args.kernel);
        let path = format!("/v1/jobs/{}/port-forward?port={}&kernel={}", args.id, pair.remote, args.kernel);
        tokio::spawn(accept(listener, client.clone(), path));
    }
    loop {
        tokio::time::sleep(JOB_POLL).await;
        match client.job(args.id).await {
            Ok(j) if j.job.state == JobState::Running => {}
            Ok(j) => {
                eprintln!("job {} is {}: the forward stops", args.id, j.job.state);
                return Ok(ExitCode::SUCCESS);
            }
            // The manager restarting is no reason to drop the listeners.
            Err(e) => eprintln!("cannot check job {}: {e:#}", args.id),
        }
    }
}

async fn accept(listener: TcpListener, client: Client, path: String) {
    loop {
        let Ok((tcp, peer)) = listener.accept().await else { continue };
        let (client, path) = (client.clone(), path.clone());
        tokio::spawn(async move {
            match open(&client, &path).await {
                Ok(ws) => carry(ws, tcp).await,
                // Told before the connection closes, so whoever sees it closed can read why.
                Err(e) => eprintln!("connection from {peer}: {e:#}"),
            }
        });
    }
}

/// Opens a forward: the stream, once the agent has connected inside the kernel.
async fn open(client: &Client, path: &str) -> anyhow::Result<crate::client::Ws> {
    let mut ws = client.websocket(path).await?;
    match ws.next().await {
        Some(Ok(Message::Binary(b))) => match stream::split(&b) {
            Some((OPENED, _)) => Ok(ws),
            Some((CONTROL, body)) => {
                let end: StreamEnd = serde_json::from_slice(body).unwrap_or_default();
                Err(anyhow!(end.error.unwrap_or_else(|| "the kernel closed the connection".into())))
            }
            _ => bail!("unexpected first message from the manager"),
        },
        Some(Err(e)) => bail!("the stream broke: {e}"),
        _ => bail!("the manager closed the stream"),
    }
}

/// Carries one local connection to the kernel and back.
async fn carry(ws: crate::client::Ws, tcp: TcpStream) {
    let _ = tcp.set_nodelay(true);
    let (mut tx, mut rx) = ws.split();
    let (mut read, mut write) = tcp.into_split();
    let up = async move {
        let mut buf = vec![0u8; MAX_CHUNK];
        loop {
            match read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx.send(Message::binary(stream::frame(STDIN, &buf[..n]))).await.is_err() {
                        return;
                    }
                }
            }
        }
        let _ = tx.send(Message::binary(stream::frame(STDIN_EOF, &[]))).await;
        // Half-closed: the kernel's answer may still come, so the socket stays open.
        std::future::pending::<()>().await;
    };
    let down = async move {
        while let Some(Ok(msg)) = rx.next().await {
            let Message::Binary(b) = msg else { continue };
            match stream::split(&b) {
                Some((STDOUT, data)) if write.write_all(data).await.is_err() => break,
                Some((CONTROL, _)) => break,
                _ => {}
            }
        }
        let _ = write.shutdown().await;
    };
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_pairs() {
        assert_eq!("8080:80".parse(), Ok(PortPair { local: 8080, remote: 80 }));
        assert_eq!("80".parse(), Ok(PortPair { local: 80, remote: 80 }));
        assert_eq!(":80".parse(), Ok(PortPair { local: 0, remote: 80 }));
        assert!("0".parse::<PortPair>().unwrap_err().contains("1 to 65535"));
        assert!("x:80".parse::<PortPair>().unwrap_err().contains("[LOCAL:]REMOTE"));
        assert!("80:0".parse::<PortPair>().is_err());
    }
}
