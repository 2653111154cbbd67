//! How user commands print: a table for people, pretty JSON (the API objects unchanged) for
//! scripts, plus the small formatters the tables share (ages, fractions, shell quoting). Every
//! command takes `-o table|json` ([`OutputArgs`]); listings that offer more (`berth ps`) take
//! [`ListOutputArgs`] instead: also `wide`, `yaml` and `name`, so that the others refuse those
//! at parse time, naming the formats they have.

use anyhow::Context;
use clap::{Args, ValueEnum};
use comfy_table::{ContentArrangement, Table, presets};
use serde::Serialize;

/// `-o`/`--output`, flattened into every user command so each one accepts it after its name.
#[derive(Debug, Clone, Copy, Default, Args)]
pub struct OutputArgs {
    /// Output format: `table` for people, `json` (the API objects, pretty-printed) for scripts.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table, value_name = "FORMAT")]
    pub format: Format,
}

impl OutputArgs {
    pub fn json(&self) -> bool {
        self.format == Format::Json
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    #[default]
    Table,
    Json,
}

/// `-o`/`--output` of a listing: [`OutputArgs`]' formats and `wide`, `yaml`, `name`.
#[derive(Debug, Clone, Copy, Default, Args)]
pub struct ListOutputArgs {
    /// Output format: `table`; `wide`, a table with more columns; `json` or `yaml` (the API
    /// objects); `name`, one id per line (for `xargs`)
    #[arg(short = 'o', long = "output", value_enum, default_value_t = ListFormat::Table, value_name = "FORMAT")]
    pub format: ListFormat,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum ListFormat {
    #[default]
    Table,
    Wide,
    Json,
    Yaml,
    Name,
}

/// Prints any API object as YAML on stdout (the same fields as `-o json`).
pub fn print_yaml<T: Serialize + ?Sized>(value: &T) -> anyhow::Result<()> {
    let s = yaml_serde::to_string(value).context("cannot encode the answer as YAML")?;
    print!("{s}");
    Ok(())
}

/// Prints any API object as pretty JSON on stdout.
pub fn print_json<T: Serialize + ?Sized>(value: &T) -> anyhow::Result<()> {
    let s = serde_json::to_string_pretty(value).context("cannot encode the answer as JSON")?;
    println!("{s}");
    Ok(())
}

/// A borderless table with the given header. Wrapping is off: a table piped into `grep` or
/// `awk` must keep one row per line whatever the terminal width.
pub fn table<I, S>(header: I) -> Table
where
    I: IntoIterator<Item = S>,
    S: Into<comfy_table::Cell>,
{
    let mut t = Table::new();
    t.load_preset(presets::NOTHING).set_content_arrangement(ContentArrangement::Disabled).set_header(header);
    t
}

/// Prints a table built by [`table`] with two spaces between columns and no leading space,
/// so that the first column starts at the left margin like `ps` and `squeue`.
pub fn print_table(t: Table) {
    print!("{}", render_table(t));
}

/// [`print_table`]'s text: one line per row, each ending in a newline.
pub fn render_table(mut t: Table) -> String {
    let last = t.column_count().saturating_sub(1);
    for (i, col) in t.column_iter_mut().enumerate() {
        col.set_padding((0, if i == last { 0 } else { 2 }));
    }
    t.lines().map(|line| format!("{}\n", line.trim_end())).collect()
}

/// Cuts `s` to at most `max` characters for a table cell, ending in `…` when cut, so that one
/// long value cannot widen every row (the whole text is in `-o wide`, `-o json` or `show`).
pub fn clip(s: &str, max: usize) -> String {
    match s.char_indices().nth(max.saturating_sub(1)) {
        Some((cut, _)) if s.chars().count() > max => format!("{}…", s[..cut].trim_end()),
        _ => s.to_string(),
    }
}

/// Seconds as a short age: `3s`, `4m`, `2h`, `3d` (floored, like `kubectl get`). Negative
/// ages (a clock ahead of ours) print as `0s` rather than confuse.
pub fn age_secs(secs: i64) -> String {
    let s = secs.max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// The age of `ts` now.
pub fn age(ts: jiff::Timestamp) -> String {
    age_secs(jiff::Timestamp::now().as_second() - ts.as_second())
}

/// How long until `ts`, for people: `in 12m`, `in 2h`; `now` once it has passed.
pub fn until(ts: jiff::Timestamp) -> String {
    until_secs(ts.as_second() - jiff::Timestamp::now().as_second())
}

/// [`until`] for a number of seconds from now.
pub fn until_secs(secs: i64) -> String {
    if secs <= 0 { "now".into() } else { format!("in {}", age_secs(secs)) }
}

/// A timestamp in the local time zone, to the second.
pub fn local_time(ts: jiff::Timestamp) -> String {
    ts.to_zoned(jiff::tz::TimeZone::system()).strftime("%Y-%m-%d %H:%M:%S").to_string()
}

/// A duration in seconds as the user would type it back: `1h30m`, `45s`, `2d`.
pub fn duration(secs: u64) -> String {
    berth_model::format_duration(secs)
}

/// Quotes one argument for display so that a copied command line means the same in a shell.
pub fn shell_quote(arg: &str) -> String {
    shell_words::quote(arg).into_owned()
}

/// A command for display. Inline scripts (arguments with newlines) are summarised: the whole
/// script is in `-o json` for whoever needs it.
pub fn command_line(cmd: &[String]) -> String {
    cmd.iter()
        .map(|a| match a.lines().count() {
            n if n > 1 => format!("<script, {n} lines>"),
            _ => shell_quote(a),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `-` for an empty cell, so that whitespace-splitting scripts still see one field per column.
pub fn or_dash(s: impl Into<String>) -> String {
    let s = s.into();
    if s.is_empty() { "-".into() } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_are_short_and_floored() {
        assert_eq!(age_secs(0), "0s");
        assert_eq!(age_secs(3), "3s");
        assert_eq!(age_secs(59), "59s");
        assert_eq!(age_secs(60), "1m");
        assert_eq!(age_secs(4 * 60 + 59), "4m");
        assert_eq!(age_secs(2 * 3600 + 10), "2h");
        assert_eq!(age_secs(3 * 86400 + 5), "3d");
        assert_eq!(age_secs(-5), "0s");
    }

    #[test]
    fn times_until() {
        assert_eq!(until_secs(12 * 60 + 5), "in 12m");
        assert_eq!(until_secs(30), "in 30s");
        assert_eq!(until_secs(0), "now");
        assert_eq!(until_secs(-10), "now");
    }

    #[test]
    fn durations_read_back() {
        assert_eq!(duration(60), "1m");
        assert_eq!(duration(5400), "1h30m");
        assert_eq!(duration(86410), "1d10s");
        assert_eq!(duration(0), "0s");
    }

    #[test]
    fn yaml_has_the_json_fields() {
        #[derive(Serialize)]
        struct Job {
            id: u64,
            name: Option<String>,
            nodes: Vec<String>,
        }
        let y = yaml_serde::to_string(&[Job { id: 3, name: None, nodes: vec!["n1".into()] }]).unwrap();
        assert_eq!(y, "- id: 3\n  name: null\n  nodes:\n  - n1\n");
    }

    #[test]
    fn tables_start_at_the_left_margin() {
        let mut t = table(["FOLDER", "USED"]);
        t.add_row(["data", "1 KiB"]);
        assert_eq!(render_table(t), "FOLDER  USED\ndata    1 KiB\n");
    }

    #[test]
    fn long_cells_are_clipped_with_an_ellipsis() {
        assert_eq!(clip("short", 10), "short");
        assert_eq!(clip("0123456789", 10), "0123456789");
        assert_eq!(clip("0123456789abc", 10), "012345678…");
        assert_eq!(clip("ééééééééééé", 4), "ééé…");
    }

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("train.py"), "train.py");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(command_line(&["sh".into(), "-c".into(), "a\nb\n".into()]), "sh -c <script, 2 lines>");
    }
}
