//! `--export`: which of the submitter's environment variables a job gets, with Slurm's
//! syntax and meaning (`sbatch --export`): `ALL` (the default), `NONE`, or a list of names,
//! each optionally with a value (`NAME=value`), after `ALL,` to add to everything.
//!
//! berth's own variables (`BERTH_*`: the API token, the manager's URL) are never exported,
//! nor the shell's bookkeeping (`PWD`, `OLDPWD`, `SHLVL`, `_`), which would be wrong in the
//! job.

use std::collections::BTreeMap;
use std::ffi::OsString;

/// What `--export` asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Export {
    /// Every variable, then these (a bare name changes nothing; `NAME=value` sets it).
    All(Vec<Item>),
    /// Nothing of the submitter's environment.
    None,
    /// Only these variables: a bare name takes the submitter's value.
    Only(Vec<Item>),
}

/// One `NAME` or `NAME=value` of an `--export` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub name: String,
    pub value: Option<String>,
}

impl Default for Export {
    fn default() -> Self {
        Export::All(Vec::new())
    }
}

impl std::str::FromStr for Export {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("NONE") {
            return Ok(Export::None);
        }
        let mut all = false;
        let mut items = Vec::new();
        for part in s.split(',') {
            if part.eq_ignore_ascii_case("ALL") {
                all = true;
                continue;
            }
            let (name, value) = match part.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (part, None),
            };
            if name.is_empty() || name.contains(['\0', ' ']) {
                return Err(format!(
                    "invalid --export `{s}`: use ALL, NONE, or NAME[=value],... (e.g. ALL,WANDB_MODE=offline)"
                ));
            }
            if name.eq_ignore_ascii_case("NONE") {
                return Err(format!("invalid --export `{s}`: NONE cannot be combined with other names"));
            }
            items.push(Item { name: name.to_string(), value });
        }
        Ok(if all { Export::All(items) } else { Export::Only(items) })
    }
}

/// Whether a variable of the submitter's environment stays behind under `ALL`.
fn never_exported(name: &str) -> bool {
    name.starts_with("BERTH_") || matches!(name, "PWD" | "OLDPWD" | "SHLVL" | "_")
}

impl Export {
    /// The variables a job gets from `vars` (the submitter's environment); the second list
    /// names the variables left out because they are not UTF-8 (the API carries text).
    pub fn resolve(
        &self,
        vars: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> (BTreeMap<String, String>, Vec<String>) {
        let mut skipped = Vec::new();
        let mut env = BTreeMap::new();
        for (k, v) in vars {
            match (k.into_string(), v.into_string()) {
                (Ok(k), Ok(v)) => {
                    env.insert(k, v);
                }
                (Ok(k), Err(_)) => skipped.push(k),
                (Err(k), _) => skipped.push(k.to_string_lossy().into_owned()),
            }
        }
        let pick = |items: &[Item], env: &BTreeMap<String, String>| -> BTreeMap<String, String> {
            items
                .iter()
                .filter_map(|i| match &i.value {
                    Some(v) => Some((i.name.clone(), v.clone())),
                    None => env.get(&i.name).map(|v| (i.name.clone(), v.clone())),
                })
                .collect()
        };
        let out = match self {
            Export::None => BTreeMap::new(),
            Export::Only(items) => pick(items, &env),
            Export::All(items) => {
                let extra = pick(items, &env);
                let mut all: BTreeMap<String, String> = env.into_iter().filter(|(k, _)| !never_exported(k)).collect();
                all.extend(extra);
                all
            }
        };
        skipped.retain(|k| !never_exported(k) && matches!(self, Export::All(_)));
        (out, skipped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> Vec<(OsString, OsString)> {
        [("PATH", "/venv/bin:/usr/bin"), ("HOME", "/home/a"), ("BERTH_TOKEN", "secret"), ("PWD", "/x"), ("A", "1")]
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect()
    }

    #[test]
    fn slurm_syntax() {
        assert_eq!("ALL".parse(), Ok(Export::All(vec![])));
        assert_eq!("none".parse(), Ok(Export::None));
        let only: Export = "PATH,B=2".parse().unwrap();
        assert_eq!(
            only,
            Export::Only(vec![
                Item { name: "PATH".into(), value: None },
                Item { name: "B".into(), value: Some("2".into()) }
            ])
        );
        assert_eq!("ALL,B=x=y".parse(), Ok(Export::All(vec![Item { name: "B".into(), value: Some("x=y".into()) }])));
        assert!("A,,B".parse::<Export>().unwrap_err().contains("NAME[=value]"));
        assert!("NONE,A".parse::<Export>().unwrap_err().contains("cannot be combined"));
    }

    #[test]
    fn all_but_berths_own_and_the_shells_bookkeeping() {
        let (env, skipped) = Export::default().resolve(vars());
        assert_eq!(env.keys().collect::<Vec<_>>(), ["A", "HOME", "PATH"], "the token never leaves");
        assert!(skipped.is_empty());
        let (env, _) = "ALL,A=2,C=3".parse::<Export>().unwrap().resolve(vars());
        assert_eq!((env["A"].as_str(), env["C"].as_str()), ("2", "3"));
    }

    #[test]
    fn none_and_lists() {
        assert!(Export::None.resolve(vars()).0.is_empty());
        let (env, _) = "PATH,B=2,MISSING".parse::<Export>().unwrap().resolve(vars());
        assert_eq!(env, BTreeMap::from([("PATH".into(), "/venv/bin:/usr/bin".into()), ("B".into(), "2".into())]));
    }

    #[test]
    fn variables_that_are_not_text_are_named() {
        use std::os::unix::ffi::OsStringExt;
        let mut v = vars();
        v.push(("BIN".into(), OsString::from_vec(vec![0xff, 0xfe])));
        let (env, skipped) = Export::default().resolve(v);
        assert!(!env.contains_key("BIN"));
        assert_eq!(skipped, ["BIN"]);
    }
}
