//! Qualities of service (Slurm's `--qos`): names an admin defines in the manager's config file,
//! each setting the priority of the jobs that ask for it and, optionally, capping their time
//! limit.
//!
//! ```toml
//! [qos.high]
//! priority = 100
//! max_time_limit = "1d"        # a job of this qos may ask for at most this long
//!
//! [qos.low]
//! priority = -10
//! ```
//!
//! A job without `qos` has none (its own `--priority`, default 0). The table lives in memory
//! only: the config file is its one source, read at start.

use std::collections::BTreeMap;

use berth_model::{JobSpec, format_duration};

use crate::error::ApiError;

/// A `[qos.NAME]` entry of the config file berth cannot use; the text names the entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QosError {
    #[error("qos name `{0}`: use 1-64 letters, digits, `-`, `_` or `.`")]
    Name(String),
    #[error("qos.{0}.max_time_limit must be more than 0s")]
    ZeroLimit(String),
    #[error("qos.{name}.max_time_limit: {source}")]
    Limit { name: String, source: berth_model::QuantityError },
}

/// The config file's parser reports its errors as text (`config::parse`).
impl From<QosError> for String {
    fn from(e: QosError) -> String {
        e.to_string()
    }
}

/// One qos.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Qos {
    /// The priority of the qos's jobs.
    pub priority: i32,
    /// The longest time limit a job of the qos may ask for (seconds); `None`: no maximum.
    pub max_time_limit_secs: Option<u64>,
}

/// The configured qos, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QosTable(BTreeMap<String, Qos>);

impl QosTable {
    /// The table of `(name, priority, max_time_limit)` entries as the config file gives them;
    /// errors name the entry.
    pub fn parse(entries: impl IntoIterator<Item = (String, i32, Option<String>)>) -> Result<QosTable, QosError> {
        let mut out = BTreeMap::new();
        for (name, priority, max) in entries {
            if !berth_model::valid_name(&name) {
                return Err(QosError::Name(name));
            }
            let max_time_limit_secs = match max {
                None => None,
                Some(t) => match berth_model::parse_duration(&t) {
                    Ok(0) => return Err(QosError::ZeroLimit(name)),
                    Ok(s) => Some(s),
                    Err(source) => return Err(QosError::Limit { name, source }),
                },
            };
            out.insert(name, Qos { priority, max_time_limit_secs });
        }
        Ok(QosTable(out))
    }

    pub fn get(&self, name: &str) -> Option<&Qos> {
        self.0.get(name)
    }

    /// Gives a job the priority of the qos it names, and a time limit within the qos's
    /// maximum (`queue_default_ms` when it asks for none). An unknown qos, a different
    /// `--priority` beside it or a longer time limit is a 400 that says what to change.
    pub(crate) fn apply(&self, spec: &mut JobSpec, queue_default_ms: i64) -> Result<(), ApiError> {
        let Some(name) = &spec.qos else { return Ok(()) };
        let Some(q) = self.get(name) else {
            return Err(ApiError::bad_request(if self.0.is_empty() {
                format!(
                    "unknown qos `{name}`: this cluster defines none; drop --qos (an admin defines them as \
                     [qos.NAME] in the manager's config file)"
                )
            } else {
                let known: Vec<&str> = self.0.keys().map(String::as_str).collect();
                format!("unknown qos `{name}`: the configured ones are {}", known.join(", "))
            }));
        };
        if spec.priority != 0 && spec.priority != q.priority {
            return Err(ApiError::bad_request(format!(
                "qos `{name}` sets the priority to {}: drop --priority {} (or --qos)",
                q.priority, spec.priority
            )));
        }
        spec.priority = q.priority;
        if let Some(max) = q.max_time_limit_secs {
            match spec.time_limit_secs {
                Some(t) if t > max => {
                    return Err(ApiError::bad_request(format!(
                        "time limit {} is above qos `{name}`'s maximum of {}: use --time-limit {} or less",
                        format_duration(t),
                        format_duration(max),
                        format_duration(max)
                    )));
                }
                Some(_) => {}
                None => spec.time_limit_secs = Some(((queue_default_ms / 1000).max(1) as u64).min(max)),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> QosTable {
        QosTable::parse([("high".to_string(), 100, Some("1d".to_string())), ("low".to_string(), -10, None)]).unwrap()
    }

    fn spec(qos: Option<&str>) -> JobSpec {
        JobSpec { qos: qos.map(String::from), ..JobSpec::command(["true"]) }
    }

    #[test]
    fn a_qos_sets_the_priority_and_caps_the_time_limit() {
        let t = table();
        let mut s = spec(Some("high"));
        t.apply(&mut s, 3_600_000).unwrap();
        assert_eq!((s.priority, s.time_limit_secs), (100, Some(3600)), "the queue's default, within the max");
        let mut s = spec(Some("high"));
        t.apply(&mut s, 7 * 86_400_000).unwrap();
        assert_eq!(s.time_limit_secs, Some(86_400), "the queue's default capped by the qos");
        let mut s = spec(Some("low"));
        t.apply(&mut s, 3_600_000).unwrap();
        assert_eq!((s.priority, s.time_limit_secs), (-10, None));
        let mut s = spec(None);
        s.priority = 7;
        t.apply(&mut s, 3_600_000).unwrap();
        assert_eq!(s.priority, 7, "no qos: the job's own priority");
    }

    #[test]
    fn bad_uses_say_what_to_change() {
        let t = table();
        let msg = |t: &QosTable, s: &mut JobSpec| t.apply(s, 3_600_000).unwrap_err().to_string();
        assert!(msg(&t, &mut spec(Some("urgent"))).contains("unknown qos `urgent`: the configured ones are high, low"));
        let none = QosTable::default();
        assert!(msg(&none, &mut spec(Some("high"))).contains("this cluster defines none"));
        let mut s = spec(Some("high"));
        s.priority = 5;
        assert!(msg(&t, &mut s).contains("qos `high` sets the priority to 100: drop --priority 5"));
        let mut s = spec(Some("high"));
        s.time_limit_secs = Some(2 * 86_400);
        assert!(msg(&t, &mut s).contains("above qos `high`'s maximum of 1d"));
    }

    #[test]
    fn the_config_entries_are_checked() {
        let e = |name: &str, max: &str| {
            QosTable::parse([(name.to_string(), 1, Some(max.to_string()))]).unwrap_err().to_string()
        };
        assert!(e("a b", "1h").contains("qos name `a b`"));
        assert!(e("high", "0s").starts_with("qos.high.max_time_limit"));
        assert!(e("high", "soon").starts_with("qos.high.max_time_limit: "));
    }
}
