//! `sbatch [OPTIONS] [SCRIPT [ARGS...]]`: Slurm's options (split by
//! `berth_slurm::sbatch_line`, translated by [`berth_slurm::sbatch::translate`]) over the
//! script's own directives, then the very path of `berth submit SCRIPT`
//! ([`crate::commands::submit::build_job`]). The script comes from a file, `--wrap "CMD"` or
//! stdin. Prints `Submitted batch job N`, or `N` with `--parsable`.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, anyhow, bail};
use berth_model::api::SubmitRequest;
use clap::Parser;

use berth_slurm::sbatch_line::{HELP, batch_script, not_given, split, wrapped};

use crate::commands::submit::{self, JobArgs};
use crate::commands::wait;

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
    let mut line = split(&words).map_err(anyhow::Error::msg)?;
    // Submits nothing: the submit's checks and where the job would start (`test_only`).
    let test = line.options.iter().any(|o| o == "--test-only");
    line.options.retain(|o| o != "--test-only");
    if line.help {
        println!("{HELP}");
        return Ok(ExitCode::SUCCESS);
    }
    if line.version {
        println!("{}", berth_slurm::version_line());
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
    if test {
        return test_only(&client, spec).await;
    }
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

/// `--test-only`: the checks a submit makes (the manager's preview), nothing submitted, then
/// Slurm's line (on standard error, as Slurm's): the job starts now on nodes of its queue with
/// room for it now, at a time berth cannot tell (`Unknown`) on those it fits otherwise. No
/// node of its queue that could ever hold it is Slurm's error, exit 1. berth gives a job its
/// id when it is submitted, so the line says job 0.
async fn test_only(client: &crate::client::Client, spec: berth_model::JobSpec) -> anyhow::Result<ExitCode> {
    use berth_model::api::NodeState;
    let r = spec.resources;
    let preview = client
        .preview(&SubmitRequest { spec: spec.clone() })
        .await
        .map_err(|e| anyhow!("Batch job submission failed: {e}"))?;
    let nodes = client.nodes().await?;
    let fits =
        |cpus: u64, mem: u64, gpus: u64| cpus * 1000 >= r.cpu_milli && mem >= r.mem_bytes && gpus * 1000 >= r.gpu_milli;
    let ever: Vec<_> = nodes
        .iter()
        .filter(|n| n.queue == preview.queue && fits(n.cpus_total.into(), n.mem_total, n.gpus.len() as u64))
        .collect();
    let wanted = spec.nodes.max(1) as usize;
    if ever.len() < wanted {
        bail!("Batch job submission failed: Requested node configuration is not available");
    }
    let now: Vec<_> = ever
        .iter()
        .copied()
        .filter(|n| n.connected && n.state == NodeState::Ready && (!spec.exclusive || n.running_jobs == 0))
        .filter(|n| {
            let free_cpus = u64::from(n.cpus_total.saturating_sub(n.cpus_used));
            fits(free_cpus, n.mem_total.saturating_sub(n.mem_used), n.gpus.len() as u64)
        })
        .collect();
    let (start, chosen) = if now.len() >= wanted {
        (berth_slurm::when::slurm_time(Some(jiff::Timestamp::now())), &now[..wanted])
    } else {
        ("Unknown".to_string(), &ever[..wanted])
    };
    let names: Vec<String> = chosen.iter().map(|n| n.name.clone()).collect();
    eprintln!(
        "sbatch: Job 0 to start at {start} using {} processors on nodes {} in partition {}",
        r.cpu_milli.div_ceil(1000) * wanted as u64,
        berth_slurm::format::hostlist(&names),
        preview.queue
    );
    Ok(ExitCode::SUCCESS)
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
