//! The web dashboard. Its pages are one HTML shell, one script and one stylesheet, built
//! into the binary (`assets.rs`; no CDN: clusters are often offline), that call the REST API
//! with the session cookie; the session starts from a one-time link (`login.rs`) and live
//! job changes come as server-sent events (`events.rs`).
//!
//! Every page answer carries a strict Content-Security-Policy (scripts and styles only from
//! this origin, no inline code, no framing), so that even a job name that slipped into the
//! page as markup could not run; the script itself only ever writes text into the page.

mod assets;
mod events;
pub mod login;

use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::manager::Manager;

/// The dashboard's routes (pages, assets, login, events), merged into the API's router.
pub fn routes() -> Router<Arc<Manager>> {
    Router::new()
        .route("/", get(index))
        .route("/assets/{name}", get(assets::asset))
        .route("/ui/login", get(login::login))
        .route("/ui/logout", post(login::logout))
        .route("/ui/session", get(login::session))
        .route("/ui/events", get(events::events))
        .route("/v1/ui/login-links", post(login::create_link))
}

async fn index() -> Response {
    page(axum::http::StatusCode::OK, assets::INDEX_HTML)
}

/// An HTML answer with the dashboard's security headers.
pub fn page(status: axum::http::StatusCode, html: &'static str) -> Response {
    let mut r = (status, html).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    secure_headers(h);
    r
}

/// What every dashboard answer carries: no code from elsewhere, no framing, no sniffing, no
/// referrer (login links carry a code), nothing cached that a later user could see.
pub fn secure_headers(h: &mut axum::http::HeaderMap) {
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

/// Whether a request that matched no route came from a browser wanting a page (it then gets
/// the dashboard's 404 page instead of the API's JSON error).
pub fn wants_page(headers: &axum::http::HeaderMap, path: &str) -> bool {
    !path.starts_with("/v1/")
        && headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("text/html"))
}

/// The dashboard's "no such page".
pub fn not_found_page() -> Response {
    page(axum::http::StatusCode::NOT_FOUND, assets::NOT_FOUND_HTML)
}
