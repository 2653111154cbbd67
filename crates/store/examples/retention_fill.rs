//! The retention figure (docs/perf.md, `bench/retention.sh`): fills a store with finished
//! jobs shaped like real ones (a spec with a command and the submitter's exported
//! environment, five transitions, one kernel with its binding and measured usage) through the
//! [`berth_store::Store`] trait, measures the store's size, archives them all in batches of 1,000
//! (`Retention::archive_finished`, as the manager's retention task does), and measures again.
//! Sizes are taken after SQLite's `VACUUM` (the file) or PostgreSQL's `VACUUM FULL`
//! (`pg_database_size`), so free pages do not count; per job, less the empty store's size.
//!
//!   cargo run --release -p berth-store --example retention_fill -- sqlite:/tmp/x.db 100000
//!   cargo run --release -p berth-store --example retention_fill -- postgres://u@127.0.0.1:5432/db 100000

use std::collections::BTreeMap;
use std::time::Instant;

use berth_model::{Binding, EndCause, JobSpec, JobState, KernelUsage};
use berth_store::{Change, StoreUrl};
use jiff::{SignedDuration, Timestamp};

/// Jobs a fill batch writes (transitions in one `apply`).
const FILL_BATCH: usize = 200;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(url), Some(n)) = (args.get(1), args.get(2).and_then(|n| n.parse::<usize>().ok())) else {
        return Err("usage: retention_fill STORE_URL JOBS".into());
    };
    let url = StoreUrl::parse(url)?;
    let s = berth_store::open(&url).await?;
    let user = s.create_user("bench", "user", Timestamp::now()).await?;
    // What the schema takes with no job (PostgreSQL's catalogs are most of it): left out of
    // the per-job figures.
    let empty = size(&url).await?;
    let start = Timestamp::now() - SignedDuration::from_hours(24 * 365);
    let t = Instant::now();
    let mut done = 0;
    while done < n {
        let count = FILL_BATCH.min(n - done);
        let mut changes = Vec::with_capacity(count * 6);
        for i in done..done + count {
            let at = start + SignedDuration::from_secs(i as i64 * 60);
            let id = s.insert_job(user.id, &spec(i), None, at).await?;
            changes.extend(life(id, at));
        }
        s.apply(&changes).await?;
        done += count;
    }
    let fill = t.elapsed();
    let hot = size(&url).await?;
    let t = Instant::now();
    let mut archived = 0;
    loop {
        let moved = s.archive_finished(Timestamp::now(), 1000).await?;
        archived += moved;
        if moved < 1000 {
            break;
        }
    }
    let archive = t.elapsed();
    let cold = size(&url).await?;
    s.close().await;
    println!("jobs={n} archived={archived} fill_s={:.1} archive_s={:.2}", fill.as_secs_f64(), archive.as_secs_f64());
    println!("size_empty_bytes={empty} size_before_bytes={hot} size_after_bytes={cold}");
    let per_job = |total: u64| total.saturating_sub(empty) / n.max(1) as u64;
    println!("per_job_before_bytes={} per_job_after_bytes={}", per_job(hot), per_job(cold));
    Ok(())
}

