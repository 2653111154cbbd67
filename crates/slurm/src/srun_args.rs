//! `srun`'s options, read as Slurm's srun reads them (`getopt_long`): short options with their
//! value attached or in the next word (`-n1`, `-n 1`, `-ln2`), any unambiguous prefix of a long
//! option (`--cpus-per-t=1`; clap's `infer_long_args`, judged against every option listed here,
//! Slurm's ignored ones included, so that `--cpus` is as ambiguous as in Slurm), and the first
//! word that is no option starts the command, whose own options are left alone.
//!
//! What changes what runs takes effect ([`SrunArgs`]' typed fields: tasks, nodes, `-c`,
//! `--chdir`, `--export`, output, `--label`, ...). Options that only tune placement, binding or
//! accounting (`--mpi`, `--exact`, `--overlap`, `--cpu-bind`, `--distribution`, `--hint`,
//! `--mem`, `--gres`, `-J`, `-t`, ...) are accepted and ignored, as they change nothing in an
//! allocation whose kernels' CPUs, memory and time limit are the job's (docs/slurm.md lists
//! them). Options that would ask for something berth cannot do within a job (`--nodelist`,
//! `--multi-prog`, `--bcast`, ...) are refused as unknown.

use clap::{ArgAction, Args};

#[derive(Debug, Clone, Args)]
#[command(infer_long_args = true)]
pub struct SrunArgs {
    /// Tasks to run [default: nodes × tasks per node]
    #[arg(short = 'n', long = "ntasks", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub ntasks: Option<u32>,

    /// Nodes (kernels) of the job to run them on, or a range MIN-MAX (its minimum) [default:
    /// all, or as many as -n needs]
    #[arg(short = 'N', long = "nodes", value_name = "N", value_parser = node_count)]
    pub nodes: Option<u32>,

    /// Tasks per node [default: the job's, SLURM_NTASKS_PER_NODE]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub ntasks_per_node: Option<u32>,

    /// CPUs of each task (SLURM_CPUS_PER_TASK in the tasks), within the job's CPUs per node
    #[arg(short = 'c', long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub cpus_per_task: Option<u32>,

    /// Run the tasks in this directory [default: the kernel's working directory]
    #[arg(short = 'D', long, value_name = "DIR")]
    pub chdir: Option<String>,

    /// Put the task's rank before each line of its output (`3: ...`)
    #[arg(short = 'l', long)]
    pub label: bool,

    /// Write output as it comes instead of line by line
    #[arg(short = 'u', long)]
    pub unbuffered: bool,

    /// Write the tasks' output to files: %j job, %t task, %n node of the step, %N node
    /// name, %s step, %u user, %x job name, %% a percent sign
    #[arg(short = 'o', long, value_name = "PATTERN")]
    pub output: Option<String>,

    /// Write the tasks' standard error to files (same patterns) [default: with their output]
    #[arg(short = 'e', long, value_name = "PATTERN")]
    pub error: Option<String>,

    /// Accepted for Slurm scripts and ignored: a kernel's tasks share its CPUs
    #[arg(long, value_name = "TYPE", alias = "cpu_bind")]
    pub cpu_bind: Option<String>,

    /// Which of srun's variables the tasks get: ALL (but node-specific ones), NONE (only the
    /// kernel's and the task's), or NAME[=value],... (ALL,NAME=value adds to all) [default: ALL]
    #[arg(long, value_name = "ALL|NONE|NAME[=VALUE],...")]
    pub export: Option<String>,

    /// GPUs of its own for each task: task L of a node gets the kernel's GPUs L×G to L×G+G-1
    /// (CUDA_VISIBLE_DEVICES), so a node's tasks get disjoint sets
    #[arg(long, value_name = "G", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub gpus_per_task: Option<u32>,

    /// Stop the other tasks when one exits non-zero (Slurm's default is to let them run)
    #[arg(short = 'K', long, value_name = "0|1", num_args = 0..=1, require_equals = true, default_missing_value = "1")]
    pub kill_on_bad_exit: Option<u8>,

    /// Say nothing but errors (no notes about ignored options)
    #[arg(short = 'Q', long)]
    pub quiet: bool,

    /// Outside a job: run one task on a terminal (`berth run -it`)
    #[arg(long)]
    pub pty: bool,

