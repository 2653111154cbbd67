//! Node features a job asks for (Slurm's `--constraint`/`-C`), and what a node offers.
//!
//! berth has no feature list of its own: a node's labels (`berth agent --label KEY=VALUE`) are
//! its features, by one rule. A feature `NAME` matches a node with a label whose key is
//! `NAME`, whatever its value (`--label a100=yes` offers `a100`); a feature written
//! `KEY=VALUE` matches a node with exactly that label (`--constraint gpu=a100`).
//!
//! Of Slurm's expression forms, the ones lab scripts use are taken: one feature (`a100`),
//! all of several (`a100&ib`, or `a100,ib` as older scripts write it) and any of several
//! (`a100|h100`). The rarer forms (node counts
//! `a*2`, matching OR `[a|b]`, parentheses, `!`) and mixing `&` with `|` are refused with a
//! message that says what to write instead, never read as something else.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::SpecError;

/// The longest constraint accepted (far beyond any real one).
const MAX_LEN: usize = 1024;

/// What a job's nodes must offer: each of its nodes satisfies the whole expression.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Constraint {
    /// Every feature (`a&b`; one feature is `All` of one).
    All(Vec<String>),
    /// At least one feature (`a|b`).
    Any(Vec<String>),
}

/// Whether `s` is a label key or value, and so a feature name: 1-63 letters, digits, `-`,
/// `_`, `.` or `/`.
pub fn valid_label(s: &str) -> bool {
    !s.is_empty() && s.len() <= 63 && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

/// Whether a node with `labels` offers `feature` (the rule in the module doc).
pub fn offers(labels: &BTreeMap<String, String>, feature: &str) -> bool {
    match feature.split_once('=') {
        Some((k, v)) => labels.get(k).is_some_and(|have| have == v),
        None => labels.contains_key(feature),
    }
}

impl Constraint {
    /// Whether a node with `labels` satisfies the constraint.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Constraint::All(f) => f.iter().all(|f| offers(labels, f)),
            Constraint::Any(f) => f.iter().any(|f| offers(labels, f)),
        }
    }

    /// The features named, in the order written.
    pub fn features(&self) -> &[String] {
        match self {
            Constraint::All(f) | Constraint::Any(f) => f,
        }
    }
}

impl std::fmt::Display for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Constraint::All(v) => f.write_str(&v.join("&")),
            Constraint::Any(v) => f.write_str(&v.join("|")),
        }
    }
}

impl std::str::FromStr for Constraint {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<Constraint, SpecError> {
        let bad = |why: String| Err(SpecError(format!("invalid constraint `{s}`: {why}")));
        let t = s.trim();
        if t.is_empty() {
            return bad("name a node feature, e.g. a100, a100&ib or a100|h100".into());
        }
        if t.len() > MAX_LEN {
            return bad(format!("at most {MAX_LEN} characters"));
        }
        // The rarer Slurm forms, each refused with its own fix.
        if t.contains(['[', ']']) {
            return bad("matching OR (`[a|b]`: all nodes with the same feature) is not supported: write a|b, and \
                 berth may mix nodes with either feature"
                .into());
        }
        if t.contains('*') {
            return bad("node counts per feature (`a*2`) are not supported: every node of a job must satisfy the \
                 whole constraint (a&b, a|b)"
                .into());
        }
        if t.contains(['(', ')']) {
            return bad("parentheses are not supported: use features joined by `&` (all) or by `|` (any)".into());
        }
        if t.contains('!') {
            return bad("`!` (not) is not supported: use features joined by `&` (all) or by `|` (any)".into());
        }
        // Older scripts join with `,` for AND.
        let (and, or) = (t.contains(['&', ',']), t.contains('|'));
        if and && or {
            return bad("mixing `&` and `|` is not supported: use features joined by `&` (all) or by `|` (any)".into());
        }
        let features: Vec<String> = t.split(['&', '|', ',']).map(|f| f.trim().to_string()).collect();
        for f in &features {
            if f.is_empty() {
                return bad("a feature is empty: write names between the `&` or `|`, e.g. a100&ib".into());
            }
            let ok = match f.split_once('=') {
                Some((k, v)) => valid_label(k) && valid_label(v),
                None => valid_label(f),
            };
            if !ok {
                return bad(format!(
                    "feature `{f}`: use a node label key or KEY=VALUE (1-63 letters, digits, `-`, `_`, `.`, `/`)"
                ));
            }
        }
        Ok(if or { Constraint::Any(features) } else { Constraint::All(features) })
    }
}

impl TryFrom<String> for Constraint {
    type Error = SpecError;
    fn try_from(s: String) -> Result<Constraint, SpecError> {
        s.parse()
    }
}

impl From<Constraint> for String {
    fn from(c: Constraint) -> String {
        c.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn the_common_forms_parse_and_print_back() {
        let c: Constraint = "a100".parse().unwrap();
        assert_eq!(c, Constraint::All(vec!["a100".into()]));
        assert_eq!(" a100 & ib ".parse::<Constraint>().unwrap(), Constraint::All(vec!["a100".into(), "ib".into()]));
        assert_eq!("a100,ib".parse::<Constraint>().unwrap().to_string(), "a100&ib", "`,` is an older AND");
        let c: Constraint = "a100|h100|gpu=v100".parse().unwrap();
        assert_eq!(c.features(), ["a100", "h100", "gpu=v100"]);
        assert_eq!(c.to_string(), "a100|h100|gpu=v100");
        let j = serde_json::to_string(&c).unwrap();
        assert_eq!(j, "\"a100|h100|gpu=v100\"");
        assert_eq!(serde_json::from_str::<Constraint>(&j).unwrap(), c);
        assert!(serde_json::from_str::<Constraint>("\"a*2\"").is_err());
    }

    #[test]
    fn rare_forms_are_refused_with_a_fix() {
        let e = |s: &str| s.parse::<Constraint>().unwrap_err().0;
        assert!(e("[a|b]").contains("matching OR"), "{}", e("[a|b]"));
        assert!(e("a*2&b").contains("node counts"));
        assert!(e("(a|b)&c").contains("parentheses"));
        assert!(e("!a").contains("not"));
        assert!(e("a&b|c").contains("mixing `&` and `|`"));
        assert!(e("a&&b").contains("a feature is empty"));
        assert!(e("a|").contains("a feature is empty"));
        assert!(e("").contains("name a node feature"));
        assert!(e("a b").contains("feature `a b`"));
        assert!(e("gpu=").contains("KEY=VALUE"));
        assert!(e("a100,ib|h100").contains("mixing `&` and `|`"));
    }

    #[test]
    fn a_feature_is_a_label_key_or_a_whole_label() {
        let n = labels(&[("a100", "yes"), ("gpu", "a100"), ("zone", "b")]);
        let m = |s: &str| s.parse::<Constraint>().unwrap().matches(&n);
        assert!(m("a100") && m("gpu") && m("gpu=a100") && m("zone=b"));
        assert!(!m("ib") && !m("gpu=v100") && !m("b"), "a value alone is no feature");
        assert!(m("a100&gpu=a100") && !m("a100&ib"));
        assert!(m("ib|a100") && !m("ib|h100"));
        assert!(!"a100".parse::<Constraint>().unwrap().matches(&BTreeMap::new()));
    }
}
