//! The autoscaler: how many replicas an endpoint wants from its load, as Kubernetes'
//! HorizontalPodAutoscaler decides it. The load (requests in flight, averaged over a few
//! seconds, or requests per second) divided by the per-replica target gives a count within
//! `min..=max`. Up: at once, then not again before the up cool-down. Down: only to the largest
//! count wanted over the whole down cool-down, so a short lull removes nothing. With `min` 0,
//! an endpoint that had no request for the down cool-down goes to zero.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use berth_model::endpoint::Autoscale;

/// Seconds of load samples the in-flight average covers.
pub const LOAD_WINDOW: Duration = Duration::from_secs(5);

/// What the autoscaler remembers of one endpoint.
#[derive(Debug, Default)]
pub struct Scaler {
    /// (when, requests in flight) samples over [`LOAD_WINDOW`].
    load: VecDeque<(Instant, u64)>,
    /// (when, count wanted) over the down cool-down.
    wanted: VecDeque<(Instant, u32)>,
    last_up: Option<Instant>,
    since: Option<Instant>,
}

/// The load now.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    pub inflight: u64,
    /// Requests per second over [`LOAD_WINDOW`].
    pub rps: f64,
    /// When the last request arrived or ended.
    pub last_request: Option<Instant>,
}

impl Scaler {
    /// The count to run from now on, given the current `desired`.
    pub fn decide(&mut self, a: &Autoscale, now: Instant, load: Load, desired: u32) -> u32 {
        let since = *self.since.get_or_insert(now);
        self.load.push_back((now, load.inflight));
        while self.load.front().is_some_and(|(t, _)| now.saturating_duration_since(*t) > LOAD_WINDOW) {
            self.load.pop_front();
        }
        let inflight = self.load.iter().map(|(_, n)| *n as f64).sum::<f64>() / self.load.len().max(1) as f64;
        let by_inflight = a.target_inflight.map(|t| (inflight / t).ceil());
        let by_rps = a.target_rps.map(|t| (load.rps / t).ceil());
        let mut want = by_inflight.into_iter().chain(by_rps).fold(0.0f64, f64::max) as u32;
        let down = Duration::from_secs(u64::from(a.down_cooldown_secs));
        let recent = load.last_request.is_some_and(|t| now.saturating_duration_since(t) < down);
        if recent || load.inflight > 0 {
            want = want.max(1);
        }
        let want = want.clamp(a.min, a.max);
        self.wanted.push_back((now, want));
        while self.wanted.front().is_some_and(|(t, _)| now.saturating_duration_since(*t) > down) {
            self.wanted.pop_front();
        }
        let up = Duration::from_secs(u64::from(a.up_cooldown_secs));
        if want > desired {
            if self.last_up.is_none_or(|t| now.saturating_duration_since(t) >= up) {
                self.last_up = Some(now);
                return want;
            }
            return desired;
        }
        // Down only once the whole cool-down has been watched, to the most it wanted then.
        let watched = now.saturating_duration_since(since) >= down
            && self.last_up.is_none_or(|t| now.saturating_duration_since(t) >= down);
        let most = self.wanted.iter().map(|(_, w)| *w).max().unwrap_or(want);
        if watched && most < desired { most.max(a.min) } else { desired.clamp(a.min, a.max) }
    }

    /// A request came to an endpoint at zero: one replica at once.
    pub fn wake(&mut self, now: Instant) {
        self.last_up = Some(now);
        self.wanted.push_back((now, 1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Autoscale {
        Autoscale {
            min: 1,
            max: 8,
            target_inflight: Some(4.0),
            target_rps: None,
            up_cooldown_secs: 10,
            down_cooldown_secs: 30,
            cold_start_secs: 60,
        }
    }

    fn load(inflight: u64, at: Instant) -> Load {
        Load { inflight, rps: 0.0, last_request: Some(at) }
    }

    #[test]
    fn scales_up_at_once_then_waits_for_the_cooldown_and_down_after_a_calm_window() {
        let a = policy();
        let t0 = Instant::now();
        let mut s = Scaler::default();
        assert_eq!(s.decide(&a, t0, load(16, t0), 1), 4);
        // More load within the up cool-down: no change yet.
        let t = t0 + Duration::from_secs(1);
        assert_eq!(s.decide(&a, t, load(40, t), 4), 4);
        let t = t0 + Duration::from_secs(11);
        assert_eq!(s.decide(&a, t, load(40, t), 4), 8);
        // Calm: down only after 30 s without wanting more.
        let mut desired = 8;
        for sec in 12..=70 {
            let t = t0 + Duration::from_secs(sec);
            desired = s.decide(&a, t, load(1, t), desired);
            if sec < 41 {
                assert_eq!(desired, 8, "at {sec}s");
            }
        }
        assert_eq!(desired, 1);
    }

    #[test]
    fn an_idle_endpoint_with_min_zero_goes_to_zero_and_a_request_wakes_it() {
        let a = Autoscale { min: 0, ..policy() };
        let t0 = Instant::now();
        let mut s = Scaler::default();
        let mut desired = 1;
        for sec in 0..=70 {
            let t = t0 + Duration::from_secs(sec);
            desired = s.decide(&a, t, Load { inflight: 0, rps: 0.0, last_request: Some(t0) }, desired);
        }
        assert_eq!(desired, 0);
        let t = t0 + Duration::from_secs(71);
        s.wake(t);
        assert_eq!(s.decide(&a, t, Load { inflight: 1, rps: 0.0, last_request: Some(t) }, 1), 1);
    }

    #[test]
    fn requests_per_second_drive_it_too() {
        let a = Autoscale { target_inflight: None, target_rps: Some(10.0), ..policy() };
        let t0 = Instant::now();
        let mut s = Scaler::default();
        assert_eq!(s.decide(&a, t0, Load { inflight: 0, rps: 35.0, last_request: Some(t0) }, 1), 4);
    }
}
