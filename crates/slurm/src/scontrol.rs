//! `scontrol`: the subcommands lab scripts and tools call. `show hostnames [LIST]` expands a
//! host list (`SLURM_JOB_NODELIST` without one), `show hostlist NAMES` compresses one (both
//! `berth_model::hostlist`), `show config` prints the keys tools read (`scontrol_config`),
//! `show job [ID]` prints a job in Slurm's `Key=Value` layout (`-o` on one line), `show
//! node`/`show partition` (`scontrol_nodes`). `requeue` stops a job and
//! queues it again ([`requeue_job`], `berth requeue`'s too); `hold`, `uhold` and `release`
//! hold a pending job or let it run (`berth hold`/`release`). What berth cannot do (`update`,
//! ...) is refused with the berth command that does it instead, exit 1.

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use berth_client::Client;
use berth_model::JobId;
use berth_model::api::{ErrorReason, JobDetail, JobListQuery};
use berth_model::hostlist;
use reqwest::StatusCode;

use crate::jobfields::{Field, value};
use crate::sacct::Sacct;
use crate::{Connect, Error, Result};

const HELP: &str = "\
Usage: scontrol [-o|--oneliner] COMMAND [ARGS...]

berth answers these scontrol commands:
  show hostnames [HOSTLIST]   one host name per line (default: $SLURM_JOB_NODELIST)
  show hostlist NAMES         NAMES (a,b,c or a host list) as one host list
  show config                 the configuration keys tools read (ClusterName, MaxArraySize...)
  show job [JOB_ID]           a job (all of yours without JOB_ID), Key=Value
  show node [NAME]            nodes; show partition [NAME]: queues
  requeue JOB_ID[,JOB_ID...]  stop running jobs and queue them again (a new attempt each)
  hold|uhold JOB_ID[,...]     keep pending jobs from starting (uhold: a user's hold)
  release JOB_ID[,JOB_ID...]  let held jobs run
  -o, --oneliner              one line per job
update and the rest are refused with the berth command to use.
See docs/slurm.md.";

/// Runs the scontrol command of `argv` (its own name first), printing to `out`.
pub async fn run(argv: Vec<OsString>, connect: &dyn Connect, out: &mut dyn Write) -> Result<ExitCode> {
    let words: Vec<String> = argv
        .into_iter()
        .skip(1)
        .map(|a| a.into_string().map_err(|a| Error::failed(format!("argument {a:?} is not valid UTF-8"))))
        .collect::<Result<_>>()?;
    let mut oneliner = false;
    let mut rest = Vec::new();
    let known = crate::getopt::slurm_entries(crate::Tool::Scontrol);
    for w in words {
        // `--one` is `--oneliner`, as getopt_long reads scontrol's options.
        let w = match w.strip_prefix("--").filter(|n| !n.is_empty() && !n.contains('=')) {
            Some(name) => crate::getopt::resolve(name, &known)
                .map_err(Error::Failed)?
                .map_or(w.clone(), |(_, full)| format!("--{full}")),
            None => w,
        };
        match w.as_str() {
            "-V" | "--version" => {
                writeln!(out, "{}", crate::version_line())?;
                return Ok(ExitCode::SUCCESS);
            }
            "-o" | "--oneliner" => oneliner = true,
            // Accepted, change nothing here.
            "-d" | "--details" | "-Q" | "--quiet" | "-v" | "--verbose" | "-a" | "--all" => {}
            "-h" | "--help" | "--usage" => {
                writeln!(out, "{HELP}")?;
                return Ok(ExitCode::SUCCESS);
            }
            _ => rest.push(w),
        }
    }
    let Some(command) = rest.first().map(|c| c.to_ascii_lowercase()) else {
        writeln!(out, "{HELP}")?;
        return Ok(ExitCode::from(2));
    };
    let args = &rest[1..];
    match command.as_str() {
        "show" => show(args, oneliner, connect, out).await,
        "hold" | "uhold" | "release" => hold(&command, args, connect).await,
        "update" => Err(Error::failed(
            "update is not supported: a berth job's spec is fixed at submit; cancel it (scancel) and submit it again \
             with the new options",
        )),
        "requeue" => requeue(args, connect).await,
        "requeuehold" => Err(Error::failed(
            "requeuehold is not supported: berth holds a job only for its dependency or --begin time; use \
             scontrol requeue, or cancel the job (scancel) and submit it again",
        )),
        "suspend" | "resume" => Err(Error::failed(format!("{command} is not supported: berth does not suspend jobs"))),
        other => Err(Error::failed(format!(
            "invalid keyword: {other} (berth's scontrol knows show, requeue, hold, uhold and release, and refuses update)"
        ))),
    }
}

/// `scontrol requeue JOBID[,JOBID...]`: each job stopped and queued again (its next run a
/// new attempt), in Slurm's words when one cannot be.
async fn requeue(args: &[String], connect: &dyn Connect) -> Result<ExitCode> {
    let ids: Vec<&str> = args.iter().flat_map(|a| a.split(',')).filter(|s| !s.is_empty()).collect();
    if ids.is_empty() {
        return Err(Error::failed("requeue what? scontrol requeue JOBID[,JOBID...]"));
    }
    let mut failed = false;
    for raw in ids {
        let Ok(id) = raw.parse::<berth_model::JobId>() else {
            eprintln!("scontrol: error: Invalid job id specified: {raw}");
            failed = true;
            continue;
        };
        if let Err(e) = requeue_job(connect, id).await {
            let why = match e.refused_status() {
                Some(StatusCode::NOT_FOUND) => "Invalid job id specified".to_string(),
                Some(StatusCode::FORBIDDEN) => "Access/permission denied".to_string(),
                _ => crate::error::chain(&e),
            };
            eprintln!("scontrol: error: Requeue of JobId={id} failed: {why}");
            failed = true;
        }
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// `scontrol hold|uhold|release JOBID[,JOBID...]`: each pending job held (an admin's hold for
/// `hold` by an admin, a user's otherwise) or released, in Slurm's words when one cannot be.
async fn hold(command: &str, args: &[String], connect: &dyn Connect) -> Result<ExitCode> {
    let ids: Vec<&str> = args.iter().flat_map(|a| a.split(',')).filter(|s| !s.is_empty()).collect();
    if ids.is_empty() {
        return Err(Error::failed(format!("{command} what? scontrol {command} JOBID[,JOBID...]")));
    }
    let client = connect()?;
    let mut failed = false;
    for raw in ids {
        let Ok(id) = raw.parse::<JobId>() else {
            eprintln!("scontrol: error: Invalid job id specified for job {raw}");
            failed = true;
            continue;
        };
        let done = match command {
            "release" => client.release(id).await.map(drop),
            // `hold` is the manager's default: an admin's for admins, a user's for users.
            "uhold" => client.hold(id, Some(berth_model::Hold::User)).await.map(drop),
            _ => client.hold(id, None).await.map(drop),
        };
        if let Err(e) = done {
            let why = match (e.refused_status(), e.refused_reason()) {
                (Some(StatusCode::NOT_FOUND), _) => "Invalid job id specified".to_string(),
                (Some(StatusCode::FORBIDDEN), _) => "Access/permission denied".to_string(),
                (_, Some(ErrorReason::JobNotPending | ErrorReason::JobEnded)) => {
                    "Job is no longer pending execution".to_string()
                }
                _ => crate::error::chain(&e),
            };
            eprintln!("scontrol: error: {why} for job {id}");
            failed = true;
        }
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// Stops job `id` and queues it again (`scontrol requeue`, `berth requeue`), as the job itself
/// when called from inside it (`scontrol requeue $SLURM_JOB_ID` in a checkpoint trap, on a
/// node that holds no user credentials): its step token is the credential there.
pub async fn requeue_job(connect: &dyn Connect, id: JobId) -> Result<()> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let inside = var("SLURM_JOB_ID").or_else(|| var("BERTH_JOB_ID")).and_then(|j| j.parse::<JobId>().ok());
    let client = match (inside == Some(id), var("BERTH_STEP_TOKEN"), var("BERTH_URL")) {
        (true, Some(token), Some(url)) => {
            Client::new(crate::step_credentials(url, token)).map_err(|source| Error::StepToken { source })?
        }
        _ => connect()?,
    };
    client.requeue(id).await?;
    Ok(())
}

async fn show(args: &[String], oneliner: bool, connect: &dyn Connect, out: &mut dyn Write) -> Result<ExitCode> {
    let Some(what) = args.first().map(|w| w.to_ascii_lowercase()) else {
        return Err(Error::failed("show what? scontrol show hostnames|hostlist|job"));
    };
    let arg = args.get(1).map(String::as_str);
    match what.as_str() {
        "hostnames" | "hostname" => {
            let list = match arg {
                Some(l) => l.to_string(),
                None => std::env::var("SLURM_JOB_NODELIST")
                    .map_err(|_| Error::failed("no host list given and SLURM_JOB_NODELIST is not set"))?,
            };
            for name in hostlist::expand(&list).map_err(hostlist_error)? {
                writeln!(out, "{name}")?;
            }
            Ok(ExitCode::SUCCESS)
        }
        "hostlist" | "hostlistsorted" => {
            let names =
                hostlist::expand(arg.ok_or_else(|| Error::failed(format!("show {what} needs a list of host names")))?)
                    .map_err(hostlist_error)?;
            let list = if what == "hostlist" { hostlist::compress(&names) } else { hostlist::compress_sorted(&names) };
            writeln!(out, "{list}")?;
            Ok(ExitCode::SUCCESS)
        }
        "config" | "configuration" => {
            out.write_all(crate::scontrol_config::render(jiff::Timestamp::now()).as_bytes())?;
            Ok(ExitCode::SUCCESS)
        }
        "job" | "jobs" | "jobid" => show_jobs(&connect()?, arg, oneliner, out).await,
        "node" | "nodes" => {
            crate::scontrol_nodes::show_nodes(&connect()?, arg, oneliner, out).await.map(|()| ExitCode::SUCCESS)
        }
        "partition" | "partitions" => {
            crate::scontrol_nodes::show_partitions(&connect()?, arg, oneliner, out).await.map(|()| ExitCode::SUCCESS)
        }
        other => Err(Error::failed(format!(
            "invalid entity: {other} for keyword: show (berth knows config, hostnames, hostlist, job, node, partition)"
        ))),
    }
}

async fn show_jobs(client: &Client, id: Option<&str>, oneliner: bool, out: &mut dyn Write) -> Result<ExitCode> {
    let ids = match id {
        Some(id) => {
            let refs =
                crate::job_ref::parse_list(id).map_err(|_| Error::failed(format!("invalid job id specified: {id}")))?;
            crate::job_ref::resolve(client, &refs).await.map_err(invalid_id)?
        }
        None => client.jobs(&JobListQuery::default()).await?.into_iter().map(|j| j.id).collect(),
    };
    if ids.is_empty() && id.is_none() {
        writeln!(out, "No jobs in the system")?;
    }
    let now = jiff::Timestamp::now();
    for (i, job) in ids.into_iter().enumerate() {
        let detail = client.job(job).await.map_err(|e| invalid_id(e.into()))?;
        if i > 0 && !oneliner {
            writeln!(out)?;
        }
        writeln!(out, "{}", render(&detail, now, oneliner))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// A job that does not exist, or that the caller may not see, as Slurm says it.
fn invalid_id(e: Error) -> Error {
    if e.refused_status() == Some(StatusCode::NOT_FOUND) {
        Error::failed("slurm_load_jobs error: Invalid job id specified")
    } else {
        e
    }
}

/// A host list that does not parse, in its own words.
fn hostlist_error(e: berth_model::hostlist::HostlistError) -> Error {
    Error::failed(e.to_string())
}

/// A job in Slurm's layout: lines of `Key=Value` pairs, indented, or all on one line.
pub fn render(d: &JobDetail, now: jiff::Timestamp, oneliner: bool) -> String {
    let j = &d.job;
    let v = |f: Field| value(f, j, now, &Sacct);
    let mut head = vec![format!("JobId={}", j.id)];
    if let Some(t) = j.array_task {
        head.push(format!("ArrayJobId={}", t.array_id));
        head.push(format!("ArrayTaskId={}", t.index));
    }
    head.push(format!("JobName={}", berth_model::output::job_name(j.name.as_deref(), j.id)));
    let user = match d.submitter {
        Some(u) => format!("{}({})", j.user, u.uid),
        None => j.user.clone(),
    };
    let (_, state) = crate::states::job_state(j);
    let workdir = d.spec.workdir.clone().unwrap_or_default();
    let (stdout, stderr) = output_paths(d);
    let lines: Vec<Vec<String>> = vec![
        head,
        vec![format!("UserId={user}"), format!("Account={}", j.project.as_deref().unwrap_or(&j.user))],
        vec![format!("Priority={}", j.priority), format!("Partition={}", j.queue)],
        vec![
            format!("JobState={state}"),
            format!("Reason={}", v(Field::Reason)),
            format!("Dependency={}", dependency(d.spec.dependency.as_ref(), j.pending_reason.as_ref().map(|r| r.kind))),
        ],
        vec![format!("Requeue={}", u8::from(d.spec.requeue)), format!("ExitCode={}", v(Field::Exit))],
        vec![format!("RunTime={}", v(Field::Elapsed)), format!("TimeLimit={}", v(Field::TimeLimit))],
        vec![format!("SubmitTime={}", v(Field::Submitted))],
        vec![format!("StartTime={}", v(Field::Started)), format!("EndTime={}", v(Field::Ended))],
        vec![format!(
            "NodeList={}",
            if j.nodes.is_empty() { "(null)".into() } else { crate::format::hostlist(&j.nodes) }
        )],
        vec![
            format!("NumNodes={}", v(Field::NodeCount)),
            format!("NumCPUs={}", v(Field::Cpus)),
            format!(
                "NumTasks={}",
                u64::from(crate::jobfields::node_count(j)) * u64::from(d.spec.tasks_per_node.max(1))
            ),
        ],
        vec![format!("TRES={}", v(Field::Tres))],
        vec![format!("Command={}", batch_command(&d.spec.command).unwrap_or_else(|| command(&d.spec.command)))],
        vec![format!("WorkDir={workdir}")],
        vec![format!("StdErr={stderr}")],
        vec![format!("StdOut={stdout}")],
    ];
    crate::scontrol_nodes::layout(&lines, oneliner)
}

/// Slurm's `Dependency=`: each condition with whether it still holds the job back
/// (`afterok:12(unfulfilled)`), `(failed)` once it never can be met, `(null)` without any
/// left to wait for (as Slurm clears them once met).
fn dependency(dep: Option<&berth_model::Dependency>, waits_for: Option<berth_model::PendingKind>) -> String {
    use berth_model::PendingKind;
    let Some(dep) = dep else { return "(null)".into() };
    let status = match waits_for {
        Some(PendingKind::Dependency) => "unfulfilled",
        Some(PendingKind::DependencyNeverSatisfied) => "failed",
        _ => return "(null)".into(),
    };
    let sep = if dep.any { "?" } else { "," };
    dep.conditions.iter().map(|c| format!("{c}({status})")).collect::<Vec<_>>().join(sep)
}

/// A batch script's `Command=`: the name it was submitted under (berth keeps its text, not its
/// path), `(null)` for `sbatch --wrap`'s, as Slurm shows; `None` for a command that is no
/// script (berth sends a script as `INTERPRETER -c TEXT NAME ARGS...`).
fn batch_command(words: &[String]) -> Option<String> {
    let at = words.windows(2).position(|w| w[0] == "-c" && w[1].contains('\n'))?;
    if words[at + 1].contains(crate::sbatch_line::WRAP_MARK) {
        return Some("(null)".into());
    }
    Some(words.get(at + 2).cloned().unwrap_or_else(|| "(script)".into()))
}

/// A command as one value: a script's text (a word with lines) stands as `(script)`.
fn command(words: &[String]) -> String {
    words.iter().map(|w| if w.contains('\n') { "(script)" } else { w.as_str() }).collect::<Vec<_>>().join(" ")
}

/// The first kernel's output and error files, as `--output`/`--error` name them; `(null)`
/// when a stream goes to berth's log (`berth logs`).
fn output_paths(d: &JobDetail) -> (String, String) {
    let j = &d.job;
    let name = berth_model::output::job_name(j.name.as_deref(), j.id);
    let c = berth_model::output::Context {
        job_id: j.id,
        array: j.array_task.map(|t| (t.array_id, t.index)),
        name: &name,
        user: &j.user,
        node: j.nodes.first().map(String::as_str).unwrap_or_default(),
        node_index: 0,
        task: 0,
        step: None,
    };
    let paths = d.spec.output.expand(&c).unwrap_or_default();
    let dir = std::path::Path::new(d.spec.workdir.as_deref().unwrap_or("/"));
    let show = |p: Option<String>| match p {
        Some(p) => berth_model::output::resolve(&p, dir).to_string_lossy().into_owned(),
        None => "(null)".into(),
    };
    (show(paths.stdout), show(paths.stderr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_is_the_scripts_name_and_dependency_slurms_text() {
        let words = |v: &[&str]| v.iter().map(|w| w.to_string()).collect::<Vec<_>>();
        let script = words(&["/bin/bash", "-c", "#!/bin/bash\necho hi\n", "train.sh", "--lr", "1"]);
        assert_eq!(batch_command(&script).as_deref(), Some("train.sh"));
        let wrap = crate::sbatch_line::wrapped("hostname");
        assert_eq!(batch_command(&words(&["/bin/sh", "-c", &wrap, "wrap"])).as_deref(), Some("(null)"));
        assert_eq!(batch_command(&words(&["python", "train.py"])), None);
        let dep: berth_model::Dependency = "afterok:12,afterany:13".parse().unwrap();
        let kind = berth_model::PendingKind::Dependency;
        assert_eq!(dependency(Some(&dep), Some(kind)), "afterok:12(unfulfilled),afterany:13(unfulfilled)");
        let never = berth_model::PendingKind::DependencyNeverSatisfied;
        assert_eq!(dependency(Some(&dep), Some(never)), "afterok:12(failed),afterany:13(failed)");
        assert_eq!(dependency(Some(&dep), None), "(null)", "met: Slurm clears it");
        assert_eq!(dependency(None, Some(kind)), "(null)");
    }
}
