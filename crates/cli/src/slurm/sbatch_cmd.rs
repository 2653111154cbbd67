//! `sbatch [OPTIONS] [SCRIPT [ARGS...]]`: Slurm's options (the ones `#SBATCH` lines take,
//! translated by [`berth_slurm::sbatch::translate`]) over the script's own directives, then the
//! very path of `berth submit SCRIPT` ([`crate::commands::submit::build_job`]). The script
//! comes from a file, `--wrap "CMD"` or stdin. Prints `Submitted batch job N`, or `N` with
//! `--parsable`.
//!
//! The options are parsed by hand, not by clap: Slurm has a hundred of them and berth takes
//! the ones it can honour, warning about the others, so the parser only needs to know which
//! take no value to find where the script's name starts.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, anyhow, bail};
use berth_model::api::SubmitRequest;
use clap::Parser;

use crate::commands::submit::{self, JobArgs};
use crate::commands::wait;

/// Slurm options that take no value (or only an inline `=value`): the word after them is
/// the script, not their value.
const NO_VALUE: &[&str] = &[
    "--contiguous",
    "--exclusive",
    "--get-user-env",
    "-H",
    "--hold",
    "--ignore-pbs",
    "-I",
    "--immediate",
    "-k",
    "--no-kill",
    "--nice",
    "--no-requeue",
    "--requeue",
    "-O",
    "--overcommit",
    "-s",
    "--oversubscribe",
    "--propagate",
    "--reboot",
    "--spread-job",
    "--test-only",
    "--use-min-nodes",
    "-v",
    "--verbose",
];

const HELP: &str = "\
Usage: sbatch [OPTIONS...] [SCRIPT [ARGS...]]

Submits a batch script to berth. Options are Slurm's, the same as #SBATCH lines take, and
override the script's #SBATCH and #BERTH lines. berth honours:
  -c, --cpus-per-task=N   --mem=SIZE        -G, --gpus=N   --gres=gpu:N   --gpus-per-node=N
  -t, --time=TIME         -J, --job-name=NAME   -p, --partition=QUEUE   -N, --nodes=N
  -D, --chdir=DIR         -A, --account=PROJECT   --priority=N   --requeue   --export=...
  -o, --output=FILE       -e, --error=FILE  (%j %A %a %x %u %N %% patterns)   --open-mode=append|truncate
  -C, --constraint=FEATURES   --exclusive       -q, --qos=QOS
takes --mail-type, --mail-user, --wckey and --comment with a note, and warns about the
others. sbatch's own:
      --parsable          print only the job id
      --wrap=CMD          run CMD in a /bin/sh script instead of reading one
  -W, --wait              wait for the job to end; exit with its exit code
  -Q, --quiet             print no warnings
  -h, --help              this help
Without SCRIPT (and without --wrap), the script is read from standard input.
See docs/slurm.md for what berth supports.";

/// What the command line says, split.
#[derive(Debug, Default, PartialEq)]
struct Line {
    options: Vec<String>,
    parsable: bool,
    wait: bool,
    quiet: bool,
    wrap: Option<String>,
    help: bool,
    script: Option<String>,
    args: Vec<String>,
}

fn split(words: &[String]) -> Result<Line, String> {
    let mut l = Line::default();
    let mut i = 0;
    while i < words.len() {
        let w = &words[i];
        i += 1;
        if !w.starts_with('-') || w == "-" {
            l.script = Some(w.clone());
            l.args = words[i..].to_vec();
            break;
        }
        match w.as_str() {
            "-h" | "--help" | "--usage" => l.help = true,
            "--parsable" => l.parsable = true,
            "-W" | "--wait" => l.wait = true,
            "-Q" | "--quiet" => l.quiet = true,
            "--wrap" => {
                l.wrap = Some(words.get(i).cloned().ok_or("option '--wrap' requires an argument")?);
                i += 1;
            }
            _ if w.starts_with("--wrap=") => l.wrap = Some(w["--wrap=".len()..].to_string()),
            _ => {
                l.options.push(w.clone());
                let inline = w.contains('=') || (!w.starts_with("--") && w.len() > 2);
                if !inline && !NO_VALUE.contains(&w.as_str()) {
                    let v = words.get(i).ok_or_else(|| format!("option '{w}' requires an argument"))?;
                    l.options.push(v.clone());
                    i += 1;
                }
            }
        }
    }
    Ok(l)
}

