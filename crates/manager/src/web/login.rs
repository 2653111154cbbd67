//! Logging in to the dashboard: `berth ui` asks for a one-time link (`POST
//! /v1/ui/login-links`, with the user's own credentials), the browser opens it (`GET
//! /ui/login?code=...`) and gets a session cookie holding a fresh API token
//! (`session_cookie.rs`); `POST /ui/logout` revokes that token. `GET /ui/session` tells the
//! page who it is and the CSRF token its changes must carry.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum_extra::extract::CookieJar;
use axum_extra::extract::cookie::{Cookie, SameSite};
use berth_model::api::LoginLink;
use serde::Deserialize;

use crate::auth::Auth;
use crate::error::ApiError;
use crate::local::Submitter;
use crate::login_links::{DASHBOARD, LINK_TTL, LinkOwner};
use crate::manager::Manager;
use crate::session_cookie::{COOKIE, csrf_token};

/// A one-time dashboard login link for the caller.
#[utoipa::path(post, path = "/v1/ui/login-links", tag = "dashboard",
    responses((status = 200, body = LoginLink), (status = 401, body = berth_model::api::ErrorBody)))]
pub async fn create_link(State(m): State<Arc<Manager>>, Auth(user): Auth) -> axum::Json<LoginLink> {
    let code = m.login_links.create(LinkOwner { user_id: user.id, name: user.name.clone() }, DASHBOARD);
    let path = format!("/ui/login?code={code}");
    let url = Some(format!("{}{path}", m.leader_url));
    axum::Json(LoginLink { path, url, expires_in_secs: LINK_TTL.as_secs() })
}

#[derive(Deserialize)]
pub struct LoginQuery {
    #[serde(default)]
    code: String,
}

/// `GET /ui/login?code=...`: a valid link starts a session and goes to the dashboard.
pub async fn login(State(m): State<Arc<Manager>>, Query(q): Query<LoginQuery>) -> Response {
    let Some(owner) = m.login_links.redeem(&q.code, DASHBOARD) else {
        return super::page(StatusCode::UNAUTHORIZED, super::assets::BAD_LINK_HTML);
    };
    let token = match m.tenancy.create_session(&owner).await {
        Ok(t) => t,
        Err(e) => return e.into_response(),
    };
    tracing::info!(user = owner.name, "dashboard session started");
    let cookie = Cookie::build((COOKIE, token))
        .path("/")
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(m.tls)
        .max_age(cookie::time::Duration::seconds(crate::tenancy::SESSION_TTL.as_secs() as i64))
        .build();
    let mut r = (CookieJar::new().add(cookie), Redirect::to("/")).into_response();
    super::secure_headers(r.headers_mut());
    r
}

/// `POST /ui/logout`: the session's token is revoked and the cookie dropped.
pub async fn logout(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    jar: CookieJar,
) -> Result<(CookieJar, StatusCode), ApiError> {
    if let Some(c) = jar.get(COOKIE) {
        m.tenancy.revoke_token(&user, &crate::token::hash_token(c.value())).await?;
    }
    Ok((jar.remove(Cookie::build(COOKIE).path("/")), StatusCode::NO_CONTENT))
}

/// `GET /ui/session`: who the page acts as, the CSRF token of its cookie, and the Unix user
/// its jobs run as (the Submit form's default working directory is that user's home).
pub async fn session(Auth(user): Auth, Submitter(submitter): Submitter, jar: CookieJar) -> Response {
    let csrf = jar.get(COOKIE).map(|c| csrf_token(c.value()));
    let run_as = crate::run_as::run_as(&user, submitter);
    let body = serde_json::json!({ "user": user.name, "role": user.role, "csrf": csrf, "run_as": run_as });
    let mut r = axum::Json(body).into_response();
    r.headers_mut().insert(header::CACHE_CONTROL, header::HeaderValue::from_static("no-store"));
    r
}
