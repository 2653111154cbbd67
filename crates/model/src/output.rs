//! Output files of a batch job, as Slurm writes them (`--output`, `--error`, `--open-mode`):
//! where the job's standard output and error go instead of the agent's logs (`berth logs`).
//!
//! A path is a template with Slurm's patterns, checked at submit and expanded on the node when
//! the kernel that runs the command starts (the agent, [`Template::expand`]) and by `berth
//! show` (the same function, from the job's record):
//!
//! | pattern | expands to |
//! |---------|------------|
//! | `%j` | the job id; an array task's own job id |
//! | `%A` | the array's job id (a job that is no array task: its own id) |
//! | `%a` | the array index (a job that is no array task: 4294967294, Slurm's NO_VAL) |
//! | `%b` | the array index modulo 10 |
//! | `%J` | `<job id>.batch`, the batch step as Slurm names it |
//! | `%s` | `batch`, the step |
//! | `%x` | the job name (`job-<id>` when it has none) |
//! | `%u` | the user who owns the job |
//! | `%N` | the short name (up to the first `.`) of the node the command runs on: the job's first node for a Slurm batch script |
//! | `%n` | the node's index in the job (`SLURM_NODEID`): 0 for the batch script |
//! | `%t` | the task's rank (`SLURM_PROCID`): 0 for the batch script, which is task 0 as in Slurm; a `launch = every` job's kernel index |
//! | `%%` | a literal `%` |
//!
//! A number between `%` and the letter zero-pads a number to that width, at most 10 (`%5a`
//! → `00007`); it is ignored for text (`%5x`). As in Slurm, a path holding a backslash is
//! not expanded at all (the backslashes are dropped). Any other pattern is an error that names
//! it. A relative path is relative to the job's working directory.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::{JobId, SpecError};

/// `%a` of a job that is no array task: Slurm's `NO_VAL`, as Slurm writes it.
pub const NO_ARRAY_INDEX: u32 = 4_294_967_294;

/// The widest zero padding (`%10j`), as in Slurm.
pub const MAX_WIDTH: usize = 10;

/// The longest path template, in bytes (Linux's `PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;

/// The patterns, for messages.
pub const KNOWN: &str = "%j (job id), %A (array's job id), %a (array index), %b (array index modulo 10), \
     %J (job id.batch), %s (step), %x (job name), %u (user name), %N (node name), %n (node index), \
     %t (task rank), %% (a literal %), with an optional zero-padding width such as %5a";

/// How an output file is opened: emptied first (Slurm's default) or added to.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    Serialize,
    Deserialize,
    ToSchema,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum OpenMode {
    #[default]
    Truncate,
    Append,
}

impl OpenMode {
    pub fn is_truncate(&self) -> bool {
        *self == OpenMode::Truncate
    }

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl std::str::FromStr for OpenMode {
    type Err = SpecError;

    /// `append` or `truncate`, in any case.
    fn from_str(s: &str) -> Result<OpenMode, SpecError> {
        crate::names::parse_any_case(s)
            .ok_or_else(|| SpecError(format!("invalid open mode `{s}`: use append or truncate")))
    }
}

/// Where a job's standard output and error go (Slurm's `--output`, `--error`, `--open-mode`).
/// Nothing set: to the agent's logs, for `berth logs`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub struct OutputFiles {
    /// The standard output's path template (with stderr too, unless `stderr` is set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    /// The standard error's path template; unset: with stdout (in its file, or the log).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    /// Truncate (default) or append to the files.
    #[serde(default, skip_serializing_if = "OpenMode::is_truncate")]
    pub open_mode: OpenMode,
}

/// What the patterns of a kernel's output paths stand for.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The job's own id (an array task's own).
    pub job_id: JobId,
    /// The array's job id and the task's index, for an array task.
    pub array: Option<(JobId, u32)>,
    /// The job's name (see [`job_name`]).
    pub name: &'a str,
    /// The job's owner.
    pub user: &'a str,
    /// The node the kernel runs on.
    pub node: &'a str,
    /// The kernel's index in the job (`%n`).
    pub node_index: u32,
    /// The task's rank (`%t`).
    pub task: u32,
    /// The step (`%s`; `%J` is `JOB.STEP`): an `srun`'s number, none for the batch script.
    pub step: Option<u32>,
}

