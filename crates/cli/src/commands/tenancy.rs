//! The admin commands of tenancy: `berth admin user list|disable|enable`, `berth admin project
//! create|list|add-member|remove-member` and `berth admin audit`.

use berth_model::api::{AuditView, ProjectView, UserView};
use clap::Subcommand;

use crate::client::Client;
use crate::output::{self, OutputArgs};

#[derive(Debug, Subcommand)]
pub enum ProjectCommand {
    /// Create a project
    Create {
        name: String,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// List projects and their members
    List {
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Add a user to a project
    AddMember { project: String, user: String },
    /// Remove a user from a project (their jobs there stay)
    RemoveMember { project: String, user: String },
}

pub async fn project(client: &Client, cmd: ProjectCommand) -> anyhow::Result<()> {
    match cmd {
        ProjectCommand::Create { name, output } => {
            let p = client.create_project(&name).await?;
            if output.json() {
                output::print_json(&p)?;
            } else {
                println!("created project {}", p.name);
            }
        }
        ProjectCommand::List { output } => {
            let ps = client.projects().await?;
            if output.json() {
                output::print_json(&ps)?;
            } else {
                output::print_table(project_table(&ps));
            }
        }
        ProjectCommand::AddMember { project, user } => {
            client.add_member(&project, &user).await?;
            println!("{user} is a member of {project}");
        }
        ProjectCommand::RemoveMember { project, user } => {
            client.remove_member(&project, &user).await?;
            println!("{user} is no longer a member of {project}");
        }
    }
    Ok(())
}

fn project_table(ps: &[ProjectView]) -> comfy_table::Table {
    let mut t = output::table(["PROJECT", "MEMBERS", "CREATED"]);
    for p in ps {
        t.add_row([p.name.clone(), p.members.join(","), output::local_time(p.created_at)]);
    }
    t
}

/// `berth admin user list`.
pub async fn list_users(client: &Client, out: &OutputArgs) -> anyhow::Result<()> {
    let users = client.users().await?;
    if out.json() {
        return output::print_json(&users);
    }
    output::print_table(user_table(&users));
    Ok(())
}

fn user_table(users: &[UserView]) -> comfy_table::Table {
    let mut t = output::table(["USER", "ROLE", "STATE", "PROJECTS", "CREATED"]);
    for u in users {
        t.add_row([
            u.name.clone(),
            u.role.clone(),
            if u.disabled { "disabled" } else { "active" }.to_string(),
            u.projects.join(","),
            output::local_time(u.created_at),
        ]);
    }
    t
}

/// `berth admin audit`.
pub async fn audit(client: &Client, since: Option<&str>, limit: u32, out: &OutputArgs) -> anyhow::Result<()> {
    let entries = client.audit(since, limit).await?;
    if out.json() {
        return output::print_json(&entries);
    }
    output::print_table(audit_table(&entries));
    Ok(())
}

fn audit_table(entries: &[AuditView]) -> comfy_table::Table {
    let mut t = output::table(["TIME", "ACTOR", "ACTION", "TARGET", "DETAIL"]);
    for e in entries {
        t.add_row([output::local_time(e.at), e.actor.clone(), e.action.clone(), e.target.clone(), e.detail.clone()]);
    }
    t
}
