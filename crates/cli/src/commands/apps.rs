//! `berth apps ID` lists the web apps a job serves through the app proxy (and whether each
//! gets its URL's path whole or with the `/apps/<job>/<name>` prefix stripped), and
//! `berth open ID APP` prints a one-time link that opens one in a browser: it works once and
//! for two minutes, and the session it starts is a cookie for that app alone.
//!
//! The link is printed, not handed to a browser launcher: the code in it is a secret, and a
//! launcher's command line is readable by every local user.

use std::process::ExitCode;

use berth_model::JobId;
use berth_model::app::{AppKind, AppPath};
use clap::Args;

use crate::output::{self, OutputArgs};

#[derive(Debug, Args)]
pub struct AppsArgs {
    /// The job's id
    #[arg(value_parser = clap::value_parser!(JobId).range(1..), add = crate::completion::job_ids_arg())]
    pub id: JobId,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Args)]
pub struct OpenArgs {
    /// The job's id
    #[arg(value_parser = clap::value_parser!(JobId).range(1..), add = crate::completion::job_ids_arg())]
    pub id: JobId,
    /// The app's name (`berth apps ID` lists them); default: the job's only app
    pub app: Option<String>,
    #[command(flatten)]
    pub output: OutputArgs,
}

pub async fn list(args: AppsArgs) -> anyhow::Result<ExitCode> {
    let client = crate::client::from_env()?;
    let apps = client.apps(args.id).await?;
    if args.output.json() {
        output::print_json(&apps)?;
        return Ok(ExitCode::SUCCESS);
    }
    if apps.is_empty() {
        eprintln!("job {} serves no apps: submit with --app NAME=PORT, --jupyter or --tensorboard DIR", args.id);
        return Ok(ExitCode::SUCCESS);
    }
    // PATH: whether the app gets the URL's path whole or from its own root (`,strip`).
    let mut t = output::table(["NAME", "KIND", "PORT", "PATH", "URL"]);
    for a in apps {
        let kind = match a.kind {
            AppKind::Custom => "app",
            AppKind::Jupyter => "jupyter",
            AppKind::Tensorboard => "tensorboard",
        };
        let port = a.port.map(|p| p.to_string()).unwrap_or_else(|| "auto".into());
        let path = match a.path {
            AppPath::Keep => "prefix kept",
            AppPath::Strip => "prefix stripped",
        };
        t.add_row([a.name, kind.to_string(), port, path.to_string(), a.url]);
    }
    output::print_table(t);
    eprintln!("open one with: berth open {} APP", args.id);
    Ok(ExitCode::SUCCESS)
}

pub async fn open(args: OpenArgs) -> anyhow::Result<ExitCode> {
    let client = crate::client::from_env()?;
    let app = match args.app {
        Some(a) => a,
        None => {
            let apps = client.apps(args.id).await?;
            match apps.as_slice() {
                [only] => only.name.clone(),
                [] => anyhow::bail!("job {} serves no apps: submit with --app NAME=PORT or --jupyter", args.id),
                many => {
                    let names: Vec<&str> = many.iter().map(|a| a.name.as_str()).collect();
                    anyhow::bail!("job {} serves several apps ({}): name one", args.id, names.join(", "))
                }
            }
        }
    };
    let link = client.app_link(args.id, &app).await?;
    if args.output.json() {
        output::print_json(&link)?;
    } else {
        println!("{}", link.url);
        eprintln!("open it in your browser within {} s; it works once", link.expires_in_secs);
    }
    Ok(ExitCode::SUCCESS)
}