    /// Slurm's options with a value that tune what berth decides itself in a job's
    /// allocation: accepted and ignored (docs/slurm.md).
    #[arg(
        long = "mpi",
        hide = true,
        value_name = "VALUE",
        action = ArgAction::Append,
        visible_aliases = IGNORED_WITH_VALUE,
        visible_short_aliases = ['m', 'J', 't', 'p', 'q', 'A', 'C', 'G', 'B', 'L', 'S', 'T'],
    )]
    pub ignored: Vec<String>,

    /// Slurm's switches that change nothing in a job's allocation: accepted and ignored.
    #[arg(
        long = "exact",
        hide = true,
        action = ArgAction::Count,
        visible_aliases = IGNORED_SWITCHES,
        visible_short_aliases = ['O', 's', 'X', 'E', 'v'],
    )]
    pub ignored_switches: u8,

    /// `--exclusive[=user|mcs]`: a step's CPUs are the job's kernels' in berth; ignored.
    #[arg(long, hide = true, value_name = "user|mcs", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    pub exclusive: Option<String>,

    /// The program to run in every task, and its arguments
    #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// Slurm's srun options with a value that berth accepts and ignores within a job (the first,
/// `--mpi`, names the option they share).
const IGNORED_WITH_VALUE: [&str; 46] = [
    "gres",
    "gres-flags",
    "distribution",
    "hint",
    "mem",
    "mem-per-cpu",
    "mem-per-gpu",
    "mem-bind",
    "mem_bind",
    "gpu-bind",
    "accel-bind",
    "cpu-freq",
    "gpu-freq",
    "cpus-per-gpu",
    "ntasks-per-core",
    "ntasks-per-socket",
    "ntasks-per-gpu",
    "sockets-per-node",
    "cores-per-socket",
    "threads-per-core",
    "extra-node-info",
    "core-spec",
    "thread-spec",
    "threads",
    "job-name",
    "time",
    "time-min",
    "partition",
    "qos",
    "account",
    "constraint",
    "gpus",
    "gpus-per-node",
    "gpus-per-socket",
    "licenses",
    "network",
    "comment",
    "wckey",
    "profile",
    "acctg-freq",
    "mincpus",
    "tmp",
    "reservation",
    "mail-type",
    "mail-user",
    "prefer",
];

/// Slurm's srun switches that berth accepts and ignores within a job (the first, `--exact`,
/// names the option they share).
const IGNORED_SWITCHES: [&str; 9] = [
    "overlap",
    "contiguous",
    "spread-job",
    "use-min-nodes",
    "overcommit",
    "oversubscribe",
    "disable-status",
    "preserve-env",
    "verbose",
];

/// `-N N` or `-N MIN-MAX`: the step's nodes (a range's minimum, as a step in an allocation
/// takes what it has).
fn node_count(v: &str) -> Result<u32, String> {
    let min = v.split_once('-').map_or(v, |(min, _)| min);
    match min.parse::<u32>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("`{v}` is no node count: give N or MIN-MAX, at least 1")),
    }
}

impl SrunArgs {
    /// The options as words, for the srun of a job srun asked for (outside a job): output,
    /// environment, directory and CPUs per task.
    pub fn output_options(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (flag, v) in
            [("--output", &self.output), ("--error", &self.error), ("--export", &self.export), ("--chdir", &self.chdir)]
        {
            if let Some(v) = v {
                out.push(format!("{flag}={v}"));
            }
        }
        if let Some(c) = self.cpus_per_task {
            out.push(format!("--cpus-per-task={c}"));
        }
        for (flag, on) in [
            ("--label", self.label),
            ("--unbuffered", self.unbuffered),
            ("--kill-on-bad-exit", self.kill_on_bad_exit.is_some_and(|k| k != 0)),
            ("--quiet", self.quiet),
        ] {
            if on {
                out.push(flag.to_string());
            }
        }
        out
    }

