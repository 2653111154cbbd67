//! The optional TOML config file: the queues and their head-of-line policy.
//!
//! ```toml
//! [[queue]]
//! name = "default"
//! head_of_line = "strict"   # or "skip-after-3"
//! ```

use std::path::Path;

use berth_sched::{HeadOfLine, QueueConfig};
use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {err}")]
    Read { path: String, err: std::io::Error },
    #[error("invalid config file {path}: {msg}")]
    Invalid { path: String, msg: String },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    queue: Vec<QueueEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct QueueEntry {
    name: String,
    #[serde(default)]
    head_of_line: Option<String>,
}

/// The queues when there is no config file: one `default` queue, strict order.
pub fn default_queues() -> Vec<QueueConfig> {
    vec![QueueConfig { head_of_line: HeadOfLine::Strict, ..QueueConfig::new(berth_model::DEFAULT_QUEUE.to_string()) }]
}

/// Reads the queues from `path`, or the defaults without a file.
pub fn load(path: Option<&Path>) -> Result<Vec<QueueConfig>, ConfigError> {
    let Some(path) = path else { return Ok(default_queues()) };
    let p = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|err| ConfigError::Read { path: p.clone(), err })?;
    parse(&text).map_err(|msg| ConfigError::Invalid { path: p, msg })
}

/// Parses the config text (errors say what to fix).
pub fn parse(text: &str) -> Result<Vec<QueueConfig>, String> {
    let file: File = toml::from_str(text).map_err(|e| e.message().to_string())?;
    if file.queue.is_empty() {
        return Ok(default_queues());
    }
    let mut out: Vec<QueueConfig> = Vec::new();
    for q in file.queue {
        if q.name.is_empty() || !q.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            return Err(format!("queue name `{}`: use letters, digits, `-` and `_`", q.name));
        }
        if out.iter().any(|o| o.name == q.name) {
            return Err(format!("queue `{}` is defined twice", q.name));
        }
        let head_of_line = parse_head_of_line(q.head_of_line.as_deref().unwrap_or("strict"))
            .map_err(|e| format!("queue `{}`: {e}", q.name))?;
        out.push(QueueConfig { head_of_line, ..QueueConfig::new(q.name) });
    }
    Ok(out)
}

/// `strict` or `skip-after-N`.
pub fn parse_head_of_line(s: &str) -> Result<HeadOfLine, String> {
    if s == "strict" {
        return Ok(HeadOfLine::Strict);
    }
    if let Some(n) = s.strip_prefix("skip-after-").and_then(|n| n.parse::<u32>().ok())
        && n > 0
    {
        return Ok(HeadOfLine::SkipAfter(n));
    }
    Err(format!(
        "head_of_line `{s}` is not valid: use \"strict\" or \"skip-after-N\" with N ≥ 1, e.g. \"skip-after-3\""
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_queues() {
        let q = parse("[[queue]]\nname = \"default\"\n\n[[queue]]\nname = \"gpu\"\nhead_of_line = \"skip-after-3\"\n")
            .unwrap();
        assert_eq!(q.len(), 2);
        assert_eq!(q[0].head_of_line, HeadOfLine::Strict);
        assert_eq!(q[1].head_of_line, HeadOfLine::SkipAfter(3));
        assert_eq!(parse("").unwrap(), default_queues());
    }

    #[test]
    fn bad_config_says_what_to_fix() {
        assert!(parse("[[queue]]\nname = \"a\"\nhead_of_line = \"lifo\"").unwrap_err().contains("skip-after-N"));
        assert!(parse("[[queue]]\nname = \"a\"\n[[queue]]\nname = \"a\"").unwrap_err().contains("twice"));
        assert!(parse("[[queue]]\nnam = \"a\"").is_err());
        assert!(parse("[[queue]]\nname = \"a b\"").unwrap_err().contains("letters"));
    }
}
