//! Whether a request that rides the dashboard's session cookie comes from the dashboard's own
//! pages: browsers send a cookie with requests that other pages start (a form, `fetch`, a
//! WebSocket), and a WebSocket handshake is a GET that no CORS rule stops, so the cookie alone
//! proves nothing about who asked.
//!
//! Three checks, all on what the browser itself writes and a page's script cannot forge:
//! - `Sec-Fetch-Site`, when sent, must be `same-origin` or `none` (typed in, a bookmark).
//!   `same-site` is refused too: cookies ignore ports, so a page on the app proxy's port of the
//!   same host is "same-site" with the dashboard.
//! - `Origin`, when sent (every WebSocket handshake and every change from a browser), must be
//!   the request's own origin: the host and port in `Host`, as the dashboard's pages have it.
//!   The scheme is not compared, so a TLS-terminating proxy in front of the manager works.
//! - A WebSocket handshake and every change must carry the session's CSRF token, which only the
//!   dashboard's own pages can read (`GET /ui/session`): in the `x-berth-csrf` header, or, for
//!   a WebSocket (a browser cannot set its headers), in the `csrf` query parameter.

use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, Uri, header};

use crate::error::ApiError;
use crate::session_cookie::{CSRF_HEADER, CSRF_PARAM, csrf_token};

/// Refuses a cookie-authenticated request that another page started, or a change or WebSocket
/// without the session's CSRF token.
pub fn check_cookie_request(parts: &Parts, session_token: &str) -> Result<(), ApiError> {
    check_same_origin(&parts.headers)?;
    let ws = is_websocket(&parts.headers);
    if !ws && matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(());
    }
    let sent = parts
        .headers
        .get(CSRF_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| ws.then(|| query_param(&parts.uri, CSRF_PARAM)).flatten())
        .unwrap_or_default();
    let want = csrf_token(session_token);
    if crate::token::ct_eq(sent.as_bytes(), want.as_bytes()) {
        Ok(())
    } else if ws {
        Err(ApiError::forbidden(
            "missing or wrong CSRF token: a WebSocket opened with the dashboard's session must pass the \
             session's CSRF token as `?csrf=` (scripts use an API token instead)",
        ))
    } else {
        Err(ApiError::forbidden("missing or wrong CSRF token: reload the page and try again"))
    }
}

/// The `Sec-Fetch-Site` and `Origin` checks.
fn check_same_origin(headers: &HeaderMap) -> Result<(), ApiError> {
    let refuse = |from: &str| {
        ApiError::forbidden(format!(
            "cross-site request refused ({from}): the dashboard's session cookie is good only on the \
             dashboard's own pages; scripts send an API token (`Authorization: Bearer`)"
        ))
    };
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok())
        && !matches!(site, "same-origin" | "none")
    {
        return Err(refuse(&format!("Sec-Fetch-Site: {site}")));
    }
    let Some(origin) = headers.get(header::ORIGIN) else { return Ok(()) };
    let origin = origin.to_str().unwrap_or("null");
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
    if same_authority(origin, host) { Ok(()) } else { Err(refuse(&format!("Origin: {origin}"))) }
}

/// Whether `origin` (`scheme://host[:port]`) names the same host and port as a `Host` header.
fn same_authority(origin: &str, host: &str) -> bool {
    let Ok(uri) = origin.parse::<Uri>() else { return false };
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else { return false };
    if uri.path() != "/" && !uri.path().is_empty() {
        return false;
    }
    let default = match scheme {
        "http" => 80,
        "https" => 443,
        _ => return false,
    };
    let Ok(host) = host.parse::<axum::http::uri::Authority>() else { return false };
    authority.host().eq_ignore_ascii_case(host.host())
        && authority.port_u16().unwrap_or(default) == host.port_u16().unwrap_or(default)
}

