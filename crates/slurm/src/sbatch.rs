//! `#SBATCH` directives in batch scripts, translated into `berth submit` flags so that a script
//! written for Slurm runs on berth unchanged where the two share a meaning.
//!
//! Translated: `--mem` (a bare number is MiB, as in Slurm), `--gres=gpu[:type]:N` and
//! `--gpus`/`-G`/`--gpus-per-node` (a GPU type is the feature `gpu-type=TYPE`), `--time`/`-t` (Slurm's time formats), `--job-name`/`-J`,
//! `--priority`, `--partition`/`-p`, `--nodes`/`-N` (the minimum of a range), `--chdir`/`-D`,
//! `--requeue`, `--export` (ALL, NONE, NAME[=value],...), `--dependency`/`-d`, `--begin`/`-b`, `--array`/`-a`, `--signal`,
//! `--output`/`-o`, `--error`/`-e`, `--open-mode` (output files, their patterns checked here),
//! `--constraint`/`-C`, `--exclusive` (whole nodes; `--exclusive=user|mcs|topo` is refused),
//! `--qos`/`-q`. Everything else is returned as ignored, for the caller to warn about, or,
//! for the harmless ones scripts and tools always write (`--mail-*`, `--wckey`, `--comment`),
//! to give the [`note`] about.
//!
//! The task directives are combined once every line is read ([`Tasks::flags`]), since berth
//! asks per kernel (one per node) what Slurm asks per task: `--ntasks-per-node` (or
//! `--ntasks`/`-n` split evenly over the nodes) is the spec's `tasks_per_node`; the kernel's
//! CPUs are tasks × `--cpus-per-task`/`-c`, its memory `--mem-per-cpu` × its CPUs, its GPUs
//! tasks × `--gpus-per-task`, or `--gpus`/`-G` (the job's in all, as in Slurm) over the nodes;
//! `-c` is also the job's `SLURM_CPUS_PER_TASK` (`--env`), which Slurm sets only then.

/// The task directives of a script, as given (the last one of each wins), turned into flags
/// once every line is read.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tasks {
    nodes: Option<u32>,
    ntasks: Option<u32>,
    per_node: Option<u32>,
    cpus_per_task: Option<u64>,
    /// Bytes per CPU.
    mem_per_cpu: Option<u64>,
    gpus_per_task: Option<u64>,
    /// `--gpus`/`-G`: the job's GPUs in all, as text (`2`, or a fraction: berth's own).
    gpus: Option<String>,
    /// The GPU type of any GPU option (`--gres=gpu:a100:2`, `--gpus=a100:2`), lowercase.
    gpu_type: Option<String>,
    /// `--constraint`/`-C`, which a GPU type joins as the feature `gpu-type=TYPE`.
    constraint: Option<String>,
}

impl Tasks {
    /// These directives with `over`'s on top, option by option, as sbatch's command line
    /// overrides its script's: `-c 4` over `--ntasks-per-node=2` gives both, so the kernel
    /// gets 8 CPUs.
    pub fn overlay(self, over: Tasks) -> Tasks {
        Tasks {
            nodes: over.nodes.or(self.nodes),
            ntasks: over.ntasks.or(self.ntasks),
            per_node: over.per_node.or(self.per_node),
            cpus_per_task: over.cpus_per_task.or(self.cpus_per_task),
            mem_per_cpu: over.mem_per_cpu.or(self.mem_per_cpu),
            gpus_per_task: over.gpus_per_task.or(self.gpus_per_task),
            gpus: over.gpus.or(self.gpus),
            gpu_type: over.gpu_type.or(self.gpu_type),
            constraint: over.constraint.or(self.constraint),
        }
    }

