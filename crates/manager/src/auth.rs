//! Who a request is, as axum extractors: [`Auth`] (any user) and [`Admin`], from the bearer
//! token or, on the manager's unix socket, the caller's Unix user (the `tenancy` service
//! answers both).

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

/// Extractor: the user behind the request's `Authorization: Bearer` token, or without one,
/// over the manager's unix socket, the caller's local Unix user (401 otherwise).
pub struct Auth(pub Arc<User>);

impl FromRequestParts<Arc<Manager>> for Auth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, m: &Arc<Manager>) -> Result<Self, ApiError> {
        if bearer(parts).is_none() && crate::local::peer(parts).is_some() {
            return Ok(Auth(m.tenancy.authenticate_local(parts).await?));
        }
        let token = bearer(parts).ok_or_else(|| {
            ApiError::unauthorized("missing API token: send `Authorization: Bearer <token>` (set BERTH_TOKEN)")
        })?;
        Ok(Auth(m.tenancy.authenticate(token).await?))
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
