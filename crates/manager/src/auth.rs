//! Who a request is, as axum extractors: [`Auth`] (any user) and [`Admin`], from the bearer
//! token, on the manager's unix socket the caller's Unix user, or the dashboard's session
//! cookie (`session_cookie.rs`), which is good only on the dashboard's own pages and must
//! come with its CSRF token on every change and WebSocket (`origin.rs`; the `tenancy` service
//! answers all three).

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use crate::error::ApiError;
use crate::identity::User;
use crate::manager::Manager;

/// The bearer token of a request, if any.
pub fn bearer(parts: &Parts) -> Option<&str> {
    bearer_of(&parts.headers)
}

/// The bearer token in `headers`, if any.
pub fn bearer_of(headers: &axum::http::HeaderMap) -> Option<&str> {
    let v = headers.get(axum::http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim()).filter(|t| !t.is_empty())
}

/// The session token in the request's cookie, if any.
pub fn session(parts: &Parts) -> Option<String> {
    let jar = axum_extra::extract::cookie::CookieJar::from_headers(&parts.headers);
    jar.get(crate::session_cookie::COOKIE).map(|c| c.value().to_string()).filter(|t| !t.is_empty())
}

/// Extractor: the user behind the request's `Authorization: Bearer` token, or without one,
/// over the manager's unix socket, the caller's local Unix user (401 otherwise).
pub struct Auth(pub Arc<User>);

impl FromRequestParts<Arc<Manager>> for Auth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, m: &Arc<Manager>) -> Result<Self, ApiError> {
        if let Some(token) = bearer(parts) {
            return Ok(Auth(m.tenancy.authenticate(token).await?));
        }
        if crate::local::peer(parts).is_some() {
            return Ok(Auth(m.tenancy.authenticate_local(parts).await?));
        }
        if let Some(token) = session(parts) {
            let user = m.tenancy.authenticate(&token).await.map_err(|e| match e.status {
                axum::http::StatusCode::UNAUTHORIZED => {
                    ApiError::unauthorized("your session has ended: run `berth ui` for a new login link")
                }
                _ => e,
            })?;
            crate::origin::check_cookie_request(parts, &token)?;
            return Ok(Auth(user));
        }
        Err(ApiError::unauthorized("missing API token: send `Authorization: Bearer <token>` (set BERTH_TOKEN)")
            .because(berth_model::api::ErrorReason::TokenMissing))
    }
}

/// Extractor for the routes a job's step token may call (exec): a user as [`Auth`] finds
/// one, or the job and attempt of a step token (`step_token.rs`) this manager's key made.
pub enum Caller {
    User(Arc<User>),
    Step { job: berth_model::JobId, attempt: u32 },
}

impl FromRequestParts<Arc<Manager>> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, m: &Arc<Manager>) -> Result<Self, ApiError> {
        if let Some(token) = bearer(parts).filter(|t| crate::step_token::is_step_token(t)) {
            return match m.step_key.verify(token) {
                Some((job, attempt)) => Ok(Caller::Step { job, attempt }),
                None => Err(ApiError::unauthorized("invalid step token: it opens streams only into its own job")),
            };
        }
        let Auth(user) = Auth::from_request_parts(parts, m).await?;
        Ok(Caller::User(user))
    }
}

/// Extractor: an authenticated admin (403 for other users).
pub struct Admin(pub Arc<User>);

impl FromRequestParts<Arc<Manager>> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, m: &Arc<Manager>) -> Result<Self, ApiError> {
        let Auth(u) = Auth::from_request_parts(parts, m).await?;
        if !u.is_admin() {
            return Err(ApiError::forbidden(format!("only admins may do this; {} is a {}", u.name, u.role)));
        }
        Ok(Admin(u))
    }
}