    /// The `berth submit` flags for the task directives seen: `--tasks-per-node`, `--cpus`,
    /// `--mem` and `--gpus` per kernel. An `--ntasks` that does not split evenly over the
    /// nodes is refused (berth runs the same tasks on every node).
    pub fn flags(&self) -> Result<Vec<String>, String> {
        let nodes = self.nodes.unwrap_or(1).max(1);
        let per_node = match (self.per_node, self.ntasks) {
            (Some(p), _) => Some(p),
            (None, Some(n)) if n % nodes != 0 || n < nodes => {
                return Err(format!(
                    "#SBATCH --ntasks={n} does not split evenly over --nodes={nodes}: berth runs the same number \
                     of tasks on every node; use --ntasks-per-node (e.g. --ntasks-per-node={})",
                    n.div_ceil(nodes)
                ));
            }
            (None, Some(n)) => Some(n / nodes),
            (None, None) => None,
        };
        let tasks = per_node.unwrap_or(1) as u64;
        let max = berth_model::job::MAX_TASKS_PER_NODE as u64;
        if tasks > max {
            return Err(format!("#SBATCH asks for {tasks} tasks per node: at most {max}"));
        }
        let mut out = Vec::new();
        if let Some(p) = per_node {
            out.extend(["--tasks-per-node".to_string(), p.to_string()]);
        }
        let cpus = (per_node.is_some() || self.cpus_per_task.is_some())
            .then(|| tasks.saturating_mul(self.cpus_per_task.unwrap_or(1)));
        if let Some(c) = cpus {
            out.extend(["--cpus".to_string(), c.to_string()]);
        }
        if let Some(m) = self.mem_per_cpu {
            let bytes = m.saturating_mul(cpus.unwrap_or(1));
            out.extend(["--mem".to_string(), format!("{bytes}B")]);
        }
        if let Some(g) = self.gpus_per_task {
            out.extend(["--gpus".to_string(), tasks.saturating_mul(g).to_string()]);
            // Kept for srun, which gives each task its own (`SLURM_GPUS_PER_TASK`).
            out.extend(["--gpus-per-task".to_string(), g.to_string()]);
        } else if let Some(g) = &self.gpus {
            out.extend(["--gpus".to_string(), per_node_gpus(g, nodes)?]);
        }
        if let Some(c) = self.constraint_with_gpu_type()? {
            out.extend(["--constraint".to_string(), c]);
        }
        if let Some(c) = self.cpus_per_task {
            // Slurm sets it only when -c was given, and srun reads it as its own default.
            out.extend(["--env".to_string(), format!("SLURM_CPUS_PER_TASK={c}")]);
        }
        Ok(out)
    }
}

impl Tasks {
    /// `--constraint` with the GPU type's feature joined (`ib&gpu-type=a100`). A type beside
    /// alternatives (`a|b`) is refused: berth's constraints do not mix `&` and `|`.
    fn constraint_with_gpu_type(&self) -> Result<Option<String>, String> {
        let Some(t) = &self.gpu_type else { return Ok(self.constraint.clone()) };
        let feature = berth_model::gpu_type::feature(t).map_err(|e| format!("#SBATCH GPU type: {e}"))?;
        Ok(Some(match self.constraint.as_deref().filter(|c| !c.is_empty()) {
            None => feature,
            Some(c) if c.contains('|') => {
                return Err(format!(
                    "#SBATCH GPU type `{t}` with --constraint={c}: berth cannot join a GPU type to alternatives; \
                     give the GPU count without its type and the type in each alternative \
                     (--constraint='{}')",
                    c.split('|').map(|a| format!("{a}&{feature}")).collect::<Vec<_>>().join("|")
                ));
            }
            Some(c) => format!("{c}&{feature}"),
        }))
    }
}

/// The GPUs per node of `--gpus=total` over `nodes`; a total that does not split evenly is
/// refused, since berth gives every node of a job the same. One node keeps the value as
/// written (berth's fractions, `0.5`, included).
fn per_node_gpus(total: &str, nodes: u32) -> Result<String, String> {
    if nodes <= 1 {
        return Ok(total.to_string());
    }
    match total.parse::<u64>() {
        Ok(n) if n % nodes as u64 == 0 => Ok((n / nodes as u64).to_string()),
        _ => Err(format!(
            "#SBATCH --gpus={total} (the job's GPUs in all) does not split evenly over --nodes={nodes}: berth gives \
             every node the same GPUs; use --gpus-per-node"
        )),
    }
}

