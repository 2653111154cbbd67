//! A corpus of batch scripts as labs write them for Slurm (`tests/lab_scripts/`, listed in its
//! README), each run unchanged end to end through the real binary: submitted with the `sbatch`
//! link, `berth submit SCRIPT` or the lab's own driver scripts (which call `sbatch --parsable`
//! and chain the ids with `--dependency`), then checked for what a lab relies on: the state
//! and exit code, the nodes, CPUs, memory and GPUs the job got, the environment its tasks saw
//! (written to files by the scripts), the output files its patterns name, and no warning
//! about a directive berth supports.
//!
//! The scripts work in the directory they are submitted from, a copy of the corpus in a
//! `support::slurm_bin_dir()` that jobs can see (their /tmp is private), with berth, `srun`
//! and `sbatch` on the PATH they export.

mod support;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use support::{Berth, text};

/// Two GPU nodes in queue `gpu` (where the lab's GPU scripts ask to go), two fake GPUs each;
/// n1 offers the feature `a100`, and the manager knows qos `high`.
fn gpu_cluster() -> Berth {
    let b = Berth::cluster(
        "[qos.high]\npriority = 10\n",
        &[
            // Its admin names its GPUs' type, as gres.conf's `Type=a100` does (`--gres=gpu:a100:1`).
            ("n1", &["--queue", "gpu", "--fake-gpus", "2", "--label", "a100=yes", "--label", "gpu-type=a100"]),
            ("n2", &["--queue", "gpu", "--fake-gpus", "2"]),
        ],
    );
    b.ok(&["admin", "queue", "create", "gpu"]);
    b
}

/// A lab's working directory: the corpus copied into a directory jobs can write, with its
/// `logs/`, and berth's commands on the PATH.
struct Lab {
    b: Berth,
    _dir: tempfile::TempDir,
    bin: PathBuf,
    root: PathBuf,
}

/// A directory any job user may write (jobs of a root agent run as another uid).
fn open_dir(p: &Path) {
    std::fs::create_dir_all(p).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
}

impl Lab {
    fn new(b: Berth) -> Lab {
        let (dir, bin) = support::slurm_bin_dir();
        let root = dir.path().join("lab");
        open_dir(&root);
        let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/lab_scripts");
        for e in std::fs::read_dir(&corpus).unwrap() {
            let p = e.unwrap().path();
            std::fs::copy(&p, root.join(p.file_name().unwrap())).unwrap();
        }
        // sbatch opens the output files and creates no directory, as in Slurm.
        open_dir(&root.join("logs"));
        Lab { b, _dir: dir, bin, root }
    }

    /// `program` (a bare name is looked up on the PATH, berth's bin first) run in the lab
    /// with the test's credentials.
    fn cmd(&self, program: &str, args: &[&str]) -> Command {
        let mut c = support::base_cmd_at(Path::new(program), self.b.home.path());
        let path = format!("{}:{}", self.bin.display(), std::env::var("PATH").unwrap_or_default());
        c.env("PATH", path).env_remove("RUST_LOG").current_dir(&self.root).args(args);
        c.stdin(Stdio::null());
        c
    }

    fn run(&self, program: &str, args: &[&str]) -> Output {
        let o = self.cmd(program, args).output().unwrap();
        assert!(o.status.success(), "{program} {args:?}: {}\n{}", text(&o.stdout), text(&o.stderr));
        no_warning(&o);
        o
    }

    /// `sbatch --parsable ARGS...` → the job id.
    fn sbatch(&self, args: &[&str]) -> i64 {
        let mut a = vec!["--parsable"];
        a.extend(args);
        let o = self.run("sbatch", &a);
        text(&o.stdout).trim().parse().unwrap_or_else(|_| panic!("sbatch printed no id: {}", text(&o.stdout)))
    }

    /// `berth submit SCRIPT` → the job id and what it printed on stderr.
    fn submit(&self, script: &str) -> (i64, String) {
        let o = self.run(support::BIN, &["submit", "-o", "json", script]);
        let id = serde_json::from_slice::<Value>(&o.stdout).unwrap()["id"].as_i64().unwrap();
        (id, text(&o.stderr))
    }

    /// Runs a driver script of the lab's with bash → the job ids it printed.
    fn driver(&self, script: &str) -> Vec<i64> {
        let o = self.run("bash", &[script]);
        text(&o.stdout).split_whitespace().map(|w| w.parse().unwrap()).collect()
    }

