//! `berth --help`: the subcommands in groups (jobs, interactive work, data, serving, the
//! cluster, your account, admin, daemons), like `kubectl` and `git` list theirs, instead of one
//! flat list of forty. clap lists subcommands under one heading only, so the root command's
//! help template is written here from the same definitions (each subcommand's own `about`).

use clap::Command;

/// Each group's heading and its subcommands, in the order shown. Every subcommand is in
/// exactly one group (a unit test holds new ones to that).
const GROUPS: &[(&str, &[&str])] = &[
    (
        "Jobs",
        &["submit", "ps", "show", "logs", "wait", "cancel", "requeue", "hold", "release", "eff", "history", "srun"],
    ),
    ("Interactive work", &["run", "attach", "exec", "port-forward", "apps", "open", "ui"]),
    ("Data and environments", &["folder", "upload", "download", "env", "cache", "images"]),
    ("Serving", &["serve"]),
    ("The cluster", &["nodes", "queues", "quotas", "usage", "managers", "sim"]),
    ("You and your clusters", &["login", "context", "token", "whoami"]),
    ("Administration", &["admin", "install-slurm-commands", "completions", "man"]),
    ("Daemons", &["up", "manager", "agent"]),
];

/// `cmd` (the root command) with its help listing the subcommands by group.
pub fn grouped(cmd: Command) -> Command {
    let width = cmd.get_subcommands().map(|s| s.get_name().len()).max().unwrap_or(0) + 2;
    let mut listing = String::new();
    for (heading, names) in GROUPS {
        listing.push_str(&format!("{heading}:\n"));
        for name in *names {
            let about =
                cmd.find_subcommand(name).and_then(|s| s.get_about()).map(|a| a.to_string()).unwrap_or_default();
            listing.push_str(&format!("  {name:<width$}{}\n", wrap(&about, 2 + width)));
        }
        listing.push('\n');
    }
    let template = format!(
        "{{about-with-newline}}\n{{usage-heading}} {{usage}}\n\n{listing}Options:\n{{options}}\n\n\
         `berth help COMMAND` or `berth COMMAND --help` says more about each.\n"
    );
    cmd.help_template(template)
}

/// The width the help is written for (the root command's `max_term_width`).
const WIDTH: usize = 100;

/// `text` broken at spaces into lines that fit in [`WIDTH`] after `indent` columns, the lines
/// after the first indented by as much.
fn wrap(text: &str, indent: usize) -> String {
    let room = WIDTH.saturating_sub(indent).max(20);
    let mut out = String::new();
    let mut line = 0;
    for word in text.split_whitespace() {
        if line > 0 && line + 1 + word.len() > room {
            out.push('\n');
            out.push_str(&" ".repeat(indent));
            line = 0;
        } else if line > 0 {
            out.push(' ');
            line += 1;
        }
        out.push_str(word);
        line += word.len();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn every_subcommand_is_in_exactly_one_group() {
        let cmd = <crate::Cli as clap::CommandFactory>::command();
        let all: BTreeSet<&str> = cmd.get_subcommands().map(|s| s.get_name()).collect();
        let mut seen = BTreeSet::new();
        for (heading, names) in GROUPS {
            for name in *names {
                assert!(all.contains(name), "{heading}: no subcommand `{name}`");
                assert!(seen.insert(*name), "`{name}` is in two groups");
            }
        }
        assert_eq!(seen, all, "subcommands in no group");
    }

    #[test]
    fn the_help_lists_groups_with_each_subcommands_summary() {
        let help = grouped(<crate::Cli as clap::CommandFactory>::command()).render_help().to_string();
        let jobs = help.find("Jobs:").expect(&help);
        let daemons = help.find("Daemons:").expect(&help);
        let submit = help.find("  submit ").expect(&help);
        assert!(jobs < submit && submit < daemons, "{help}");
        assert!(help.contains("Submit a job: flags and a command"), "{help}");
        assert!(help.contains("Options:") && help.contains("--context"), "{help}");
        let listing = &help[..help.find("Options:").unwrap()];
        assert!(listing.lines().all(|l| l.chars().count() <= WIDTH), "{help}");
    }

    #[test]
    fn long_summaries_wrap_under_their_column() {
        assert_eq!(wrap("a b c", 4), "a b c");
        let w = wrap(&"word ".repeat(40), 26);
        assert!(w.lines().count() > 1 && w.lines().all(|l| l.len() <= WIDTH), "{w}");
        assert!(w.lines().skip(1).all(|l| l.starts_with(&" ".repeat(26)) && !l[26..].starts_with(' ')), "{w}");
    }
}
