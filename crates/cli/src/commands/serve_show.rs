//! The `berth serve` commands that read: `ls`, `show`, `logs` (a replica's job through
//! `berth logs`' own code) and `token` (create, ls, revoke), plus the endpoint's URL.

use std::process::ExitCode;

use berth_model::JobId;
use berth_model::endpoint::{CreateEndpointToken, EndpointView, ReplicaRoute, ReplicaState};
use clap::{Args, Subcommand};

use crate::UsageError;
use crate::output::{self, OutputArgs};

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Make a token for an endpoint; its secret is printed once
    Create {
        name: String,
        /// What it is for, shown by `ls`
        #[arg(long, default_value = "")]
        label: String,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// List an endpoint's tokens (not their secrets)
    #[command(alias = "list")]
    Ls {
        name: String,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Revoke a token: calls with it are refused from now on
    Revoke { name: String, id: i64 },
}

/// A replica's job: `--job ID`, or the replica at `index` in `berth serve show`'s table.
pub fn pick_replica(view: &berth_model::endpoint::EndpointView, index: Option<usize>) -> anyhow::Result<JobId> {
    let i = index.unwrap_or(0);
    match view.replicas.get(i) {
        Some(r) => Ok(r.job),
        None if view.replicas.is_empty() => anyhow::bail!("endpoint {} has no replicas right now", view.name),
        None => Err(UsageError::error(format!(
            "endpoint {} has {}: --replica takes 0 to {}",
            view.name,
            berth_model::replica::replicas(view.replicas.len() as u64),
            view.replicas.len() - 1
        ))),
    }
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    pub name: String,
    /// The replica: its row in `berth serve show`'s table, from 0 [default: 0]
    #[arg(long, value_name = "N", conflicts_with = "job")]
    pub replica: Option<usize>,
    /// The replica with this job id (also one that has stopped, e.g. of an older revision)
    #[arg(long, value_name = "ID", value_parser = clap::value_parser!(JobId).range(1..))]
    pub job: Option<JobId>,
    /// Keep printing new output until the replica ends
    #[arg(short, long)]
    pub follow: bool,
    /// Print the stderr log instead of stdout
    #[arg(long)]
    pub stderr: bool,
}

/// Where to call the endpoint: its full URL when the manager knows the app listener's
/// address as the caller reaches it, else its path on the app listener.
pub fn endpoint_url(view: &EndpointView) -> String {
    view.url.clone().unwrap_or_else(|| view.path.clone())
}

/// When only the path is known, says where it lives.
pub fn explain_url(url: &str) {
    if url.starts_with('/') {
        eprintln!(
            "the path is on berth's app listener: `berth up --apps-listen` (by default the API's address with the \
             next port, e.g. http://127.0.0.1:7071{url})"
        );
    }
}

pub async fn list(out: OutputArgs) -> anyhow::Result<ExitCode> {
    let eps = crate::client::from_env()?.endpoints().await?;
    if out.json() {
        output::print_json(&eps)?;
        return Ok(ExitCode::SUCCESS);
    }
    if eps.is_empty() {
        eprintln!("no endpoints: create one with berth serve create NAME -- COMMAND");
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = output::table(["NAME", "OWNER", "READY", "REVISION", "ROLLOUT", "RPS", "P50", "P99", "PATH"]);
    for e in eps {
        t.add_row([
            e.name,
            e.owner,
            format!("{}/{}", e.ready, e.desired),
            e.revision.to_string(),
            e.rollout.as_str().to_string(),
            format!("{:.1}", e.request_rate),
            ms(e.p50_ms),
            ms(e.p99_ms),
            e.path,
        ]);
    }
    output::print_table(t);
    Ok(ExitCode::SUCCESS)
}

fn ms(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.0}ms")).unwrap_or_else(|| "-".into())
}

fn state(s: ReplicaState) -> &'static str {
    match s {
        ReplicaState::Starting => "starting",
        ReplicaState::NotReady => "not-ready",
        ReplicaState::Ready => "ready",
        ReplicaState::Draining => "draining",
    }
}