/// A whole number for `#SBATCH opt`, at least 1.
fn count(opt: &str, v: Option<String>) -> Result<u64, String> {
    let v = v.unwrap_or_default();
    v.parse::<u64>()
        .ok()
        .filter(|n| (1..=u32::MAX as u64).contains(n))
        .ok_or_else(|| format!("invalid #SBATCH {opt} value `{v}`: give a whole number of at least 1"))
}

/// Translates one line's `#SBATCH` words into `berth submit` flags, keeping its task
/// directives in `tasks`. Returns the flags and the Slurm options that have no berth
/// equivalent; a task directive with a bad value is an error.
pub fn translate(words: &[String], tasks: &mut Tasks) -> Result<(Vec<String>, Vec<String>), String> {
    let mut out = Vec::new();
    let mut ignored = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let w = &words[i];
        i += 1;
        // `--opt=value`, `--opt value`, `-c4`, `-c 4`.
        let (opt, inline) = if let Some(long) = w.strip_prefix("--") {
            match long.split_once('=') {
                Some((o, v)) => (format!("--{o}"), Some(v.to_string())),
                None => (w.clone(), None),
            }
        } else if w.starts_with('-') && w.len() > 2 {
            (w[..2].to_string(), Some(w[2..].trim_start_matches('=').to_string()))
        } else {
            (w.clone(), None)
        };
        let flag_only =
            matches!(opt.as_str(), "--requeue" | "--no-requeue" | "--exclusive" | "--hold" | "-H" | "--wait");
        let mut value = || match &inline {
            Some(v) => Some(v.clone()),
            None if !flag_only && i < words.len() && !words[i].starts_with('-') => {
                i += 1;
                Some(words[i - 1].clone())
            }
            None => None,
        };
        let berth: Option<(&str, Option<String>)> = match opt.as_str() {
            "--cpus-per-task" | "-c" => {
                tasks.cpus_per_task = Some(count(&opt, value())?);
                None
            }
            "--ntasks" | "-n" => {
                tasks.ntasks = Some(count(&opt, value())? as u32);
                None
            }
            "--ntasks-per-node" => {
                tasks.per_node = Some(count(&opt, value())? as u32);
                None
            }
            "--mem-per-cpu" => {
                let v = value().unwrap_or_default();
                let bytes = berth_model::parse_mem(&slurm_mem(&v))
                    .map_err(|e| format!("invalid #SBATCH --mem-per-cpu value `{v}`: {e}"))?;
                tasks.mem_per_cpu = Some(bytes);
                None
            }
            "--gpus-per-task" => {
                let v = value().unwrap_or_default();
                // `[type:]N`, as --gpus takes.
                let (t, n) = gpu_request(&opt, &v).unwrap_or((None, v.clone()));
                tasks.gpus_per_task = Some(count(&opt, Some(n))?);
                tasks.gpu_type = t.or(tasks.gpu_type.take());
                None
            }
            "--mem" => match value().map(|v| slurm_mem(&v)) {
                // Slurm's `--mem=0`: all of the node's memory. berth's counterpart is the whole
                // node (`--exclusive`): its memory, and its CPUs and GPUs with it.
                Some(v) if whole_node_mem(&v) => {
                    (!out.iter().any(|w| w == "--exclusive")).then_some(("--exclusive", None))
                }
                v => Some(("--mem", v)),
            },
            // Slurm's --gpus is the job's in all, berth's per node: split once -N is known.
            "--gpus" | "-G" => {
                let v = value().unwrap_or_default();
                let (t, n) = gpu_request(&opt, &v).unwrap_or((None, v.clone()));
                tasks.gpus = Some(n);
                tasks.gpu_type = t.or(tasks.gpu_type.take());
                None
            }
            "--gres" | "--gpus-per-node" => {
                let v = value();
                match v.as_deref().and_then(|v| gpu_request(&opt, v)) {
                    Some((t, n)) => {
                        tasks.gpu_type = t.or(tasks.gpu_type.take());
                        Some(("--gpus", Some(n)))
                    }
                    None => {
                        ignored.push(as_written(w, &inline, &opt, v));
                        None
                    }
                }
            }
            "--time" | "-t" => Some(("--time-limit", value().map(|v| slurm_time(&v)))),
            "--job-name" | "-J" => Some(("--name", value())),
            "--priority" => Some(("--priority", value())),
            "--partition" | "-p" => Some(("--queue", value())),
            "--nodes" | "-N" => {
                let v = value().map(|v| v.split('-').next().unwrap_or_default().to_string());
                tasks.nodes = v.as_deref().and_then(|n| n.parse().ok());
                Some(("--nodes", v))
            }
            "--chdir" | "-D" => Some(("--workdir", value())),
            "--requeue" => Some(("--requeue", None)),
            // Held until `scontrol release` (berth release).
            "--hold" | "-H" => Some(("--hold", None)),
            "--export" => Some(("--export", value())),
            "--dependency" | "-d" => Some(("--dependency", value())),
            "--array" | "-a" => Some(("--array", value())),
            "--begin" | "-b" => Some(("--begin", value())),
            "--signal" => Some(("--signal", value())),
            // Slurm's accounts are berth's projects.
            "--account" | "-A" => Some(("--project", value())),
            "--output" | "-o" => Some(("--output-file", Some(output_file(&opt, value())?))),
            "--error" | "-e" => Some(("--error-file", Some(output_file(&opt, value())?))),
            "--open-mode" => Some(("--open-mode", Some(open_mode(value())?))),
            "--constraint" | "-C" => {
                // Checked here, so a mistake names its line; joined to a GPU type at the end.
                let v = value().unwrap_or_default();
                v.parse::<berth_model::Constraint>()
                    .map_err(|e| format!("invalid #SBATCH --constraint `{v}`: {}", e.0))?;
                tasks.constraint = Some(v);
                None
            }
            "--qos" | "-q" => Some(("--qos", value())),
            "--exclusive" => match &inline {
                None if out.iter().any(|w| w == "--exclusive") => None,
                None => Some(("--exclusive", None)),
                Some(v) => {
                    return Err(format!(
                        "#SBATCH --exclusive={v} (sharing nodes only with some jobs) is not supported: use \
                         --exclusive for whole nodes, or drop it"
                    ));
                }
            },
            _ => {
                let v = value();
                ignored.push(as_written(w, &inline, &opt, v));
                None
            }
        };
        if let Some((flag, v)) = berth {
            out.push(flag.to_string());
            out.extend(v);
        }
    }
    Ok((out, ignored))
}

