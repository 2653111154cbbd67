//! Where `srun`'s tasks write: srun's own standard output and error, whole lines at a time so
//! that tasks never cut into each other's lines (`-l` puts `N: ` before each), or raw as the
//! bytes come (`-u`); or files named by `--output`/`--error` patterns, as Slurm expands them
//! (`%j` job, `%t` task, `%n` node of the step, `%N` node name, `%s` step, `%u` user, `%x` job
//! name, `%%`). Tasks whose patterns expand to one path share the file, truncated once.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::Context;

/// What one task is, for patterns and labels.
#[derive(Debug, Clone)]
pub struct TaskInfo {
    pub rank: u32,
    /// The task's node among the step's (0-based).
    pub node: u32,
    pub node_name: String,
}

/// The job facts patterns name.
#[derive(Debug, Clone, Default)]
pub struct JobInfo {
    pub id: String,
    pub name: String,
    pub user: String,
    pub step: u32,
}

/// Expands a Slurm file name pattern for one task. Unknown `%` letters stay as written.
pub fn expand(pattern: &str, job: &JobInfo, task: &TaskInfo) -> String {
    let mut out = String::new();
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        // Slurm allows a zero-padding width: `%3t` is `007`.
        let mut width = String::new();
        while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            width.push(*d);
            chars.next();
        }
        let w: usize = width.parse().unwrap_or(0);
        let num = |n: u32| format!("{n:0w$}");
        match chars.next() {
            Some('%') => out.push('%'),
            Some('j') | Some('J') => out.push_str(&job.id),
            Some('t') => out.push_str(&num(task.rank)),
            Some('n') => out.push_str(&num(task.node)),
            Some('N') => out.push_str(&task.node_name),
            Some('s') => out.push_str(&num(job.step)),
            Some('u') => out.push_str(&job.user),
            Some('x') => out.push_str(&job.name),
            Some(other) => {
                out.push('%');
                out.push_str(&width);
                out.push(other);
            }
            None => {
                out.push('%');
                out.push_str(&width);
            }
        }
    }
    out
}

/// A place output goes: srun's stdout or stderr, or a file.
#[derive(Clone)]
enum Target {
    Stdout,
    Stderr,
    File(Arc<Mutex<std::fs::File>>),
}

impl Target {
    fn write(&self, data: &[u8]) -> std::io::Result<()> {
        match self {
            Target::Stdout => {
                let mut o = std::io::stdout().lock();
                o.write_all(data)?;
                o.flush()
            }
            Target::Stderr => {
                let mut e = std::io::stderr().lock();
                e.write_all(data)?;
                e.flush()
            }
            Target::File(f) => f.lock().expect("output file lock").write_all(data),
        }
    }
}

/// How output is written, shared by the tasks.
pub struct Outputs {
    label: bool,
    unbuffered: bool,
    files: Mutex<HashMap<PathBuf, Arc<Mutex<std::fs::File>>>>,
    output: Option<String>,
    error: Option<String>,
}

impl Outputs {
    pub fn new(label: bool, unbuffered: bool, output: Option<String>, error: Option<String>) -> Outputs {
        Outputs { label, unbuffered, files: Mutex::default(), output, error }
    }

    /// A task's two writers: its standard error goes where `--error` says, else with its
    /// output (a file of `--output`), else to ours.
    pub fn for_task(&self, job: &JobInfo, task: &TaskInfo) -> anyhow::Result<(TaskWriter, TaskWriter)> {
        let out = match &self.output {
            Some(p) => self.file(&expand(p, job, task))?,
            None => Target::Stdout,
        };
        let err = match (&self.error, &self.output) {
            (Some(p), _) => self.file(&expand(p, job, task))?,
            (None, Some(_)) => out.clone(),
            (None, None) => Target::Stderr,
        };
        let w = |target| TaskWriter {
            target,
            prefix: self.label.then(|| format!("{}: ", task.rank)),
            unbuffered: self.unbuffered,
            partial: Vec::new(),
        };
        Ok((w(out), w(err)))
    }

    fn file(&self, path: &str) -> anyhow::Result<Target> {
        let path = PathBuf::from(path);
        let mut files = self.files.lock().expect("output files lock");
        if let Some(f) = files.get(&path) {
            return Ok(Target::File(f.clone()));
        }
        let f = std::fs::File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
        let f = Arc::new(Mutex::new(f));
        files.insert(path, f.clone());
        Ok(Target::File(f))
    }
}

/// One task's output stream: whole lines (prefixed with `-l`), or raw with `-u`.
pub struct TaskWriter {
    target: Target,
    prefix: Option<String>,
    unbuffered: bool,
    partial: Vec<u8>,
}

impl TaskWriter {
    pub fn write(&mut self, data: &[u8]) -> std::io::Result<()> {
        if self.unbuffered && self.prefix.is_none() {
            return self.target.write(data);
        }
        self.partial.extend_from_slice(data);
        let Some(end) = self.partial.iter().rposition(|b| *b == b'\n') else { return Ok(()) };
        let lines: Vec<u8> = self.partial.drain(..=end).collect();
        let text = self.labelled(&lines);
        self.target.write(&text)
    }

    /// Writes what is left of an unfinished last line.
    pub fn finish(&mut self) -> std::io::Result<()> {
        if self.partial.is_empty() {
            return Ok(());
        }
        let rest = std::mem::take(&mut self.partial);
        let text = self.labelled(&rest);
        self.target.write(&text)
    }

    fn labelled(&self, lines: &[u8]) -> Vec<u8> {
        let Some(p) = &self.prefix else { return lines.to_vec() };
        let mut out = Vec::with_capacity(lines.len() + p.len() * 4);
        for line in lines.split_inclusive(|b| *b == b'\n') {
            out.extend_from_slice(p.as_bytes());
            out.extend_from_slice(line);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(rank: u32) -> TaskInfo {
        TaskInfo { rank, node: rank / 4, node_name: format!("n{}", rank / 4 + 1) }
    }

    #[test]
    fn patterns_expand_like_slurm() {
        let job = JobInfo { id: "42".into(), name: "train".into(), user: "ada".into(), step: 3 };
        assert_eq!(expand("out-%j-%t.log", &job, &task(5)), "out-42-5.log");
        assert_eq!(expand("%x.%s.%n.%N.%u", &job, &task(5)), "train.3.1.n2.ada");
        assert_eq!(expand("100%% %3t %q %", &job, &task(7)), "100% 007 %q %");
        assert_eq!(expand("plain", &job, &task(0)), "plain");
    }

    #[test]
    fn labels_go_before_every_whole_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("o");
        let outputs = Outputs::new(true, false, Some(path.to_string_lossy().into_owned()), None);
        let job = JobInfo::default();
        let (mut out, mut err) = outputs.for_task(&job, &task(3)).unwrap();
        out.write(b"a\nb").unwrap();
        err.write(b"E\n").unwrap();
        out.write(b"c\n").unwrap();
        out.write(b"tail").unwrap();
        out.finish().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "3: a\n3: E\n3: bc\n3: tail");
    }
}
