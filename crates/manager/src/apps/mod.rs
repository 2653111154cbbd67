//! The app proxy: `/apps/<job>/<app>/...` on a listener of its own (`--apps-listen`), HTTP
//! and WebSocket upgrades, to the app's port in the job's main kernel (`proxy.rs`).
//!
//! Each app is served on a host name of its own (`<job>-<app>.localhost`, or from
//! `--apps-url`'s wildcard: `api/apps.rs`), so an app's pages (code the job's owner wrote) are
//! a site apart from the dashboard and an origin apart from every other app: they cannot read
//! the dashboard's pages, nor make the browser send its session cookie (which the API would
//! refuse from another origin anyway: `origin.rs`). Who gets in: a session cookie for that one
//! app (`berth-app-<job>-<app>`, host-only, path-scoped, `HttpOnly`, started from a one-time
//! link, `berth open`) holding a token good for that app only, never for the API, or an API
//! token in the `Authorization` header (scripts); then the job must be visible to that user
//! (its owner, admins, and its project's members for a shared job). Everyone else, whatever
//! the reason, gets the same 404, so nobody learns which jobs or apps exist.
//!
//! Serving endpoints (`/serve/<name>/`) are on this listener too, at the host the API is
//! reached by; every answer of theirs carries `Content-Security-Policy: sandbox`, so a page an
//! endpoint serves runs in an opaque origin that no site's cookies ride.

pub mod direct;
pub mod key;
mod pool;
pub mod proxy;
pub mod workers;

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, Request, Response, StatusCode, header};
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
use berth_model::app::AppPath;
use berth_model::{JobId, JobState};

use crate::identity::User;
use crate::login_links::LinkOwner;
use crate::manager::Manager;
use proxy::{AppKey, Forwarded, Proxy, plain};

/// The query parameter of a one-time login link.
pub const LOGIN_PARAM: &str = "berth-login";

/// The app proxy of one listener (or of one worker of it): the manager and its own pool of
/// connections to the apps.
pub struct Apps {
    m: Arc<Manager>,
    proxy: Proxy,
}

impl Apps {
    pub fn new(m: Arc<Manager>) -> Arc<Apps> {
        Arc::new(Apps { proxy: Proxy::new(m.clone(), m.serving.routes.clone()), m })
    }
}

/// The app proxy's routes (everything under `/apps/`), for the TLS listener; the plain one's
/// workers call [`answer`] straight from hyper (`workers.rs`).
pub fn router(m: Arc<Manager>) -> Router {
    Router::new().fallback(handle).with_state(Apps::new(m))
}

async fn handle(State(apps): State<Arc<Apps>>, req: Request<Body>) -> Response<Body> {
    answer(&apps, req).await
}

/// The cookie that holds a session for app `app` of job `job`.
pub fn cookie_name(job: JobId, app: &str) -> String {
    format!("berth-app-{job}-{app}")
}

/// `/apps/<job>/<app>` and whether a `/` follows.
fn parse_path(path: &str) -> Option<(JobId, String, bool)> {
    let rest = path.strip_prefix("/apps/")?;
    let (job, rest) = rest.split_once('/')?;
    let job: JobId = job.parse().ok().filter(|j| *j > 0)?;
    let (app, slash) = match rest.split_once('/') {
        Some((app, _)) => (app, true),
        None => (rest, false),
    };
    berth_model::app::valid_app_name(app).ok()?;
    Some((job, app.to_string(), slash))
}

/// The answer to anyone who may not see the app, and for apps that do not exist: the same.
fn not_found() -> Response<Body> {
    plain(StatusCode::NOT_FOUND, "not found: open a job's app with `berth open JOB APP`".into())
}

