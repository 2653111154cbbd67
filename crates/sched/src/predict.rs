//! Run-time prediction from history: what backfill plans with instead of a limit that is
//! missing or far too long (most users give none, or the queue's maximum).
//!
//! A job's prediction is the mean of the last [`RECENT`] run times of the most specific
//! history it has: the same user, name and size; else the same user and size; else the same
//! user (Tsafrir, Etsion and Feitelson, "Backfilling using system-generated predictions
//! rather than user runtime estimates", TPDS 2007: the mean of a user's last two jobs beats
//! the users' own estimates). It is capped by the job's limit, so it never exceeds it, and
//! a job without history gets none (its limit, or the queue's default, stays the estimate).
//!
//! Only the scheduler's plans use predictions: a job is stopped at its limit, never at its
//! prediction. A job that outlives its prediction counts as ending now in backfill's
//! timeline, like a job past its limit. Pure: the caller feeds completions as they happen
//! (`observe`) and asks when a job is submitted or requeued (`predict`).

use std::collections::{HashMap, VecDeque};

use crate::Millis;

/// Run times kept per history key: the mean of the last two reacts fast to a user's new
/// kind of work, and a longer memory would carry yesterday's experiment into today's.
pub const RECENT: usize = 2;

/// What a job's history is looked up by.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JobKey {
    pub user: String,
    /// The job's name (Slurm's `--job-name`); empty when it has none.
    pub name: String,
    /// Its size: nodes and per-node request, in any stable form ([`crate::size_milli`]).
    pub size: u64,
}

/// Recent run times by user, name and size; by user and size; and by user.
#[derive(Debug, Clone, Default)]
pub struct Predictor {
    exact: HashMap<(String, String, u64), VecDeque<Millis>>,
    sized: HashMap<(String, u64), VecDeque<Millis>>,
    user: HashMap<String, VecDeque<Millis>>,
}

fn push(h: &mut VecDeque<Millis>, ran_ms: Millis) {
    if h.len() == RECENT {
        h.pop_front();
    }
    h.push_back(ran_ms);
}

fn mean(h: &VecDeque<Millis>) -> Option<Millis> {
    (!h.is_empty()).then(|| h.iter().map(|&x| x as i128).sum::<i128>() as Millis / h.len() as Millis)
}

impl Predictor {
    pub fn new() -> Self {
        Self::default()
    }

    /// A job of `key` ran `ran_ms` to its end (completed, failed or stopped at its limit; a
    /// preempted or cancelled run says nothing about the job's length and is not observed).
    pub fn observe(&mut self, key: &JobKey, ran_ms: Millis) {
        let ran_ms = ran_ms.max(0);
        push(self.exact.entry((key.user.clone(), key.name.clone(), key.size)).or_default(), ran_ms);
        push(self.sized.entry((key.user.clone(), key.size)).or_default(), ran_ms);
        push(self.user.entry(key.user.clone()).or_default(), ran_ms);
    }

    /// The expected run time of a job of `key` with `limit_ms`, never above the limit;
    /// `None` without history. At least 1 ms: a prediction of nothing plans nothing.
    pub fn predict(&self, key: &JobKey, limit_ms: Option<Millis>) -> Option<Millis> {
        let found = self
            .exact
            .get(&(key.user.clone(), key.name.clone(), key.size))
            .and_then(mean)
            .or_else(|| self.sized.get(&(key.user.clone(), key.size)).and_then(mean))
            .or_else(|| self.user.get(&key.user).and_then(mean))?;
        let p = found.max(1);
        Some(limit_ms.map_or(p, |l| p.min(l.max(1))))
    }
}

/// How far predictions fell from the truth, over the jobs that had one.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct PredictionError {
    /// Jobs that started with a prediction, and all jobs that started.
    pub predicted: usize,
    pub started: usize,
    /// Mean of |predicted − actual|, in seconds.
    pub mean_abs_error_s: f64,
    /// Median of predicted ÷ actual (1 is exact; below 1: too short).
    pub median_ratio: f64,
    /// Share of predictions within a factor of 2 of the actual run time.
    pub within_2x: f64,
    /// Share of predictions shorter than the actual run time.
    pub under: f64,
}

