//! Job dependencies (Slurm's `--dependency`): conditions on other jobs that must hold before a
//! job may be scheduled, typed in the spec and written in Slurm's syntax on the command line.
//!
//! `afterok:12:13,afterany:14` needs every condition (`,`); `afterok:12?afternotok:13` needs
//! any one (`?`); the two separators cannot be mixed, as in Slurm. `after:12+10` waits until
//! job 12 has been running for ten minutes. `singleton` waits until no other job of the same
//! user and name runs. `afterok:12_7` names task 7 of job array 12 alone (its own job, made
//! when the array's turn for it comes), `afterok:12` the whole array. The scheduler judges
//! them (`berth_sched::depend`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::array::MAX_ARRAY_INDEX;
use crate::{JobId, SpecError};

/// The most conditions one dependency may list.
pub const MAX_CONDITIONS: usize = 64;

/// What a job waits for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Dependency {
    /// `true`: any one condition is enough (`?`); `false`: all must hold (`,`).
    #[serde(default)]
    pub any: bool,
    pub conditions: Vec<Condition>,
}

/// One condition on another job (or, for `singleton`, on the jobs of the same name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Condition {
    /// The job has started (or was cancelled before it could), `delay_secs` ago at least.
    After {
        job: JobId,
        /// One task of job array `job` (`12_7`) rather than the whole job.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        task: Option<u32>,
        #[serde(default)]
        delay_secs: u64,
    },
    /// The job ended, however it ended.
    AfterAny {
        job: JobId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        task: Option<u32>,
    },
    /// The job succeeded.
    AfterOk {
        job: JobId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        task: Option<u32>,
    },
    /// The job ended without succeeding (failed, cancelled, timed out, lost).
    AfterNotOk {
        job: JobId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        task: Option<u32>,
    },
    /// No other job of the same user and name has started and not yet ended.
    Singleton,
}

/// What a condition names: a job (`12`, an array as a whole too) or one task of a job array
/// (`12_7`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobRef {
    pub job: JobId,
    /// The task's index in array `job`.
    pub task: Option<u32>,
}

impl JobRef {
    pub fn job(job: JobId) -> JobRef {
        JobRef { job, task: None }
    }

    pub fn task(array: JobId, index: u32) -> JobRef {
        JobRef { job: array, task: Some(index) }
    }
}

impl std::fmt::Display for JobRef {
    /// `12`, or `12_7` for a task, as Slurm writes them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.task {
            Some(i) => write!(f, "{}_{i}", self.job),
            None => write!(f, "{}", self.job),
        }
    }
}

impl Condition {
    /// The job (or array task) this condition is about (`None` for `singleton`).
    pub fn target(&self) -> Option<JobRef> {
        match *self {
            Condition::After { job, task, .. }
            | Condition::AfterAny { job, task }
            | Condition::AfterOk { job, task }
            | Condition::AfterNotOk { job, task } => Some(JobRef { job, task }),
            Condition::Singleton => None,
        }
    }

    /// The job this condition is about: for a task, its array (`None` for `singleton`).
    pub fn job(&self) -> Option<JobId> {
        self.target().map(|t| t.job)
    }

    fn keyword(&self) -> &'static str {
        match self {
            Condition::After { .. } => "after",
            Condition::AfterAny { .. } => "afterany",
            Condition::AfterOk { .. } => "afterok",
            Condition::AfterNotOk { .. } => "afternotok",
            Condition::Singleton => "singleton",
        }
    }
}

impl std::fmt::Display for Condition {
    /// One condition in Slurm's syntax: `afterok:12`, `after:12+5`, `singleton`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Condition::Singleton => f.write_str("singleton"),
            Condition::After { job, task, delay_secs } if delay_secs > 0 => {
                write!(f, "after:{}+{}", JobRef { job, task }, delay_secs.div_ceil(60))
            }
            c => write!(f, "{}:{}", c.keyword(), c.target().unwrap_or(JobRef::job(0))),
        }
    }
}