/// The answer to any request on the app listener. No access-log middleware: the lines are
/// written here, and `/serve/`'s only when they are wanted (a middleware copied every
/// request's method and path, and boxed its future).
pub async fn answer(apps: &Apps, req: Request<Body>) -> Response<Body> {
    let serve = req.uri().path().starts_with("/serve/");
    if serve && !crate::access_log::serving_lines() {
        return serve_endpoint(apps, req).await;
    }
    let (method, path, start) = (req.method().clone(), req.uri().path().to_string(), Instant::now());
    let r = if serve { serve_endpoint(apps, req).await } else { job_app(apps, req).await };
    crate::access_log::line(&method, &path, r.status().as_u16(), start);
    r
}

/// `/serve/<name>/...`: a serving endpoint's answer, sandboxed.
async fn serve_endpoint(apps: &Apps, req: Request<Body>) -> Response<Body> {
    let mut r = crate::serving::router::handle(&apps.m, &apps.proxy, req).await;
    sandbox(r.headers_mut());
    r
}

/// `/apps/<job>/<app>/...`: a job's app.
async fn job_app(apps: &Apps, req: Request<Body>) -> Response<Body> {
    let Some((job, app, slash)) = parse_path(req.uri().path()) else { return not_found() };
    let scope = berth_model::app::base_path(job, &app);
    let query = req.uri().query().unwrap_or("");
    let (code, rest): (Vec<&str>, Vec<&str>) =
        query.split('&').filter(|p| !p.is_empty()).partition(|p| p.starts_with(&format!("{LOGIN_PARAM}=")));
    if !slash {
        let q = if query.is_empty() { String::new() } else { format!("?{query}") };
        return redirect(StatusCode::PERMANENT_REDIRECT, &format!("{scope}{q}"));
    }
    if let Some(code) = code.first().and_then(|c| c.split_once('=')).map(|(_, c)| c) {
        if !on_own_host(&apps.m, req.headers(), job, &app) {
            return plain(
                StatusCode::BAD_REQUEST,
                format!(
                    "an app opens on a host of its own, {}.localhost: open the link exactly as `berth open {job} \
                     {app}` printed it",
                    berth_model::app::host_label(job, &app)
                ),
            );
        }
        return login(&apps.m, job, &app, &scope, code, &rest, req.uri().path()).await;
    }
    let Some(user) = who(&apps.m, req.headers(), job, &app, &scope).await else { return not_found() };
    let (attempt, path) = match may_use(&apps.m, &user, job, &app).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    apps.m.sessions.touch(job);
    let mut req = req;
    if path == AppPath::Strip {
        let Some(stripped) = strip_prefix(req.uri(), job, &app) else {
            return plain(StatusCode::BAD_REQUEST, "invalid request path".into());
        };
        *req.uri_mut() = stripped;
    }
    let forwarded = Forwarded {
        proto: if apps.m.tls { "https" } else { "http" },
        host: req.headers().get(header::HOST).cloned(),
        prefix: HeaderValue::from_str(&scope).ok(),
    };
    let mut resp = apps.proxy.forward(AppKey { job, attempt, app: app.into() }, req, forwarded).await;
    if path == AppPath::Strip {
        prefix_location(resp.headers_mut(), &scope);
    }
    resp
}

/// The request's URI as an app that strips its prefix gets it (`/apps/7/web/x` is `/x`).
fn strip_prefix(uri: &axum::http::Uri, job: JobId, app: &str) -> Option<axum::http::Uri> {
    let whole = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    berth_model::app::strip_base(job, app, whole).parse().ok()
}

/// A redirect from an app that strips its prefix to a path of its own (`Location: /dir/`, as
/// `python -m http.server` sends for a folder) goes back with the prefix put in, or the
/// browser would leave the app (what nginx's `proxy_redirect` does).
fn prefix_location(h: &mut axum::http::HeaderMap, scope: &str) {
    let Some(to) = h.get(header::LOCATION).and_then(|v| v.to_str().ok()) else { return };
    if to.starts_with('/') && !to.starts_with("//") {
        let with = format!("{}{to}", scope.trim_end_matches('/'));
        if let Ok(v) = HeaderValue::from_str(&with) {
            h.insert(header::LOCATION, v);
        }
    }
}

