//! Fair-share usage books: each user's and each project's past usage, decayed with a half-life
//! ([`decay_usage`]), charged while jobs hold resources and read by fair-share ordering as a
//! [`FairShare`]. One type for the manager, which stores every change before it takes it
//! ([`UsageBook::charge`], then [`UsageBook::set`]), and for `berth sim`, which has nothing to
//! store and changes it at once ([`UsageBook::add`]).
//!
//! Each figure keeps the time it is decayed to, so a change costs one figure, not the book.
//! Names are numbered when first seen ([`Figures`]): a replay charges every running job at
//! every event, by number ([`UsageBook::add_ids`]), without comparing a string.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use crate::{FairShare, Millis, decay_factor, decay_usage};

/// A figure: usage (resource-time, in the caller's unit) as of a time (ms).
pub type Figure = (f64, Millis);

/// Which book a figure belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum UsageKind {
    User,
    Project,
}

impl UsageKind {
    /// The name the manager's store keeps the kind under.
    pub fn as_str(self) -> &'static str {
        match self {
            UsageKind::User => "user",
            UsageKind::Project => "project",
        }
    }

    pub fn parse(s: &str) -> Option<UsageKind> {
        match s {
            "user" => Some(UsageKind::User),
            "project" => Some(UsageKind::Project),
            _ => None,
        }
    }
}

/// A figure after a charge, not yet in the book.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Charged<'n> {
    pub kind: UsageKind,
    pub name: &'n str,
    pub figure: Figure,
}

/// One kind's figures by name, each name numbered when first seen (numbers are never
/// reused, even once a figure is removed).
#[derive(Debug, Clone, Default)]
pub struct Figures {
    ids: FxHashMap<String, u32>,
    names: Vec<String>,
    figures: Vec<Option<Figure>>,
}

impl Figures {
    /// The number of `name`, given to it now if it has none.
    pub fn id(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.ids.insert(name.to_string(), id);
        self.names.push(name.to_string());
        self.figures.push(None);
        id
    }

    pub fn get(&self, name: &str) -> Option<&Figure> {
        self.figures[*self.ids.get(name)? as usize].as_ref()
    }

    /// Sets `name`'s figure; the one it replaces.
    pub fn insert(&mut self, name: String, figure: Figure) -> Option<Figure> {
        let id = self.id(&name);
        self.figures[id as usize].replace(figure)
    }

    pub fn remove(&mut self, name: &str) -> Option<Figure> {
        self.figures[*self.ids.get(name)? as usize].take()
    }

    pub fn is_empty(&self) -> bool {
        self.figures.iter().all(Option::is_none)
    }

    /// The figures with their names, by number.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Figure)> {
        self.names.iter().zip(&self.figures).filter_map(|(n, f)| Some((n.as_str(), f.as_ref()?)))
    }

    fn by_name(&self) -> BTreeMap<&str, &Figure> {
        self.iter().collect()
    }
}

/// The same figures, whatever order the names were numbered in.
impl PartialEq for Figures {
    fn eq(&self, other: &Self) -> bool {
        self.by_name() == other.by_name()
    }
}

impl std::ops::Index<&str> for Figures {
    type Output = Figure;
    fn index(&self, name: &str) -> &Figure {
        self.get(name).expect("no figure for this name")
    }
}

/// Past usage per user and per project.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UsageBook {
    pub users: Figures,
    pub projects: Figures,
}

/// `figure` decayed to `now`, plus `amount`.
fn charged(figure: Option<Figure>, amount: f64, now: Millis, half_life_ms: Millis) -> Figure {
    let (value, at) = figure.unwrap_or((0.0, now));
    (decay_usage(value, now - at, half_life_ms) + amount, now)
}

impl UsageBook {
    fn book(&self, kind: UsageKind) -> &Figures {
        match kind {
            UsageKind::User => &self.users,
            UsageKind::Project => &self.projects,
        }
    }

    fn book_mut(&mut self, kind: UsageKind) -> &mut Figures {
        match kind {
            UsageKind::User => &mut self.users,
            UsageKind::Project => &mut self.projects,
        }
    }

    /// The figures after adding `amount` for each `(user, project, amount)` at `now`, one item
    /// after the other (a name that comes twice adds up); users first, then projects, each by
    /// name. The book is unchanged until [`UsageBook::set`] takes them.
    pub fn charge<'n>(&self, items: &[(&'n str, &'n str, f64)], now: Millis, half_life_ms: Millis) -> Vec<Charged<'n>> {
        let mut after: BTreeMap<(UsageKind, &str), Figure> = BTreeMap::new();
        for &(user, project, amount) in items {
            for (kind, name) in [(UsageKind::User, user), (UsageKind::Project, project)] {
                let before = after.get(&(kind, name)).or_else(|| self.book(kind).get(name)).copied();
                after.insert((kind, name), charged(before, amount, now, half_life_ms));
            }
        }
        after.into_iter().map(|((kind, name), figure)| Charged { kind, name, figure }).collect()
    }