    fn read(&self, rel: &str) -> String {
        let p = self.root.join(rel);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    /// The `KEY=value` lines of a file the job wrote.
    fn vars(&self, rel: &str) -> BTreeMap<String, String> {
        vars(&self.read(rel))
    }
}

fn vars(s: &str) -> BTreeMap<String, String> {
    s.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// Supported directives draw no warning (a note, for `--mail-*`, is fine).
fn no_warning(o: &Output) {
    let e = text(&o.stderr);
    assert!(!e.contains("warning") && !e.contains("ignoring"), "{e}");
}

/// The GPU uuids of kernel `k`'s binding, sorted.
fn gpus_of(job: &Value, k: usize) -> Vec<String> {
    let mut g: Vec<String> = job["kernels"][k]["binding"]["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["uuid"].as_str().unwrap().to_string())
        .collect();
    g.sort();
    g
}

fn sorted_list(csv: &str) -> Vec<String> {
    let mut v: Vec<String> = csv.split(',').map(str::to_string).collect();
    v.sort();
    v
}

fn ts(j: &Value, field: &str) -> jiff::Timestamp {
    j["job"][field].as_str().unwrap_or_else(|| panic!("no {field}: {j:#}")).parse().unwrap()
}

#[test]
fn a_ddp_launcher_runs_a_task_per_slot_on_both_nodes_with_their_ranks_and_gpus() {
    let lab = Lab::new(gpu_cluster());
    let id = lab.sbatch(&["train_ddp.sh"]);
    let done = lab.b.wait_state(id, "SUCCEEDED");
    assert_eq!(done["job"]["exit_code"], 0);
    assert_eq!(done["job"]["queue"], "gpu", "{done:#}");
    assert_eq!(done["spec"]["time_limit_secs"], 600, "--time=00:10:00");
    let kernels = done["kernels"].as_array().unwrap();
    let nodes: Vec<&str> = kernels.iter().map(|k| k["binding"]["node"].as_str().unwrap()).collect();
    let mut sorted = nodes.clone();
    sorted.sort();
    assert_eq!(sorted, ["n1", "n2"], "{done:#}");
    for k in kernels {
        let b = &k["binding"];
        assert_eq!(b["cpus"].as_array().unwrap().len(), 2, "2 tasks × 1 CPU per node: {done:#}");
        assert_eq!(b["mem_bytes"], 2 * (256 << 20), "--mem-per-cpu=256M × 2 CPUs: {done:#}");
        assert_eq!(b["gpus"].as_array().unwrap().len(), 1, "--gpus-per-node=1: {done:#}");
    }

    // The batch step's output and errors, each in the file its short option names.
    let out = lab.read(&format!("logs/ddp-train-{id}.out"));
    let list = if nodes[0] == "n1" { "n[1-2]" } else { "n2,n1" };
    assert_eq!(out.lines().next(), Some(format!("job {id}: 2 nodes ({list}), 4 tasks").as_str()), "{out}");
    let mut ready: Vec<&str> = out.lines().filter(|l| l.starts_with("rank ")).collect();
    ready.sort();
    assert_eq!(ready, ["rank 0 of 4 ready", "rank 1 of 4 ready", "rank 2 of 4 ready", "rank 3 of 4 ready"]);
    assert_eq!(lab.read(&format!("logs/ddp-train-{id}.err")), "all ranks done\n");

    // Each rank: its place in the world, the batch shell's exports, its node's GPU.
    for rank in 0..4u64 {
        let v = lab.vars(&format!("results/ddp-{id}/rank-{rank}.env"));
        let node = rank / 2;
        let want = [
            ("SLURM_PROCID", rank),
            ("RANK", rank),
            ("SLURM_LOCALID", rank % 2),
            ("LOCAL_RANK", rank % 2),
            ("SLURM_NODEID", node),
            ("SLURM_NTASKS", 4),
            ("WORLD_SIZE", 4),
            ("MASTER_PORT", 10000 + id as u64 % 50000),
            ("OMP_NUM_THREADS", 1),
        ];
        for (k, n) in want {
            assert_eq!(v[k], n.to_string(), "rank {rank}: {k}: {v:?}");
        }
        assert_eq!(sorted_list(&v["CUDA_VISIBLE_DEVICES"]), gpus_of(&done, node as usize), "rank {rank}: {v:?}");
        assert_eq!(v["PWD"], lab.root.display().to_string(), "tasks run where the job was submitted");
        assert_eq!(v["SLURM_SUBMIT_DIR"], lab.root.display().to_string());
        assert_eq!((v["SLURM_JOB_PARTITION"].as_str(), v["SLURM_CPUS_PER_TASK"].as_str()), ("gpu", "1"));
    }
}

#[test]
fn a_sweep_array_writes_a_log_per_task_and_keeps_to_its_throttle() {
    let lab = Lab::new(gpu_cluster());
    let array = lab.sbatch(&["sweep.sh"]);
    let done = lab.b.wait_state(array, "SUCCEEDED");
    assert_eq!(done["job"]["reason"], "all 10 tasks succeeded", "{done:#}");
    let lrs = ["0.1", "0.05", "0.02", "0.01", "0.005", "0.002", "0.001", "0.0005", "0.0002", "0.0001"];
    let tasks: BTreeMap<u64, i64> = lab
        .b
        .json(&["ps", "-a"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["array_task"]["array_id"] == array)
        .map(|j| (j["array_task"]["index"].as_u64().unwrap(), j["id"].as_i64().unwrap()))
        .collect();
    assert_eq!(tasks.keys().copied().collect::<Vec<_>>(), (0..10).collect::<Vec<_>>());
    let mut spans = vec![];
    for (i, lr) in lrs.iter().enumerate() {
        let job = tasks[&(i as u64)];
        // %x_%A_%a: the name, the array's id, the task's index.
        let log = lab.read(&format!("logs/sweep_{array}_{i}.out"));
        assert_eq!(log, format!("task {i} of 10 (array {array}, job {job}): lr={lr}\n"));
        let result = lab.read(&format!("results/sweep/lr-{i}.txt"));
        assert!(result.starts_with(&format!("lr={lr} loss=")), "{result}");
        let span: Vec<u128> =
            lab.read(&format!("results/sweep/span-{i}.txt")).lines().map(|l| l.parse().unwrap()).collect();
        spans.push((span[0], span[1]));
    }
    let logs = std::fs::read_dir(lab.root.join("logs")).unwrap().count();
    assert_eq!(logs, 10, "one log per task and no other");
    // Four free CPUs, but %3: at no task's start were more than two others running.
    for (s, _) in &spans {
        let running = spans.iter().filter(|(a, b)| a <= s && s < b).count();
        assert!(running <= 3, "{running} tasks at once under %3: {spans:?}");
    }
}

#[test]
fn gpu_requests_in_each_spelling_get_their_gpus_and_placement_options_hold() {
    let lab = Lab::new(gpu_cluster());

    // --gres=gpu:a100:1 on the node that offers a100, with a qos: through `berth submit`.
    let (id, stderr) = lab.submit("finetune.sh");
    assert!(!stderr.contains("warning"), "{stderr}");
    let done = lab.b.wait_state(id, "SUCCEEDED");
    assert_eq!(done["job"]["nodes"], serde_json::json!(["n1"]), "--constraint=a100: {done:#}");
    assert_eq!((&done["job"]["priority"], &done["spec"]["qos"]), (&10.into(), &"high".into()), "{done:#}");
    assert_eq!(done["spec"]["time_limit_secs"], 2 * 86400, "--time=2-00:00:00");
    let v = lab.vars(&format!("logs/finetune-{id}.out"));
    assert_eq!(v["SLURM_GPUS_ON_NODE"], "1", "{v:?}");
    assert_eq!(sorted_list(&v["CUDA_VISIBLE_DEVICES"]), gpus_of(&done, 0));
    assert_eq!((v["SLURM_JOB_NODELIST"].as_str(), v["SLURM_JOB_PARTITION"].as_str()), ("n1", "gpu"));

    // --ntasks=2 --gpus-per-task=1: both GPUs of one node, both tasks in it.
    let id = lab.sbatch(&["multi_gpu_eval.sh"]);
    let done = lab.b.wait_state(id, "SUCCEEDED");
    let gpus = gpus_of(&done, 0);
    assert_eq!(gpus.len(), 2, "{done:#}");
    assert_eq!(done["spec"]["time_limit_secs"], 30 * 60, "--time=30 is minutes");
    let out = lab.read(&format!("logs/mgpu-eval-{id}.out"));
    assert_eq!(out.lines().next(), Some("SLURM_NTASKS=2 SLURM_GPUS_ON_NODE=2"), "{out}");
    for t in 0..2 {
        let seen = out
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{t}: task {t} sees ")))
            .unwrap_or_else(|| panic!("no line of task {t}: {out}"));
        for g in seen.split(',') {
            assert!(gpus.contains(&g.to_string()), "task {t} sees {g}, not the job's: {out}");
        }
    }

    // -N 2 --gpus=2: the job's two GPUs in all, one on each node.
    let id = lab.sbatch(&["embed.sh"]);
    let done = lab.b.wait_state(id, "SUCCEEDED");
    let out = lab.read(&format!("logs/embed-{id}.out"));
    for k in 0..2 {
        let gpus = gpus_of(&done, k);
        assert_eq!(gpus.len(), 1, "one GPU on each node: {done:#}");
        assert!(out.contains(&format!("node {k}: 1 GPU {}\n", gpus[0])), "{out}");
    }

    // --exclusive: the whole node, every CPU and both GPUs, though it asked for one CPU.
    let id = lab.sbatch(&["benchmark.sh"]);
    let done = lab.b.wait_state(id, "SUCCEEDED");
    let node = done["job"]["nodes"][0].as_str().unwrap().to_string();
    let total =
        lab.b.json(&["nodes"]).as_array().unwrap().iter().find(|n| n["name"] == node.as_str()).unwrap()["cpus_total"]
            .as_u64()
            .unwrap();
    let v = lab.vars(&format!("logs/bench-{id}.out"));
    assert_eq!(v["SLURM_CPUS_ON_NODE"], total.to_string(), "{v:?}");
    assert_eq!(v["SLURM_GPUS_ON_NODE"], "2", "{v:?}");
    assert_eq!(v["SLURM_JOB_NODELIST"], node);
    assert_eq!(done["spec"]["time_limit_secs"], 15 * 60, "--time=15:00 is minutes and seconds");
}

#[test]
fn a_pipeline_runs_in_order_and_a_fan_in_runs_after_a_failed_shard() {
    let lab = Lab::new(Berth::up(&["--fake-gpus", "2"]));
    let ids = lab.driver("run_pipeline.sh");
    let [pre, train, eval] = ids[..] else { panic!("{ids:?}") };
    let jpre = lab.b.wait_state(pre, "SUCCEEDED");
    let jtrain = lab.b.wait_state(train, "SUCCEEDED");
    let jeval = lab.b.wait_state(eval, "SUCCEEDED");
    assert!(ts(&jtrain, "started_at") >= ts(&jpre, "ended_at"), "train started before preprocess ended");
    assert!(ts(&jeval, "started_at") >= ts(&jtrain, "ended_at"), "evaluate started before train ended");
    assert_eq!(jtrain["spec"]["dependency"]["conditions"][0]["job"], pre, "{jtrain:#}");
    // -c 2; --time as D-H:M, M:S and H:M:S.
    assert_eq!(jpre["kernels"][0]["binding"]["cpus"].as_array().unwrap().len(), 2, "{jpre:#}");
    let limits: Vec<&Value> = [&jpre, &jtrain, &jeval].iter().map(|j| &j["spec"]["time_limit_secs"]).collect();
    assert_eq!(limits, [&Value::from(300), &Value::from(600), &Value::from(3600)]);
    assert_eq!(lab.read(&format!("logs/preprocess-{pre}.out")).lines().next().unwrap().split(' ').nth(2), Some("2"));
    // --gres=gpu:2 and --gpus=1, and each step found what the one before it made.
    let train_gpus = gpus_of(&jtrain, 0);
    assert_eq!(train_gpus.len(), 2, "{jtrain:#}");
    let model = lab.read("models/model.txt");
    assert_eq!(model, format!("weights=500500 gpus=2 devices={}\n", sorted_devices(&model, &train_gpus)));
    let eval_gpus = gpus_of(&jeval, 0);
    assert_eq!(eval_gpus.len(), 1, "{jeval:#}");
    assert_eq!(lab.read("results/eval.txt"), format!("accuracy=0.93 devices={} {model}", eval_gpus[0]));
    assert_eq!(lab.read(&format!("logs/evaluate-{eval}.out")), format!("evaluated job {eval}, time limit 60 min\n"));

    // The fan-in: shard 1 has no input and fails; collect runs after both all the same.
    std::fs::create_dir_all(lab.root.join("data")).unwrap();
    std::fs::write(lab.root.join("data/shard-0.txt"), "a\nb\nc\n").unwrap();
    let ids = lab.driver("run_fanin.sh");
    let [a, b, c] = ids[..] else { panic!("{ids:?}") };
    let ja = lab.b.wait_state(a, "SUCCEEDED");
    let jb = lab.b.wait_state(b, "FAILED");
    assert_eq!(jb["job"]["exit_code"], 1, "{jb:#}");
    let jc = lab.b.wait_state(c, "SUCCEEDED");
    assert!(ts(&jc, "started_at") >= ts(&ja, "ended_at") && ts(&jc, "started_at") >= ts(&jb, "ended_at"));
    assert_eq!(lab.read("results/shard-0.count"), "3\n");
    assert_eq!(lab.read("results/collected.txt"), "1 of 2 shards\n");
    assert_eq!(lab.read(&format!("logs/shard-{a}.out")), "shard 0 done\n");
    let err = lab.read(&format!("logs/shard-{b}.out"));
    assert!(err.contains("data/shard-1.txt") && !err.contains("shard 1 done"), "{err}");
    // --mem-per-cpu=100M × -c 1.
    assert_eq!(ja["kernels"][0]["binding"]["mem_bytes"], 100 << 20, "{ja:#}");
}

/// `devices` as the job wrote them, checked to be `gpus` in some order.
fn sorted_devices<'a>(model: &'a str, gpus: &[String]) -> &'a str {
    let devices = model.trim_end().rsplit("devices=").next().unwrap();
    assert_eq!(sorted_list(devices), gpus, "{model}");
    devices
}

#[test]
fn a_long_run_checkpoints_on_its_warning_signal_and_appends_to_its_log() {
    let lab = Lab::new(Berth::up(&[]));
    // An earlier run's log, which --open-mode=append keeps.
    let runs = lab.root.join("runs");
    open_dir(&runs);
    std::fs::write(runs.join("train.log"), "earlier run\n").unwrap();
    std::fs::set_permissions(runs.join("train.log"), std::fs::Permissions::from_mode(0o666)).unwrap();

    let o = lab.cmd("sbatch", &["checkpoint.sh"]).env("LAB_DATASET", "imagenet").output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let stderr = text(&o.stderr);
    assert!(stderr.contains("note: ") && stderr.contains("--mail-type=END,FAIL: berth sends no mail"), "{stderr}");
    assert!(!stderr.contains("warning"), "--mail-type is a note, not a warning: {stderr}");
    let id: i64 = text(&o.stdout).trim().strip_prefix("Submitted batch job ").unwrap().parse().unwrap();

    let done = lab.b.wait_state(id, "SUCCEEDED");
    assert_eq!(done["job"]["exit_code"], 0, "{done:#}");
    let log = std::fs::read_to_string(runs.join("train.log")).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines[..2], ["earlier run", &format!("run of job {id} starts")], "{log}");
    let step: u32 = std::fs::read_to_string(runs.join("checkpoint.txt")).unwrap().trim().parse().unwrap();
    assert!(step > 0 && step < 1000, "checkpointed mid-run: {step}");
    assert_eq!(lines[2..], [format!("USR1 at step {step}: checkpointing")], "{log}");

    let v = vars(&std::fs::read_to_string(runs.join("env.txt")).unwrap());
    let user = done["job"]["user"].as_str().unwrap();
    assert_eq!(v["PWD"], runs.display().to_string(), "--chdir=runs, relative to where sbatch ran");
    assert_eq!(v["WANDB_MODE"], "offline", "--export=ALL,WANDB_MODE=offline");
    assert_eq!(v["LAB_DATASET"], "imagenet", "ALL: the submitter's environment");
    assert_eq!(v["SLURM_JOB_NAME"], "long-train");
    assert_eq!(v["SLURM_JOB_PARTITION"], "default");
    assert_eq!(v["SLURM_JOB_ACCOUNT"], user);
    assert_eq!(v["SLURM_TIMELIMIT"], "1");
}
