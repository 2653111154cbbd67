//! The admin's `berth cache` commands: buckets (`bucket create|list|delete`) and members
//! (`members`, `member set|remove|add`).
//!
//! Buckets and members are kept by the manager, which pushes them to every cache node
//! (including later ones), so these commands go through the manager's API with the berth
//! credentials (admin for changes). Bucket commands given a cache token (`--token`) talk to
//! the cache nodes directly instead, each up member in turn (a cache run without a manager);
//! so does `members`, which then shows the node's routing list.

use std::process::ExitCode;

use anyhow::Context;
use berth_cache::maglev::Member;
use berth_model::api::{BucketPlacement, CacheBucket, CacheMemberUpdate, CacheMemberView, bucket_origin_error};
use berth_model::format_bytes;
use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::Value;

use super::cache_client::{CacheClient, Endpoint, answer, transport_error};
use crate::UsageError;
use crate::args::{parse_cache_weight, parse_size};
use crate::client::Client;
use crate::output::{OutputArgs, print_json, print_table, table};

#[derive(Debug, Subcommand)]
pub enum BucketCommand {
    /// Create a bucket, or change its settings, on every member
    Create(BucketCreateArgs),
    /// List buckets and their settings
    List(BucketListArgs),
    /// Delete a bucket and every object in it, on every member
    Delete(BucketDeleteArgs),
}

#[derive(Debug, Args)]
pub struct BucketCreateArgs {
    name: String,
    /// Readable by everyone without a token (writes and deletes: --projects tokens or admins).
    #[arg(long)]
    public: bool,
    /// Most bytes the bucket may use on each node, e.g. 100GiB.
    #[arg(long, value_parser = parse_size)]
    quota: Option<u64>,
    /// Projects whose tokens may use the bucket, comma-separated.
    #[arg(long, value_delimiter = ',')]
    projects: Vec<String>,
    /// The shared directory (same absolute path on every node) that jobs' datasets
    /// (`--dataset BUCKET/PREFIX`) are copied from into the cache.
    #[arg(long, value_name = "DIR", value_parser = parse_origin)]
    origin: Option<String>,
    /// `spread`: one copy of each object, on the node Maglev hashing picks (the caches add
    /// up); `node`: each node keeps its own copies of what is written to it, reads stay local.
    #[arg(long, default_value = "spread")]
    placement: BucketPlacement,
    #[command(flatten)]
    endpoint: Endpoint,
}

/// `--origin`: an absolute directory path without `.`, `..` or a trailing `/`.
fn parse_origin(s: &str) -> Result<String, String> {
    match bucket_origin_error(s) {
        Some(e) => Err(e),
        None => Ok(s.to_string()),
    }
}

#[derive(Debug, Args)]
pub struct BucketListArgs {
    #[command(flatten)]
    endpoint: Endpoint,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Debug, Args)]
pub struct BucketDeleteArgs {
    name: String,
    #[command(flatten)]
    endpoint: Endpoint,
}

#[derive(Debug, Args)]
pub struct MembersArgs {
    #[command(flatten)]
    endpoint: Endpoint,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Debug, Subcommand)]
pub enum MemberCommand {
    /// Set a member's weight (its share of the keys), over the one its agent reports
    Set(MemberSetArgs),
    /// Take a node's cache out of the members for good (until `member add`)
    Remove(MemberArgs),
    /// Add a removed node's cache back, at the URL its agent last reported
    Add(MemberArgs),
}

#[derive(Debug, Args)]
pub struct MemberSetArgs {
    /// The berth node whose cache it is (see `berth cache members`).
    node: String,
    /// Relative share of the keys, 1-1000 (e.g. 2 for a node with twice the disk).
    #[arg(long, value_parser = parse_cache_weight)]
    weight: u32,
}

#[derive(Debug, Args)]
pub struct MemberArgs {
    /// The berth node whose cache it is (see `berth cache members`).
    node: String,
}

pub async fn bucket(c: BucketCommand) -> anyhow::Result<ExitCode> {
    match c {
        BucketCommand::Create(a) => bucket_create(a).await,
        BucketCommand::List(a) => bucket_list(a).await,
        BucketCommand::Delete(a) => bucket_delete(a).await,
    }
}

fn manager(why: &str) -> anyhow::Result<Client> {
    crate::client::from_env().with_context(|| why.to_string())
}

const BUCKETS_ON_MANAGER: &str = "buckets are kept by the berth manager: log in as an admin (BERTH_URL, BERTH_TOKEN), or give a cache admin token (--token) to change them on the cache nodes directly";

