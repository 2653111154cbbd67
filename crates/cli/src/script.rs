//! Batch scripts (`berth submit train.sh [ARGS...]`): `#BERTH` and `#SBATCH` directives at the
//! top of the script give flags, and the script's text is sent inline in the command, so the
//! node needs no copy of the submit host's files.
//!
//! As in Slurm, directives are read from the comment block at the top: scanning stops at the
//! first line that is neither blank nor a comment. `#BERTH` lines are parsed by the very clap
//! definition of `berth submit`'s flags. `#SBATCH` lines are translated for the flags the two
//! share; the others are ignored with a warning, never silently. Precedence, lowest first:
//! `#SBATCH`, `#BERTH`, the command line.

use std::path::Path;

use anyhow::{anyhow, bail};
use clap::Parser;

use crate::specflags::SpecFlags;
use berth_slurm::sbatch;

/// Linux refuses a single argument longer than this (MAX_ARG_STRLEN), and the script travels
/// as one argument.
const MAX_INLINE: usize = 128 * 1024 - 1;

/// A script ready to submit.
#[derive(Debug)]
pub struct Script {
    pub flags: SpecFlags,
    pub command: Vec<String>,
    pub warnings: Vec<String>,
    /// Options accepted without effect, with what to do instead (`sbatch::note`).
    pub notes: Vec<String>,
    /// The `#SBATCH` task directives as written, for sbatch to merge its own options into.
    pub tasks: sbatch::Tasks,
}

/// `#BERTH` arguments, parsed like `berth submit`'s flags.
#[derive(Parser)]
#[command(no_binary_name = true, disable_help_flag = true)]
struct Directive {
    #[command(flatten)]
    flags: SpecFlags,
}

/// Reads `path` when it is a batch script: a file starting with `#!`, or one with `#BERTH` or
/// `#SBATCH` lines at the top. Anything else (a binary, a missing file) is `None`, to be run
/// as a command.
pub fn read_if_script(path: &Path) -> anyhow::Result<Option<String>> {
    let Ok(meta) = std::fs::metadata(path) else { return Ok(None) };
    if !meta.is_file() {
        return Ok(None);
    }
    let bytes = std::fs::read(path).map_err(|e| anyhow!("cannot read {}: {e}", path.display()))?;
    let shebang = bytes.starts_with(b"#!");
    let Ok(text) = String::from_utf8(bytes) else {
        if shebang {
            bail!("script {} is not valid UTF-8: berth sends scripts as UTF-8 text", path.display());
        }
        return Ok(None);
    };
    if shebang || header(&text).any(|(_, l)| directive_body(l).is_some()) {
        return Ok(Some(text));
    }
    Ok(None)
}

/// Why `first`, a file on this machine that [`read_if_script`] did not take, cannot be run as
/// the job's command, with the fix; `None` when it can (an executable given by path, or a name
/// on `path`). A bare `train.py` is looked up on the node's PATH, never in the work dir, and a
/// file without `#!` or execute permission fails there only after the job was queued.
pub fn not_runnable(first: &str, path: Option<&std::ffi::OsStr>) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(first).ok().filter(|m| m.is_file())?;
    let by_path = first.contains('/');
    if !by_path && path.is_some_and(|p| std::env::split_paths(p).any(|d| d.join(first).is_file())) {
        return None;
    }
    let executable = meta.permissions().mode() & 0o111 != 0;
    if by_path && executable {
        return None;
    }
    let interp = interpreter(first);
    let run_it = format!("run it with its interpreter: `berth submit -- {} {first}`", interp.unwrap_or("INTERPRETER"));
    let script = format!(
        "or make it a script: a first line `#!/usr/bin/env {}`, then `chmod +x {first}` and `berth submit {}`",
        interp.unwrap_or("INTERPRETER"),
        if by_path { first.to_string() } else { format!("./{first}") }
    );
    Some(if by_path {
        format!("`{first}` is not executable and has no `#!` line: {run_it}, {script}")
    } else {
        format!(
            "`{first}` is a file here, not a command on PATH (a job looks commands up on PATH, not in its directory): {run_it}, {script}"
        )
    })
}

/// The usual interpreter of a script file, by its extension.
fn interpreter(file: &str) -> Option<&'static str> {
    let ext = Path::new(file).extension()?.to_str()?;
    Some(match ext {
        "py" => "python3",
        "sh" => "sh",
        "bash" => "bash",
        "R" | "r" => "Rscript",
        "jl" => "julia",
        "pl" => "perl",
        "rb" => "ruby",
        _ => return None,
    })
}

