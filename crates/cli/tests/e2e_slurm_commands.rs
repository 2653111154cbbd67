//! Slurm's client commands, as tools written for Slurm call them: the berth binary under the
//! names `sbatch`, `squeue`, `scancel`, `sacct`, `sinfo`, `sacctmgr` and `sshare` (links made by
//! `berth install-slurm-commands`), their flags and their output, byte for byte where scripts
//! parse it; a job's view of the host's `/tmp`; and `berth history`, which shares sacct's fields.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use support::{Berth, base_cmd, text};

/// Makes the links in a fresh dir under the test's HOME and returns it.
fn links(b: &Berth) -> PathBuf {
    let dir = b.home.path().join("slurm-bin");
    let out = b.cli(&["install-slurm-commands", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Issue 41: into a directory that is not on PATH it succeeded without a word.
    let err = text(&out.stderr);
    assert!(
        err.contains("is not on your PATH") && err.contains(&format!("export PATH=\"{}:$PATH\"", dir.display())),
        "{err}"
    );
    dir
}

/// Runs `tool args...` through its link, as the admin, from the user's submit dir.
fn slurm(b: &Berth, dir: &Path, tool: &str, args: &[&str]) -> Output {
    command(b, dir, tool, args).stdin(Stdio::null()).output().expect("run the slurm command")
}

/// `tool args...` through its link, with the environment of [`base_cmd`].
fn command(b: &Berth, dir: &Path, tool: &str, args: &[&str]) -> Command {
    let base = base_cmd(b.home.path());
    let mut c = Command::new(dir.join(tool));
    c.current_dir(base.get_current_dir().unwrap());
    for (k, v) in base.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c.env_remove("SQUEUE_FORMAT").env_remove("SQUEUE_FORMAT2").env_remove("SACCT_FORMAT").env_remove("SINFO_FORMAT");
    c.args(args);
    c
}

/// Like [`slurm`], and it must succeed: its stdout.
fn ok(b: &Berth, dir: &Path, tool: &str, args: &[&str]) -> String {
    let out = slurm(b, dir, tool, args);
    assert!(out.status.success(), "{tool} {args:?}: {}\n{}", out.status, text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn slurm_commands_submit_list_account_and_cancel() {
    let b = Berth::up(&[]);
    let bin = links(&b);
    let cwd = b.home.path().join("submit");

    // sbatch: #SBATCH lines, the command line over them, --parsable prints the id alone
    std::fs::write(
        cwd.join("job.sh"),
        "#!/bin/sh\n#SBATCH --job-name=fromscript\n#SBATCH --mem=64M\n#SBATCH --output=out.log\necho hello \"$1\"\necho \"on $SLURMD_NODENAME\"\n",
    )
    .unwrap();
    let out = slurm(&b, &bin, "sbatch", &["--parsable", "-J", "override", "job.sh", "world"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let done: i64 = text(&out.stdout).trim().parse().unwrap_or_else(|_| panic!("{:?}", text(&out.stdout)));
    assert!(!text(&out.stderr).contains("ignoring"), "{}", text(&out.stderr));
    let job = b.wait_state(done, "SUCCEEDED");
    let log = std::fs::read_to_string(cwd.join("out.log")).unwrap();
    // Regression (issue 41): SLURMD_NODENAME was not set in jobs.
    let node = b.json(&["nodes"])[0]["name"].as_str().unwrap().to_string();
    assert_eq!(log, format!("hello world\non {node}\n"), "#SBATCH --output, relative to the submit dir");
    assert_eq!(job["job"]["name"], "override", "the command line wins over #SBATCH");
    assert_eq!(job["spec"]["resources"]["mem_bytes"], 64 << 20, "#SBATCH lines apply");
    assert_eq!(
        ok(&b, &bin, "sbatch", &["--help"]).lines().next(),
        Some("Usage: sbatch [OPTIONS...] [SCRIPT [ARGS...]]")
    );

    // --wrap, the Slurm way of printing the id, and a script that is not one
    let out = ok(&b, &bin, "sbatch", &["--wrap", "echo to stdout; echo to stderr >&2; exit 3"]);
    let failed: i64 = out.trim().strip_prefix("Submitted batch job ").expect(&out).parse().unwrap();
    b.wait_state(failed, "FAILED");
    // Regression (issue 41): without --output, output went only to berth's logs; Slurm (and
    // the tools that read its files) expect slurm-<id>.out in the submit dir, both streams.
    let file = std::fs::read_to_string(cwd.join(format!("slurm-{failed}.out"))).unwrap();
    assert_eq!(file, "to stdout\nto stderr\n");
    std::fs::write(cwd.join("plain.txt"), "echo no interpreter\n").unwrap();
    let out = slurm(&b, &bin, "sbatch", &["plain.txt"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with("sbatch: error: This does not look like a batch script"),
        "{}",
        text(&out.stderr)
    );

    // a script on stdin, named as Slurm names it
    let mut child = command(&b, &bin, "sbatch", &["--parsable"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"#!/bin/sh\necho from stdin\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let piped: i64 = text(&out.stdout).trim().parse().unwrap();
    assert_eq!(b.wait_state(piped, "SUCCEEDED")["job"]["name"], "sbatch");

    // squeue: Slurm's default layout, -o and -O
    let sleeper: i64 =
        ok(&b, &bin, "sbatch", &["--parsable", "-J", "sleeper", "--wrap", "sleep 600"]).trim().parse().unwrap();
    b.wait_state(sleeper, "RUNNING");
    let out = ok(&b, &bin, "squeue", &[]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)");
    let row = lines.iter().find(|l| l.contains("sleeper")).expect(&out);
    // Regression (issue 48): `admin`, berth's name for root, where the job runs as root.
    let me = text(&Command::new("id").arg("-un").output().unwrap().stdout).trim().to_string();
    assert!(row.starts_with(&format!("{sleeper:>18}   default  sleeper {me:>8}  R ")), "{out}");
    assert_eq!(ok(&b, &bin, "squeue", &["-h", "-o", "%i %t %j"]), format!("{sleeper} R sleeper\n"));
    let out = ok(&b, &bin, "squeue", &["-O", "JobID:10,Name:12,State"]);
    assert_eq!(
        out,
        format!("{:<10}{:<12}{:<20}\n{sleeper:<10}{:<12}{:<20}\n", "JOBID", "NAME", "STATE", "sleeper", "RUNNING")
    );
    let out = slurm(&b, &bin, "squeue", &["-h", "-t", "PD", "-o", "%i"]);
    assert_eq!(text(&out.stdout), "", "nothing pending");
    let out = slurm(&b, &bin, "squeue", &["-h", "-o", "%i|%y|"]);
    assert_eq!(text(&out.stdout), format!("{sleeper}||\n"), "an unknown code prints nothing");
    assert!(text(&out.stderr).contains("squeue: error: Invalid job format specification: y"), "{}", text(&out.stderr));

    let out = slurm(&b, &bin, "squeue", &["-j", "12_7"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).starts_with("squeue: error: task 12_7 has not started"), "{}", text(&out.stderr));

    // sinfo: the node, node-oriented, and the default layout's header
    let out = ok(&b, &bin, "sinfo", &["-N", "-h", "-o", "%N %t"]);
    let state = out.trim().strip_prefix(&format!("{node} ")).expect(&out).to_string();
    assert!(["mix", "alloc"].contains(&state.as_str()), "a node running a job: {out}");
    assert_eq!(ok(&b, &bin, "sinfo", &[]).lines().next(), Some("PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST"));

    // scancel: by name, silently; an unknown id as Slurm says it
    let out = slurm(&b, &bin, "scancel", &["-n", "sleeper"]);
    assert!(out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(), "{}", text(&out.stderr));
    b.wait_state(sleeper, "CANCELLED");
    let out = slurm(&b, &bin, "scancel", &["99999"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stderr), "scancel: error: Kill job error on job id 99999: Invalid job id specified\n");
    let out = slurm(&b, &bin, "scancel", &[]);
    assert_eq!(
        (out.status.code(), text(&out.stderr)),
        (Some(1), "scancel: error: No job identification provided\n".into())
    );
    let pending: i64 = ok(&b, &bin, "sbatch", &["--parsable", "--wrap", "sleep 600"]).trim().parse().unwrap();
    assert_eq!(ok(&b, &bin, "scancel", &[&pending.to_string()]), "");
    b.wait_state(pending, "CANCELLED");

    // sacct: what submitit asks, and the default table
    let ids = format!("{done},{failed},{sleeper}");
    let out = ok(&b, &bin, "sacct", &["--parsable2", "-o", "JobID,State,ExitCode", "-j", &ids]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[..3],
        ["JobID|State|ExitCode".to_string(), format!("{done}|COMPLETED|0:0"), format!("{failed}|FAILED|3:0")]
    );
    let cancelled: Vec<&str> = lines[3].split('|').collect();
    assert_eq!(cancelled[0], sleeper.to_string());
    assert_eq!(cancelled[1].split_whitespace().next(), Some("CANCELLED"), "{out}");
    let out = ok(&b, &bin, "sacct", &["-S", "now-1hours", "-X"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "JobID           JobName  Partition    Account  AllocCPUS      State ExitCode ");
    assert_eq!(lines[1], "------------ ---------- ---------- ---------- ---------- ---------- -------- ");
    // Regression (issue 41): Account was empty; a job without a project is its user's, as in
    // the job's SLURM_JOB_ACCOUNT.
    assert!(lines[2].starts_with(&format!("{done:<12}   override    default      admin")), "{out}");
    let out = ok(&b, &bin, "sacct", &["-S", "now-1hours", "-s", "F", "-n", "-p", "-o", "JobID,JobName"]);
    assert_eq!(out, format!("{failed}|wrap|\n"));
    let out = slurm(&b, &bin, "sacct", &["-o", "JobID,Bogus"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stderr), "sacct: error: Invalid field requested: \"Bogus\"\n");

    // Issue 48: what Snakemake's and Parsl's status checks run, long options by their
    // prefixes as getopt takes them, Slurm's configuration and version, and a dry run.
    let args = ["-X", "--parsable2", "--clusters", "all", "--noheader", "--format=JobIdRaw,State"];
    let window = ["--starttime", "2026-01-01T00:00", "--endtime", "now", "--name", "override"];
    assert_eq!(ok(&b, &bin, "sacct", &[&args[..], &window[..]].concat()), format!("{done}|COMPLETED\n"));
    let out = ok(&b, &bin, "sacct", &["-X", "--noheader", "--format=jobid,state%20", "--job", &done.to_string()]);
    assert_eq!(out.split_whitespace().collect::<Vec<_>>(), [done.to_string().as_str(), "COMPLETED"]);
    let out = slurm(&b, &bin, "sacct", &["--n", "x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("option '--n' is ambiguous; possibilities: '--name'"), "{}", text(&out.stderr));
    let config = ok(&b, &bin, "scontrol", &["show", "config"]);
    assert!(config.contains("\nClusterName             = berth\n"), "{config}");
    assert!(config.contains("\nMaxArraySize            = 100000\n"), "{config}");
    assert_eq!(ok(&b, &bin, "squeue", &["--version"]), "slurm 22.05.8\n");
    let out = slurm(&b, &bin, "sbatch", &["--test-only", "--wrap", "true"]);
    let said = text(&out.stderr);
    assert!(out.status.success() && out.stdout.is_empty(), "{said}");
    assert!(said.starts_with("sbatch: Job 0 to start at ") && said.contains("using 1 processors on nodes"), "{said}");
    assert!(said.trim_end().ends_with(&format!("{node} in partition default")), "{said}");
    let out = slurm(&b, &bin, "sbatch", &["--test-only", "--mem=100000G", "--wrap", "true"]);
    assert_eq!(out.status.code(), Some(1));
    // The manager's own check says why, where Slurm says "Requested node configuration is not available".
    let said = text(&out.stderr);
    assert!(said.starts_with("sbatch: error: Batch job submission failed: no node can ever run this"), "{said}");

    // berth history: the same window in berth's words
    let out = b.ok(&["history", "--since", "1h", "-o", "id,name,state,exit", "--state", "SUCCEEDED,FAILED"]);
    let rows: Vec<Vec<&str>> = out.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows[0], ["ID", "NAME", "STATE", "EXIT"]);
    assert_eq!(rows[1], [done.to_string().as_str(), "override", "SUCCEEDED", "0"]);
    assert_eq!(rows[2], [failed.to_string().as_str(), "wrap", "FAILED", "3"]);
    assert_eq!(rows[3], [piped.to_string().as_str(), "sbatch", "SUCCEEDED", "0"]);
    assert_eq!(rows.len(), 4, "{out}");
    let out = b.cli(&["history", "--since", "yesterdayish"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("bad time `yesterdayish`"), "{}", text(&out.stderr));
    let out = b.ok(&["history", "--since", "2026-01-01T00:00", "--json"]);
    let listed: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(listed.len(), 5, "every job of the test: {out}");

    // Issue 48: a job's private /tmp hid the submit dir when it lay under /tmp (as this test's
    // HOME does) and the job ran elsewhere (-D): both are bound into the job at their paths.
    let elsewhere = tempfile::tempdir_in("/tmp").unwrap();
    let y = elsewhere.path().display().to_string();
    let wrap = format!("ls {}/job.sh && test \"$SLURM_SUBMIT_DIR\" = \"{}\" && pwd", cwd.display(), cwd.display());
    let id: i64 =
        ok(&b, &bin, "sbatch", &["--parsable", "-D", &y, "-o", "seen.out", "--wrap", &wrap]).trim().parse().unwrap();
    let seen = b.wait_state(id, "SUCCEEDED");
    let out = std::fs::read_to_string(elsewhere.path().join("seen.out")).unwrap_or_default();
    assert_eq!(out, format!("{}/job.sh\n{y}\n", cwd.display()), "{seen:#}");

    // sacctmgr and sshare: the account checks Snakemake makes, for the caller's Unix name.
    let accounts = ok(&b, &bin, "sacctmgr", &["-n", "-s", "list", "user", &me, "format=account%256"]);
    assert_eq!(accounts.trim(), "admin", "the admin's personal account: {accounts:?}");
    assert_eq!(ok(&b, &bin, "sshare", &["-U", "--format", "Account%256", "--noheader"]).trim(), "admin");
    let out = ok(&b, &bin, "sacctmgr", &["show", "user", "-P"]);
    assert_eq!(out, "User|Def Acct|Admin\nadmin|admin|Administrator\n");

    // Issue 48: root appeared as `admin`, berth's user for it. Over the manager's socket root's
    // jobs run as root, and the Slurm commands name it so.
    let uid = text(&Command::new("id").arg("-u").output().unwrap().stdout).trim().to_string();
    let nobody = tempfile::tempdir().unwrap();
    let over_socket = |tool: &str, args: &[&str]| {
        let mut c = command(&b, &bin, tool, args);
        c.env("HOME", nobody.path()).env("BERTH_SOCKET", b.data.join("berth.sock")).current_dir(&y);
        let out = c.stdin(Stdio::null()).output().unwrap();
        assert!(out.status.success(), "{tool} {args:?}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    let wrap = "echo \"$SLURM_JOB_USER $SLURM_JOB_UID\"; sleep 600";
    let mine: i64 = over_socket("sbatch", &["--parsable", "-o", "user.out", "--wrap", wrap]).trim().parse().unwrap();
    b.wait_state(mine, "RUNNING");
    let listed = over_socket("squeue", &["-u", &me, "-h", "-o", "%i %u"]);
    assert!(listed.lines().any(|l| l == format!("{mine} {me}")), "squeue -u {me}: {listed}");
    assert_eq!(over_socket("scancel", &[&mine.to_string()]), "");
    b.wait_state(mine, "CANCELLED");
    let out = std::fs::read_to_string(elsewhere.path().join("user.out")).unwrap();
    assert_eq!(out, format!("{me} {uid}\n"), "SLURM_JOB_USER and SLURM_JOB_UID are the Unix user's");
    let acct = over_socket("sacct", &["-u", &me, "-X", "-n", "-P", "-o", "JobID,User", "-j", &mine.to_string()]);
    assert_eq!(acct, format!("{mine}|{me}\n"));
}

#[test]
fn install_slurm_commands_links_and_refuses_foreign_files() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("bin");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("squeue"), "#!/bin/sh\necho the real one\n").unwrap();
    let run =
        |args: &[&str]| base_cmd(home.path()).arg("install-slurm-commands").arg(&dir).args(args).output().unwrap();
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("squeue exists and is not a link to berth"), "{}", text(&out.stderr));
    assert!(!dir.join("sbatch").exists(), "nothing is linked when one name is refused");
    let out = run(&["--force"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.contains("replaced") && said.contains("/squeue ->") && said.contains("created"), "{said}");
    for name in ["sbatch", "squeue", "scancel", "sacct", "sinfo", "scontrol", "srun", "sacctmgr", "sshare"] {
        let target = std::fs::read_link(dir.join(name)).unwrap();
        assert_eq!(target.file_name().unwrap(), "berth", "{name}");
    }
    let out = run(&[]);
    assert!(out.status.success());
    assert_eq!(text(&out.stdout).matches("already links to berth").count(), 9);
    // the links answer as Slurm's commands
    let out = Command::new(dir.join("squeue")).arg("--help").output().unwrap();
    assert!(text(&out.stdout).contains("--noheader"), "{}", text(&out.stdout));
}