/// The user behind the app's session cookie (a token good for this app only) or an API token
/// (scripts).
async fn who(m: &Manager, headers: &axum::http::HeaderMap, job: JobId, app: &str, scope: &str) -> Option<Arc<User>> {
    let jar = CookieJar::from_headers(headers);
    match jar.get(&cookie_name(job, app)) {
        Some(c) => m.tenancy.authenticate_app(c.value(), scope).await.ok(),
        None => m.tenancy.authenticate(crate::auth::bearer_of(headers)?).await.ok(),
    }
}

/// Whether a login link is being opened on the app's own host. Without `--apps-url` that is
/// `<job>-<app>.localhost`: a session cookie set on any other host (the API's, say) would
/// make the app's pages a site with the dashboard again. Behind `--apps-url` the admin's proxy
/// decides which host names reach the proxy.
fn on_own_host(m: &Manager, headers: &axum::http::HeaderMap, job: JobId, app: &str) -> bool {
    if m.apps.as_ref().is_some_and(|a| a.public_url.is_some()) {
        return true;
    }
    let name = caller_host(headers).trim_end_matches('.');
    name.eq_ignore_ascii_case(&format!("{}.localhost", berth_model::app::host_label(job, app)))
}

/// What every answer of a serving endpoint carries: its pages run in an opaque origin (scripts
/// allowed, no same-origin access), so a page one user serves cannot act with a visitor's
/// cookies for the dashboard or the apps on the same host.
fn sandbox(h: &mut axum::http::HeaderMap) {
    // Appended: an endpoint's own policy still holds beside it.
    h.append(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("sandbox allow-scripts allow-forms allow-popups allow-downloads allow-modals"),
    );
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
}

/// Whether `user` may use app `app` of job `job`: the attempt to send it to and the path the
/// app takes, or the answer.
async fn may_use(m: &Manager, user: &User, job: JobId, app: &str) -> Result<(u32, AppPath), Response<Body>> {
    let row = m.store.job(job).await.map_err(|_| plain(StatusCode::SERVICE_UNAVAILABLE, "the store is busy".into()))?;
    let path = match row {
        Some(r) if user.can_see(r.user_id, &r.spec) => match r.spec.apps.iter().find(|a| a.name == app) {
            Some(a) => a.path,
            None => return Err(not_found()),
        },
        _ => return Err(not_found()),
    };
    let st = m.jobs.lock().await;
    match st.job(job) {
        Some(j) if j.state == JobState::Running => Ok((j.attempt.number, path)),
        Some(j) => Err(plain(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("job {job} is {}: its apps are served while it runs", j.state),
        )),
        None => Err(plain(StatusCode::SERVICE_UNAVAILABLE, format!("job {job} has ended: its apps are gone"))),
    }
}

/// A one-time link: its session starts in a cookie for this app only, and the browser goes on
/// to the app without the code in its address bar.
async fn login(
    m: &Manager,
    job: JobId,
    app: &str,
    scope: &str,
    code: &str,
    rest: &[&str],
    path: &str,
) -> Response<Body> {
    let Some(owner) = m.login_links.redeem(code, scope) else {
        return plain(
            StatusCode::UNAUTHORIZED,
            format!("this link is used up or too old: run `berth open {job} {app}` for a new one"),
        );
    };
    let token = match m.tenancy.create_app_session(&owner, scope).await {
        Ok(t) => t,
        Err(e) => return plain(e.status, e.message),
    };
    tracing::info!(user = owner.name, job, app, "app session started");
    let cookie = Cookie::build((cookie_name(job, app), token))
        .path(scope.to_string())
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(m.tls)
        .max_age(cookie::time::Duration::seconds(crate::tenancy::SESSION_TTL.as_secs() as i64))
        .build();
    let target = if rest.is_empty() { path.to_string() } else { format!("{path}?{}", rest.join("&")) };
    landing(&target, &cookie.to_string())
}