pub async fn show(name: &str, out: OutputArgs) -> anyhow::Result<ExitCode> {
    let client = crate::client::from_env()?;
    let v = client.endpoint(name).await?;
    if out.json() {
        output::print_json(&v)?;
        return Ok(ExitCode::SUCCESS);
    }
    let url = endpoint_url(&v);
    for (k, val) in header(&v, &url) {
        println!("{k:<10} {val}");
    }
    println!();
    if v.replicas.is_empty() {
        println!("no replicas");
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = output::table(["#", "JOB", "REVISION", "STATE", "NODE", "ROUTE", "INFLIGHT", "REASON"]);
    for (i, r) in v.replicas.iter().enumerate() {
        t.add_row([
            i.to_string(),
            r.job.to_string(),
            r.revision.to_string(),
            state(r.state).to_string(),
            output::or_dash(r.node.clone().unwrap_or_default()),
            match r.route {
                Some(ReplicaRoute::Direct) => "direct",
                Some(ReplicaRoute::Tunnel) => "tunnel",
                None => "-",
            }
            .to_string(),
            r.inflight.to_string(),
            output::or_dash(r.reason.clone().unwrap_or_default()),
        ]);
    }
    output::print_table(t);
    Ok(ExitCode::SUCCESS)
}

/// `show`'s header lines, label and value.
fn header(v: &EndpointView, url: &str) -> Vec<(&'static str, String)> {
    let s = &v.spec;
    let scaling = match &s.autoscale {
        None => String::new(),
        Some(a) => {
            let target = match (a.target_inflight, a.target_rps) {
                (Some(n), _) => format!("{n} in flight"),
                (None, Some(r)) => format!("{r} req/s"),
                (None, None) => "-".into(),
            };
            format!(", autoscaling {}-{} at {target} per replica", a.min, a.max)
        }
    };
    let h = &s.health;
    let probe = |p: &Option<String>, dflt: &str| p.clone().unwrap_or_else(|| dflt.to_string());
    let mut lines = vec![
        ("endpoint", v.name.clone()),
        ("owner", v.owner.clone()),
        ("url", url.to_string()),
        ("access", if s.public { "public (no token needed)".into() } else { "token".into() }),
        ("revision", format!("{} (rollout {})", v.revision, v.rollout.as_str())),
        ("replicas", format!("{}/{} ready{scaling}", v.ready, v.desired)),
        (
            "traffic",
            format!(
                "{:.1} req/s, {:.1}% errors, p50 {}, p99 {}",
                v.request_rate,
                v.error_rate * 100.0,
                ms(v.p50_ms),
                ms(v.p99_ms)
            ),
        ),
        ("restarts", v.restarts.to_string()),
        ("command", output::command_line(&s.job.command)),
        ("port", s.port.map(|p| p.to_string()).unwrap_or_else(|| "$PORT".into())),
        (
            "probes",
            format!(
                "ready {}, live {}, every {}, {} failure{}; start within {}, drain {}",
                probe(&h.ready_path, "tcp"),
                probe(&h.live_path, "as ready"),
                output::duration(h.period_secs.into()),
                h.failures,
                if h.failures == 1 { "" } else { "s" },
                output::duration(h.start_timeout_secs.into()),
                output::duration(h.drain_secs.into())
            ),
        ),
        ("created", output::local_time(v.created_at)),
    ];
    if let Some(m) = &v.message {
        lines.push(("message", m.clone()));
    }
    lines
}

pub async fn logs(args: LogsArgs) -> anyhow::Result<ExitCode> {
    let id = match args.job {
        Some(id) => id,
        None => {
            let view = crate::client::from_env()?.endpoint(&args.name).await?;
            let id = pick_replica(&view, args.replica)?;
            if args.replica.is_none() && view.replicas.len() > 1 {
                eprintln!(
                    "berth: replica 0 (job {id}) of {}; pick another with --replica N (berth serve show {})",
                    view.replicas.len(),
                    args.name
                );
            }
            id
        }
    };
    // One log, as `serve logs` always printed: stdout, or stderr with --stderr.
    let a = crate::commands::logs::LogsArgs {
        id,
        follow: args.follow,
        stdout: !args.stderr,
        stderr: args.stderr,
        setup: false,
        kernel: 0,
        tail: None,
    };
    crate::commands::logs::run(a).await
}

pub async fn token(cmd: TokenCommand) -> anyhow::Result<ExitCode> {
    let client = crate::client::from_env()?;
    match cmd {
        TokenCommand::Create { name, label, output: out } => {
            let t = client.create_endpoint_token(&name, &CreateEndpointToken { label }).await?;
            if out.json() {
                output::print_json(&t)?;
                return Ok(ExitCode::SUCCESS);
            }
            let url = match client.endpoint(&name).await {
                Ok(v) => endpoint_url(&v),
                Err(_) => berth_model::endpoint::base_path(&name),
            };
            println!("{}", t.secret);
            eprintln!("token {} for endpoint {name}: the secret above is shown only once", t.token.id);
            eprintln!("call it with: curl -H \"Authorization: Bearer {}\" {url}", t.secret);
            explain_url(&url);
        }
        TokenCommand::Ls { name, output: out } => {
            let tokens = client.endpoint_tokens(&name).await?;
            if out.json() {
                output::print_json(&tokens)?;
                return Ok(ExitCode::SUCCESS);
            }
            let mut t = output::table(["ID", "LABEL", "CREATED"]);
            for k in tokens {
                t.add_row([k.id.to_string(), output::or_dash(k.label), output::local_time(k.created_at)]);
            }
            output::print_table(t);
        }
        TokenCommand::Revoke { name, id } => {
            client.revoke_endpoint_token(&name, id).await?;
            println!("revoked token {id} of endpoint {name}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::endpoint::{EndpointSpec, HealthSpec, ReplicaView, Rollout};

    fn view() -> EndpointView {
        EndpointView {
            id: 1,
            name: "llm".into(),
            owner: "alice".into(),
            spec: EndpointSpec {
                name: "llm".into(),
                replicas: 2,
                port: None,
                health: HealthSpec::default(),
                autoscale: None,
                public: false,
                job: berth_model::JobSpec::command(["python3", "serve.py"]),
            },
            revision: 3,
            desired: 2,
            ready: 1,
            rollout: Rollout::Rolling,
            message: None,
            path: "/serve/llm/".into(),
            url: None,
            replicas: vec![ReplicaView {
                job: 42,
                revision: 3,
                state: ReplicaState::Ready,
                node: Some("n1".into()),
                inflight: 0,
                reason: None,
                route: Some(ReplicaRoute::Direct),
            }],
            request_rate: 1.5,
            error_rate: 0.0,
            p50_ms: Some(12.0),
            p99_ms: None,
            restarts: 0,
            created_at: jiff::Timestamp::UNIX_EPOCH,
        }
    }

    #[test]
    fn the_header_says_what_matters() {
        let h = header(&view(), "/serve/llm/");
        let get = |k: &str| h.iter().find(|(l, _)| *l == k).map(|(_, v)| v.clone()).unwrap();
        assert_eq!(get("replicas"), "1/2 ready");
        assert_eq!(get("revision"), "3 (rollout rolling)");
        assert_eq!(get("traffic"), "1.5 req/s, 0.0% errors, p50 12ms, p99 -");
        assert_eq!(get("command"), "python3 serve.py");
        assert!(get("probes").starts_with("ready tcp, live as ready, every 2s, 3 failures"), "{}", get("probes"));
    }

    #[test]
    fn replicas_are_picked_by_row() {
        let v = view();
        assert_eq!(pick_replica(&v, None).unwrap(), 42);
        let e = pick_replica(&v, Some(3)).unwrap_err();
        assert!(e.downcast_ref::<crate::UsageError>().is_some() && e.to_string().contains("0 to 0"), "{e}");
        let mut v = view();
        v.replicas.clear();
        assert!(pick_replica(&v, None).unwrap_err().to_string().contains("no replicas"));
    }
}