/// `berth submit`'s job arguments, parsed from translated flags.
#[derive(Parser)]
#[command(no_binary_name = true, disable_help_flag = true)]
struct Translated {
    #[command(flatten)]
    job: JobArgs,
}

pub async fn run(argv: Vec<OsString>) -> anyhow::Result<ExitCode> {
    let words: Vec<String> = argv
        .into_iter()
        .skip(1)
        .map(|a| a.into_string().map_err(|a| anyhow!("argument {} is not valid UTF-8", a.to_string_lossy())))
        .collect::<anyhow::Result<_>>()?;
    let line = split(&words).map_err(anyhow::Error::msg)?;
    if line.help {
        println!("{HELP}");
        return Ok(ExitCode::SUCCESS);
    }
    let mut tasks = berth_slurm::sbatch::Tasks::default();
    let (mut flags, ignored) = berth_slurm::sbatch::translate(&line.options, &mut tasks).map_err(anyhow::Error::msg)?;
    if !line.quiet {
        for o in ignored {
            match berth_slurm::sbatch::note(&o) {
                Some(note) => eprintln!("sbatch: note: {o}: {note}"),
                None => eprintln!("sbatch: warning: ignoring {o}: berth has no equivalent"),
            }
        }
    }
    // A script that is not a file of the user's goes through a private file of ours, so that
    // it takes `berth submit SCRIPT`'s path like any other.
    let mut scratch = None;
    let script: PathBuf = match (&line.wrap, &line.script) {
        (Some(_), Some(_)) => bail!("script argument not permitted with --wrap option"),
        (Some(cmd), None) => scratch_script(&mut scratch, "wrap", &wrapped(cmd))?,
        (None, Some(path)) => {
            let text = std::fs::read(path).map_err(|_| anyhow!("Unable to open file {path}"))?;
            batch_script(&text)?;
            PathBuf::from(path)
        }
        (None, None) => {
            let mut text = Vec::new();
            std::io::stdin().read_to_end(&mut text).context("cannot read the script from standard input")?;
            batch_script(&text)?;
            scratch_script(&mut scratch, "sbatch", &String::from_utf8_lossy(&text))?
        }
    };
    if tasks != berth_slurm::sbatch::Tasks::default() {
        // Merged option by option with the script's directives, then translated once: the
        // command line's `-c 4` and the script's `--ntasks-per-node=2` make 8 CPUs.
        let text = std::fs::read_to_string(&script).unwrap_or_default();
        let name = script.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        // A script that does not parse is reported by the submit below, with its line.
        let theirs = crate::script::parse(&text, &name, Vec::new()).map(|s| s.tasks).unwrap_or_default();
        let merged = theirs.overlay(tasks).flags().map_err(anyhow::Error::msg)?;
        flags.extend(not_given(merged, &flags));
    }
    let mut argv = flags;
    argv.push(script.display().to_string());
    argv.push("--".into());
    argv.extend(line.args.iter().cloned());
    let built = Translated::try_parse_from(&argv)
        .map_err(|e| anyhow!(crate::script::clap_message(&e)))
        .and_then(|t| submit::build_job(&t.job));
    if let Some(dir) = scratch {
        let _ = std::fs::remove_dir_all(dir);
    }
    let (mut spec, code) = built?;
    if spec.output.stdout.is_none() {
        // Slurm's default, which its scripts and tools look for: `slurm-<id>.out` (an array
        // task's `slurm-<array>_<index>.out`) in the directory the job runs in.
        let default = if spec.array.is_some() { "slurm-%A_%a.out" } else { "slurm-%j.out" };
        spec.output.stdout = Some(default.to_string());
    }
    let client = crate::client::from_env()?;
    submit::attach_code(&client, &mut spec, code.as_deref()).await?;
    crate::run_as::note_before_submit(&client, &spec).await;
    let job = client.submit(&SubmitRequest { spec }).await?;
    if line.parsable {
        println!("{}", job.id);
    } else {
        println!("Submitted batch job {}", job.id);
    }
    if line.wait {
        return Ok(ExitCode::from(wait::wait_for(&client, job.id, wait::Show::Quiet).await?));
    }
    Ok(ExitCode::SUCCESS)
}