/// The answer to a login link: the cookie, and a page that goes on to the app. Not a
/// redirect: the link is opened from another site (the dashboard, a terminal), and a browser
/// keeps a `SameSite=Strict` cookie off every request of a navigation another site started,
/// redirects included; a navigation the app's own host starts carries it.
fn landing(to: &str, cookie: &str) -> Response<Body> {
    let to = escape_html(to);
    let html = format!(
        "<!doctype html><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"0;url={to}\">\
         <title>berth: opening the app</title><p>Opening <a href=\"{to}\">the app</a>…</p>\n"
    );
    let mut r = Response::new(Body::from(html));
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static("default-src 'none'; frame-ancestors 'none'"));
    if let Ok(v) = HeaderValue::from_str(cookie) {
        h.insert(header::SET_COOKIE, v);
    }
    // The code must not leak to the app through `Referer`.
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// `text` safe inside an HTML attribute or text.
fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn redirect(status: StatusCode, to: &str) -> Response<Body> {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = status;
    if let Ok(v) = HeaderValue::from_str(to) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    // The code must not leak to the app through `Referer`.
    r.headers_mut().insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// Who a link is for.
pub fn link_owner(user: &User) -> LinkOwner {
    LinkOwner { user_id: user.id, name: user.name.clone() }
}

/// The host name the caller reached the API or the proxy by, without its port (`[v6]` kept bracketed).
pub(crate) fn caller_host(headers: &axum::http::HeaderMap) -> &str {
    let host = headers.get(axum::http::header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("localhost");
    match host.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) && (!h.starts_with('[') || h.ends_with(']')) => h,
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caller_hosts_lose_their_port() {
        let mut h = axum::http::HeaderMap::new();
        h.insert(axum::http::header::HOST, "127.0.0.1:7070".parse().unwrap());
        assert_eq!(caller_host(&h), "127.0.0.1");
        h.insert(axum::http::header::HOST, "[::1]:7070".parse().unwrap());
        assert_eq!(caller_host(&h), "[::1]");
        h.insert(axum::http::header::HOST, "berth.example.org".parse().unwrap());
        assert_eq!(caller_host(&h), "berth.example.org");
    }

    #[test]
    fn the_landing_page_escapes_its_target() {
        assert_eq!(escape_html("/apps/7/web/?a=1&b=\"<x>'"), "/apps/7/web/?a=1&amp;b=&quot;&lt;x&gt;&#39;");
    }

    #[test]
    fn redirects_of_stripped_apps_stay_in_the_app() {
        let mut h = axum::http::HeaderMap::new();
        h.insert(header::LOCATION, HeaderValue::from_static("/dir/"));
        prefix_location(&mut h, "/apps/7/web/");
        assert_eq!(h.get(header::LOCATION).unwrap(), "/apps/7/web/dir/");
        for elsewhere in ["//evil.example/", "https://example.org/x", "dir/"] {
            h.insert(header::LOCATION, HeaderValue::from_static(elsewhere));
            prefix_location(&mut h, "/apps/7/web/");
            assert_eq!(h.get(header::LOCATION).unwrap(), elsewhere);
        }
        let uri: axum::http::Uri = "/apps/7/web/a%20b?q=1".parse().unwrap();
        assert_eq!(strip_prefix(&uri, 7, "web").unwrap(), "/a%20b?q=1");
    }

    #[test]
    fn app_paths() {
        assert_eq!(parse_path("/apps/7/jupyter/lab"), Some((7, "jupyter".into(), true)));
        assert_eq!(parse_path("/apps/7/jupyter/"), Some((7, "jupyter".into(), true)));
        assert_eq!(parse_path("/apps/7/jupyter"), Some((7, "jupyter".into(), false)));
        assert_eq!(parse_path("/apps/0/x/"), None);
        assert_eq!(parse_path("/apps/x/y/"), None);
        assert_eq!(parse_path("/apps/7/Bad/"), None);
        assert_eq!(parse_path("/v1/jobs"), None);
    }
}
