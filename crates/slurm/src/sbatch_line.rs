//! sbatch's command line: `sbatch [OPTIONS] [SCRIPT [ARGS...]]`, split into Slurm's options
//! (translated by [`crate::sbatch::translate`]), sbatch's own (`--parsable`, `--wrap`,
//! `--wait`, `--quiet`), the script and its arguments; its help; the script `--wrap` makes.
//! The submit itself is `berth submit SCRIPT`'s path, in the `berth` binary.
//!
//! The options are parsed by hand, not by clap: Slurm has a hundred of them and berth takes
//! the ones it can honour, warning about the others, so the parser only needs to know which
//! take no value to find where the script's name starts.

use crate::{Error, Result};

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

pub const HELP: &str = "\
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
pub struct Line {
    /// Slurm's options, for [`crate::sbatch::translate`].
    pub options: Vec<String>,
    pub parsable: bool,
    pub wait: bool,
    pub quiet: bool,
    pub wrap: Option<String>,
    pub help: bool,
    /// `-V`/`--version`: print Slurm's version and submit nothing.
    pub version: bool,
    pub script: Option<String>,
    /// The script's own arguments.
    pub args: Vec<String>,
}

/// The command line's words (without sbatch's name) split into options, script and its
/// arguments.
pub fn split(words: &[String]) -> Result<Line, String> {
    let known = crate::getopt::slurm_entries(crate::Tool::Sbatch);
    let mut l = Line::default();
    let mut i = 0;
    while i < words.len() {
        let w = &spelled_out(&words[i], &known)?;
        i += 1;
        if !w.starts_with('-') || w == "-" {
            l.script = Some(w.clone());
            l.args = words[i..].to_vec();
            break;
        }
        match w.as_str() {
            "-h" | "--help" | "--usage" => l.help = true,
            "-V" | "--version" => l.version = true,
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

/// A long option `w` with its prefix spelled out (`--part=gpu` → `--partition=gpu`); any
/// other word as it is.
fn spelled_out(w: &str, known: &[crate::getopt::Long]) -> Result<String, String> {
    let Some(body) = w.strip_prefix("--").filter(|b| !b.is_empty()) else {
        return Ok(w.to_string());
    };
    let (name, value) = match body.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (body, None),
    };
    Ok(match crate::getopt::resolve(name, known)? {
        Some((_, full)) if value.is_some() => format!("--{full}={}", value.unwrap_or_default()),
        Some((_, full)) => format!("--{full}"),
        None => w.to_string(),
    })
}

/// The `--flag value` pairs of `merged` whose flag `given` (the command line's own flags)
/// does not have: `--mem=4G` given outright wins over a merged `--mem-per-cpu`.
pub fn not_given(merged: Vec<String>, given: &[String]) -> Vec<String> {
    merged.chunks(2).filter(|pair| !given.contains(&pair[0])).flatten().cloned().collect()
}

/// The line `--wrap`'s script starts with after its `#!`, by which `scontrol show job` knows it.
pub const WRAP_MARK: &str = "# This script was created by sbatch --wrap.";

/// `--wrap`'s script, as Slurm writes it.
pub fn wrapped(cmd: &str) -> String {
    format!("#!/bin/sh\n{WRAP_MARK}\n\n{cmd}\n")
}

/// Slurm runs only scripts that name their interpreter.
pub fn batch_script(text: &[u8]) -> Result<()> {
    if !text.starts_with(b"#!") {
        return Err(Error::failed(
            "This does not look like a batch script: the first line must start with #! followed by the path to an \
             interpreter (for instance #!/bin/sh)",
        ));
    }
    Ok(())
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
    fn long_option_prefixes_as_getopt_reads_them() {
        let l = split(&words("--part gpu --cpus-per-t=4 --pars --test run.sh --part")).unwrap();
        assert_eq!(l.options, words("--partition gpu --cpus-per-task=4 --test-only"));
        assert!(l.parsable);
        assert_eq!(l.args, words("--part"), "the script's own arguments stay");
        assert_eq!(
            split(&words("--mem-per 1G x.sh")).unwrap_err(),
            "option '--mem-per' is ambiguous; possibilities: '--mem-per-cpu' '--mem-per-gpu'"
        );
        assert!(split(&words("--vers")).unwrap().version);
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