impl Dependency {
    /// The jobs the conditions name (for a task, its array), each once, in order.
    pub fn jobs(&self) -> Vec<JobId> {
        let mut ids: Vec<JobId> = Vec::new();
        for id in self.conditions.iter().filter_map(Condition::job) {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        ids
    }

    /// The jobs and array tasks the conditions name, each once, in order.
    pub fn targets(&self) -> Vec<JobRef> {
        let mut refs: Vec<JobRef> = Vec::new();
        for r in self.conditions.iter().filter_map(Condition::target) {
            if !refs.contains(&r) {
                refs.push(r);
            }
        }
        refs
    }

    pub fn has_singleton(&self) -> bool {
        self.conditions.contains(&Condition::Singleton)
    }

    /// Checks a dependency sent as JSON: at least one condition, at most [`MAX_CONDITIONS`],
    /// job ids that can exist.
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.conditions.is_empty() {
            return Err(SpecError("a dependency needs at least one condition, e.g. afterok:12".into()));
        }
        if self.conditions.len() > MAX_CONDITIONS {
            return Err(SpecError(format!("a dependency may list at most {MAX_CONDITIONS} conditions")));
        }
        if let Some(c) = self.conditions.iter().find(|c| c.job().is_some_and(|j| j < 1)) {
            return Err(SpecError(format!("dependency `{c}`: job ids start at 1")));
        }
        if let Some(c) = self.conditions.iter().find(|c| c.target().and_then(|t| t.task) > Some(MAX_ARRAY_INDEX)) {
            return Err(SpecError(format!("dependency `{c}`: a task index is at most {MAX_ARRAY_INDEX}")));
        }
        Ok(())
    }
}

impl std::fmt::Display for Dependency {
    /// Slurm's syntax, one condition per job: `afterok:12,afterok:13`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sep = if self.any { "?" } else { "," };
        let parts: Vec<String> = self.conditions.iter().map(Condition::to_string).collect();
        f.write_str(&parts.join(sep))
    }
}

impl std::str::FromStr for Dependency {
    type Err = SpecError;

    /// Slurm's `--dependency` syntax: `type:job[:job...]` parts joined by `,` (all) or `?`
    /// (any); `after` takes `job+minutes`; `singleton` stands alone.
    fn from_str(s: &str) -> Result<Dependency, SpecError> {
        let bad = |m: String| SpecError(format!("invalid dependency `{s}`: {m}"));
        let s = s.trim();
        if s.is_empty() {
            return Err(bad("it is empty; use e.g. afterok:12 or afterany:12:13".into()));
        }
        let (any, parts): (bool, Vec<&str>) = match (s.contains(','), s.contains('?')) {
            (true, true) => return Err(bad("`,` (all of) and `?` (any of) cannot be mixed".into())),
            (_, true) => (true, s.split('?').collect()),
            _ => (false, s.split(',').collect()),
        };
        let mut conditions = Vec::new();
        for part in parts {
            let mut fields = part.split(':');
            let kind = fields.next().unwrap_or_default();
            let ids: Vec<&str> = fields.collect();
            if kind == "singleton" {
                if !ids.is_empty() {
                    return Err(bad("`singleton` takes no job ids".into()));
                }
                conditions.push(Condition::Singleton);
                continue;
            }
            let make: fn(JobRef, u64) -> Condition = match kind {
                "after" => |r, delay_secs| Condition::After { job: r.job, task: r.task, delay_secs },
                "afterany" => |r, _| Condition::AfterAny { job: r.job, task: r.task },
                "afterok" => |r, _| Condition::AfterOk { job: r.job, task: r.task },
                "afternotok" => |r, _| Condition::AfterNotOk { job: r.job, task: r.task },
                "aftercorr" | "afterburstbuffer" => {
                    return Err(bad(format!(
                        "berth does not support `{kind}`: use afterok, afterany, afternotok or after"
                    )));
                }
                "" => return Err(bad("a condition is empty (two separators in a row?)".into())),
                other => {
                    return Err(bad(format!(
                        "unknown dependency type `{other}`: use after, afterany, afterok, afternotok or singleton"
                    )));
                }
            };
            if ids.is_empty() {
                return Err(bad(format!("`{kind}` needs a job id, e.g. {kind}:12")));
            }
            for id in ids {
                let (id, delay) = match id.split_once('+') {
                    Some((id, m)) if kind == "after" => {
                        let mins: u64 = m.parse().map_err(|_| bad(format!("`+{m}` is not a number of minutes")))?;
                        (id, mins.checked_mul(60).ok_or_else(|| bad(format!("`+{m}` minutes is too long")))?)
                    }
                    Some(_) => return Err(bad(format!("only `after` takes a delay (`after:{id}`)"))),
                    None => (id, 0),
                };
                conditions.push(make(job_ref(kind, id).map_err(bad)?, delay));
            }
        }
        let dep = Dependency { any, conditions };
        dep.validate().map_err(|e| bad(e.0))?;
        Ok(dep)
    }
}