    /// Takes a figure (one made by [`UsageBook::charge`], or read back from a store).
    pub fn set(&mut self, kind: UsageKind, name: &str, figure: Figure) {
        let book = self.book_mut(kind);
        let id = book.id(name);
        book.figures[id as usize] = Some(figure);
    }

    /// Adds `amount` to `user`'s and `project`'s figures at `now`, at once.
    pub fn add(&mut self, user: &str, project: &str, amount: f64, now: Millis, half_life_ms: Millis) {
        let ids = (self.users.id(user), self.projects.id(project));
        self.add_ids(ids, amount, now, half_life_ms);
    }

    /// [`UsageBook::add`] by the numbers [`Figures::id`] gave the user and the project.
    pub fn add_ids(&mut self, (user, project): (u32, u32), amount: f64, now: Millis, half_life_ms: Millis) {
        for (book, id) in [(&mut self.users, user), (&mut self.projects, project)] {
            let f = &mut book.figures[id as usize];
            *f = Some(charged(*f, amount, now, half_life_ms));
        }
    }

    /// Decays every figure to `now`. `berth sim` does it at every event, so that its figures
    /// decay in the same steps whatever reads them (its published figures stay reproducible).
    /// Figures decayed to the same time share one factor (after a settle, all of them).
    pub fn settle(&mut self, now: Millis, half_life_ms: Millis) {
        let mut last: Option<(Millis, Option<f64>)> = None;
        for (value, at) in self.users.figures.iter_mut().chain(self.projects.figures.iter_mut()).flatten() {
            let elapsed = now - *at;
            let factor = match last {
                Some((e, f)) if e == elapsed => f,
                _ => decay_factor(elapsed, half_life_ms),
            };
            last = Some((elapsed, factor));
            if let Some(f) = factor {
                *value *= f;
            }
            *at = now;
        }
    }

    /// Writes every figure, decayed to `now`, into `into`'s usage (names already there are
    /// not copied again: a replay refills one [`FairShare`] before every pass).
    pub fn fill(&self, into: &mut FairShare, now: Millis, half_life_ms: Millis) {
        for (book, out) in [(&self.users, &mut into.usage_by_user), (&self.projects, &mut into.usage_by_project)] {
            for (name, &(value, at)) in book.iter() {
                let value = decay_usage(value, now - at, half_life_ms);
                match out.get_mut(name) {
                    Some(v) => *v = value,
                    None => {
                        out.insert(name.to_string(), value);
                    }
                }
            }
        }
    }

    /// The scheduler's fair-share input: every figure decayed to `now`, and the weights.
    pub fn fair_share(&self, weights: &BTreeMap<String, f64>, now: Millis, half_life_ms: Millis) -> FairShare {
        let mut out = FairShare { project_weights: weights.clone(), ..FairShare::default() };
        self.fill(&mut out, now, half_life_ms);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Millis = 86_400_000;

    #[test]
    fn a_charge_changes_nothing_until_set_and_names_add_up() {
        let mut book = UsageBook::default();
        let rows = book.charge(&[("ann", "p", 2.0), ("bob", "p", 3.0), ("ann", "q", 1.0)], 0, DAY);
        assert!(book.users.is_empty());
        let got: Vec<(UsageKind, &str, f64)> = rows.iter().map(|c| (c.kind, c.name, c.figure.0)).collect();
        assert_eq!(
            got,
            [
                (UsageKind::User, "ann", 3.0),
                (UsageKind::User, "bob", 3.0),
                (UsageKind::Project, "p", 5.0),
                (UsageKind::Project, "q", 1.0)
            ]
        );
        for c in &rows {
            book.set(c.kind, c.name, c.figure);
        }
        assert_eq!(book.users["ann"], (3.0, 0));
    }

    #[test]
    fn figures_decay_by_half_per_half_life_however_they_are_read() {
        let mut book = UsageBook::default();
        book.add("ann", "p", 8.0, 0, DAY);
        let fs = book.fair_share(&BTreeMap::new(), 2 * DAY, DAY);
        assert_eq!(fs.usage_by_user["ann"], 2.0);
        assert_eq!(fs.usage_by_project["p"], 2.0);
        let later = book.charge(&[("ann", "p", 1.0)], DAY, DAY);
        assert_eq!(later[0].figure, (5.0, DAY));
        book.settle(DAY, DAY);
        assert_eq!(book.users["ann"], (4.0, DAY));
        book.add("ann", "p", 1.0, DAY, DAY);
        assert_eq!(book.projects["p"], (5.0, DAY));
    }

    #[test]
    fn fill_updates_in_place_and_keeps_the_weights() {
        let mut book = UsageBook::default();
        book.add("ann", "p", 1.0, 0, DAY);
        let mut fs = FairShare::default();
        fs.project_weights.insert("p".into(), 2.0);
        book.fill(&mut fs, 0, DAY);
        book.add("ann", "p", 1.0, 0, DAY);
        book.fill(&mut fs, 0, DAY);
        assert_eq!((fs.usage_by_user["ann"], fs.project_weights["p"]), (2.0, 2.0));
    }
}
