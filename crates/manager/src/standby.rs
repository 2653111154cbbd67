//! What a standby manager serves while another leads (`leader.rs`): every API request is
//! redirected (307, the same method and body) to the leader's URL, also named in the
//! `berth-leader` header, so that clients given several manager URLs follow the leader; while
//! nobody leads (a takeover under way) the answer is 503 with `Retry-After`. `/v1/leader` and
//! `/metrics` are its own.

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use berth_model::api::{ErrorBody, LEADER_HEADER, LeaderView};
use berth_store::LeaseRow;
use tokio::sync::watch;

#[derive(Clone)]
struct Standby {
    seen: watch::Receiver<Option<LeaseRow>>,
    me: String,
}

impl Standby {
    /// The leader's URL, while someone leads (not this manager's own URL: that is a previous
    /// run of it, about to be replaced).
    fn leader(&self) -> Option<LeaseRow> {
        self.seen.borrow().clone().filter(|l| l.held() && l.url != self.me)
    }
}

/// The standby's routes; `seen` is kept up to date by the campaign, `me` is this manager's URL.
pub fn router(seen: watch::Receiver<Option<LeaseRow>>, me: String) -> Router {
    Router::new()
        .route("/v1/leader", get(leader))
        .route("/metrics", get(metrics))
        .fallback(redirect)
        .with_state(Standby { seen, me })
}

async fn leader(State(s): State<Standby>) -> axum::Json<LeaderView> {
    let row = s.leader();
    axum::Json(LeaderView {
        role: "standby".into(),
        url: s.me.clone(),
        epoch: row.as_ref().map_or(0, |l| l.epoch),
        leader: row.map(|l| l.url),
    })
}

async fn metrics() -> Response {
    let body = "# HELP berth_manager_leader Whether this manager leads (1) or stands by (0).\n\
                # TYPE berth_manager_leader gauge\nberth_manager_leader 0\n# EOF\n";
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], body).into_response()
}

async fn redirect(State(s): State<Standby>, uri: Uri) -> Response {
    let Some(row) = s.leader() else {
        let body = ErrorBody::new("no manager leads right now (a takeover is under way): retry in a few seconds");
        return (StatusCode::SERVICE_UNAVAILABLE, [(header::RETRY_AFTER, "1")], axum::Json(body)).into_response();
    };
    let to = format!("{}{}", row.url.trim_end_matches('/'), uri.path_and_query().map_or("/", |p| p.as_str()));
    let (Ok(location), Ok(leader)) = (HeaderValue::from_str(&to), HeaderValue::from_str(&row.url)) else {
        let body = ErrorBody::new(format!("the leader's URL `{}` is not a valid header value", row.url));
        return (StatusCode::INTERNAL_SERVER_ERROR, axum::Json(body)).into_response();
    };
    let body = ErrorBody::new(format!("this manager is a standby: the leader is at {}", row.url));
    let mut resp = (StatusCode::TEMPORARY_REDIRECT, axum::Json(body)).into_response();
    resp.headers_mut().insert(header::LOCATION, location);
    resp.headers_mut().insert(LEADER_HEADER, leader);
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use tower_service::Service;

    async fn ask(app: &mut Router, path: &str) -> Response {
        app.call(axum::http::Request::post(path).body(Body::empty()).unwrap()).await.unwrap()
    }

    #[tokio::test]
    async fn redirects_to_the_leader_or_asks_to_retry() {
        let (tx, rx) = watch::channel(None);
        let mut app = router(rx, "http://b:7070".into());
        let r = ask(&mut app, "/v1/jobs?x=1").await;
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE, "nobody leads yet");
        assert_eq!(r.headers()[header::RETRY_AFTER], "1");
        let row = LeaseRow {
            holder: "a:1".into(),
            url: "http://a:7070".into(),
            epoch: 4,
            remaining: std::time::Duration::from_secs(3),
        };
        tx.send_replace(Some(row.clone()));
        let r = ask(&mut app, "/v1/jobs?x=1").await;
        assert_eq!(r.status(), StatusCode::TEMPORARY_REDIRECT);
        assert_eq!(r.headers()[header::LOCATION], "http://a:7070/v1/jobs?x=1");
        assert_eq!(r.headers()[LEADER_HEADER], "http://a:7070");
        tx.send_replace(Some(LeaseRow { remaining: std::time::Duration::ZERO, ..row }));
        assert_eq!(ask(&mut app, "/v1/jobs").await.status(), StatusCode::SERVICE_UNAVAILABLE, "a lease run out");
    }
}
