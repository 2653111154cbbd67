//! Long options as Slurm's commands read them (`getopt_long`): any unambiguous prefix of a long
//! option stands for it (`--job` for sacct's `--jobs`, `--part` for `--partition`), and a prefix
//! of several is refused naming them, as getopt does. Ambiguity is judged against Slurm's own
//! option list of the command ([`slurm_longs`]) as well as berth's, so that a prefix Slurm
//! refuses is refused here too, even where berth knows only one of the options it could mean.
//!
//! [`expand`] rewrites a command line with each prefix spelled out, for clap (whose
//! `infer_long_args` alone would not know Slurm's other options) and for sbatch's and
//! scontrol's own parsers; [`parse`] does it for a clap command.

use std::ffi::OsString;

use clap::Parser;

use crate::Tool;

/// A long option a command knows: its names (synonyms mean the same option, as getopt
/// takes them) and whether it takes a value in the next word when none is given inline.
#[derive(Debug, Clone)]
pub struct Long {
    pub names: Vec<String>,
    pub takes_value: bool,
}

/// Slurm 22.05's long options of `tool` that berth's parser may not have, synonyms joined by
/// `|`: only for telling an ambiguous prefix from an unambiguous one.
pub fn slurm_longs(tool: Tool) -> &'static [&'static str] {
    match tool {
        Tool::Squeue => &[
            "account",
            "all",
            "array",
            "array-unique",
            "cluster|clusters",
            "federation",
            "format",
            "Format",
            "help",
            "hide",
            "iterate",
            "jobs",
            "json",
            "licenses",
            "local",
            "long",
            "me",
            "name",
            "noconvert",
            "node|nodes|nodelist",
            "noheader",
            "partition",
            "priority",
            "qos",
            "reservation",
            "sibling",
            "sort",
            "start",
            "states",
            "steps",
            "usage",
            "user",
            "verbose",
            "version",
            "yaml",
        ],
        Tool::Sacct => &[
            "account|accounts",
            "allclusters",
            "allocations",
            "allusers",
            "array",
            "associations",
            "batch-script",
            "brief",
            "cluster|clusters",
            "completion",
            "constraints",
            "delimiter",
            "duplicates",
            "endtime",
            "env-vars",
            "federation",
            "file",
            "flags",
            "format",
            "gid|group",
            "help",
            "helpformat",
            "jobs",
            "json",
            "local",
            "long",
            "name",
            "nnodes",
            "noconvert",
            "noheader",
            "nodelist",
            "parsable",
            "parsable2",
            "partition",
            "qos",
            "reason",
            "starttime",
            "state",
            "timelimit-max",
            "timelimit-min",
            "truncate",
            "uid|user",
            "units",
            "usage",
            "verbose",
            "version",
            "wckeys",
            "whole-hetjob",
            "yaml",
        ],
        Tool::Sinfo => &[
            "all",
            "bg",
            "cluster|clusters",
            "dead",
            "exact",
            "federation",
            "format",
            "Format",
            "help",
            "hide",
            "iterate",
            "json",
            "list-reasons",
            "local",
            "long",
            "Node",
            "nodes",
            "noconvert",
            "noheader",
            "partition",
            "reservation",
            "responding",
            "sort",
            "states",
            "summarize",
            "usage",
            "verbose",
            "version",
            "yaml",
        ],
        Tool::Scancel => &[
            "account",
            "batch",
            "cluster|clusters",
            "ctld",
            "full",
            "help",
            "hurry",
            "interactive",
            "jobname|name",
            "me",
            "nodelist",
            "partition",
            "qos",
            "quiet",
            "reservation",
            "sibling",
            "signal",
            "state",
            "usage",
            "user",
            "verbose",
            "version",
            "wckey",
        ],
        Tool::Scontrol => &[
            "all",
            "cluster|clusters",
            "details",
            "federation",
            "help",
            "hide",
            "json",
            "local",
            "oneliner",
            "quiet",
            "sibling",
            "usage",
            "verbose",
            "version",
            "yaml",
        ],
        Tool::Sbatch => SBATCH_LONGS,
    }
}

