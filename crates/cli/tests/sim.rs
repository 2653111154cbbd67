//! `berth sim` through the real binary, on the tiny traces of crates/sched/tests/traces.

use std::process::Command;

fn berth(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_berth")).args(args).output().unwrap()
}

fn trace(name: &str) -> String {
    format!("{}/../sched/tests/traces/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn sim_prints_json_per_policy() {
    let t = trace("backfill4.swf");
    let out = berth(&[
        "sim",
        "--trace",
        &t,
        "--nodes",
        "1",
        "--cpus-per-node",
        "8",
        "--policy",
        "fifo,backfill,preempt",
        "-o",
        "json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["format"], "swf");
    assert_eq!(v["jobs"], 4);
    let r = v["results"].as_array().unwrap();
    assert_eq!(r.len(), 2);
    assert_eq!(r[0]["policy"], "fifo");
    assert_eq!(r[0]["jct_mean_s"], 185.0);
    assert_eq!(r[1]["policy"], "backfill");
    assert_eq!(r[1]["jct_mean_s"], 152.5);
    assert_eq!(r[1]["finished"], 4);
    assert_eq!(r[1]["resource"], "cpu");
    // The replay's own time is reported as a number (its value is the machine's, not asserted).
    assert!(r[1]["wall_s"].is_number(), "no wall_s in {}", r[1]);
    // No priorities in this trace: preempt is skipped with a reason.
    assert_eq!(v["skipped"][0]["policy"], "preempt");
}

#[test]
fn sim_prints_a_table() {
    let t = trace("fifo3.csv");
    let out = berth(&[
        "sim",
        "--trace",
        &t,
        "--nodes",
        "1",
        "--gpus-per-node",
        "1",
        "--cpus-per-node",
        "8",
        "--policy",
        "fifo,lifo",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].starts_with("POLICY"));
    assert!(lines[1].starts_with("fifo "));
    assert!(lines[2].starts_with("lifo "));
}

/// `--plot out.svg`: one self-contained SVG with a line per policy in each panel; other
/// extensions are refused before any replay.
#[test]
fn sim_plots_each_policy_into_an_svg() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("out.svg");
    let t = trace("backfill4.swf");
    let common = ["sim", "--trace", &t, "--nodes", "1", "--cpus-per-node", "8", "--policy", "fifo,backfill"];
    let out = berth(&[&common[..], &["--plot", svg.to_str().unwrap()]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg"), "{text:.200}");
    for label in ["Jobs waiting", "Cluster allocated", "Mean wait", "fifo", "backfill", "backfill4.swf"] {
        assert!(text.contains(label), "no `{label}` in the plot");
    }
    assert!(!text.contains("<script") && !text.contains("href=\"http"), "nothing to load or run");
    let png = dir.path().join("out.png");
    let out = berth(&[&common[..], &["--plot", png.to_str().unwrap()]].concat());
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("only SVG"), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!png.exists());
}

/// `--preempt-min-runtime` defaults to the checkpoint interval; a shorter one is allowed but
/// noted (a victim stopped before its first checkpoint loses its whole run).
#[test]
fn the_preemption_minimum_runtime_follows_the_checkpoint_interval() {
    let t = trace("preempt2.swf");
    let base = ["sim", "--trace", &t, "--nodes", "1", "--cpus-per-node", "8", "--policy", "preempt", "-o", "json"];
    let stops_of = |extra: &[&str]| {
        let out = berth(&[&base[..], extra].concat());
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let r = &v["results"][0];
        (r["preemptions"].as_u64().unwrap(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    // The express job arrives after 700 s of the low one's run: past 10 min, short of 30.
    let (stops, err) = stops_of(&["--checkpoint-interval", "30m"]);
    assert_eq!(stops, 0, "{err}");
    assert!(!err.contains("shorter than"), "{err}");
    let (stops, err) = stops_of(&["--checkpoint-interval", "30m", "--preempt-min-runtime", "10m"]);
    assert_eq!(stops, 1);
    assert!(err.contains("--preempt-min-runtime 10m is shorter than --checkpoint-interval 30m"), "{err}");
    let (stops, _) = stops_of(&[]);
    assert_eq!(stops, 1, "without checkpoints the minimum runtime stays 10m");
    let out = berth(&[&base[..], &["--preempt-min-runtime", "soon"]].concat());
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--preempt-min-runtime"));
}

#[test]
fn sim_reports_bad_input() {
    let t = trace("fifo3.csv");
    let base = ["sim", "--trace", &t, "--nodes", "1", "--gpus-per-node", "1", "--cpus-per-node", "8"];
    let out = berth(&[&base[..], &["--policy", "fifo,sjf"]].concat());
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown policy `sjf`"));
    let out = berth(&[
        "sim",
        "--trace",
        "/nonexistent/x.csv",
        "--nodes",
        "1",
        "--gpus-per-node",
        "1",
        "--cpus-per-node",
        "8",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot open trace /nonexistent/x.csv"));
    let out = berth(&[&base[..], &["--time-scale", "-1"]].concat());
    assert_eq!(out.status.code(), Some(2));
    let out = berth(&[
        "sim",
        "--trace",
        &trace("backfill4.swf"),
        "--nodes",
        "1",
        "--cpus-per-node",
        "8",
        "--gpus-per-node",
        "1",
        "--format",
        "philly",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 1") || err.contains("line 3"), "{err}");
}

/// The README's `berth sim` command, run as written from the repository's root (on the first
/// jobs only): the traces it names ship with the repository.
#[test]
fn the_readme_sim_command_runs_in_a_clone() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let start = readme.find("berth sim --trace").expect("the README shows a berth sim command");
    let mut command = String::new();
    for line in readme[start..].lines() {
        command.push_str(line.trim_end_matches('\\'));
        if !line.ends_with('\\') {
            break;
        }
    }
    let args: Vec<&str> = command.split_whitespace().skip(1).collect();
    // In a directory of its own that sees the repository's traces/, so the plot it draws
    // lands there and not in the clone.
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(root.join("traces").canonicalize().unwrap(), dir.path().join("traces")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(&args)
        .args(["--limit", "300"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "berth {command}: {}", String::from_utf8_lossy(&out.stderr));
    assert!(text.starts_with("POLICY"), "{text}");
    assert!(text.lines().nth(1).is_some_and(|l| l.starts_with("fifo ")), "{text}");
    if let Some(i) = args.iter().position(|a| *a == "--plot") {
        assert!(dir.path().join(args[i + 1]).metadata().is_ok_and(|m| m.len() > 1000), "the plot was drawn");
    }
}