/// A job as users submit them: a name, a command with arguments, resources, a project and
/// the exported environment of a login shell (what `berth submit` sends by default).
fn spec(i: usize) -> JobSpec {
    let mut spec = JobSpec::command(["python", "train.py", "--config", "configs/resnet50.yaml", "--epochs", "90"]);
    spec.name = Some(format!("resnet50-sweep-{i}"));
    spec.project = Some("vision".into());
    spec.resources.cpu_milli = 8000;
    spec.resources.gpu_milli = 1000;
    spec.resources.mem_bytes = 64 << 30;
    spec.time_limit_secs = Some(86_400);
    spec.env = BTreeMap::from([("WANDB_PROJECT".into(), "resnet".into()), ("SEED".into(), i.to_string())]);
    let home = "/home/bench";
    let vars = [
        ("HOME", home.to_string()),
        ("USER", "bench".into()),
        ("LOGNAME", "bench".into()),
        ("SHELL", "/bin/bash".into()),
        ("LANG", "en_US.UTF-8".into()),
        ("TERM", "xterm-256color".into()),
        ("PWD", format!("{home}/src/vision")),
        ("OLDPWD", home.into()),
        (
            "PATH",
            format!(
                "{home}/.local/bin:{home}/miniconda3/envs/torch/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
            ),
        ),
        ("CONDA_DEFAULT_ENV", "torch".into()),
        ("CONDA_PREFIX", format!("{home}/miniconda3/envs/torch")),
        ("CONDA_EXE", format!("{home}/miniconda3/bin/conda")),
        ("CONDA_PYTHON_EXE", format!("{home}/miniconda3/bin/python")),
        ("LD_LIBRARY_PATH", "/usr/local/cuda/lib64:/usr/local/nccl/lib".into()),
        ("SSH_CONNECTION", "10.1.2.3 52144 10.1.0.10 22".into()),
        ("SSH_CLIENT", "10.1.2.3 52144 22".into()),
        ("SSH_TTY", "/dev/pts/3".into()),
        ("XDG_SESSION_ID", "4172".into()),
        ("XDG_RUNTIME_DIR", "/run/user/1000".into()),
        ("MAIL", "/var/mail/bench".into()),
        ("HISTCONTROL", "ignoreboth".into()),
        ("EDITOR", "vim".into()),
        ("LS_COLORS", "rs=0:di=01;34:ln=01;36:mh=00:pi=40;33:so=01;35:do=01;35:bd=40;33;01:cd=40;33;01".into()),
        ("HF_HOME", "/data/cache/huggingface".into()),
    ];
    spec.submit_env = vars.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    spec
}

/// Scheduled on a node, started, measured, ended: what a finished job's rows hold.
fn life(id: i64, at: Timestamp) -> Vec<Change> {
    let tr = |from, to, secs: i64, reason: &str| Change::Transition {
        job_id: id,
        from,
        to,
        at: at + SignedDuration::from_secs(secs),
        reason: reason.into(),
        exit_code: (to == JobState::Succeeded).then_some(0),
        end: (to == JobState::Succeeded).then_some(EndCause::Exited),
        end_signal: None,
    };
    let binding = Binding {
        node: format!("gpu{:03}", id % 64),
        cpus: (0..8).collect(),
        cpu_milli: 8000,
        mems: vec![0],
        mem_bytes: 64 << 30,
        gpus: vec![berth_model::GpuShare {
            uuid: format!("GPU-3f2a9c1e-7b4d-4e8a-9c2f-{:012x}", id % 8),
            index: (id % 8) as u32,
            milli: 1000,
        }],
        port: None,
    };
    let usage = KernelUsage {
        cpu_seconds: Some(20_000.0),
        memory_peak_bytes: Some(40 << 30),
        gpu_seconds: Some(3_400.0),
        ..Default::default()
    };
    let node = binding.node.clone();
    vec![
        tr(JobState::Pending, JobState::Scheduled, 30, &format!("scheduled on {node}")),
        Change::SetKernels { job_id: id, attempt: 0, bindings: vec![binding] },
        tr(JobState::Scheduled, JobState::Preparing, 31, "preparing"),
        tr(JobState::Preparing, JobState::Running, 32, "running"),
        Change::KernelExit { job_id: id, attempt: 0, index: 0, exit_code: Some(0), usage: Some(usage) },
        tr(JobState::Running, JobState::Succeeded, 3600, "exited with 0"),
    ]
}

/// The store's size with free pages left out.
async fn size(url: &StoreUrl) -> Result<u64, Box<dyn std::error::Error>> {
    use sqlx::Connection;
    Ok(match url {
        StoreUrl::Sqlite(path) => {
            let mut c = sqlx::SqliteConnection::connect(&format!("sqlite:{}", path.display())).await?;
            sqlx::query("VACUUM").execute(&mut c).await?;
            sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(&mut c).await?;
            c.close().await?;
            std::fs::metadata(path)?.len()
        }
        StoreUrl::Postgres(u) => {
            let mut c = sqlx::PgConnection::connect(u).await?;
            sqlx::query("VACUUM FULL").execute(&mut c).await?;
            let n: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())").fetch_one(&mut c).await?;
            c.close().await?;
            n as u64
        }
    })
}
