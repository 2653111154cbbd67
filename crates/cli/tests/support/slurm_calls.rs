//! Slurm's commands with a recorder in front: the tests that drive Slurm's tool ecosystem
//! (Snakemake, Parsl, dask-jobqueue, submitit) put [`Recorder::path_dir`] first on the PATH, so
//! every `sbatch`, `sacct`, `srun`, ... a tool runs, in the driver or inside a job, is appended
//! to one log with its arguments, exit status and stderr, then checked against the calls the
//! test knows. A new tool version that calls something new fails with the command named, not
//! with a job that mysteriously never finished.

use std::path::{Path, PathBuf};

/// Every command berth installs with `berth install-slurm-commands`.
const COMMANDS: &[&str] = &["sbatch", "squeue", "sacct", "scancel", "scontrol", "sinfo", "srun", "sacctmgr", "sshare"];

/// One recorded call.
#[derive(Debug, Clone)]
pub struct Call {
    /// The command's name and its arguments.
    pub argv: Vec<String>,
    /// Its exit status.
    pub status: i32,
    /// What it wrote to stderr.
    pub stderr: String,
}

impl Call {
    /// The call's shape, without the values that change from run to run: the command, then its
    /// options (`--mem` of `--mem=1G`, `-n1` as written) and bare lowercase words (`show`,
    /// `config`, `format=`; the partition as `PART`; an option repeated in a row once), leaving out ids, paths, names and times. `srun` stops at the first
    /// word that is not an option: what follows is the command it runs.
    pub fn shape(&self) -> String {
        let user = std::env::var("USER").unwrap_or_else(|_| "root".into());
        let mut out = vec![self.argv[0].clone()];
        for a in &self.argv[1..] {
            if a.starts_with('-') && a.len() > 1 {
                // An option repeated in a row (`-j 1 -j 2`, one per job a tool watches) once.
                let opt = a.split('=').next().unwrap();
                if out.last().is_none_or(|l| l != opt) {
                    out.push(opt.to_string());
                }
            } else if self.argv[0] == "srun" {
                break;
            } else if let Some((key, _)) = a.split_once('=') {
                if !key.is_empty() && key.chars().all(|c| c.is_ascii_lowercase()) {
                    out.push(format!("{key}="));
                }
            } else if *a == "default" {
                // berth's default queue, Slurm's partition: `PART` on both sides.
                out.push("PART".into());
            } else if !a.is_empty() && a.chars().all(|c| c.is_ascii_lowercase()) && *a != user {
                out.push(a.clone());
            }
        }
        out.join(" ")
    }

    /// The call as a shell line, for messages.
    pub fn line(&self) -> String {
        self.argv.join(" ")
    }
}

/// A directory of recording wrappers around berth's Slurm commands, and their log.
pub struct Recorder {
    /// Holds `bin/` (berth and its Slurm commands), `rec/` (the wrappers) and the log.
    pub dir: tempfile::TempDir,
    /// berth's own directory (`berth`, `sbatch`, ...).
    pub bin: PathBuf,
    log: PathBuf,
}

impl Recorder {
    /// berth's Slurm commands installed as a site installs them, with a wrapper in front of each.
    pub fn install() -> Recorder {
        use std::os::unix::fs::PermissionsExt;
        let (dir, bin) = super::slurm_bin_dir();
        let rec = dir.path().join("rec");
        std::fs::create_dir(&rec).unwrap();
        let log = dir.path().join("calls.log");
        std::fs::write(&log, "").unwrap();
        // Jobs may run as another user: the log is theirs to append to as well.
        std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o666)).unwrap();
        // One script, linked under every command's name; `real` says where the commands are.
        let script = rec.join("record.sh");
        std::fs::write(&script, include_str!("../slurm_tools/record.sh")).unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(rec.join("real"), bin.to_str().unwrap()).unwrap();
        for name in COMMANDS {
            if bin.join(name).exists() {
                std::os::unix::fs::symlink("record.sh", rec.join(name)).unwrap();
            }
        }
        Recorder { dir, bin, log }
    }

    /// The directory to put first on the PATH.
    pub fn path_dir(&self) -> PathBuf {
        self.dir.path().join("rec")
    }

    /// A PATH with the wrappers first, then `extra`, then this process's PATH.
    pub fn path(&self, extra: &Path) -> String {
        format!("{}:{}:{}", self.path_dir().display(), extra.display(), std::env::var("PATH").unwrap_or_default())
    }

    /// The calls made so far, in the order they ended.
    pub fn calls(&self) -> Vec<Call> {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        log.split('\x1e')
            .filter(|r| !r.trim().is_empty())
            .map(|r| {
                let mut parts = r.splitn(3, '\x1d');
                let argv = parts.next().unwrap_or_default().split('\x1f').map(str::to_string).collect();
                let status = parts.next().and_then(|s| s.parse().ok()).unwrap_or(-1);
                Call { argv, status, stderr: parts.next().unwrap_or_default().to_string() }
            })
            .collect()
    }

    /// Every call has a shape in `known`, with an exit status that shape allows (`&[0]` for
    /// most); otherwise the calls that are not, named with their stderr.
    pub fn check(&self, known: &[(&str, &[i32])]) -> Result<Vec<Call>, String> {
        let calls = self.calls();
        let bad: Vec<String> = calls
            .iter()
            .filter_map(|c| {
                let shape = c.shape();
                match known.iter().find(|(k, _)| *k == shape) {
                    None => Some(format!("a call the test does not know: `{}` (shape `{shape}`)", c.line())),
                    Some((_, ok)) if !ok.contains(&c.status) => {
                        Some(format!("`{}` exited {}: {}", c.line(), c.status, c.stderr.trim()))
                    }
                    Some(_) => None,
                }
            })
            .collect();
        if bad.is_empty() { Ok(calls) } else { Err(bad.join("\n")) }
    }
}

/// `program` with the environment of berth's CLI for `home` (its credentials) and `path`.
pub fn tool_command(home: &Path, program: &Path, path: &str) -> std::process::Command {
    let mut c = super::base_cmd(home);
    c.env("PATH", path).env_remove("RUST_LOG");
    let mut tool = std::process::Command::new(program);
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => tool.env(k, v),
            None => tool.env_remove(k),
        };
    }
    tool.stdin(std::process::Stdio::null());
    tool
}