async fn bucket_create(a: BucketCreateArgs) -> anyhow::Result<ExitCode> {
    berth_cache::bucket::validate_bucket_name(&a.name).map_err(|e| UsageError::error(e.to_string()))?;
    let body = CacheBucket {
        name: a.name.clone(),
        public: a.public,
        quota: a.quota,
        projects: a.projects.clone(),
        origin: a.origin.clone(),
        placement: a.placement,
    };
    let whom = if a.endpoint.has_token() {
        let path = format!("/v1/buckets/{}", a.name);
        let answers = on_up_members(&a.endpoint, Method::PUT, &path, Some(&body)).await?;
        let failed = answers.iter().filter(|(_, r)| r.is_err()).count();
        for (node, r) in &answers {
            if let Err(e) = r {
                eprintln!("error: {node}: {e:#}");
            }
        }
        if failed > 0 {
            eprintln!(
                "bucket `{}` is set on {} of {} cache nodes: run the command again once they are up",
                a.name,
                answers.len() - failed,
                answers.len()
            );
            return Ok(ExitCode::FAILURE);
        }
        format!("on {} cache nodes", answers.len())
    } else {
        let c = manager(BUCKETS_ON_MANAGER)?;
        let _: CacheBucket = c.put_cache_bucket(&body).await?;
        "on the manager (pushed to every cache node)".to_string()
    };
    let quota = a.quota.map(format_bytes).unwrap_or_else(|| "none".into());
    println!(
        "bucket `{}` {whom}: {}, quota {quota} per node, placement {}{}{}",
        a.name,
        if a.public { "public" } else { "private" },
        a.placement.as_str(),
        if a.projects.is_empty() { String::new() } else { format!(", projects {}", a.projects.join(",")) },
        a.origin.as_ref().map(|o| format!(", origin {o}")).unwrap_or_default()
    );
    Ok(ExitCode::SUCCESS)
}

/// Sends `method path` (with `body`) to every up member the node at `e` knows (a cache
/// without a manager): each member's URL and its answer.
async fn on_up_members(
    e: &Endpoint,
    method: Method,
    path: &str,
    body: Option<&CacheBucket>,
) -> anyhow::Result<Vec<(String, Result<Answer, anyhow::Error>)>> {
    let c = CacheClient::new(e).await?;
    let (m, _) = c.members().await?;
    let up: Vec<&Member> = m.members().iter().filter(|m| m.is_up()).collect();
    let mut out = vec![];
    for member in up {
        let mut req = c.req(method.clone(), &format!("{}{path}", member.name));
        if let Some(b) = body {
            req = req.json(b);
        }
        let r = match req.send().await {
            Ok(r) if r.status() == reqwest::StatusCode::NOT_FOUND => {
                Ok(Answer::NotFound(answer(r).await.err().unwrap_or_else(|| anyhow::anyhow!("404 Not Found"))))
            }
            Ok(r) => answer(r).await.map(Answer::Done),
            Err(e) => Err(transport_error(&member.name, e)),
        };
        out.push((member.name.clone(), r));
    }
    Ok(out)
}

/// A cache node's answer: done (its JSON), or 404 (the message).
enum Answer {
    Done(Value),
    NotFound(anyhow::Error),
}