/// sbatch's long options in Slurm 22.05, synonyms joined by `|`: a prefix of one of them
/// stands for it, as `getopt_long` reads them (`--part=gpu`, `--cpus=4`).
const SBATCH_LONGS: &[&str] = &[
    "account",
    "acctg-freq",
    "array",
    "batch",
    "bb",
    "bbf",
    "begin",
    "chdir",
    "cluster-constraint",
    "cluster|clusters",
    "comment",
    "constraint",
    "container",
    "contiguous",
    "core-spec",
    "cores-per-socket",
    "cpu-freq",
    "cpus-per-gpu",
    "cpus-per-task",
    "deadline",
    "delay-boot",
    "dependency",
    "distribution",
    "error",
    "exclude",
    "exclusive",
    "export",
    "export-file",
    "extra-node-info",
    "get-user-env",
    "gid",
    "gpu-bind",
    "gpu-freq",
    "gpus",
    "gpus-per-node",
    "gpus-per-socket",
    "gpus-per-task",
    "gres",
    "gres-flags",
    "help",
    "hint",
    "hold",
    "ignore-pbs",
    "immediate",
    "input",
    "job-name",
    "kill-on-invalid-dep",
    "licenses",
    "mail-type",
    "mail-user",
    "mcs-label",
    "mem",
    "mem-bind",
    "mem-per-cpu",
    "mem-per-gpu",
    "mincpus",
    "network",
    "nice",
    "no-kill",
    "no-requeue",
    "nodefile",
    "nodelist",
    "nodes",
    "ntasks",
    "ntasks-per-core",
    "ntasks-per-gpu",
    "ntasks-per-node",
    "ntasks-per-socket",
    "open-mode",
    "output",
    "overcommit",
    "oversubscribe",
    "parsable",
    "partition",
    "power",
    "prefer",
    "priority",
    "profile",
    "propagate",
    "qos",
    "quiet",
    "reboot",
    "requeue",
    "reservation",
    "signal",
    "sockets-per-node",
    "spread-job",
    "switches",
    "test-only",
    "thread-spec",
    "threads-per-core",
    "time",
    "time-min",
    "tmp",
    "uid",
    "usage",
    "use-min-nodes",
    "verbose",
    "version",
    "wait",
    "wait-all-nodes",
    "wckey",
    "wrap",
];

/// The long options of clap command `cmd` (built), with their aliases as synonyms.
pub fn clap_longs(cmd: &clap::Command) -> Vec<Long> {
    cmd.get_arguments()
        .filter_map(|a| {
            let long = a.get_long()?;
            let mut names = vec![long.to_string()];
            names.extend(a.get_all_aliases().into_iter().flatten().map(str::to_string));
            Some(Long { names, takes_value: a.get_action().takes_values() })
        })
        .collect()
}

/// Slurm's list as [`Long`]s (the value side unknown: berth's own options say it).
pub(crate) fn slurm_entries(tool: Tool) -> Vec<Long> {
    slurm_longs(tool)
        .iter()
        .map(|s| Long { names: s.split('|').map(str::to_string).collect(), takes_value: false })
        .collect()
}

/// What `--name` (without `--` and `=value`) stands for among `known`: the option it names
/// exactly, else the one it is a prefix of; `Err` with getopt's words when it is a prefix of
/// several; `Ok(None)` when it is no known option's.
pub fn resolve<'a>(name: &str, known: &'a [Long]) -> Result<Option<(&'a Long, &'a str)>, String> {
    for l in known {
        if let Some(n) = l.names.iter().find(|n| *n == name) {
            return Ok(Some((l, n)));
        }
    }
    let mut found: Vec<(&Long, &str)> = Vec::new();
    for l in known {
        if let Some(n) = l.names.iter().find(|n| n.starts_with(name)) {
            // An option Slurm lists and berth knows too (as the same name) counts once.
            if !found.iter().any(|(f, _)| f.names.iter().any(|m| l.names.contains(m))) {
                found.push((l, n));
            }
        }
    }
    match found[..] {
        [] => Ok(None),
        [one] => Ok(Some(one)),
        _ => {
            let mut names: Vec<String> = found.iter().map(|(_, n)| format!("'--{n}'")).collect();
            names.sort();
            Err(format!("option '--{name}' is ambiguous; possibilities: {}", names.join(" ")))
        }
    }
}

/// `words` (the command's name first) with each long option's prefix spelled out against
/// `berth`'s options (which say whether one takes the next word as its value) and Slurm's
/// (`tool`'s list); `shorts` are the short options that take a value. Everything after `--`
/// stays as it is.
pub fn expand(words: Vec<String>, berth: &[Long], tool: Tool, shorts: &[char]) -> Result<Vec<String>, String> {
    let mut known: Vec<Long> = berth.to_vec();
    known.extend(slurm_entries(tool));
    let mut out = Vec::with_capacity(words.len());
    let mut words = words.into_iter();
    out.extend(words.next());
    while let Some(w) = words.next() {
        if w == "--" {
            out.push(w);
            out.extend(words.by_ref());
            break;
        }
        if let Some(body) = w.strip_prefix("--") {
            let (name, value) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (body, None),
            };
            let Some((_, full)) = resolve(name, &known)? else {
                out.push(w);
                continue;
            };
            let takes = berth.iter().any(|b| b.takes_value && b.names.iter().any(|n| n == full));
            out.push(match value {
                Some(v) => format!("--{full}={v}"),
                None => format!("--{full}"),
            });
            if takes && value.is_none() {
                out.extend(words.next());
            }
        } else if let Some(cluster) = w.strip_prefix('-').filter(|c| !c.is_empty()) {
            // `-o FMT`, `-ho FMT`: the value of the last short option is the next word.
            let needs_next = cluster
                .char_indices()
                .find(|(_, c)| shorts.contains(c))
                .is_some_and(|(i, c)| i + c.len_utf8() == cluster.len());
            out.push(w);
            if needs_next {
                out.extend(words.next());
            }
        } else {
            out.push(w);
        }
    }
    Ok(out)
}