/// The path template of `#SBATCH --output`/`--error`, its patterns checked here so that the
/// error names the directive (and the script its line).
fn output_file(opt: &str, v: Option<String>) -> Result<String, String> {
    let v = v.ok_or_else(|| format!("#SBATCH {opt} needs a file name, e.g. {opt}=%x-%j.out"))?;
    berth_model::output::Template::parse(&v).map_err(|e| format!("#SBATCH {opt}={v}: {e}"))?;
    Ok(batch_job_step(&v))
}

/// `%J` (`jobid.stepid`) in a batch script's output name is the job id alone, as sbatch writes
/// it (`-o x-%J.out` is `x-14.out`): the batch script is no step. `%%J` stays as it is.
fn batch_job_step(template: &str) -> String {
    let mut out = String::with_capacity(template.len());
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        if c != '%' {
            continue;
        }
        if chars.peek() == Some(&'%') {
            out.extend(chars.next());
            continue;
        }
        // `%5J`: the width stays.
        while let Some(d) = chars.next_if(char::is_ascii_digit) {
            out.push(d);
        }
        if let Some(code) = chars.next() {
            out.push(if code == 'J' { 'j' } else { code });
        }
    }
    out
}

/// Whether `--mem` (with its unit) asks for no amount: Slurm's "all of the node's memory".
fn whole_node_mem(v: &str) -> bool {
    let digits = v.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    !digits.is_empty() && digits.bytes().all(|b| b == b'0')
}

