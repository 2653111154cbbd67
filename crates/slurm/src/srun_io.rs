//! Where `srun`'s tasks write: srun's own standard output and error, whole lines at a time so
//! that tasks never cut into each other's lines (`-l` puts `N: ` before each), or raw as the
//! bytes come (`-u`); or files named by `--output`/`--error` patterns, expanded by the one
//! template of `berth_model::output` (`%j` job, `%t` task, `%n` node of the step, `%N` node
//! name, `%s` step, `%J` job.step, `%A`/`%a` array, `%u` user, `%x` job name, `%%`; an unknown
//! pattern is refused, as sbatch refuses it). Tasks whose patterns expand to one path share
//! the file, truncated once.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::{Error, Result};

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
    /// The array's job id and this task's index, in a job array's task.
    pub array: Option<(berth_model::JobId, u32)>,
}

/// Expands a Slurm file name pattern for one task; an unknown pattern is an error naming it.
pub fn expand(pattern: &str, job: &JobInfo, task: &TaskInfo) -> Result<String> {
    let template = berth_model::output::Template::parse(pattern).map_err(|e| Error::Failed(e.0))?;
    let c = berth_model::output::Context {
        job_id: job.id.parse().unwrap_or_default(),
        array: job.array,
        name: &job.name,
        user: &job.user,
        node: &task.node_name,
        node_index: task.node,
        task: task.rank,
        step: Some(job.step),
    };
    Ok(template.expand(&c))
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
    pub fn for_task(&self, job: &JobInfo, task: &TaskInfo) -> Result<(TaskWriter, TaskWriter)> {
        let out = match &self.output {
            Some(p) => self.file(&expand(p, job, task)?)?,
            None => Target::Stdout,
        };
        let err = match (&self.error, &self.output) {
            (Some(p), _) => self.file(&expand(p, job, task)?)?,
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

    fn file(&self, path: &str) -> Result<Target> {
        let path = PathBuf::from(path);
        let mut files = self.files.lock().expect("output files lock");
        if let Some(f) = files.get(&path) {
            return Ok(Target::File(f.clone()));
        }
        let f = std::fs::File::create(&path)
            .map_err(|source| Error::Io { what: format!("cannot create {}", path.display()), source })?;
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
        let job = JobInfo { id: "42".into(), name: "train".into(), user: "ada".into(), step: 3, array: None };
        let x = |p: &str, t: u32| expand(p, &job, &task(t)).unwrap();
        assert_eq!(x("out-%j-%t.log", 5), "out-42-5.log");
        assert_eq!(x("%x.%s.%n.%N.%u", 5), "train.3.1.n2.ada");
        assert_eq!(x("100%% %3t %J", 7), "100% 007 42.3");
        assert_eq!(x("plain", 0), "plain");
        let task_of_array = JobInfo { array: Some((40, 2)), ..job.clone() };
        assert_eq!(expand("%A_%a-%t", &task_of_array, &task(1)).unwrap(), "40_2-1");
        // The same template as sbatch's: a pattern it does not know is refused, not kept.
        let e = expand("%q.log", &job, &task(0)).unwrap_err().to_string();
        assert!(e.contains("unknown pattern `%q`"), "{e}");
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