    /// The task's command line: the command, started in `--chdir`'s directory when one was
    /// given (through `sh`, which says clearly when the directory is not there).
    pub fn task_command(&self) -> Vec<String> {
        let Some(dir) = &self.chdir else { return self.command.clone() };
        let script = r#"cd -- "$0" 2>/dev/null || { echo "srun: error: cannot chdir to $0: no such directory in the kernel" >&2; exit 1; }; exec "$@""#;
        let mut cmd = vec!["/bin/sh".to_string(), "-c".to_string(), script.to_string(), dir.clone()];
        cmd.extend(self.command.iter().cloned());
        cmd
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Srun {
        #[command(flatten)]
        args: SrunArgs,
    }

    fn parse(line: &str) -> Result<SrunArgs, String> {
        let words = shell_words::split(line).unwrap();
        Srun::try_parse_from(words).map(|s| s.args).map_err(|e| e.to_string())
    }

    #[test]
    fn snakemakes_step_line_parses_with_the_command_left_alone() {
        let a = parse("srun -n1 --cpu-bind=q --cpus-per-task=1 --nodes=1 python -c 'print(1)'").unwrap();
        assert_eq!((a.ntasks, a.nodes, a.cpus_per_task), (Some(1), Some(1), Some(1)));
        assert_eq!(a.cpu_bind.as_deref(), Some("q"));
        assert_eq!(a.command, ["python", "-c", "print(1)"]);
    }

    #[test]
    fn short_options_take_attached_or_separate_values_and_cluster() {
        let a = parse("srun -n1 -N 1 -c 2 -J x -t 1 -l echo -n hi").unwrap();
        assert_eq!((a.ntasks, a.nodes, a.cpus_per_task, a.label), (Some(1), Some(1), Some(2), true));
        assert_eq!(a.command, ["echo", "-n", "hi"], "the command's own options are its");
        let a = parse("srun -ln2 hostname").unwrap();
        assert_eq!((a.label, a.ntasks), (true, Some(2)));
        assert_eq!(parse("srun -N1-4 true").unwrap().nodes, Some(1), "a range's minimum");
        assert_eq!(parse("srun -- -n x").unwrap().command, ["-n", "x"]);
    }

    #[test]
    fn slurms_tuning_options_are_accepted_and_ignored() {
        let a = parse(
            "srun --mem=100M --mpi=none --exact --overlap --gres=none --cpu_bind=none --distribution=block \
             --hint=nomultithread --quiet --exclusive -m block -v -O true",
        )
        .unwrap();
        assert_eq!(a.cpu_bind.as_deref(), Some("none"), "Slurm's old spelling");
        assert!(a.quiet);
        assert_eq!(a.ignored, ["100M", "none", "none", "block", "nomultithread", "block"]);
        assert_eq!(a.command, ["true"]);
    }

    #[test]
    fn long_options_take_unambiguous_prefixes_as_getopt_does() {
        let a = parse("srun --ntasks=2 --cpus-per-t=3 --chd /tmp --lab --expo=NONE env").unwrap();
        assert_eq!((a.ntasks, a.cpus_per_task, a.label), (Some(2), Some(3), true));
        assert_eq!((a.chdir.as_deref(), a.export.as_deref()), (Some("/tmp"), Some("NONE")));
        // Slurm's srun has --cpus-per-task and --cpus-per-gpu: `--cpus` is either.
        assert!(parse("srun --cpus=1 true").is_err());
        // --mem is an option of its own beside --mem-per-cpu.
        assert_eq!(parse("srun --mem=1G true").unwrap().ignored, ["1G"]);
        assert!(parse("srun --ex true").is_err(), "--exact, --exclusive, --export");
    }

    #[test]
    fn what_berth_cannot_do_in_a_job_is_refused() {
        assert!(parse("srun --nodelist=n1 true").unwrap_err().contains("--nodelist"));
        assert!(parse("srun --multi-prog conf").is_err());
        assert!(parse("srun -N0 true").is_err());
        assert!(parse("srun -K echo").unwrap().kill_on_bad_exit == Some(1), "-K's value is attached only");
    }

    #[test]
    fn chdir_runs_the_command_in_the_directory() {
        let a = parse("srun -D /tmp/x ls -a").unwrap();
        let cmd = a.task_command();
        assert_eq!(cmd[0], "/bin/sh");
        assert_eq!(&cmd[3..], ["/tmp/x", "ls", "-a"]);
        assert_eq!(parse("srun ls").unwrap().task_command(), ["ls"]);
        let opts = parse("srun -c2 -D /w -l --quiet true").unwrap().output_options();
        assert_eq!(opts, ["--chdir=/w", "--cpus-per-task=2", "--label", "--quiet"]);
    }
}
