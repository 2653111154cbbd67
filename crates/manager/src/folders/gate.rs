//! A bound on the blocking work folder requests do, per user and in all, so that one user
//! cannot take the blocking thread pool that every other request shares (tokio's, 512 threads:
//! file reads and writes, but also what probes, port-forwards and app tunnels need). Each
//! listing, download or upload takes a slot for as long as it touches the disk (a download:
//! until its last byte is sent); past the bound the request is refused at once with 429 (the
//! user's own slots are taken) or 503 (all of them are), never queued on a thread.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;

/// Folder operations one user may have touching the disk at once (the CLI moves four files
/// at a time).
pub const PER_USER: usize = 8;
/// ... and all users together: a quarter of tokio's blocking pool.
pub const ALL: usize = 128;

/// The slots.
pub struct Gate {
    all: Arc<Semaphore>,
    users: Mutex<HashMap<i64, Arc<Semaphore>>>,
}

impl Default for Gate {
    fn default() -> Gate {
        Gate { all: Arc::new(Semaphore::new(ALL)), users: Default::default() }
    }
}

/// One taken slot, given back when the last clone is dropped (a blocking task holds a clone
/// until it ends, even after its client gave up: the thread is still in use).
#[derive(Clone)]
pub struct Slot(#[allow(dead_code)] Arc<(OwnedSemaphorePermit, OwnedSemaphorePermit)>);

impl Gate {
    /// A slot for user `user`, or the refusal.
    pub fn enter(&self, user: i64) -> Result<Slot, ApiError> {
        let mine = self
            .users
            .lock()
            .expect("gate lock")
            .entry(user)
            .or_insert_with(|| Arc::new(Semaphore::new(PER_USER)))
            .clone();
        let Ok(own) = mine.try_acquire_owned() else {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "you already have {PER_USER} folder operations running (listings, downloads, uploads), \
                     the most one user may have at once: wait for some to end, then try again"
                ),
            ));
        };
        let Ok(all) = self.all.clone().try_acquire_owned() else {
            return Err(ApiError::unavailable(format!(
                "the manager is running {ALL} folder operations for its users, the most it runs at once: try again shortly"
            )));
        };
        Ok(Slot(Arc::new((own, all))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_past_their_slots_is_refused_and_others_are_not() {
        let g = Gate::default();
        let mine: Vec<Slot> = (0..PER_USER).map(|_| g.enter(1).unwrap()).collect();
        let e = g.enter(1).err().unwrap();
        assert_eq!(e.status, StatusCode::TOO_MANY_REQUESTS);
        assert!(e.message.contains("8 folder operations"), "{}", e.message);
        assert!(g.enter(2).is_ok(), "another user still gets a slot");
        let mut mine = mine;
        let held = mine[0].clone();
        mine.remove(0);
        assert!(g.enter(1).is_err(), "a clone (a blocking task still running) keeps its slot");
        drop(held);
        assert!(g.enter(1).is_ok());
    }

    #[test]
    fn all_users_together_are_bounded() {
        let g = Gate::default();
        let _held: Vec<Slot> = (0..ALL as i64).map(|u| g.enter(u).unwrap()).collect();
        assert_eq!(g.enter(9999).err().unwrap().status, StatusCode::SERVICE_UNAVAILABLE);
    }
}