/// One id of a condition: `12`, or `12_7` (task 7 of job array 12).
fn job_ref(kind: &str, id: &str) -> Result<JobRef, String> {
    let job_id = |s: &str| s.parse::<JobId>().ok().filter(|j| *j >= 1).ok_or_else(|| format!("`{s}` is not a job id"));
    let Some((job, index)) = id.split_once('_') else { return Ok(JobRef::job(job_id(id)?)) };
    let job = job_id(job)?;
    if index.starts_with('[') {
        // Slurm names tasks one by one in a dependency, never as a range.
        let listed = index
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<crate::ArraySpec>()
            .ok()
            .filter(|a| a.count() <= 8)
            .map(|a| a.indices().map(|i| format!("{job}_{i}")).collect::<Vec<_>>().join(":"))
            .unwrap_or_else(|| format!("{job}_1:{job}_2:{job}_3"));
        return Err(format!(
            "`{id}`: a dependency names array tasks one by one, not as a range: list them, e.g. {kind}:{listed}"
        ));
    }
    let task = index.parse::<u32>().ok().filter(|i| *i <= MAX_ARRAY_INDEX).ok_or_else(|| {
        format!("`{id}`: `{index}` is not an array task index (0 to {MAX_ARRAY_INDEX}), e.g. {job}_7")
    })?;
    Ok(JobRef::task(job, task))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Dependency {
        s.parse().unwrap_or_else(|e: SpecError| panic!("{s}: {e}"))
    }

    #[test]
    fn slurm_syntax_parses_to_typed_conditions_and_prints_back() {
        let d = p("afterok:12:13,afterany:14");
        assert!(!d.any);
        assert_eq!(
            d.conditions,
            [
                Condition::AfterOk { job: 12, task: None },
                Condition::AfterOk { job: 13, task: None },
                Condition::AfterAny { job: 14, task: None }
            ]
        );
        assert_eq!(d.to_string(), "afterok:12,afterok:13,afterany:14");
        let d = p("afterok:3?afternotok:4");
        assert!(d.any);
        assert_eq!(d.to_string(), "afterok:3?afternotok:4");
        assert_eq!(p("after:7+5").conditions, [Condition::After { job: 7, task: None, delay_secs: 300 }]);
        assert_eq!(p("after:7+5").to_string(), "after:7+5");
        assert_eq!(p("singleton").conditions, [Condition::Singleton]);
        assert_eq!(p("afterok:5,singleton").jobs(), [5]);
        assert_eq!(p("afterok:5:5,afterany:6").jobs(), [5, 6]);
    }

    #[test]
    fn malformed_dependencies_say_what_is_wrong() {
        for (s, says) in [
            ("", "empty"),
            ("afterok", "needs a job id"),
            ("afterok:x", "`x` is not a job id"),
            ("afterok:0", "`0` is not a job id"),
            ("afterok:1,afterany:2?afterok:3", "cannot be mixed"),
            ("before:3", "unknown dependency type `before`"),
            ("afterok:3+5", "only `after` takes a delay"),
            ("after:3+x", "not a number of minutes"),
            ("singleton:3", "takes no job ids"),
            ("aftercorr:3", "does not support `aftercorr`"),
            ("afterok:12_x", "`12_x`: `x` is not an array task index"),
            ("afterok:12_", "is not an array task index"),
            ("afterok:_3", "`` is not a job id"),
            ("afterok:x_3", "`x` is not a job id"),
            ("afterok:12_10000000", "is not an array task index (0 to 9999999)"),
            ("afterok:12_-1", "is not an array task index"),
            ("afterok:12_[1-3]", "list them, e.g. afterok:12_1:12_2:12_3"),
            ("afterany:12_[4-5]", "list them, e.g. afterany:12_4:12_5"),
            ("afterok:12_[1-100]", "not as a range: list them"),
            ("afterok:3_1+5", "only `after` takes a delay"),
            ("afterok:1,,afterok:2", "empty"),
        ] {
            let e = s.parse::<Dependency>().unwrap_err().to_string();
            assert!(e.contains(says), "{s}: {e}");
        }
        let many = (1..=65).map(|i| format!("afterok:{i}")).collect::<Vec<_>>().join(",");
        assert!(many.parse::<Dependency>().unwrap_err().to_string().contains("at most 64"));
    }

    #[test]
    fn one_task_of_an_array_parses_in_every_kind_and_prints_back() {
        let d = p("afterok:12_7:13,afterany:12_0,afternotok:12_9999999,after:12_3+2");
        assert_eq!(
            d.conditions,
            [
                Condition::AfterOk { job: 12, task: Some(7) },
                Condition::AfterOk { job: 13, task: None },
                Condition::AfterAny { job: 12, task: Some(0) },
                Condition::AfterNotOk { job: 12, task: Some(9_999_999) },
                Condition::After { job: 12, task: Some(3), delay_secs: 120 },
            ]
        );
        assert_eq!(d.to_string(), "afterok:12_7,afterok:13,afterany:12_0,afternotok:12_9999999,after:12_3+2");
        assert_eq!(p("after:5_1").to_string(), "after:5_1");
        assert_eq!(d.jobs(), [12, 13], "a task's job is its array");
        assert_eq!(
            d.targets(),
            [
                JobRef::task(12, 7),
                JobRef::job(13),
                JobRef::task(12, 0),
                JobRef::task(12, 9_999_999),
                JobRef::task(12, 3)
            ]
        );
        assert_eq!(p("afterok:12_7:12_7?afterok:12").targets(), [JobRef::task(12, 7), JobRef::job(12)]);
        assert!("singleton:12_7".parse::<Dependency>().unwrap_err().to_string().contains("takes no job ids"));
    }

    #[test]
    fn a_task_in_json_is_an_optional_field_so_older_specs_still_read() {
        let d = p("afterok:12_7,afterany:3");
        let j = serde_json::to_string(&d).unwrap();
        assert_eq!(
            j,
            r#"{"any":false,"conditions":[{"kind":"after_ok","job":12,"task":7},{"kind":"after_any","job":3}]}"#
        );
        assert_eq!(serde_json::from_str::<Dependency>(&j).unwrap(), d);
        let too_high =
            Dependency { any: false, conditions: vec![Condition::AfterOk { job: 1, task: Some(10_000_000) }] };
        assert!(too_high.validate().unwrap_err().0.contains("at most 9999999"));
    }

    proptest::proptest! {
        /// Whatever the kinds, ids and tasks, printing and parsing again gives the same
        /// dependency.
        #[test]
        fn printing_round_trips(
            conds in proptest::collection::vec((0u8..4, 1i64..1_000_000, proptest::option::of(0u32..=MAX_ARRAY_INDEX), 0u64..100), 1..6),
            any in proptest::bool::ANY,
        ) {
            let conditions = conds
                .into_iter()
                .map(|(k, job, task, mins)| match k {
                    0 => Condition::After { job, task, delay_secs: mins * 60 },
                    1 => Condition::AfterAny { job, task },
                    2 => Condition::AfterOk { job, task },
                    _ => Condition::AfterNotOk { job, task },
                })
                .collect::<Vec<_>>();
            // One condition prints without a separator, so it reads back as "all".
            let d = Dependency { any: any && conditions.len() > 1, conditions };
            proptest::prop_assert_eq!(d.to_string().parse::<Dependency>().unwrap(), d);
        }
    }

    #[test]
    fn json_form_is_tagged_by_kind() {
        let d = p("after:3+1,singleton");
        let j = serde_json::to_string(&d).unwrap();
        assert_eq!(j, r#"{"any":false,"conditions":[{"kind":"after","job":3,"delay_secs":60},{"kind":"singleton"}]}"#);
        assert_eq!(serde_json::from_str::<Dependency>(&j).unwrap(), d);
    }
}
