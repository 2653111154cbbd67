//! Slurm's placement options from the `berth` binary: `--constraint` (node features: the
//! nodes' labels), `--exclusive` (whole nodes), `--qos` (a priority from the manager's config)
//! and `--mail-*` (accepted with a note), each from `#SBATCH` lines, flags or both.

mod support;

use std::path::{Path, PathBuf};

use support::{Berth, shared_tempdir, text};

/// Writes a batch script into the directory jobs are submitted from; returns its path.
fn script(b: &Berth, name: &str, body: &str) -> PathBuf {
    let path = b.home.path().join("submit").join(name);
    std::fs::write(&path, body).unwrap();
    path
}

/// `berth submit -o json ARGS...` that must succeed: the job id and what it printed on stderr.
fn submit(b: &Berth, args: &[&str]) -> (i64, String) {
    let mut a = vec!["submit", "-o", "json"];
    a.extend(args);
    let o = b.cli(&a);
    assert!(o.status.success(), "berth {a:?} failed: {}", text(&o.stderr));
    let id = serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["id"].as_i64().expect("job id");
    (id, text(&o.stderr))
}

/// `berth ARGS...` that must fail with `code`: its stderr.
fn refused(b: &Berth, args: &[&str], code: i32) -> String {
    let o = b.cli(args);
    assert_eq!(o.status.code(), Some(code), "berth {args:?}: {}{}", text(&o.stdout), text(&o.stderr));
    text(&o.stderr)
}

/// A job script that runs until `gate` exists.
fn gated(gate: &Path) -> String {
    format!("while [ ! -e {} ]; do sleep 0.05; done", gate.display())
}

#[test]
fn a_constraint_lands_on_the_node_that_offers_it_and_an_impossible_one_is_refused() {
    let b =
        Berth::cluster("", &[("n1", &["--label", "gpu=v100"]), ("n2", &["--label", "a100=yes", "--label", "ib=hdr"])]);
    let path = script(
        &b,
        "feat.sh",
        "#!/bin/sh\n#SBATCH --constraint=a100&ib\n#SBATCH --mail-type=ALL\n#SBATCH --mail-user=me@lab.example\n\
         #SBATCH --cpus-per-task=1 --mem=32\necho ran\n",
    );
    let (id, stderr) = submit(&b, &[path.to_str().unwrap()]);
    assert!(
        stderr.contains("note: feat.sh:3: #SBATCH --mail-type=ALL: berth sends no mail")
            && stderr.contains("berth wait JOB")
            && !stderr.contains("warning"),
        "{stderr}"
    );
    let done = b.wait_state(id, "SUCCEEDED");
    assert_eq!(done["job"]["nodes"], serde_json::json!(["n2"]), "{done:#}");
    assert_eq!(done["spec"]["constraint"], "a100&ib");
    assert!(b.ok(&["show", &id.to_string()]).contains("a100&ib (node features)"));

    // A whole label is a feature too, and `|` takes any of several.
    let (id, _) = submit(&b, &["--constraint", "gpu=v100|h100", "--cpus", "0.1", "--mem", "32MiB", "--", "true"]);
    assert_eq!(b.wait_state(id, "SUCCEEDED")["job"]["nodes"], serde_json::json!(["n1"]));

    // `berth nodes` shows what each node offers.
    let table = b.ok(&["nodes"]);
    assert!(table.contains("FEATURES") && table.contains("a100=yes,ib=hdr") && table.contains("gpu=v100"), "{table}");

    // No node offers it: refused at submit (as Slurm does), naming what the nodes have.
    let e = refused(&b, &["submit", "--constraint", "h100", "--", "true"], 1);
    assert!(
        e.contains(
            "no node in queue default offers the features h100 (--constraint): its nodes' labels are \
             a100=yes, gpu=v100, ib=hdr"
        ),
        "{e}"
    );
    // The rarer Slurm forms are refused with what to write instead, on the command line (a
    // usage error) and in a script (naming its line).
    let e = refused(&b, &["submit", "--constraint", "a100*2", "--", "true"], 2);
    assert!(e.contains("node counts per feature (`a*2`) are not supported"), "{e}");
    let path = script(&b, "brackets.sh", "#!/bin/sh\n#SBATCH -C [a100|v100]\ntrue\n");
    let e = refused(&b, &["submit", path.to_str().unwrap()], 1);
    assert!(e.contains("brackets.sh:2") && e.contains("matching OR"), "{e}");
}

/// A GPU type (`--gres=gpu:a100:1`, `--gpus=fake:1`) is the node feature `gpu-type=TYPE`:
/// an admin's `gpu-type` label, or one the agent derives from its GPUs' model names (the fake
/// GPUs are `Fake GPU`: `fake`). It used to be dropped, the job placed on any GPU.
#[test]
fn a_gpu_type_lands_on_a_node_with_that_type_and_an_absent_one_is_refused() {
    let b =
        Berth::cluster("", &[("n1", &["--fake-gpus", "1"]), ("n2", &["--fake-gpus", "1", "--label", "gpu-type=a100"])]);
    let table = b.ok(&["nodes"]);
    assert!(table.contains("gpu-type=fake") && table.contains("gpu-type=a100"), "{table}");
    for (gres, node) in [("--gres=gpu:A100:1", "n2"), ("--gpus=fake:1", "n1")] {
        let path =
            script(&b, "typed.sh", &format!("#!/bin/sh\n#SBATCH {gres} --mem=32\nnvidia-smi -L 2>/dev/null; true\n"));
        let (id, _) = submit(&b, &[path.to_str().unwrap()]);
        let done = b.wait_state(id, "SUCCEEDED");
        assert_eq!(done["job"]["nodes"], serde_json::json!([node]), "{gres}: {done:#}");
        assert_eq!(done["job"]["gpu_milli"], 1000, "{gres}");
    }
    let path = script(&b, "h100.sh", "#!/bin/sh\n#SBATCH --gres=gpu:h100:1\ntrue\n");
    let e = refused(&b, &["submit", path.to_str().unwrap()], 1);
    assert!(e.contains("offers the features gpu-type=h100 (--constraint)") && e.contains("gpu-type=a100"), "{e}");
}