/// The lines of the top comment block, with 1-based line numbers.
fn header(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .skip_while(|(i, l)| *i == 1 && l.starts_with("#!"))
        .take_while(|(_, l)| l.trim().is_empty() || l.trim_start().starts_with('#'))
}

enum Kind {
    Berth,
    Sbatch,
}

/// The arguments of a directive line (`#BERTH --cpus 2` → `--cpus 2`).
fn directive_body(line: &str) -> Option<(Kind, &str)> {
    for (tag, kind) in [("#BERTH", Kind::Berth), ("#SBATCH", Kind::Sbatch)] {
        if let Some(rest) = line.strip_prefix(tag).filter(|r| r.is_empty() || r.starts_with(char::is_whitespace)) {
            return Some((kind, rest));
        }
    }
    None
}

/// Parses the script `text` named `name` (for messages and `$0`), run with `args`.
pub fn parse(text: &str, name: &str, args: Vec<String>) -> anyhow::Result<Script> {
    if text.len() > MAX_INLINE {
        bail!("script {name} is too large to send inline ({} bytes, at most {MAX_INLINE})", text.len());
    }
    let mut sbatch = SpecFlags::default();
    let mut berth = SpecFlags::default();
    let mut warnings = Vec::new();
    let mut notes = Vec::new();
    let mut tasks = sbatch::Tasks::default();
    let mut slurm = false;
    for (line_no, line) in header(text) {
        let Some((kind, body)) = directive_body(line) else { continue };
        let at = |m: String| anyhow!("{name}:{line_no}: {m}");
        let words = split_words(body).map_err(|m| at(m.to_string()))?;
        let (words, layer) = match kind {
            Kind::Berth => (words, &mut berth),
            Kind::Sbatch => {
                slurm = true;
                let (w, ignored) = sbatch::translate(&words, &mut tasks).map_err(at)?;
                for flag in ignored {
                    match sbatch::note(&flag) {
                        Some(note) => notes.push(format!("{name}:{line_no}: #SBATCH {flag}: {note}")),
                        None => {
                            warnings.push(format!("{name}:{line_no}: ignoring #SBATCH {flag}: berth has no equivalent"))
                        }
                    }
                }
                (w, &mut sbatch)
            }
        };
        if words.is_empty() {
            continue;
        }
        let parsed = Directive::try_parse_from(&words).map_err(|e| at(clap_message(&e)))?;
        *layer = std::mem::take(layer).overlay(parsed.flags);
    }
    if slurm {
        let words = tasks.flags().map_err(|m| anyhow!("{name}: {m}"))?;
        let parsed = Directive::try_parse_from(&words).map_err(|e| anyhow!("{name}: {}", clap_message(&e)))?;
        sbatch = sbatch.overlay(parsed.flags);
        // Slurm runs a batch script once, on the first node, and its `srun`s start the tasks.
        sbatch.launch = Some(crate::specflags::LaunchArg::First);
    }
    // `#BERTH --cpus` sets the job's CPUs outright: Slurm's per-task count from `#SBATCH -c`
    // no longer describes the job, and srun would ask each task for more than it has.
    let berth_cpus = berth.cpus.is_some() && !berth.env.iter().any(|(k, _)| k == "SLURM_CPUS_PER_TASK");
    let mut flags = sbatch.overlay(berth);
    if berth_cpus {
        flags.env.retain(|(k, _)| k != "SLURM_CPUS_PER_TASK");
    }
    if flags.name.is_none() {
        flags.name = Some(name.to_string());
    }
    Ok(Script { flags, command: command_for(text, name, args)?, warnings, notes, tasks })
}

/// The first line of a clap error without its `error: ` prefix, for use inside our own message.
pub fn clap_message(e: &clap::Error) -> String {
    let s = e.to_string();
    let first = s.lines().next().unwrap_or_default();
    first.strip_prefix("error: ").unwrap_or(first).to_string()
}

/// The command that runs the script text on the node, through the interpreter its `#!` names.
/// Shells take `-c TEXT NAME ARGS...` (NAME becomes `$0`); Python takes `-c TEXT ARGS...`.
fn command_for(text: &str, name: &str, args: Vec<String>) -> anyhow::Result<Vec<String>> {
    let first = text.lines().next().unwrap_or_default();
    let mut interp: Vec<String> = match first.strip_prefix("#!") {
        Some(rest) => rest.split_whitespace().map(str::to_string).collect(),
        None => vec!["/bin/sh".into()],
    };
    if interp.is_empty() {
        bail!("script {name} has an empty `#!` line");
    }
    // `#!/usr/bin/env [-S] prog args`: the program that decides how to pass the text.
    let prog_at = match Path::new(&interp[0]).file_name().and_then(|n| n.to_str()) {
        Some("env") => {
            if interp.get(1).is_some_and(|a| a == "-S") {
                interp.remove(1);
            }
            1
        }
        _ => 0,
    };
    let prog = interp
        .get(prog_at)
        .and_then(|p| Path::new(p).file_name())
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_string();
    let shell = matches!(prog.as_str(), "sh" | "bash" | "dash" | "zsh" | "ksh" | "mksh" | "ash" | "busybox");
    let python = prog.starts_with("python");
    if !shell && !python {
        bail!(
            "script {name} starts with `{first}`: berth sends scripts inline and can run them with sh, bash, zsh, \
             ksh or python; submit `-- INTERPRETER PATH` with a path the node can read instead"
        );
    }
    interp.push("-c".into());
    interp.push(text.to_string());
    if shell {
        interp.push(name.to_string());
    }
    interp.extend(args);
    Ok(interp)
}