/// `--open-mode`: Slurm reads the first letter (`a`ppend, `t`runcate).
fn open_mode(v: Option<String>) -> Result<String, String> {
    let v = v.unwrap_or_default();
    match v.chars().next().map(|c| c.to_ascii_lowercase()) {
        Some('a') => Ok("append".into()),
        Some('t') => Ok("truncate".into()),
        _ => Err(format!("invalid #SBATCH --open-mode value `{v}`: use append or truncate")),
    }
}

/// What to tell the user about an option [`translate`] did not honour, when it is one that
/// scripts and tools write as a matter of course and that changes nothing about how the job
/// runs; `None` for the others, which are worth a warning.
pub fn note(option: &str) -> Option<&'static str> {
    match option.split(['=', ' ']).next().unwrap_or(option) {
        "--mail-type" | "--mail-user" => {
            Some("berth sends no mail: follow the job with `berth wait JOB` (its exit code) or `berth ps --watch`")
        }
        "--wckey" | "--comment" => Some("accepted for accounting tools; berth does not keep it"),
        _ => None,
    }
}

/// An ignored option as the user wrote it, for the warning.
fn as_written(word: &str, inline: &Option<String>, opt: &str, value: Option<String>) -> String {
    match (inline, value) {
        (Some(_), _) => word.to_string(),
        (None, Some(v)) => format!("{opt} {v}"),
        (None, None) => opt.to_string(),
    }
}

/// Slurm reads a bare `--mem` number as MiB; berth wants a unit, so add Slurm's.
fn slurm_mem(v: &str) -> String {
    if !v.is_empty() && v.chars().all(|c| c.is_ascii_digit()) { format!("{v}M") } else { v.to_string() }
}

/// The GPU type (lowercase) and count of `--gres=gpu[:type][:N]` (other resources: `None`),
/// or of `--gpus`, `--gpus-per-node` and `--gpus-per-task` (`[type:]N`).
fn gpu_request(opt: &str, v: &str) -> Option<(Option<String>, String)> {
    let lower = |t: &str| Some(t.to_ascii_lowercase());
    if opt == "--gres" {
        let gpu = v.split(',').find(|g| g.starts_with("gpu"))?;
        let parts: Vec<&str> = gpu.split(':').collect();
        if parts[0] != "gpu" {
            return None;
        }
        let digits = |n: &str| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
        return Some(match parts[1..] {
            [] => (None, "1".into()),
            [n] if digits(n) => (None, n.into()),
            [t] => (lower(t), "1".into()),
            [t, n, ..] => (lower(t), n.into()),
        });
    }
    Some(match v.rsplit_once(':') {
        Some((t, n)) => (lower(t), n.to_string()),
        None => (None, v.to_string()),
    })
}

