//! The dashboard's files, built into the binary: the HTML shell, the scripts, the stylesheet
//! and the small pages shown without the script (404, a dead login link).

use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

pub const INDEX_HTML: &str = include_str!("../../web/index.html");
pub const NOT_FOUND_HTML: &str = include_str!("../../web/404.html");
pub const BAD_LINK_HTML: &str = include_str!("../../web/bad-link.html");

/// The assets by name, with their content type.
const ASSETS: &[(&str, &str, &str)] = &[
    ("app.js", "text/javascript; charset=utf-8", include_str!("../../web/app.js")),
    ("submit.js", "text/javascript; charset=utf-8", include_str!("../../web/submit.js")),
    ("app.css", "text/css; charset=utf-8", include_str!("../../web/app.css")),
];

/// `GET /assets/{name}`.
pub async fn asset(Path(name): Path<String>) -> Response {
    let Some((_, kind, body)) = ASSETS.iter().find(|(n, _, _)| *n == name) else {
        return super::not_found_page();
    };
    let mut r = (StatusCode::OK, *body).into_response();
    let h = r.headers_mut();
    super::secure_headers(h);
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    // The binary is the version: revalidate rather than keep an old script after an upgrade.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}
