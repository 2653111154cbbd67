//! `GET /ui/events`: the job changes the caller may see, as server-sent events, for the
//! dashboard's live views. Each event `job` carries a `JobView` as JSON, sent once the change
//! is stored; `resync` says the stream fell behind and the page should reload what it shows.
//! The stream ends when the manager shuts down, so it never holds a shutdown up.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use tokio::sync::broadcast::error::RecvError;

use crate::auth::Auth;
use crate::manager::Manager;

pub async fn events(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let rx = m.jobs.subscribe();
    let shutdown = m.shutdown.clone();
    let stream = futures_util::stream::unfold((rx, shutdown, user), |(mut rx, mut shutdown, user)| async move {
        loop {
            let next = tokio::select! {
                r = rx.recv() => r,
                _ = shutdown.wait_for(|s| *s) => return None,
            };
            let event = match next {
                Ok(e) if user.can_see(e.owner_id, &e.spec) => {
                    let data = serde_json::to_string(&e.view).expect("job views serialise");
                    Event::default().event("job").data(data)
                }
                Ok(_) => continue,
                Err(RecvError::Lagged(_)) => Event::default().event("resync").data(""),
                Err(RecvError::Closed) => return None,
            };
            return Some((Ok(event), (rx, shutdown, user)));
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}