/// The paths one kernel writes, expanded: `None` where the stream goes to the agent's log.
/// `stderr` equals `stdout` when the error goes with the output.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Paths {
    pub stdout: Option<String>,
    pub stderr: Option<String>,
}

impl OutputFiles {
    /// Nothing asked: the serialized spec leaves it out.
    pub fn is_empty(&self) -> bool {
        !self.has_files() && self.open_mode.is_truncate()
    }

    /// Whether either stream goes to a file.
    pub fn has_files(&self) -> bool {
        self.stdout.is_some() || self.stderr.is_some()
    }

    /// Both templates parse.
    pub fn validate(&self) -> Result<(), SpecError> {
        for t in [&self.stdout, &self.stderr].into_iter().flatten() {
            Template::parse(t)?;
        }
        Ok(())
    }

    /// The paths of the kernel `c` describes, not yet joined to the working directory
    /// ([`resolve`]). A template that does not parse (a spec that skipped validation) is
    /// an error.
    pub fn expand(&self, c: &Context) -> Result<Paths, SpecError> {
        let one = |t: &Option<String>| t.as_deref().map(|t| Template::parse(t).map(|t| t.expand(c))).transpose();
        let stdout = one(&self.stdout)?;
        let stderr = one(&self.stderr)?.or_else(|| stdout.clone());
        Ok(Paths { stdout, stderr })
    }
}

/// A job's name as its kernels see it (`BERTH_JOB_NAME`, `%x`): its own, else `job-<id>`.
pub fn job_name(name: Option<&str>, id: JobId) -> String {
    name.map(str::to_string).unwrap_or_else(|| format!("job-{id}"))
}

/// `path` on the node: as is when absolute, else under the job's working directory.
pub fn resolve(path: &str, workdir: &std::path::Path) -> std::path::PathBuf {
    let p = std::path::Path::new(path);
    if p.is_absolute() { p.to_path_buf() } else { workdir.join(p) }
}

/// One of Slurm's patterns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    ArrayJob,
    ArrayIndex,
    ArrayIndexMod10,
    Job,
    JobStep,
    Step,
    Name,
    User,
    Node,
    NodeIndex,
    Task,
}