/// Parses `argv` as clap command `P` of Slurm command `tool`, long options' prefixes
/// spelled out first; a mistake exits as clap's do (exit 2, with the usage).
pub fn parse<P: Parser>(tool: Tool, argv: Vec<OsString>) -> P {
    let words = argv.into_iter().map(|a| a.to_string_lossy().into_owned()).collect();
    try_parse(tool, words).unwrap_or_else(|e| e.exit())
}

/// [`parse`], returning clap's error (an ambiguous prefix's among them) instead of exiting.
pub fn try_parse<P: Parser>(tool: Tool, words: Vec<String>) -> Result<P, clap::Error> {
    let mut cmd = P::command();
    cmd.build();
    let shorts: Vec<char> =
        cmd.get_arguments().filter(|a| a.get_action().takes_values()).filter_map(|a| a.get_short()).collect();
    let expanded = expand(words, &clap_longs(&cmd), tool, &shorts)
        .map_err(|e| cmd.clone().error(clap::error::ErrorKind::UnknownArgument, e))?;
    let matches = cmd.clone().try_get_matches_from(expanded)?;
    P::from_arg_matches(&matches).map_err(|e| e.format(&mut cmd))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    fn longs(spec: &[(&str, bool)]) -> Vec<Long> {
        spec.iter().map(|(n, v)| Long { names: n.split('|').map(str::to_string).collect(), takes_value: *v }).collect()
    }

    #[test]
    fn prefixes_spelled_out_values_and_positionals_kept() {
        let b = longs(&[("jobs", true), ("format", true), ("noheader", false), ("starttime", true)]);
        let e = |s: &str| expand(words(s), &b, Tool::Sacct, &['o', 'j']).unwrap_or_else(|e| vec![e]);
        assert_eq!(
            e("sacct --job 54 --noh --form=jobid,state%20"),
            words("sacct --jobs 54 --noheader --format=jobid,state%20")
        );
        assert_eq!(e("sacct -o --jobx -j --st 1"), words("sacct -o --jobx -j --st 1"), "option values stay");
        assert_eq!(e("sacct --bogus -- --job"), words("sacct --bogus -- --job"), "unknown: clap's to refuse");
    }

    /// Each clap command takes a prefix Slurm takes and refuses one Slurm refuses, naming the
    /// options it could mean.
    #[test]
    fn every_command_takes_slurms_prefixes() {
        fn check<P: Parser>(tool: Tool, good: &str, ambiguous: &str, named: &str) {
            let w = |s: &str| std::iter::once(tool.name().to_string()).chain(words(s)).collect::<Vec<_>>();
            if let Err(e) = try_parse::<P>(tool, w(good)) {
                panic!("{} {good}: {e}", tool.name());
            }
            let e = try_parse::<P>(tool, w(ambiguous)).err().unwrap().to_string();
            assert!(e.contains(&format!("option '{}' is ambiguous", ambiguous.split(' ').next().unwrap())), "{e}");
            assert!(e.contains(named), "{e}");
        }
        check::<crate::squeue::Args>(Tool::Squeue, "--part gpu --noh --use alice", "--s", "'--sort'");
        check::<crate::sacct::Args>(Tool::Sacct, "--job 54 --noh --form=jobid,state%20", "--n x", "'--noheader'");
        check::<crate::sinfo::Args>(Tool::Sinfo, "--part gpu --noh --resp", "--no", "'--noheader'");
        check::<crate::scancel::Args>(Tool::Scancel, "--part gpu --sig USR1 12", "--s", "'--signal'");
    }

    #[test]
    fn ambiguous_prefixes_name_their_candidates_slurms_included() {
        let b = longs(&[("jobs", true), ("starttime", true), ("state", true)]);
        let e = expand(words("sacct --sta x"), &b, Tool::Sacct, &[]).unwrap_err();
        assert_eq!(e, "option '--sta' is ambiguous; possibilities: '--starttime' '--state'");
        // berth knows one `--n…` option; Slurm's sacct has several, so Slurm refuses `--n`.
        let b = longs(&[("name", true)]);
        assert!(expand(words("sacct --n x"), &b, Tool::Sacct, &[]).unwrap_err().contains("'--name'"));
        // Synonyms are one option, as getopt counts them.
        let b = longs(&[("user|uid", true)]);
        assert_eq!(expand(words("sacct --use x"), &b, Tool::Sacct, &[]).unwrap(), words("sacct --user x"));
        assert!(expand(words("sacct --us x"), &b, Tool::Sacct, &[]).unwrap_err().contains("'--usage' '--user'"));
    }
}
