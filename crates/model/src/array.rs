//! Job arrays (Slurm's `--array`): one submission standing for many tasks of the same job,
//! told apart by an index (`SLURM_ARRAY_TASK_ID`).
//!
//! `--array 1-100`, `1-100:2` (every second), `1,5,9`, and a throttle `%10` (at most ten tasks
//! unfinished at once), in any mix: `0-9,20-29:3%4`. The array is stored as this spec, not as
//! one row per task: the manager makes each task's job when its turn comes
//! (`manager/src/arrays.rs`), so a 10,000-task array is one row until its tasks start.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::{JobId, SpecError};

/// The most tasks one array may have, and the highest index (Slurm's `MaxArraySize` - 1).
pub const MAX_ARRAY_TASKS: u64 = 100_000;
pub const MAX_ARRAY_INDEX: u32 = 9_999_999;

/// Indices `start, start + step, ...` up to `end` (inclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct IndexRange {
    pub start: u32,
    pub end: u32,
    #[serde(default = "one")]
    pub step: u32,
}

fn one() -> u32 {
    1
}

impl IndexRange {
    fn count(&self) -> u64 {
        if self.end < self.start { 0 } else { u64::from((self.end - self.start) / self.step.max(1)) + 1 }
    }
}

/// A job array: its indices, in the order given, and its throttle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ArraySpec {
    pub ranges: Vec<IndexRange>,
    /// At most this many tasks unfinished at once (`%N`); `None`: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle: Option<u32>,
}

/// Which task of which array a job is, with what the task's environment says of its array
/// (`SLURM_ARRAY_TASK_MIN`, `_MAX`, `_COUNT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ArrayTask {
    /// The array's own job id (Slurm's `SLURM_ARRAY_JOB_ID`).
    pub array_id: JobId,
    pub index: u32,
    pub min: u32,
    pub max: u32,
    pub count: u64,
}

impl ArraySpec {
    /// Index `i` alone.
    pub fn one(i: u32) -> ArraySpec {
        ArraySpec { ranges: vec![IndexRange { start: i, end: i, step: 1 }], throttle: None }
    }

    /// How many tasks it has.
    pub fn count(&self) -> u64 {
        self.ranges.iter().map(IndexRange::count).sum()
    }

    /// The index of task number `k` (0-based, in the order given).
    pub fn nth(&self, mut k: u64) -> Option<u32> {
        for r in &self.ranges {
            let n = r.count();
            if k < n {
                return Some(r.start + (k as u32) * r.step.max(1));
            }
            k -= n;
        }
        None
    }

    /// Every index, in order.
    pub fn indices(&self) -> impl Iterator<Item = u32> + '_ {
        self.ranges.iter().flat_map(|r| (r.start..=r.end).step_by(r.step.max(1) as usize))
    }

    /// Whether index `i` is one of its tasks.
    pub fn contains(&self, i: u32) -> bool {
        self.ranges.iter().any(|r| (r.start..=r.end).contains(&i) && (i - r.start).is_multiple_of(r.step.max(1)))
    }

    pub fn min(&self) -> Option<u32> {
        self.indices().min()
    }

    pub fn max(&self) -> Option<u32> {
        self.indices().max()
    }

    /// Checks an array sent as JSON like one parsed from text.
    pub fn validate(&self) -> Result<(), SpecError> {
        let bad = |m: String| Err(SpecError(format!("invalid array `{self}`: {m}")));
        if self.ranges.is_empty() {
            return bad("it has no indices".into());
        }
        if self.ranges.len() > 1000 {
            return bad("at most 1000 ranges".into());
        }
        for r in &self.ranges {
            if r.step == 0 {
                return bad("a step must be at least 1".into());
            }
            if r.end < r.start {
                return bad(format!("{}-{} ends before it starts", r.start, r.end));
            }
            if r.end > MAX_ARRAY_INDEX {
                return bad(format!("index {} is past the highest, {MAX_ARRAY_INDEX}", r.end));
            }
        }
        let n = self.count();
        if n > MAX_ARRAY_TASKS {
            return bad(format!("{n} tasks is more than the {MAX_ARRAY_TASKS} an array may have"));
        }
        let mut seen: Vec<u32> = self.indices().collect();
        seen.sort_unstable();
        if let Some(w) = seen.windows(2).find(|w| w[0] == w[1]) {
            return bad(format!("index {} is given twice", w[0]));
        }
        if self.throttle == Some(0) {
            return bad("a throttle (%N) must be at least 1".into());
        }
        Ok(())
    }

    /// The indices not `made` yet, as Slurm shows an array's pending part: `[3-100%10]`.
    pub fn remaining(&self, made: impl Fn(u32) -> bool) -> String {
        let rest: Vec<u32> = self.indices().filter(|i| !made(*i)).collect();
        let throttle = self.throttle.map(|t| format!("%{t}")).unwrap_or_default();
        format!("[{}{throttle}]", compress(&rest))
    }
}