/// The `--flag value` pairs of `merged` whose flag `given` (the command line's own flags)
/// does not have: `--mem=4G` given outright wins over a merged `--mem-per-cpu`.
fn not_given(merged: Vec<String>, given: &[String]) -> Vec<String> {
    merged.chunks(2).filter(|pair| !given.contains(&pair[0])).flatten().cloned().collect()
}

/// `--wrap`'s script, as Slurm writes it.
fn wrapped(cmd: &str) -> String {
    format!("#!/bin/sh\n# This script was created by sbatch --wrap.\n\n{cmd}\n")
}

/// Slurm runs only scripts that name their interpreter.
fn batch_script(text: &[u8]) -> anyhow::Result<()> {
    if !text.starts_with(b"#!") {
        bail!(
            "This does not look like a batch script: the first line must start with #! followed by the path to an \
             interpreter (for instance #!/bin/sh)"
        );
    }
    Ok(())
}

/// Writes `text` as `NAME` in a fresh private directory (remembered in `dir` for removal).
fn scratch_script(dir: &mut Option<PathBuf>, name: &str, text: &str) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let d = std::env::temp_dir().join(format!("berth-sbatch-{}-{:x}", std::process::id(), rand::random::<u64>()));
    std::fs::DirBuilder::new().mode(0o700).create(&d).with_context(|| format!("cannot create {}", d.display()))?;
    *dir = Some(d.clone());
    let path = Path::new(&d).join(name);
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn options_then_script_then_its_arguments() {
        let l = split(&words("--parsable -c 4 --mem=2G --exclusive -J x run.sh -c 9 --parsable")).unwrap();
        assert_eq!(l.options, words("-c 4 --mem=2G --exclusive -J x"));
        assert!(l.parsable);
        assert_eq!(l.script.as_deref(), Some("run.sh"));
        assert_eq!(l.args, words("-c 9 --parsable"), "the script's own arguments");
        let l = split(&words("-c4 --requeue --wrap hostname")).unwrap();
        assert_eq!((l.options, l.wrap.as_deref(), l.script), (words("-c4 --requeue"), Some("hostname"), None));
        assert_eq!(split(&words("--mem")).unwrap_err(), "option '--mem' requires an argument");
        assert!(split(&words("-h")).unwrap().help);
        let l = split(&words("-o %x-%j.out -e err.txt --open-mode=append run.sh")).unwrap();
        assert_eq!(
            (l.options, l.script.as_deref()),
            (words("-o %x-%j.out -e err.txt --open-mode=append"), Some("run.sh"))
        );
    }

    #[test]
    fn merged_task_flags_yield_to_flags_given_outright() {
        let merged = words("--tasks-per-node 2 --cpus 8 --mem 2048B");
        assert_eq!(not_given(merged, &words("--mem 4GiB --name x")), words("--tasks-per-node 2 --cpus 8"));
    }

    #[test]
    fn scripts() {
        assert!(batch_script(b"#!/bin/bash\n").is_ok());
        assert!(batch_script(b"echo hi\n").unwrap_err().to_string().contains("#!"));
        assert_eq!(wrapped("hostname"), "#!/bin/sh\n# This script was created by sbatch --wrap.\n\nhostname\n");
    }
}