/// Whether the request asks for a WebSocket upgrade.
pub fn is_websocket(headers: &HeaderMap) -> bool {
    headers.get(header::UPGRADE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// The value of query parameter `name`, if any (percent-decoded).
fn query_param(uri: &Uri, name: &str) -> Option<String> {
    url::form_urlencoded::parse(uri.query()?.as_bytes()).find(|(k, _)| k == name).map(|(_, v)| v.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Request;

    fn parts(method: Method, uri: &str, headers: &[(&str, &str)]) -> Parts {
        let mut b = Request::builder().method(method).uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    const TOKEN: &str = "session-token";

    #[test]
    fn origins_match_on_host_and_port_only() {
        assert!(same_authority("http://127.0.0.1:7070", "127.0.0.1:7070"));
        assert!(same_authority("https://berth.example.org", "berth.example.org"));
        assert!(same_authority("http://berth.example.org", "BERTH.example.org:80"));
        // The app proxy's port of the same host: same site, another origin.
        assert!(!same_authority("http://127.0.0.1:7071", "127.0.0.1:7070"));
        assert!(!same_authority("http://7-web.localhost:7071", "127.0.0.1:7070"));
        assert!(!same_authority("null", "127.0.0.1:7070"));
        assert!(!same_authority("http://127.0.0.1:7070", ""));
        assert!(!same_authority("file://x", "x"));
    }

    #[test]
    fn a_websocket_from_another_origin_is_refused_even_with_the_token() {
        let csrf = csrf_token(TOKEN);
        let uri = format!("/v1/jobs/7/exec?csrf={csrf}");
        let p = parts(
            Method::GET,
            &uri,
            &[("host", "127.0.0.1:7070"), ("upgrade", "websocket"), ("origin", "http://127.0.0.1:7071")],
        );
        assert_eq!(check_cookie_request(&p, TOKEN).unwrap_err().status, 403);
        let p = parts(
            Method::GET,
            &uri,
            &[("host", "127.0.0.1:7070"), ("upgrade", "websocket"), ("origin", "http://127.0.0.1:7070")],
        );
        assert!(check_cookie_request(&p, TOKEN).is_ok());
    }

    #[test]
    fn a_websocket_of_the_dashboards_origin_still_needs_the_csrf_token() {
        let h = [("host", "127.0.0.1:7070"), ("upgrade", "websocket"), ("origin", "http://127.0.0.1:7070")];
        let p = parts(Method::GET, "/v1/jobs/7/exec", &h);
        assert_eq!(check_cookie_request(&p, TOKEN).unwrap_err().status, 403);
        let p = parts(Method::GET, "/v1/jobs/7/exec?csrf=wrong", &h);
        assert_eq!(check_cookie_request(&p, TOKEN).unwrap_err().status, 403);
    }

    #[test]
    fn same_site_fetches_are_refused_and_plain_reads_pass() {
        let p = parts(Method::GET, "/v1/jobs", &[("host", "127.0.0.1:7070"), ("sec-fetch-site", "same-site")]);
        assert_eq!(check_cookie_request(&p, TOKEN).unwrap_err().status, 403);
        let p = parts(Method::GET, "/v1/jobs", &[("host", "127.0.0.1:7070"), ("sec-fetch-site", "same-origin")]);
        assert!(check_cookie_request(&p, TOKEN).is_ok());
        let p = parts(Method::GET, "/v1/jobs", &[("host", "127.0.0.1:7070")]);
        assert!(check_cookie_request(&p, TOKEN).is_ok());
    }

    #[test]
    fn changes_need_the_csrf_header_and_the_query_parameter_is_for_websockets_only() {
        let csrf = csrf_token(TOKEN);
        let h = [("host", "127.0.0.1:7070"), ("origin", "http://127.0.0.1:7070")];
        let p = parts(Method::POST, &format!("/v1/jobs/7/cancel?csrf={csrf}"), &h);
        assert_eq!(check_cookie_request(&p, TOKEN).unwrap_err().status, 403);
        let h = [("host", "127.0.0.1:7070"), ("origin", "http://127.0.0.1:7070"), (CSRF_HEADER, csrf.as_str())];
        let p = parts(Method::POST, "/v1/jobs/7/cancel", &h);
        assert!(check_cookie_request(&p, TOKEN).is_ok());
    }
}