/// Splits a directive's arguments like a shell would, for quotes only (no expansion). An
/// unquoted `#` starts a comment, as Slurm allows (`#SBATCH --mem=4G  # for the tokenizer`).
pub(crate) fn split_words(s: &str) -> Result<Vec<String>, shell_words::ParseError> {
    shell_words::split(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRIPT: &str = "#!/bin/bash
#SBATCH --job-name=slurmname
#SBATCH -c 8
#SBATCH --mem=4000
#SBATCH --gres=gpu:a100:2
#SBATCH --time=1-02:00:00
#SBATCH -p gpu
#SBATCH --output=out.log
#SBATCH --mail-type ALL
# a plain comment

#BERTH --cpus 4 --env A=1   # berth wins over sbatch
#BERTH --name 'my job'
python train.py
#BERTH --cpus 99
";

    #[test]
    fn directives_layer_sbatch_then_berth() {
        let s = parse(SCRIPT, "train.sh", vec!["x".into()]).unwrap();
        let f = &s.flags;
        assert_eq!(f.cpus, Some(4000), "#BERTH beats #SBATCH, and lines after the header are not read");
        assert_eq!(f.mem, Some(4000 << 20), "a bare Slurm --mem is MiB");
        assert_eq!(f.gpus, Some(2000));
        assert_eq!(f.time_limit, Some(86400 + 7200));
        assert_eq!(f.queue.as_deref(), Some("gpu"));
        assert_eq!(f.name.as_deref(), Some("my job"));
        assert_eq!(f.env, vec![("A".into(), "1".into())], "#BERTH --cpus drops #SBATCH -c's SLURM_CPUS_PER_TASK");
        assert!(s.warnings.is_empty(), "translated and noted directives warn of nothing: {:?}", s.warnings);
        assert_eq!(f.output_file.as_deref(), Some("out.log"), "#SBATCH --output is translated");
        // Mail is no warning: a note on what to use instead.
        assert_eq!(s.notes.len(), 1, "{:?}", s.notes);
        assert!(s.notes[0].starts_with("train.sh:9: #SBATCH --mail-type ALL: berth sends no mail"), "{:?}", s.notes);
        assert_eq!(s.command[..2], ["/bin/bash", "-c"]);
        assert_eq!(s.command[2], SCRIPT);
        assert_eq!(s.command[3..], ["train.sh", "x"]);
    }

    #[test]
    fn sbatch_scripts_launch_first_and_combine_tasks() {
        use crate::specflags::LaunchArg;
        let s = parse("#!/bin/sh\n#SBATCH --nodes=2\n#SBATCH --ntasks=8 -c 2\nsrun x\n", "a.sh", vec![]).unwrap();
        let f = &s.flags;
        assert_eq!((f.nodes, f.tasks_per_node, f.cpus), (Some(2), Some(4), Some(8000)));
        assert_eq!(f.launch, Some(LaunchArg::First), "a Slurm batch script runs once");
        let s = parse("#!/bin/sh\n#SBATCH -N 2\n#BERTH --launch every --cpus 1\n", "a.sh", vec![]).unwrap();
        assert_eq!((s.flags.launch, s.flags.cpus), (Some(LaunchArg::Every), Some(1000)), "#BERTH wins");
        let s = parse("#!/bin/sh\n#BERTH --nodes 2\n", "a.sh", vec![]).unwrap();
        assert_eq!(s.flags.launch, None, "berth's own scripts run in every kernel");
        let e = parse("#!/bin/sh\n#SBATCH -N 2\n#SBATCH -n 3\n", "a.sh", vec![]).unwrap_err().to_string();
        assert!(e.starts_with("a.sh: #SBATCH --ntasks=3 does not split evenly over --nodes=2"), "{e}");
        let e = parse("#!/bin/sh\n#SBATCH -n x\n", "a.sh", vec![]).unwrap_err().to_string();
        assert!(e.starts_with("a.sh:2: invalid #SBATCH -n value `x`"), "{e}");
    }

    #[test]
    fn bad_directives_name_the_line_and_flag() {
        let e = parse("#!/bin/sh\n#BERTH --mem 4X\n", "a.sh", vec![]).unwrap_err().to_string();
        assert!(e.starts_with("a.sh:2: invalid value '4X' for '--mem <SIZE>'"), "{e}");
        let e = parse("#!/bin/sh\n#BERTH --bogus\n", "a.sh", vec![]).unwrap_err().to_string();
        assert!(e.contains("a.sh:2") && e.contains("--bogus"), "{e}");
        let e = parse("#!/bin/sh\n#SBATCH -J x\n#SBATCH --output=%x-%q.out\n", "a.sh", vec![]).unwrap_err().to_string();
        assert!(e.starts_with("a.sh:3: #SBATCH --output=%x-%q.out: ") && e.contains("`%q`"), "{e}");
        let e = parse("#!/bin/sh\n#BERTH --error-file e%q\n", "a.sh", vec![]).unwrap_err().to_string();
        assert!(e.starts_with("a.sh:2: ") && e.contains("--error-file") && e.contains("`%q`"), "{e}");
        let e = parse("#BERTH --name 'x\n", "a.sh", vec![]).unwrap_err().to_string();
        assert!(e.contains("a.sh:1: missing closing quote"), "{e}");
    }

    #[test]
    fn interpreters() {
        let s = parse("echo hi\n", "a.sh", vec![]).unwrap();
        assert_eq!(s.command, ["/bin/sh", "-c", "echo hi\n", "a.sh"]);
        assert_eq!(s.flags.name.as_deref(), Some("a.sh"));
        let s = parse("#!/usr/bin/env python3\nprint(1)\n", "t.py", vec!["--lr".into()]).unwrap();
        assert_eq!(s.command, ["/usr/bin/env", "python3", "-c", "#!/usr/bin/env python3\nprint(1)\n", "--lr"]);
        let s = parse("#!/bin/bash -e\ntrue\n", "b.sh", vec![]).unwrap();
        assert_eq!(s.command[..3], ["/bin/bash", "-e", "-c"]);
        let e = parse("#!/usr/bin/perl\n", "p.pl", vec![]).unwrap_err().to_string();
        assert!(e.contains("perl") && e.contains("INTERPRETER"), "{e}");
    }

    #[test]
    fn words_and_quotes() {
        assert_eq!(split_words(r#" --name "a b" --env 'X=y z' # c"#).unwrap(), ["--name", "a b", "--env", "X=y z"]);
        assert_eq!(split_words(r"a\ b").unwrap(), ["a b"]);
    }

    #[test]
    fn detection() {
        let dir = tempfile::tempdir().unwrap();
        let w = |n: &str, b: &[u8]| {
            let p = dir.path().join(n);
            std::fs::write(&p, b).unwrap();
            p
        };
        assert!(read_if_script(&w("a.sh", b"#!/bin/sh\necho\n")).unwrap().is_some());
        assert!(read_if_script(&w("b", b"# hi\n#BERTH --cpus 1\necho\n")).unwrap().is_some());
        assert!(read_if_script(&w("c", b"echo\n#BERTH --cpus 1\n")).unwrap().is_none());
        assert!(read_if_script(&w("d", b"\x7fELF\xff\xfe")).unwrap().is_none());
        assert!(read_if_script(&dir.path().join("missing")).unwrap().is_none());
        assert!(read_if_script(&w("e", b"#!/bin/sh\n\xff")).is_err());
    }

    #[test]
    fn sbatch_signal_is_typed_and_bad_ones_name_the_line() {
        let parse = |s: &str| parse(s, "a.sh", vec![]);
        let s = parse("#!/bin/sh\n#SBATCH --time=1 --signal=B:USR1@55\n").unwrap();
        assert_eq!(s.flags.signal, Some("B:USR1@55".parse().unwrap()));
        let s = parse("#!/bin/sh\n#SBATCH --signal USR2\n").unwrap();
        assert_eq!(s.flags.signal.map(|g| (g.signal, g.before_secs, g.batch_only)), Some((12, 60, false)));
        for (line, says) in [("--signal=FOO@9", "unknown signal `FOO`"), ("--signal=USR1@70000", "0 to 65535")] {
            let e = parse(&format!("#!/bin/sh\n#SBATCH {line}\n")).unwrap_err().to_string();
            assert!(e.starts_with("a.sh:2: ") && e.contains("--signal") && e.contains(says), "{e}");
        }
    }
}