/// `1,2,3,5,7,9` → `1-3,5-9:2`: runs with one step each.
fn compress(ids: &[u32]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        let start = ids[i];
        let step = ids.get(i + 1).map(|n| n.wrapping_sub(start)).filter(|s| *s > 0);
        let mut j = i;
        if let Some(step) = step {
            while j + 1 < ids.len() && ids[j + 1].wrapping_sub(ids[j]) == step {
                j += 1;
            }
        }
        // Two indices are clearer as a list than as a range.
        if j >= i + 2 {
            let step = step.unwrap_or(1);
            parts.push(if step == 1 { format!("{start}-{}", ids[j]) } else { format!("{start}-{}:{step}", ids[j]) });
            i = j + 1;
        } else {
            parts.push(start.to_string());
            i += 1;
        }
    }
    parts.join(",")
}

impl std::fmt::Display for ArraySpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .ranges
            .iter()
            .map(|r| match (r.start == r.end, r.step) {
                (true, _) => r.start.to_string(),
                (false, 1) => format!("{}-{}", r.start, r.end),
                (false, s) => format!("{}-{}:{s}", r.start, r.end),
            })
            .collect();
        f.write_str(&parts.join(","))?;
        if let Some(t) = self.throttle {
            write!(f, "%{t}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for ArraySpec {
    type Err = SpecError;

    /// Slurm's `--array` syntax: `1-100`, `1-100:2`, `1,5,9`, `0-9%4`.
    fn from_str(s: &str) -> Result<ArraySpec, SpecError> {
        let bad = |m: &str| SpecError(format!("invalid array `{s}`: {m}; use e.g. 1-100, 0-99:2, 1,5,9 or 1-100%10"));
        let (list, throttle) = match s.trim().split_once('%') {
            Some((l, t)) => (l, Some(t.parse::<u32>().map_err(|_| bad(&format!("throttle `%{t}` is not a number")))?)),
            None => (s.trim(), None),
        };
        let num = |p: &str| p.parse::<u32>().map_err(|_| bad(&format!("`{p}` is not an index")));
        let mut ranges = Vec::new();
        for part in list.split(',') {
            if part.is_empty() {
                return Err(bad("an empty index"));
            }
            let (span, step) = match part.split_once(':') {
                Some((span, step)) => (span, num(step)?),
                None => (part, 1),
            };
            let (start, end) = match span.split_once('-') {
                Some((a, b)) => (num(a)?, num(b)?),
                None if step != 1 => return Err(bad(&format!("`{part}`: a step needs a range (START-END:STEP)"))),
                None => (num(span)?, num(span)?),
            };
            ranges.push(IndexRange { start, end, step });
        }
        let a = ArraySpec { ranges, throttle };
        a.validate()?;
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn contains_follows_steps_and_ranges() {
        let a: ArraySpec = "1-9:4,20".parse().unwrap();
        let inside: Vec<u32> = (0..25).filter(|i| a.contains(*i)).collect();
        assert_eq!(inside, a.indices().collect::<Vec<_>>());
        assert_eq!(inside, [1, 5, 9, 20]);
    }

    use super::*;

    fn p(s: &str) -> ArraySpec {
        s.parse().unwrap_or_else(|e: SpecError| panic!("{s}: {e}"))
    }

    #[test]
    fn slurms_forms_parse_count_and_print_back() {
        let a = p("1-100");
        assert_eq!((a.count(), a.nth(0), a.nth(99), a.nth(100)), (100, Some(1), Some(100), None));
        let a = p("1-100:2");
        assert_eq!((a.count(), a.nth(1), a.max()), (50, Some(3), Some(99)));
        assert_eq!(p("1,5,9").indices().collect::<Vec<_>>(), [1, 5, 9]);
        let a = p("0-9,20-29:3%4");
        assert_eq!(a.throttle, Some(4));
        assert_eq!(a.count(), 14);
        assert_eq!(a.to_string(), "0-9,20-29:3%4");
        assert_eq!(p("7").to_string(), "7");
        assert_eq!(p("0-9999").count(), 10_000);
    }

    #[test]
    fn the_part_still_to_come_prints_as_slurm_shows_it() {
        let a = p("1-100%10");
        assert_eq!(a.remaining(|i| i <= 2), "[3-100%10]");
        assert_eq!(a.remaining(|i| i == 50), "[1-49,51-100%10]");
        assert_eq!(p("1,5,9,10").remaining(|_| false), "[1-9:4,10]");
        assert_eq!(p("1,5,10").remaining(|_| false), "[1,5,10]");
        assert_eq!(p("0-20:2").remaining(|i| i < 6), "[6-20:2]");
        assert_eq!(p("1-3").remaining(|_| true), "[]");
    }

    #[test]
    fn malformed_arrays_say_what_is_wrong() {
        for (s, says) in [
            ("", "empty index"),
            ("1-", "`` is not an index"),
            ("a-3", "`a` is not an index"),
            ("5-1", "ends before it starts"),
            ("1-10:0", "step must be at least 1"),
            ("3:2", "a step needs a range"),
            ("1-10%x", "throttle `%x`"),
            ("1-10%0", "at least 1"),
            ("1-3,2", "index 2 is given twice"),
            ("0-100000", "more than the 100000"),
            ("10000000", "past the highest"),
            ("1,,2", "empty index"),
        ] {
            let e = s.parse::<ArraySpec>().unwrap_err().to_string();
            assert!(e.contains(says), "{s}: {e}");
        }
    }
}
