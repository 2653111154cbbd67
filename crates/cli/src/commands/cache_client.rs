//! The HTTP client of the `berth cache` commands: where a cache node is (`--url`,
//! `BERTH_CACHE_URL`), the token (`--token`, `BERTH_CACHE_TOKEN`, `--token-file`), whom to
//! trust for `https://` nodes (`--ca-file`, `BERTH_CA_FILE`: berth's rules, as for the
//! manager), the member list a node routes by, and error answers turned into messages.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use berth_cache::maglev::{HASH_VERSION, Maglev, Member};
use berth_model::api::CacheBucket;
use berth_tls::client::TlsFailure;
use clap::Args;
use serde_json::Value;

/// Where a cache node is and the token to use.
#[derive(Debug, Args)]
pub struct Endpoint {
    /// A cache node's URL [default: a cache node of the manager you are logged in to (the
    /// one `berth up` runs), else http://127.0.0.1:7171].
    #[arg(long, env = "BERTH_CACHE_URL")]
    pub url: Option<String>,
    /// Cache token.
    #[arg(long, env = "BERTH_CACHE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// File holding the cache token.
    #[arg(long, conflicts_with = "token")]
    pub token_file: Option<PathBuf>,
    /// PEM certificate(s) to trust for https:// cache nodes besides the public CAs: the CA
    /// that signed their certificates, or a certificate itself.
    #[arg(long, env = "BERTH_CA_FILE", value_name = "CA.pem")]
    pub ca_file: Option<PathBuf>,
}

/// Where cache commands go when neither `--url` nor `BERTH_CACHE_URL` says, and no manager
/// knows a cache node.
const DEFAULT_CACHE_URL: &str = "http://127.0.0.1:7171";

impl Endpoint {
    /// Whether a cache token was given (else bucket commands go through the manager).
    pub fn has_token(&self) -> bool {
        self.token.is_some() || self.token_file.is_some()
    }

    /// The cache node to talk to: `--url`/`BERTH_CACHE_URL`; else an up cache member of the
    /// manager the user is logged in to (this machine's first: `berth up` may have moved its
    /// cache off 7171 when the port was taken); else the default port on this machine.
    async fn base_url(&self) -> String {
        if let Some(u) = &self.url {
            return u.trim_end_matches('/').to_string();
        }
        manager_cache_url().await.unwrap_or_else(|| DEFAULT_CACHE_URL.to_string())
    }
}

/// The URL of an up cache member as the configured manager lists it, preferring one on this
/// host; `None` without a manager, an answer, or an up member.
async fn manager_cache_url() -> Option<String> {
    let c = crate::client::from_env().ok()?;
    let v = c.cache_members().await.ok()?;
    let here = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default().trim().to_string();
    let up: Vec<_> = v.into_iter().filter(|m| m.state == "up").collect();
    let pick = up.iter().find(|m| m.node == here || m.node.split('.').next() == Some(here.as_str())).or(up.first())?;
    Some(pick.url.trim_end_matches('/').to_string())
}

/// A reqwest client trusting what berth trusts: the public roots plus `ca_file`.
pub(crate) fn http_client(ca_file: Option<&std::path::Path>) -> anyhow::Result<reqwest::Client> {
    let mut b = reqwest::Client::builder().connect_timeout(Duration::from_secs(5));
    if let Some(ca) = ca_file {
        b = b.use_preconfigured_tls(berth_tls::client::client_config(Some(ca))?);
    }
    b.build().context("cannot set up the HTTP client")
}

/// A failed request to the cache node at `base` as a message a user can act on.
pub(crate) fn transport_error(base: &str, e: reqwest::Error) -> anyhow::Error {
    match berth_tls::client::classify(&e) {
        Some(TlsFailure::Untrusted(why)) => anyhow!(
            "the cache node's certificate at {base} is not trusted ({why}): set BERTH_CA_FILE (or --ca-file) to the CA certificate (PEM) that signed it"
        ),
        Some(TlsFailure::WrongName(why)) => anyhow!(
            "the cache node's certificate at {base} is not valid for this address ({why}): use a name it is valid for, or set BERTH_CA_FILE to the certificate itself"
        ),
        Some(TlsFailure::NotTls) => anyhow!("the cache node at {base} does not speak TLS: use http:// in its URL"),
        None if e.is_connect() => anyhow!("cannot reach the cache node {base}: is `berth cache serve` running there?"),
        None => anyhow::Error::new(e).context(format!("request to the cache node {base} failed")),
    }
}

/// An HTTP client for cache nodes.
pub(crate) struct CacheClient {
    pub http: reqwest::Client,
    pub base: String,
    pub token: Option<String>,
}

impl CacheClient {
    pub async fn new(e: &Endpoint) -> anyhow::Result<CacheClient> {
        let token = match (&e.token, &e.token_file) {
            (Some(t), _) => Some(t.trim().to_string()),
            (None, Some(p)) => Some(
                std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?.trim().to_string(),
            ),
            (None, None) => None,
        };
        let http = http_client(e.ca_file.as_deref())?;
        Ok(CacheClient { http, base: e.base_url().await, token })
    }

    pub fn req(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        let r = self.http.request(method, url);
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    /// GETs JSON from `base` + `path`, turning error answers into their message.
    pub async fn get_json(&self, base: &str, path: &str) -> anyhow::Result<Value> {
        let url = format!("{base}{path}");
        let r = self.req(reqwest::Method::GET, &url).send().await.map_err(|e| transport_error(base, e))?;
        answer(r).await
    }

    /// The routing table of the configured node (its members, up and down).
    pub async fn members(&self) -> anyhow::Result<(Maglev, Value)> {
        let v = self.get_json(&self.base, "/v1/members").await?;
        let members: Vec<Member> = serde_json::from_value(v["members"].clone()).map_err(|_| {
            anyhow!("{} answered /v1/members without a member list: is it a berth cache node?", self.base)
        })?;
        let m = Maglev::new(members);
        if v["table_size"].as_u64() != Some(m.table_size() as u64)
            || v["hash"] != format!("maglev-xxh3-v{HASH_VERSION}")
        {
            bail!(
                "the cache node {} routes with {} over {} slots, this berth does not: use the same berth version",
                self.base,
                v["hash"],
                v["table_size"]
            );
        }
        Ok((m, v))
    }

    /// Bucket `name`'s settings as the configured node has them (`GET /v1/buckets`, any
    /// valid token); `None` when the node has no such bucket.
    pub async fn bucket(&self, name: &str) -> anyhow::Result<Option<CacheBucket>> {
        let v = self.get_json(&self.base, "/v1/buckets").await?;
        let all: Vec<CacheBucket> = serde_json::from_value(v).map_err(|_| {
            anyhow!("{} answered /v1/buckets without a bucket list: is it a berth cache node?", self.base)
        })?;
        Ok(all.into_iter().find(|b| b.name == name))
    }
}

/// The JSON of a 2xx answer, or the error message of another.
pub(crate) async fn answer(r: reqwest::Response) -> anyhow::Result<Value> {
    let status = r.status();
    let body = r.bytes().await.context("the cache node's answer was cut off")?;
    if status.is_success() {
        return serde_json::from_slice(&body).with_context(|| format!("the cache node answered {status} with no JSON"));
    }
    let msg = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
    bail!("{msg} ({status})")
}

pub(crate) use berth_model::dataset::object_url;