#[test]
fn an_exclusive_job_gets_the_whole_node_and_the_next_job_waits_for_it() {
    let b = Berth::up(&["--fake-gpus", "2"]);
    let node = &b.json(&["nodes"])[0];
    let dir = shared_tempdir();
    let gate = dir.path().join("go");
    let path =
        script(&b, "whole.sh", &format!("#!/bin/sh\n#SBATCH --exclusive\n#SBATCH -c 1 --mem=32\n{}\n", gated(&gate)));
    let (whole, _) = submit(&b, &[path.to_str().unwrap()]);
    let running = b.wait_state(whole, "RUNNING");
    let binding = &running["kernels"][0]["binding"];
    assert_eq!(binding["cpus"].as_array().unwrap().len() as u64, node["cpus_total"].as_u64().unwrap(), "{running:#}");
    assert_eq!(binding["mem_bytes"], node["mem_total"], "all of the node's memory: {running:#}");
    let gpus: Vec<u64> = binding["gpus"].as_array().unwrap().iter().map(|g| g["milli"].as_u64().unwrap()).collect();
    assert_eq!(gpus, [1000, 1000], "every GPU, whole, though it asked for none: {running:#}");
    assert_eq!(running["spec"]["exclusive"], true);

    // The smallest job does not share the node while it runs.
    let (small, _) = submit(&b, &["--cpus", "0.1", "--mem", "32MiB", "--", "true"]);
    let j = b.wait_job(small, "a resources reason", |j| j["job"]["pending_reason"]["kind"] == "resources");
    let why = j["job"]["pending_reason"]["message"].as_str().unwrap();
    assert!(why.starts_with("resources: ") && why.contains("0 free"), "{why}");
    assert_eq!(b.state(whole), "RUNNING");

    std::fs::write(&gate, "").unwrap();
    let w = b.wait_state(whole, "SUCCEEDED");
    let s = b.wait_state(small, "SUCCEEDED");
    let at = |j: &serde_json::Value, f: &str| j["job"][f].as_str().unwrap().parse::<jiff::Timestamp>().unwrap();
    assert!(at(&s, "started_at") >= at(&w, "ended_at"), "the small job started beside the exclusive one");

    // Only whole nodes: Slurm's sharing variants are refused, naming the line.
    let path = script(&b, "user.sh", "#!/bin/sh\n#SBATCH --exclusive=user\ntrue\n");
    let e = refused(&b, &["submit", path.to_str().unwrap()], 1);
    assert!(e.contains("user.sh:2") && e.contains("--exclusive=user") && e.contains("not supported"), "{e}");
}

#[test]
fn a_qos_from_the_config_file_sets_the_priority_and_an_unknown_one_is_refused() {
    let b =
        Berth::up_with_config("[qos.high]\npriority = 100\n\n[qos.low]\npriority = -5\nmax_time_limit = \"1h\"\n", &[]);
    let path = script(&b, "high.sh", "#!/bin/sh\n#SBATCH --qos=high\n#SBATCH -c 1 --mem=32\ntrue\n");
    let (id, _) = submit(&b, &[path.to_str().unwrap()]);
    let j = b.wait_state(id, "SUCCEEDED");
    assert_eq!((&j["job"]["priority"], &j["spec"]["qos"]), (&serde_json::json!(100), &serde_json::json!("high")));
    assert!(b.ok(&["show", &id.to_string()]).contains("qos:"), "berth show names the qos");

    let (id, _) = submit(&b, &["--qos", "low", "--cpus", "0.1", "--mem", "32MiB", "--", "true"]);
    let j = b.wait_state(id, "SUCCEEDED");
    assert_eq!(j["job"]["priority"], -5);
    assert_eq!(j["spec"]["time_limit_secs"], 3600, "the qos's maximum caps the default limit");

    let e = refused(&b, &["submit", "--qos", "urgent", "--", "true"], 1);
    assert!(e.contains("unknown qos `urgent`: the configured ones are high, low"), "{e}");
    let e = refused(&b, &["submit", "--qos", "low", "--time-limit", "2h", "--", "true"], 1);
    assert!(e.contains("above qos `low`'s maximum of 1h"), "{e}");
    let e = refused(&b, &["submit", "--qos", "high", "--priority", "3", "--", "true"], 1);
    assert!(e.contains("qos `high` sets the priority to 100: drop --priority 3"), "{e}");
    // A qos is still held to the user's priority cap.
    let me = j["job"]["user"].as_str().unwrap();
    b.ok(&["admin", "quota", "set", "--user", me, "--max-priority", "10"]);
    let e = refused(&b, &["submit", "--qos", "high", "--", "true"], 1);
    assert!(e.contains("priority 100 is above the maximum 10") && e.contains("qos `high` gives it"), "{e}");
}
