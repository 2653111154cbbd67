//! `berth install-slurm-commands DIR`: links `sbatch`, `squeue`, ... in DIR to this berth,
//! so that tools written for Slurm find them on PATH. A package can ship the same links
//! (`/usr/bin/sbatch -> berth`) instead: berth picks the command from the name it is called by.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use super::LINKED;

#[derive(Debug, Args)]
pub struct InstallArgs {
    /// Where to make the links (a directory on PATH, e.g. ~/.local/bin or /usr/local/bin)
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,

    /// Replace files of those names that are not links to berth
    #[arg(long)]
    pub force: bool,
}

/// What to do with one name.
#[derive(Debug, PartialEq, Eq)]
enum Plan {
    Create,
    Keep,
    /// A link to another berth (an older install): pointed at this one.
    Repoint,
    Replace,
}

pub fn run(args: InstallArgs) -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe().context("cannot find the berth executable")?;
    let exe = exe.canonicalize().unwrap_or(exe);
    std::fs::create_dir_all(&args.dir).with_context(|| format!("cannot create {}", args.dir.display()))?;
    // Decide for every name before touching any, so a refusal leaves nothing half done.
    let mut plans = Vec::new();
    for name in LINKED {
        let path = args.dir.join(name);
        let plan = plan(&path, &exe)?;
        if plan == Plan::Replace && !args.force {
            anyhow::bail!(
                "{} exists and is not a link to berth: remove it, or pass --force to replace it",
                path.display()
            );
        }
        plans.push((path, plan));
    }
    for (path, plan) in plans {
        match plan {
            Plan::Keep => println!("{} already links to berth", path.display()),
            Plan::Create | Plan::Repoint | Plan::Replace => {
                if plan != Plan::Create {
                    std::fs::remove_file(&path).with_context(|| format!("cannot remove {}", path.display()))?;
                }
                std::os::unix::fs::symlink(&exe, &path)
                    .with_context(|| format!("cannot create the link {}", path.display()))?;
                let how = if plan == Plan::Create { "created" } else { "replaced" };
                println!("{how} {} -> {}", path.display(), exe.display());
            }
        }
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    if let Some(warning) = path_advice(&args.dir, &std::env::split_paths(&path).collect::<Vec<_>>()) {
        eprintln!("warning: {warning}");
    }
    Ok(ExitCode::SUCCESS)
}

/// What stops the links from being what a shell runs, with the line that fixes it: `dir` is
/// not on `path`, or another `sbatch` (...) comes before it (Debian's slurm-client, say, which
/// then fails with Slurm's own configuration error).
fn path_advice(dir: &Path, path: &[PathBuf]) -> Option<String> {
    let same = |a: &Path| a.canonicalize().ok().is_some_and(|a| Some(a) == dir.canonicalize().ok());
    let fix = format!("export PATH=\"{}:$PATH\" (in ~/.profile or your shell's rc file)", dir.display());
    let Some(at) = path.iter().position(|p| same(p)) else {
        return Some(format!("{} is not on your PATH, so the commands are not found there: {fix}", dir.display()));
    };
    for earlier in &path[..at] {
        if let Some(name) = LINKED.iter().find(|n| earlier.join(n).is_file()) {
            return Some(format!(
                "`{name}` runs {}, which comes before {} on your PATH: {fix}",
                earlier.join(name).display(),
                dir.display()
            ));
        }
    }
    None
}

/// Whether `path` is missing (create it), a link to `exe` (keep it) or something else.
fn plan(path: &Path, exe: &Path) -> anyhow::Result<Plan> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Plan::Create),
        Err(e) => Err(anyhow::anyhow!("cannot look at {}: {e}", path.display())),
        Ok(m) if m.file_type().is_symlink() => {
            let target = std::fs::read_link(path)?;
            let target =
                if target.is_relative() { path.parent().unwrap_or(Path::new("/")).join(target) } else { target };
            Ok(if target.canonicalize().ok().as_deref() == Some(exe) {
                Plan::Keep
            } else if target.file_name().is_some_and(|n| n == "berth") {
                Plan::Repoint
            } else {
                Plan::Replace
            })
        }
        Ok(m) if m.is_dir() => anyhow::bail!("{} is a directory", path.display()),
        Ok(_) => Ok(Plan::Replace),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_advice_names_a_missing_dir_and_a_shadowing_sbatch() {
        let dir = tempfile::tempdir().unwrap();
        let ours = dir.path().join("ours");
        let theirs = dir.path().join("theirs");
        std::fs::create_dir_all(&ours).unwrap();
        std::fs::create_dir_all(&theirs).unwrap();
        let missing = path_advice(&ours, std::slice::from_ref(&theirs)).unwrap();
        assert!(missing.contains("is not on your PATH") && missing.contains("export PATH="), "{missing}");
        assert_eq!(path_advice(&ours, &[theirs.clone(), ours.clone()]), None, "nothing of Slurm's in theirs");
        std::fs::write(theirs.join("sbatch"), "#!/bin/sh\n").unwrap();
        let shadowed = path_advice(&ours, &[theirs.clone(), ours.clone()]).unwrap();
        assert!(shadowed.contains("`sbatch` runs") && shadowed.contains("comes before"), "{shadowed}");
        assert_eq!(path_advice(&ours, &[ours.clone(), theirs]), None, "ours first");
    }

    #[test]
    fn plans() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("berth");
        std::fs::write(&exe, "").unwrap();
        let exe = exe.canonicalize().unwrap();
        assert_eq!(plan(&dir.path().join("sbatch"), &exe).unwrap(), Plan::Create);
        std::os::unix::fs::symlink(&exe, dir.path().join("squeue")).unwrap();
        assert_eq!(plan(&dir.path().join("squeue"), &exe).unwrap(), Plan::Keep);
        std::os::unix::fs::symlink("/bin/true", dir.path().join("sinfo")).unwrap();
        assert_eq!(plan(&dir.path().join("sinfo"), &exe).unwrap(), Plan::Replace);
        std::os::unix::fs::symlink("/opt/old/berth", dir.path().join("scancel")).unwrap();
        assert_eq!(plan(&dir.path().join("scancel"), &exe).unwrap(), Plan::Repoint);
        std::fs::write(dir.path().join("sacct"), "#!/bin/sh\n").unwrap();
        assert_eq!(plan(&dir.path().join("sacct"), &exe).unwrap(), Plan::Replace);
    }
}