impl PredictionError {
    /// From (predicted, actual) run times in ms; `started`: every job that ran.
    pub fn of(pairs: &[(Millis, Millis)], started: usize) -> Self {
        if pairs.is_empty() {
            return PredictionError { started, ..Default::default() };
        }
        let n = pairs.len() as f64;
        let abs: f64 = pairs.iter().map(|&(p, a)| (p - a).abs() as f64 / 1000.0).sum();
        let mut ratios: Vec<f64> = pairs.iter().map(|&(p, a)| p.max(1) as f64 / a.max(1) as f64).collect();
        ratios.sort_by(f64::total_cmp);
        let within = ratios.iter().filter(|&&r| (0.5..=2.0).contains(&r)).count() as f64;
        let under = pairs.iter().filter(|&&(p, a)| p < a).count() as f64;
        PredictionError {
            predicted: pairs.len(),
            started,
            mean_abs_error_s: abs / n,
            median_ratio: crate::sim::percentile(&ratios, 50.0),
            within_2x: within / n,
            under: under / n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(user: &str, name: &str, size: u64) -> JobKey {
        JobKey { user: user.into(), name: name.into(), size }
    }

    #[test]
    fn no_history_no_prediction() {
        assert_eq!(Predictor::new().predict(&key("a", "x", 1), Some(10)), None);
    }

    #[test]
    fn mean_of_the_last_two_of_the_most_specific_history() {
        let mut p = Predictor::new();
        p.observe(&key("a", "train", 8), 1_000);
        p.observe(&key("a", "train", 8), 3_000);
        p.observe(&key("a", "train", 8), 5_000);
        p.observe(&key("a", "eval", 1), 100);
        assert_eq!(p.predict(&key("a", "train", 8), None), Some(4_000));
        // Same user and size, another name: the sized history (train's last two).
        assert_eq!(p.predict(&key("a", "new", 8), None), Some(4_000));
        // Same user only: the user's last two (5 s and 0.1 s).
        assert_eq!(p.predict(&key("a", "new", 4), None), Some(2_550));
        assert_eq!(p.predict(&key("b", "train", 8), None), None);
    }

    #[test]
    fn capped_by_the_limit_and_never_zero() {
        let mut p = Predictor::new();
        p.observe(&key("a", "", 1), 10_000);
        assert_eq!(p.predict(&key("a", "", 1), Some(4_000)), Some(4_000));
        p.observe(&key("z", "", 1), 0);
        assert_eq!(p.predict(&key("z", "", 1), None), Some(1));
    }

    proptest::proptest! {
        /// Whatever the history, a prediction never exceeds the job's limit, and is never 0.
        #[test]
        fn predictions_never_exceed_the_limit(
            runs in proptest::collection::vec((0usize..3, 0usize..2, 0u64..3, 0i64..100_000_000), 0..30),
            ask in (0usize..3, 0usize..2, 0u64..3),
            limit in proptest::option::of(0i64..50_000_000),
        ) {
            let (users, names) = (["a", "b", "c"], ["", "x"]);
            let mut p = Predictor::new();
            for &(u, n, size, ran) in &runs {
                p.observe(&key(users[u], names[n], size), ran);
            }
            if let Some(e) = p.predict(&key(users[ask.0], names[ask.1], ask.2), limit) {
                proptest::prop_assert!(e >= 1);
                proptest::prop_assert!(limit.is_none_or(|l| e <= l.max(1)), "{e} over the limit {limit:?}");
            }
        }
    }

    #[test]
    fn error_figures() {
        let e = PredictionError::of(&[(100, 100), (50, 100), (400, 100), (1000, 1000)], 5);
        assert_eq!((e.predicted, e.started), (4, 5));
        assert!((e.within_2x - 0.75).abs() < 1e-9);
        assert!((e.under - 0.25).abs() < 1e-9);
        assert!((e.median_ratio - 1.0).abs() < 1e-9);
        assert!((e.mean_abs_error_s - 0.0875).abs() < 1e-9);
    }
}