async fn bucket_list(a: BucketListArgs) -> anyhow::Result<ExitCode> {
    let v = if a.endpoint.has_token() {
        let c = CacheClient::new(&a.endpoint).await?;
        c.get_json(&c.base, "/v1/buckets").await?
    } else {
        let c = manager(
            "buckets are kept by the berth manager: log in as an admin (BERTH_URL, BERTH_TOKEN), or give a cache token (--token) to ask a cache node",
        )?;
        serde_json::to_value(c.cache_buckets().await?)?
    };
    if a.output.json() {
        print_json(&v)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = table(["BUCKET", "ACCESS", "QUOTA", "PROJECTS", "PLACEMENT", "ORIGIN"]);
    let buckets: Vec<CacheBucket> = serde_json::from_value(v).context("unexpected bucket list")?;
    for b in buckets {
        t.add_row(vec![
            b.name,
            if b.public { "public" } else { "private" }.to_string(),
            b.quota.map(format_bytes).unwrap_or_else(|| "-".into()),
            if b.projects.is_empty() { "-".into() } else { b.projects.join(",") },
            b.placement.as_str().to_string(),
            b.origin.unwrap_or_else(|| "-".into()),
        ]);
    }
    print_table(t);
    Ok(ExitCode::SUCCESS)
}

async fn bucket_delete(a: BucketDeleteArgs) -> anyhow::Result<ExitCode> {
    berth_cache::bucket::validate_bucket_name(&a.name).map_err(|e| UsageError::error(e.to_string()))?;
    if !a.endpoint.has_token() {
        let c = manager(BUCKETS_ON_MANAGER)?;
        c.delete_cache_bucket(&a.name).await?;
        println!("bucket `{}` deleted on the manager: every cache node deletes it and its objects", a.name);
        return Ok(ExitCode::SUCCESS);
    }
    let answers = on_up_members(&a.endpoint, Method::DELETE, &format!("/v1/buckets/{}", a.name), None).await?;
    let (mut deleted, mut objects, mut bytes, mut failed) = (0, 0, 0, 0);
    let mut missing = None;
    for (node, r) in answers.iter() {
        match r {
            Ok(Answer::Done(v)) => {
                deleted += 1;
                objects += v["objects"].as_u64().unwrap_or(0);
                bytes += v["bytes"].as_u64().unwrap_or(0);
            }
            // not there (never set there, or deleted by an earlier try)
            Ok(Answer::NotFound(e)) => missing = Some(format!("{e:#}")),
            Err(e) => {
                eprintln!("error: {node}: {e:#}");
                failed += 1;
            }
        }
    }
    if failed > 0 {
        eprintln!(
            "bucket `{}` is deleted on {deleted} of {} cache nodes: run the command again once they are up",
            a.name,
            answers.len()
        );
        return Ok(ExitCode::FAILURE);
    }
    if deleted == 0 {
        let why = missing.unwrap_or_else(|| "no cache node is up".into());
        return Err(UsageError::error(format!("bucket `{}` was not deleted: {why}", a.name)));
    }
    println!(
        "bucket `{}` deleted on {deleted} cache nodes: {objects} objects, {} removed",
        a.name,
        format_bytes(bytes)
    );
    Ok(ExitCode::SUCCESS)
}

pub async fn members(a: MembersArgs) -> anyhow::Result<ExitCode> {
    if a.endpoint.has_token() {
        return node_members(a).await;
    }
    let c = manager(
        "cache members are kept by the berth manager: log in (BERTH_URL, BERTH_TOKEN), or give a cache token (--token) to ask a cache node for its list",
    )?;
    let v: Vec<CacheMemberView> = c.cache_members().await?;
    if a.output.json() {
        print_json(&v)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = table(["NODE", "URL", "STATE", "WEIGHT", "SEQ"]);
    for m in v {
        let weight = if m.weight_set { format!("{} (set)", m.weight) } else { m.weight.to_string() };
        t.add_row(vec![m.node, m.url, m.state, weight, m.seq.to_string()]);
    }
    print_table(t);
    Ok(ExitCode::SUCCESS)
}

/// `members` with a cache token: the routing list of the node at `--url`.
async fn node_members(a: MembersArgs) -> anyhow::Result<ExitCode> {
    let c = CacheClient::new(&a.endpoint).await?;
    let (m, v) = c.members().await?;
    if a.output.json() {
        print_json(&v["members"])?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = table(["URL", "STATE", "WEIGHT"]);
    for mm in m.members() {
        t.add_row(vec![mm.name.clone(), mm.state.as_str().to_string(), mm.weight.to_string()]);
    }
    print_table(t);
    Ok(ExitCode::SUCCESS)
}

const MEMBERS_ON_MANAGER: &str =
    "cache members are kept by the berth manager: log in as an admin (BERTH_URL, BERTH_TOKEN)";

pub async fn member(c: MemberCommand) -> anyhow::Result<ExitCode> {
    let m = manager(MEMBERS_ON_MANAGER)?;
    let v: CacheMemberView = match &c {
        MemberCommand::Set(a) => {
            let body = CacheMemberUpdate { weight: Some(a.weight) };
            m.update_cache_member(&a.node, &body).await?
        }
        MemberCommand::Remove(a) => m.remove_cache_member(&a.node).await?,
        MemberCommand::Add(a) => m.add_cache_member(&a.node).await?,
    };
    match c {
        MemberCommand::Set(_) => println!("cache member `{}` ({}): weight {}", v.node, v.url, v.weight),
        MemberCommand::Remove(_) => println!(
            "cache member `{}` ({}) removed: the other members serve its keys until `berth cache member add {}` (its cache node keeps running)",
            v.node, v.url, v.node
        ),
        MemberCommand::Add(_) => {
            println!("cache member `{}` added back at {}: {}, weight {}", v.node, v.url, v.state, v.weight)
        }
    }
    Ok(ExitCode::SUCCESS)
}