impl Field {
    fn of(c: char) -> Option<Field> {
        Some(match c {
            'A' => Field::ArrayJob,
            'a' => Field::ArrayIndex,
            'b' => Field::ArrayIndexMod10,
            'j' => Field::Job,
            'J' => Field::JobStep,
            's' => Field::Step,
            'x' => Field::Name,
            'u' => Field::User,
            'N' => Field::Node,
            'n' => Field::NodeIndex,
            't' => Field::Task,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Field(Field, usize),
}

/// A parsed path template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(Vec<Piece>);

impl Template {
    /// Parses `s`, naming the first unknown pattern.
    pub fn parse(s: &str) -> Result<Template, SpecError> {
        let bad = |m: String| Err(SpecError(format!("invalid output file `{s}`: {m}")));
        if s.is_empty() {
            return Err(SpecError("an output file path must not be empty".into()));
        }
        if s.len() > MAX_PATH_BYTES {
            return bad(format!("at most {MAX_PATH_BYTES} bytes"));
        }
        if s.contains('\0') {
            return bad("it holds a NUL byte".into());
        }
        // Slurm's escape: a backslash anywhere turns expansion off.
        if s.contains('\\') {
            return Ok(Template(vec![Piece::Text(s.replace('\\', ""))]));
        }
        let mut pieces = Vec::new();
        let mut text = String::new();
        let mut chars = s.chars().peekable();
        while let Some(c) = chars.next() {
            if c != '%' {
                text.push(c);
                continue;
            }
            let mut digits = String::new();
            while let Some(d) = chars.next_if(char::is_ascii_digit) {
                digits.push(d);
            }
            let Some(p) = chars.next() else {
                return bad(format!("a `%{digits}` ends it: write %% for a literal %"));
            };
            if p == '%' && digits.is_empty() {
                text.push('%');
                continue;
            }
            let Some(field) = Field::of(p) else {
                return bad(format!("unknown pattern `%{digits}{p}`; berth knows {KNOWN}"));
            };
            // Slurm caps the width at 10; so do we, without overflowing on `%99999999999j`.
            let width = if digits.len() > 2 { MAX_WIDTH } else { digits.parse().unwrap_or(0).min(MAX_WIDTH) };
            if !text.is_empty() {
                pieces.push(Piece::Text(std::mem::take(&mut text)));
            }
            pieces.push(Piece::Field(field, width));
        }
        if !text.is_empty() {
            pieces.push(Piece::Text(text));
        }
        Ok(Template(pieces))
    }

    /// The path for the kernel `c` describes.
    pub fn expand(&self, c: &Context) -> String {
        let mut out = String::new();
        let num = |n: u64, w: usize| format!("{n:0w$}");
        let index = c.array.map(|(_, i)| i).unwrap_or(NO_ARRAY_INDEX) as u64;
        for p in &self.0 {
            match *p {
                Piece::Text(ref t) => out.push_str(t),
                Piece::Field(f, w) => out.push_str(&match f {
                    Field::ArrayJob => num(c.array.map(|(a, _)| a).unwrap_or(c.job_id) as u64, w),
                    Field::ArrayIndex => num(index, w),
                    Field::ArrayIndexMod10 => num(index % 10, w),
                    Field::Job => num(c.job_id as u64, w),
                    Field::JobStep => match c.step {
                        Some(s) => format!("{}.{s}", num(c.job_id as u64, w)),
                        None => format!("{}.batch", num(c.job_id as u64, w)),
                    },
                    Field::Step => c.step.map_or_else(|| "batch".into(), |s| num(s.into(), w)),
                    Field::Name => c.name.to_string(),
                    Field::User => c.user.to_string(),
                    Field::Node => short_name(c.node).to_string(),
                    Field::NodeIndex => num(c.node_index as u64, w),
                    Field::Task => num(c.task as u64, w),
                }),
            }
        }
        out
    }
}

/// A node's short name, as Slurm's `%N` gives it: up to the first `.` (an address stays whole).
fn short_name(node: &str) -> &str {
    if node.parse::<std::net::IpAddr>().is_ok() { node } else { node.split('.').next().unwrap_or(node) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> Context<'static> {
        Context {
            job_id: 42,
            array: None,
            name: "train",
            user: "alice",
            node: "gpu01.lab.example",
            node_index: 0,
            task: 0,
            step: None,
        }
    }

    fn x(t: &str, c: &Context) -> String {
        Template::parse(t).unwrap_or_else(|e| panic!("{t}: {e}")).expand(c)
    }

    #[test]
    fn every_pattern_expands() {
        let c = ctx();
        assert_eq!(x("%x-%j.out", &c), "train-42.out");
        assert_eq!(x("%u/%N.log", &c), "alice/gpu01.log");
        assert_eq!(x("%A_%a", &c), "42_4294967294", "no array task: Slurm's NO_VAL");
        assert_eq!(x("%J %s %n %t %b", &c), "42.batch batch 0 0 4");
        let task = Context { job_id: 57, array: Some((50, 7)), ..c };
        assert_eq!(x("%A_%a.out", &task), "50_7.out");
        assert_eq!(x("%j", &task), "57", "an array task's %j is its own job id");
        assert_eq!(x("%b", &Context { array: Some((50, 17)), ..c }), "7");
        let every = Context { node: "n3", node_index: 2, task: 2, ..c };
        assert_eq!(x("out-%N-%n-%t", &every), "out-n3-2-2");
        assert_eq!(x("%N", &Context { node: "10.0.0.5", ..c }), "10.0.0.5", "an address stays whole");
        assert_eq!(x("plain.txt", &c), "plain.txt");
    }

    #[test]
    fn padding_and_percent() {
        let task = Context { array: Some((50, 7)), ..ctx() };
        assert_eq!(x("%5a", &task), "00007");
        assert_eq!(x("%3j", &ctx()), "042");
        assert_eq!(x("%1j", &ctx()), "42", "narrower than the number: the number");
        assert_eq!(x("%05A", &task), "00050");
        assert_eq!(x("%12j", &ctx()), "0000000042", "at most 10 wide, as in Slurm");
        assert_eq!(x("%99999999999999999999j", &ctx()), "0000000042");
        assert_eq!(x("%5x %3N", &ctx()), "train gpu01", "no padding for text");
        assert_eq!(x("%4J", &ctx()), "0042.batch");
        assert_eq!(x("100%%-%j%%", &ctx()), "100%-42%");
        assert_eq!(x("%%j", &ctx()), "%j");
    }

    #[test]
    fn a_backslash_turns_expansion_off() {
        assert_eq!(x(r"out\%j.log", &ctx()), "out%j.log");
        assert_eq!(x(r"\%q", &ctx()), "%q", "nothing is read as a pattern then");
    }

    #[test]
    fn unknown_patterns_are_named() {
        for (t, says) in [("x%q.out", "`%q`"), ("%5q", "`%5q`"), ("a%", "`%` ends it"), ("a%3", "`%3` ends it")] {
            let e = Template::parse(t).unwrap_err().0;
            assert!(e.contains(says), "{t}: {e}");
            assert!(e.contains(&format!("`{t}`")), "{t}: {e}");
        }
        let e = Template::parse("%q").unwrap_err().0;
        assert!(e.contains("%j (job id)") && e.contains("%A") && e.contains("%%"), "the known ones are listed: {e}");
        assert!(Template::parse("").unwrap_err().0.contains("empty"));
        assert!(Template::parse("a\0b").unwrap_err().0.contains("NUL"));
        assert!(Template::parse(&"a".repeat(5000)).unwrap_err().0.contains("4096"));
    }

    #[test]
    fn files_default_to_the_logs_and_stderr_follows_stdout() {
        let c = ctx();
        let none = OutputFiles::default();
        assert!(none.is_empty() && !none.has_files());
        assert_eq!(none.expand(&c).unwrap(), Paths::default());
        let out = OutputFiles { stdout: Some("o-%j".into()), ..Default::default() };
        assert_eq!(out.expand(&c).unwrap(), Paths { stdout: Some("o-42".into()), stderr: Some("o-42".into()) });
        let err = OutputFiles { stderr: Some("e-%j".into()), ..Default::default() };
        assert_eq!(err.expand(&c).unwrap(), Paths { stdout: None, stderr: Some("e-42".into()) });
        let bad = OutputFiles { stderr: Some("e-%q".into()), ..Default::default() };
        assert!(bad.validate().unwrap_err().0.contains("%q"));
        assert_eq!(resolve("o.txt", std::path::Path::new("/w")), std::path::Path::new("/w/o.txt"));
        assert_eq!(resolve("/abs/o.txt", std::path::Path::new("/w")), std::path::Path::new("/abs/o.txt"));
        assert_eq!(job_name(None, 3), "job-3");
    }

    #[test]
    fn open_modes_and_json() {
        assert_eq!("APPEND".parse::<OpenMode>().unwrap(), OpenMode::Append);
        assert_eq!("truncate".parse::<OpenMode>().unwrap(), OpenMode::Truncate);
        assert!("sometimes".parse::<OpenMode>().unwrap_err().0.contains("append or truncate"));
        let f = OutputFiles { stdout: Some("o".into()), stderr: None, open_mode: OpenMode::Append };
        let j = serde_json::to_string(&f).unwrap();
        assert_eq!(j, r#"{"stdout":"o","open_mode":"append"}"#);
        assert_eq!(serde_json::from_str::<OutputFiles>(&j).unwrap(), f);
        assert_eq!(serde_json::to_string(&OutputFiles::default()).unwrap(), "{}");
    }
}
