//! The fair-share usage book and the run-time predictor: how the services charge, restore
//! and read them (the rest of `State` never touches either directly).

use berth_sched::{Charged, Millis, UsageBook, UsageKind};
use berth_store::UsageRow;
use jiff::Timestamp;

use super::State;

/// Fair-share usage per user and project: the scheduler's book (`berth_sched::UsageBook`, the
/// same as `berth sim`'s), in billing-seconds, each figure decayed to its own ms, with the
/// store's rows. Every change is O(1): decay the one figure to now, add, write that row.
#[derive(Debug, Default)]
pub struct Usage(UsageBook);

impl std::ops::Deref for Usage {
    type Target = UsageBook;
    fn deref(&self) -> &UsageBook {
        &self.0
    }
}

impl std::ops::DerefMut for Usage {
    fn deref_mut(&mut self) -> &mut UsageBook {
        &mut self.0
    }
}

impl Usage {
    /// The rows after adding `amount` (billing-seconds) for each (user, project, amount) at
    /// `now`; amounts of the same name add up. Memory is unchanged until [`Usage::set`].
    pub fn charge(&self, items: &[(&str, &str, f64)], now: Millis, half_life_ms: Millis) -> Vec<UsageRow> {
        // Out of range never: `now` is a reading of the manager's clock.
        let at = Timestamp::from_millisecond(now).unwrap_or_default();
        let row = |c: Charged| UsageRow { kind: c.kind.as_str().into(), name: c.name.into(), value: c.figure.0, at };
        self.0.charge(items, now, half_life_ms).into_iter().map(row).collect()
    }

    /// Takes rows made by [`Usage::charge`] once they are stored.
    pub fn set(&mut self, rows: &[UsageRow]) {
        for r in rows {
            if let Some(kind) = UsageKind::parse(&r.kind) {
                self.0.set(kind, &r.name, (r.value, r.at.as_millisecond()));
            }
        }
    }
}

impl State {
    /// The usage book as it stands (the pass's fair-share figures, a batch's undo).
    pub fn usage(&self) -> &Usage {
        &self.usage
    }

    /// Takes usage rows once they are stored ([`Usage::charge`] made them).
    pub fn set_usage(&mut self, rows: &[UsageRow]) {
        self.usage.set(rows);
    }

    /// Takes one stored usage row back after a restart (`user` and `project` rows; others
    /// are not the book's).
    pub fn restore_usage(&mut self, row: &UsageRow) {
        let figure = (row.value, row.at.as_millisecond());
        match row.kind.as_str() {
            "user" => self.usage.users.insert(row.name.clone(), figure),
            "project" => self.usage.projects.insert(row.name.clone(), figure),
            _ => None,
        };
    }

    /// How long a job like `key` is expected to run, from the history (`predictions.rs`).
    pub fn predict(&self, key: &berth_sched::JobKey, limit_ms: Option<Millis>) -> Option<Millis> {
        self.predictor.predict(key, limit_ms)
    }

    /// A run like `key` ended by itself after `ran_ms`: the predictor learns from it.
    pub fn observe_run(&mut self, key: &berth_sched::JobKey, ran_ms: Millis) {
        self.predictor.observe(key, ran_ms);
    }

    /// The predictor rebuilt from the store's history after a restart.
    pub fn set_predictor(&mut self, predictor: berth_sched::Predictor) {
        self.predictor = predictor;
    }
}
