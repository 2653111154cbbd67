//! A program using `berth-client`: who am I, the cluster's nodes and my jobs, as `berth
//! whoami`, `berth nodes` and `berth ps` print them (in short). It finds the manager as the
//! CLI does (`BERTH_URL`/`BERTH_TOKEN`, or the credentials file of `berth up`/`berth login`).
//!
//! `cargo run -p berth-client --example jobs`

use berth_client::{Client, Error};
use berth_model::api::JobListQuery;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // The cause chain: a transport error's reqwest cause, a file's I/O error.
            let mut msg = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                msg.push_str(&format!(": {s}"));
                source = s.source();
            }
            eprintln!("error: {msg}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Error> {
    let client = Client::from_env()?;
    let me = client.whoami().await?;
    println!("{} ({}) at {}", me.user, me.role, client.base_url());
    for n in client.nodes().await? {
        println!("node {} {:?}", n.name, n.state);
    }
    for j in client.jobs(&JobListQuery::default()).await? {
        println!("job {} {} {:?}", j.id, j.name.as_deref().unwrap_or("-"), j.state);
    }
    Ok(())
}
