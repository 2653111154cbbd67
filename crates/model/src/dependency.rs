//! Job dependencies (Slurm's `--dependency`): conditions on other jobs that must hold before a
//! job may be scheduled, typed in the spec and written in Slurm's syntax on the command line.
//!
//! `afterok:12:13,afterany:14` needs every condition (`,`); `afterok:12?afternotok:13` needs
//! any one (`?`); the two separators cannot be mixed, as in Slurm. `after:12+10` waits until
//! job 12 has been running for ten minutes. `singleton` waits until no other job of the same
//! user and name runs. The scheduler judges them (`berth_sched::depend`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

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
        #[serde(default)]
        delay_secs: u64,
    },
    /// The job ended, however it ended.
    AfterAny { job: JobId },
    /// The job succeeded.
    AfterOk { job: JobId },
    /// The job ended without succeeding (failed, cancelled, timed out, lost).
    AfterNotOk { job: JobId },
    /// No other job of the same user and name has started and not yet ended.
    Singleton,
}

impl Condition {
    /// The job this condition is about (`None` for `singleton`).
    pub fn job(&self) -> Option<JobId> {
        match *self {
            Condition::After { job, .. }
            | Condition::AfterAny { job }
            | Condition::AfterOk { job }
            | Condition::AfterNotOk { job } => Some(job),
            Condition::Singleton => None,
        }
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
            Condition::After { job, delay_secs } if delay_secs > 0 => {
                write!(f, "after:{job}+{}", delay_secs.div_ceil(60))
            }
            c => write!(f, "{}:{}", c.keyword(), c.job().unwrap_or_default()),
        }
    }
}

impl Dependency {
    /// The jobs the conditions name, each once, in order.
    pub fn jobs(&self) -> Vec<JobId> {
        let mut ids: Vec<JobId> = Vec::new();
        for id in self.conditions.iter().filter_map(Condition::job) {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        ids
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
            let make: fn(JobId, u64) -> Condition = match kind {
                "after" => |job, delay_secs| Condition::After { job, delay_secs },
                "afterany" => |job, _| Condition::AfterAny { job },
                "afterok" => |job, _| Condition::AfterOk { job },
                "afternotok" => |job, _| Condition::AfterNotOk { job },
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
                if id.contains('_') {
                    return Err(bad(format!("`{id}`: a dependency on one task of a job array is not supported yet")));
                }
                let job: JobId =
                    id.parse().ok().filter(|j| *j >= 1).ok_or_else(|| bad(format!("`{id}` is not a job id")))?;
                conditions.push(make(job, delay));
            }
        }
        let dep = Dependency { any, conditions };
        dep.validate().map_err(|e| bad(e.0))?;
        Ok(dep)
    }
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
            [Condition::AfterOk { job: 12 }, Condition::AfterOk { job: 13 }, Condition::AfterAny { job: 14 }]
        );
        assert_eq!(d.to_string(), "afterok:12,afterok:13,afterany:14");
        let d = p("afterok:3?afternotok:4");
        assert!(d.any);
        assert_eq!(d.to_string(), "afterok:3?afternotok:4");
        assert_eq!(p("after:7+5").conditions, [Condition::After { job: 7, delay_secs: 300 }]);
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
            ("afterok:12_3", "one task of a job array"),
            ("afterok:1,,afterok:2", "empty"),
        ] {
            let e = s.parse::<Dependency>().unwrap_err().to_string();
            assert!(e.contains(says), "{s}: {e}");
        }
        let many = (1..=65).map(|i| format!("afterok:{i}")).collect::<Vec<_>>().join(",");
        assert!(many.parse::<Dependency>().unwrap_err().to_string().contains("at most 64"));
    }

    #[test]
    fn json_form_is_tagged_by_kind() {
        let d = p("after:3+1,singleton");
        let j = serde_json::to_string(&d).unwrap();
        assert_eq!(j, r#"{"any":false,"conditions":[{"kind":"after","job":3,"delay_secs":60},{"kind":"singleton"}]}"#);
        assert_eq!(serde_json::from_str::<Dependency>(&j).unwrap(), d);
    }
}
