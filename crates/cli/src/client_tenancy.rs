//! REST calls of tenancy: users, projects, API tokens and the audit log.

use berth_model::api::{
    AuditView, CreateProjectRequest, CreateTokenRequest, MemberRequest, ProjectView, TokenCreated, TokenView, UserView,
};
use reqwest::Method;

use crate::client::{Client, encode_path_segment as seg};

impl Client {
    pub async fn users(&self) -> anyhow::Result<Vec<UserView>> {
        self.json(self.request(Method::GET, "/v1/admin/users")).await
    }

    pub async fn set_user_disabled(&self, name: &str, disabled: bool) -> anyhow::Result<()> {
        let what = if disabled { "disable" } else { "enable" };
        self.send(self.request(Method::POST, &format!("/v1/admin/users/{}/{what}", seg(name)))).await?;
        Ok(())
    }

    pub async fn projects(&self) -> anyhow::Result<Vec<ProjectView>> {
        self.json(self.request(Method::GET, "/v1/projects")).await
    }

    pub async fn create_project(&self, name: &str) -> anyhow::Result<ProjectView> {
        let req = CreateProjectRequest { name: name.to_string() };
        self.json(self.request(Method::POST, "/v1/admin/projects").json(&req)).await
    }

    pub async fn add_member(&self, project: &str, user: &str) -> anyhow::Result<()> {
        let req = MemberRequest { user: user.to_string() };
        let path = format!("/v1/admin/projects/{}/members", seg(project));
        self.send(self.request(Method::POST, &path).json(&req)).await?;
        Ok(())
    }

    pub async fn remove_member(&self, project: &str, user: &str) -> anyhow::Result<()> {
        let path = format!("/v1/admin/projects/{}/members/{}", seg(project), seg(user));
        self.send(self.request(Method::DELETE, &path)).await?;
        Ok(())
    }

    pub async fn create_token(&self, req: &CreateTokenRequest) -> anyhow::Result<TokenCreated> {
        self.json(self.request(Method::POST, "/v1/tokens").json(req)).await
    }

    pub async fn tokens(&self, all: bool) -> anyhow::Result<Vec<TokenView>> {
        self.json(self.request(Method::GET, "/v1/tokens").query(&[("all", all)])).await
    }

    pub async fn revoke_token(&self, id: &str) -> anyhow::Result<TokenView> {
        self.json(self.request(Method::DELETE, &format!("/v1/tokens/{}", seg(id)))).await
    }

    pub async fn audit(&self, since: Option<&str>, limit: u32) -> anyhow::Result<Vec<AuditView>> {
        let mut req = self.request(Method::GET, "/v1/admin/audit").query(&[("limit", limit)]);
        if let Some(s) = since {
            req = req.query(&[("since", s)]);
        }
        self.json(req).await
    }
}

impl Client {
    pub async fn quotas(&self) -> anyhow::Result<Vec<berth_model::QuotaView>> {
        self.json(self.request(Method::GET, "/v1/quotas")).await
    }

    /// Sets (`Some`) or removes (`None`) a quota.
    pub async fn set_quota(
        &self,
        kind: berth_model::QuotaKind,
        name: &str,
        limits: Option<&berth_model::QuotaLimits>,
    ) -> anyhow::Result<()> {
        let path = format!("/v1/admin/quotas/{}/{}", kind.as_str(), seg(name));
        let req = match limits {
            Some(l) => self.request(Method::PUT, &path).json(l),
            None => self.request(Method::DELETE, &path),
        };
        self.send(req).await?;
        Ok(())
    }
}

impl Client {
    pub async fn usage(&self, q: &berth_model::api::UsageQuery) -> anyhow::Result<Vec<berth_model::api::UsageLine>> {
        self.json(self.request(Method::GET, "/v1/usage").query(q)).await
    }
}
