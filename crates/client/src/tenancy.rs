//! Tenancy: who the caller is, users, projects, API tokens, quotas, usage, the audit log
//! and the dashboard's login links.

use berth_model::api::{
    AuditView, CreateProjectRequest, CreateTokenRequest, CreateUserRequest, LoginLink, MemberRequest, ProjectView,
    TokenCreated, TokenView, UserCreated, UserView, WhoAmI,
};
use reqwest::Method;

use crate::client::encode_path_segment as seg;
use crate::{Client, Error};

impl Client {
    /// Who the token (or, over the socket, the Unix account) belongs to, and their projects.
    pub async fn whoami(&self) -> Result<WhoAmI, Error> {
        self.json(self.request(Method::GET, "/v1/whoami")).await
    }

    /// A one-time dashboard login link (`berth ui`).
    pub async fn login_link(&self) -> Result<LoginLink, Error> {
        self.json(self.request(Method::POST, "/v1/ui/login-links")).await
    }

    pub async fn create_user(&self, req: &CreateUserRequest) -> Result<UserCreated, Error> {
        self.json(self.request(Method::POST, "/v1/admin/users").json(req)).await
    }

    pub async fn users(&self) -> Result<Vec<UserView>, Error> {
        self.json(self.request(Method::GET, "/v1/admin/users")).await
    }

    pub async fn set_user_disabled(&self, name: &str, disabled: bool) -> Result<(), Error> {
        let what = if disabled { "disable" } else { "enable" };
        self.send(self.request(Method::POST, &format!("/v1/admin/users/{}/{what}", seg(name)))).await?;
        Ok(())
    }

    pub async fn projects(&self) -> Result<Vec<ProjectView>, Error> {
        self.json(self.request(Method::GET, "/v1/projects")).await
    }

    pub async fn create_project(&self, name: &str) -> Result<ProjectView, Error> {
        let req = CreateProjectRequest { name: name.to_string() };
        self.json(self.request(Method::POST, "/v1/admin/projects").json(&req)).await
    }

    pub async fn add_member(&self, project: &str, user: &str) -> Result<(), Error> {
        let req = MemberRequest { user: user.to_string() };
        let path = format!("/v1/admin/projects/{}/members", seg(project));
        self.send(self.request(Method::POST, &path).json(&req)).await?;
        Ok(())
    }

    pub async fn remove_member(&self, project: &str, user: &str) -> Result<(), Error> {
        let path = format!("/v1/admin/projects/{}/members/{}", seg(project), seg(user));
        self.send(self.request(Method::DELETE, &path)).await?;
        Ok(())
    }

    pub async fn create_token(&self, req: &CreateTokenRequest) -> Result<TokenCreated, Error> {
        self.json(self.request(Method::POST, "/v1/tokens").json(req)).await
    }

    pub async fn tokens(&self, all: bool) -> Result<Vec<TokenView>, Error> {
        self.json(self.request(Method::GET, "/v1/tokens").query(&[("all", all)])).await
    }

    pub async fn revoke_token(&self, id: &str) -> Result<TokenView, Error> {
        self.json(self.request(Method::DELETE, &format!("/v1/tokens/{}", seg(id)))).await
    }

    pub async fn audit(&self, since: Option<&str>, limit: u32) -> Result<Vec<AuditView>, Error> {
        let mut req = self.request(Method::GET, "/v1/admin/audit").query(&[("limit", limit)]);
        if let Some(s) = since {
            req = req.query(&[("since", s)]);
        }
        self.json(req).await
    }

    pub async fn quotas(&self) -> Result<Vec<berth_model::QuotaView>, Error> {
        self.json(self.request(Method::GET, "/v1/quotas")).await
    }

    /// Sets (`Some`) or removes (`None`) a quota.
    pub async fn set_quota(
        &self,
        kind: berth_model::QuotaKind,
        name: &str,
        limits: Option<&berth_model::QuotaLimits>,
    ) -> Result<(), Error> {
        let path = format!("/v1/admin/quotas/{}/{}", kind.as_str(), seg(name));
        let req = match limits {
            Some(l) => self.request(Method::PUT, &path).json(l),
            None => self.request(Method::DELETE, &path),
        };
        self.send(req).await?;
        Ok(())
    }

    pub async fn usage(&self, q: &berth_model::api::UsageQuery) -> Result<Vec<berth_model::api::UsageLine>, Error> {
        self.json(self.request(Method::GET, "/v1/usage").query(q)).await
    }
}