/// Slurm time (`minutes`, `M:S`, `H:M:S`, `D-H`, `D-H:M`, `D-H:M:S`) in berth's form (`30m`,
/// `1d2h3m4s`), with no arithmetic here: berth's parser computes the value exactly and refuses
/// one past its maximum naming it. A value Slurm would not read is passed through for berth's
/// own parser (`1h30m`) to judge.
fn slurm_time(v: &str) -> String {
    fn nums(s: &str) -> Option<Vec<&str>> {
        let parts: Vec<&str> = s.split(':').collect();
        parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())).then_some(parts)
    }
    let units =
        |parts: &[&str], names: &[&str]| parts.iter().zip(names).map(|(p, u)| format!("{p}{u}")).collect::<String>();
    let t = match v.split_once('-') {
        Some((d, rest)) if !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()) => {
            nums(rest).and_then(|p| (1..=3).contains(&p.len()).then(|| format!("{d}d{}", units(&p, &["h", "m", "s"]))))
        }
        Some(_) => None,
        None => nums(v).and_then(|p| match p.len() {
            1 => Some(units(&p, &["m"])),
            2 => Some(units(&p, &["m", "s"])),
            3 => Some(units(&p, &["h", "m", "s"])),
            _ => None,
        }),
    };
    t.unwrap_or_else(|| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_zero_is_the_whole_node_and_percent_capital_j_the_job_id() {
        let mut t = Tasks::default();
        let w = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
        assert_eq!(translate(&w("--mem=0"), &mut t).unwrap().0, ["--exclusive"]);
        assert_eq!(translate(&w("--exclusive --mem 0G"), &mut t).unwrap().0, ["--exclusive"], "once");
        assert_eq!(translate(&w("--mem=0 --exclusive"), &mut t).unwrap().0, ["--exclusive"], "once");
        assert_eq!(translate(&w("--mem=100"), &mut t).unwrap().0, ["--mem", "100M"]);
        assert_eq!(translate(&w("-o x-%J.out"), &mut t).unwrap().0, ["--output-file", "x-%j.out"]);
        assert_eq!(batch_job_step("%x-%5J-%%J.%j"), "%x-%5j-%%J.%j");
    }

    #[test]
    fn command_line_task_options_merge_with_the_scripts() {
        let tasks = |line: &str| {
            let mut t = Tasks::default();
            translate(&line.split_whitespace().map(str::to_string).collect::<Vec<_>>(), &mut t).unwrap();
            t
        };
        let merged = |script: &str, line: &str| tasks(script).overlay(tasks(line)).flags().unwrap().join(" ");
        assert_eq!(merged("--ntasks-per-node=2", "-c 4"), "--tasks-per-node 2 --cpus 8 --env SLURM_CPUS_PER_TASK=4");
        assert_eq!(
            merged("--ntasks-per-node=2 -c 3", "-c 4"),
            "--tasks-per-node 2 --cpus 8 --env SLURM_CPUS_PER_TASK=4",
            "the command line wins"
        );
        assert_eq!(merged("-N 2 --ntasks=4", "-c 2"), "--tasks-per-node 2 --cpus 4 --env SLURM_CPUS_PER_TASK=2");
        assert_eq!(merged("-N 2 --ntasks=4", "-N 4"), "--tasks-per-node 1 --cpus 1");
        assert_eq!(merged("--gpus-per-task=1 --mem-per-cpu=1G", "--ntasks-per-node=4"), {
            format!("--tasks-per-node 4 --cpus 4 --mem {}B --gpus 4 --gpus-per-task 1", 4u64 << 30)
        });
        assert_eq!(merged("", "-c 2"), "--cpus 2 --env SLURM_CPUS_PER_TASK=2");
        assert!(tasks("-N 2 --ntasks=3").overlay(Tasks::default()).flags().is_err());
    }

    /// The flags of one directive line, task directives combined.
    fn all(s: &str) -> Result<Vec<String>, String> {
        let mut tasks = Tasks::default();
        let (mut out, _) = translate(&shell_words::split(s).unwrap(), &mut tasks)?;
        out.extend(tasks.flags()?);
        Ok(out)
    }

    #[test]
    fn task_directives_make_kernels() {
        assert_eq!(all("-c4").unwrap(), ["--cpus", "4", "--env", "SLURM_CPUS_PER_TASK=4"]);
        assert_eq!(
            all("--nodes=2 --ntasks-per-node=4").unwrap(),
            ["--nodes", "2", "--tasks-per-node", "4", "--cpus", "4"]
        );
        assert_eq!(
            all("-N 2 -n 8 -c 2").unwrap(),
            ["--nodes", "2", "--tasks-per-node", "4", "--cpus", "8", "--env", "SLURM_CPUS_PER_TASK=2"]
        );
        assert_eq!(all("-n 3").unwrap(), ["--tasks-per-node", "3", "--cpus", "3"]);
        assert_eq!(
            all("--ntasks-per-node 2 --cpus-per-task=3 --mem-per-cpu=1G").unwrap(),
            [
                "--tasks-per-node",
                "2",
                "--cpus",
                "6",
                "--mem",
                &format!("{}B", 6u64 << 30),
                "--env",
                "SLURM_CPUS_PER_TASK=3"
            ]
        );
        assert_eq!(all("--mem-per-cpu=100").unwrap(), ["--mem", &format!("{}B", 100u64 << 20)]);
        assert_eq!(
            all("--ntasks-per-node=4 --gpus-per-task=a100:1").unwrap(),
            [
                "--tasks-per-node",
                "4",
                "--cpus",
                "4",
                "--gpus",
                "4",
                "--gpus-per-task",
                "1",
                "--constraint",
                "gpu-type=a100"
            ]
        );
        let e = all("--nodes=2 --ntasks=5").unwrap_err();
        assert!(e.contains("--ntasks=5") && e.contains("--nodes=2") && e.contains("--ntasks-per-node"), "{e}");
        assert!(all("-N 4 -n 2").unwrap_err().contains("does not split evenly"));
        assert!(all("-n zero").unwrap_err().contains("invalid #SBATCH -n value `zero`"));
        assert!(all("--ntasks=0").unwrap_err().contains("at least 1"));
        assert!(all("--ntasks-per-node=5000").unwrap_err().contains("at most 1024"));
        assert!(all("--mem-per-cpu=lots").unwrap_err().contains("--mem-per-cpu"));
        let (out, tasks) = (all("--nodes 3").unwrap(), Tasks::default());
        assert_eq!(out, ["--nodes", "3"], "no task directive: no task flags");
        assert!(tasks.flags().unwrap().is_empty());
    }

    #[test]
    fn sbatch_translation_details() {
        let w = |s: &str| shell_words::split(s).unwrap();
        let translate = |w: &[String]| translate(w, &mut Tasks::default()).unwrap();
        assert_eq!(translate(&w("--gres=gpu:1")).0, ["--gpus", "1"]);
        assert_eq!(all("--gpus=v100:2").unwrap(), ["--gpus", "2", "--constraint", "gpu-type=v100"]);
        assert_eq!(translate(&w("--gres=nvme:1")).1, ["--gres=nvme:1"]);
        assert_eq!(translate(&w("-J name --requeue")).0, ["--name", "name", "--requeue"]);
        assert_eq!(translate(&w("-N 2-4")).0, ["--nodes", "2"]);
        assert_eq!(translate(&w("--account=vision")).0, ["--project", "vision"]);
        assert_eq!(translate(&w("-A vision")).0, ["--project", "vision"]);
        assert_eq!(
            translate(&w("-d afterok:3 --begin=now+1hour")).0,
            ["--dependency", "afterok:3", "--begin", "now+1hour"]
        );
        assert_eq!(translate(&w("--export=NONE -D /scratch/run")).0, ["--export", "NONE", "--workdir", "/scratch/run"]);
        assert_eq!(
            translate(&w("-o out/%x-%j.out --error=%A_%5a.err --open-mode=Append")),
            (words(&["--output-file", "out/%x-%j.out", "--error-file", "%A_%5a.err", "--open-mode", "append"]), vec![])
        );
        assert_eq!(translate(&w("-eerr.txt --open-mode t")).0, ["--error-file", "err.txt", "--open-mode", "truncate"]);
        assert_eq!(
            all("-C a100&ib --exclusive -q high").unwrap(),
            ["--exclusive", "--qos", "high", "--constraint", "a100&ib"]
        );
        assert_eq!(all("--constraint=gpu=a100 --qos=low").unwrap(), ["--qos", "low", "--constraint", "gpu=a100"]);
        let e = super::translate(&w("--exclusive=user"), &mut Tasks::default()).unwrap_err();
        assert!(e.contains("--exclusive=user") && e.contains("not supported"), "{e}");
        let (out, ignored) = translate(&w("--mail-type=ALL --mail-user me@lab.org --wckey=x --comment hi --foo=1"));
        assert!(out.is_empty());
        let notes: Vec<bool> = ignored.iter().map(|o| note(o).is_some()).collect();
        assert_eq!(notes, [true, true, true, true, false], "{ignored:?}");
        assert!(note("--mail-type=ALL").unwrap().contains("berth wait JOB"));
        assert_eq!(slurm_time("30"), "30m");
        assert_eq!(slurm_time("10:30"), "10m30s");
        assert_eq!(slurm_time("1:02:03"), "1h02m03s");
        assert_eq!(slurm_time("2-12"), "2d12h");
        assert_eq!(slurm_time("2-12:30:05"), "2d12h30m05s");
        assert_eq!(slurm_time("1h"), "1h");
        let parse = |v: &str| berth_model::parse_duration(&slurm_time(v));
        assert_eq!(parse("2-12").unwrap(), 2 * 86400 + 12 * 3600);
        assert_eq!(parse("10:30").unwrap(), 630);
        assert_eq!(slurm_mem("4G"), "4G");
    }

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn sbatch_gpus_is_the_jobs_total_not_each_nodes() {
        // `-N 2 --gpus=2` gave each node 2 GPUs, 4 in all, where Slurm gives the job 2.
        assert_eq!(all("-N 2 --gpus=2").unwrap(), ["--nodes", "2", "--gpus", "1"]);
        assert_eq!(
            all("--gpus=4 --nodes=2 -G a100:4").unwrap(),
            ["--nodes", "2", "--gpus", "2", "--constraint", "gpu-type=a100"]
        );
        assert_eq!(all("-G 3").unwrap(), ["--gpus", "3"], "one node: all of them");
        assert_eq!(all("--gpus=0.5").unwrap(), ["--gpus", "0.5"], "berth's fractions on one node");
        let e = all("-N 2 --gpus=3").unwrap_err();
        assert!(e.contains("--gpus=3") && e.contains("--nodes=2") && e.contains("--gpus-per-node"), "{e}");
        assert_eq!(all("-N 2 --gpus-per-node=2").unwrap(), ["--nodes", "2", "--gpus", "2"], "per node as it says");
        assert_eq!(all("-N 2 --gres=gpu:2").unwrap(), ["--nodes", "2", "--gpus", "2"], "--gres is per node");
    }

    #[test]
    fn bad_output_directives_name_the_pattern() {
        let e = all("--output=logs/%x-%q.out").unwrap_err();
        assert!(e.starts_with("#SBATCH --output=logs/%x-%q.out: ") && e.contains("unknown pattern `%q`"), "{e}");
        assert!(e.contains("%j (job id)"), "the known patterns are listed: {e}");
        assert!(all("-e").unwrap_err().contains("#SBATCH -e needs a file name"));
        assert!(all("--open-mode=sometimes").unwrap_err().contains("invalid #SBATCH --open-mode value `sometimes`"));
    }

    #[test]
    fn an_sbatch_time_past_the_maximum_is_refused_not_wrapped() {
        // 307445734561825861 minutes wrapped to 44 s when this module multiplied in u64.
        for t in ["307445734561825861", "213503982334602-0", "1-307445734561825861:00:00"] {
            let e = berth_model::parse_duration(&slurm_time(t)).unwrap_err().to_string();
            assert!(e.contains("maximum, 36500d"), "{t}: {e}");
        }
    }

    /// A GPU type in any GPU option becomes the feature `gpu-type=TYPE`, joined to the
    /// script's constraint; it used to be dropped, the job placed on any GPU.
    #[test]
    fn a_gpu_type_is_a_feature_joined_to_the_constraint() {
        assert_eq!(all("--gres=gpu:A100:2").unwrap(), ["--gpus", "2", "--constraint", "gpu-type=a100"]);
        assert_eq!(all("--gres=gpu:h100").unwrap(), ["--gpus", "1", "--constraint", "gpu-type=h100"]);
        assert_eq!(all("--gres=gpu:2").unwrap(), ["--gpus", "2"], "no type, no feature");
        assert_eq!(all("--gpus-per-node=l40s:1").unwrap(), ["--gpus", "1", "--constraint", "gpu-type=l40s"]);
        assert_eq!(
            all("-C ib --gres=gpu:a100:1").unwrap(),
            ["--gpus", "1", "--constraint", "ib&gpu-type=a100"],
            "the type joins the script's features"
        );
        let e = all("-C 'a|b' --gpus=a100:1").unwrap_err();
        assert!(
            e.contains("cannot join a GPU type to alternatives") && e.contains("a&gpu-type=a100|b&gpu-type=a100"),
            "{e}"
        );
        assert!(all("--gpus=a%b:1").unwrap_err().contains("invalid GPU type `a%b`"));
    }
}
