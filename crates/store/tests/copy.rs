//! `berth_store::copy` (`berth admin store copy`): a SQLite store with every kind of row,
//! copied to a real PostgreSQL and back, reads the same through the `Store` API; ids keep
//! counting on the target; a target with rows is refused and left as it was.

use berth_model::api::{BucketPlacement, NodeState};
use berth_model::{
    EndCause, JobSpec, JobState, KernelUsage, PendingKind, PendingReason, PreemptAction, QuotaKind, QuotaLimits,
    StopCause, UnixId,
};
use berth_store::test_support::PgCluster;
use berth_store::{
    CacheBucketRow, Change, JobFilter, QueueRow, SqliteStore, Store, StoreError, StoreUrl, UsageRow, conformance, copy,
};
use jiff::Timestamp;

fn at(secs: i64) -> Timestamp {
    Timestamp::from_microsecond(1_700_000_000_000_000 + secs * 1_000_000 + 123).unwrap()
}

fn tr(job_id: i64, from: JobState, to: JobState, secs: i64) -> Change {
    Change::Transition {
        job_id,
        from,
        to,
        at: at(secs),
        reason: format!("{from} to {to}"),
        exit_code: None,
        end: None,
        end_signal: None,
    }
}

fn end(job_id: i64, from: JobState, to: JobState, exit_code: Option<i32>, cause: EndCause) -> Change {
    Change::Transition {
        job_id,
        from,
        to,
        at: at(50),
        reason: "ended".into(),
        exit_code,
        end: Some(cause),
        end_signal: None,
    }
}

/// Every table gets rows, through the store's own API.
async fn fill(s: &dyn Store) {
    use JobState::*;
    let ann = s.create_user_with_token("ann", "admin", "aa11", "first", at(0)).await.unwrap();
    let bob = s.create_user("bob", "user", at(1)).await.unwrap();
    s.create_user("carl", "user", at(2)).await.unwrap();
    s.set_user_disabled("carl", true).await.unwrap();
    s.add_token(bob.id, "bb22", "laptop", at(3), Some(at(1000)), Some("/apps/7/web/")).await.unwrap();
    s.add_token(bob.id, "bb33cafe", "old", at(3), None, None).await.unwrap();
    s.revoke_token(Some(bob.id), "bb33cafe", at(4)).await.unwrap();
    s.touch_token("aa11", at(5)).await.unwrap();
    s.add_join_token("join1", at(0)).await.unwrap();
    s.create_project("vision", at(1)).await.unwrap();
    s.create_project("empty", at(1)).await.unwrap();
    s.add_member("vision", "bob", at(2)).await.unwrap();
    s.add_member("vision", "ann", at(2)).await.unwrap();
    let l = QuotaLimits { gpu_milli: Some(8000), pending_jobs: Some(10), ..Default::default() };
    s.set_quota(QuotaKind::Project, "vision", Some(&l), at(3)).await.unwrap();
    s.set_quota(QuotaKind::User, "bob", Some(&QuotaLimits { running_jobs: Some(2), ..l }), at(3)).await.unwrap();
    s.audit(at(4), "ann", "user.disable", "carl", "{}").await.unwrap();
    s.audit(at(5), "ann", "quota.set", "vision", "gpu 8").await.unwrap();

    let mut shared = JobSpec::command(["python", "train.py"]);
    shared.project = Some("vision".into());
    shared.shared = true;
    shared.priority = 7;
    let submitter = Some(UnixId { uid: 1000, gid: 100 });
    let mut ids = Vec::new();
    for i in 0..10 {
        let (user, spec) =
            if i % 2 == 0 { (ann.id, JobSpec::command([format!("job{i}")])) } else { (bob.id, shared.clone()) };
        ids.push(s.insert_job(user, &spec, submitter.filter(|_| i == 3), at(10 + i)).await.unwrap());
    }
    let waiting = PendingReason::new(PendingKind::Priority, "behind 3");
    s.apply(&[Change::PendingReason { job_id: ids[0], reason: Some(waiting) }]).await.unwrap();
    // 2..=9 start; each then goes its own way.
    for &id in &ids[1..] {
        s.apply(&[
            tr(id, Pending, Scheduled, 20),
            Change::SetKernels {
                job_id: id,
                attempt: 0,
                bindings: vec![conformance::binding("n1"), conformance::binding("n2")],
            },
            tr(id, Scheduled, Preparing, 21),
        ])
        .await
        .unwrap();
        s.apply(&[tr(id, Preparing, Running, 22)]).await.unwrap();
    }
    let used = KernelUsage {
        cpu_seconds: Some(12.5),
        memory_peak_bytes: Some(3 << 20),
        gpu_seconds: Some(0.25),
        ..Default::default()
    };
    let exit = |id, index, usage| Change::KernelExit { job_id: id, attempt: 0, index, exit_code: Some(0), usage };
    s.apply(&[
        exit(ids[2], 0, Some(used)),
        exit(ids[2], 1, None),
        end(ids[2], Running, Succeeded, Some(0), EndCause::Exited),
    ])
    .await
    .unwrap();
    s.apply(&[end(ids[3], Running, Failed, Some(3), EndCause::OutOfMemory)]).await.unwrap();
    let cancel = StopCause::Cancelled { by: "ann".into() };
    s.apply(&[tr(ids[4], Running, Terminating, 30), Change::Stop { job_id: ids[4], cause: cancel }]).await.unwrap();
    let preempt = StopCause::Preempted { by_job: ids[0], action: PreemptAction::Cancel };
    s.apply(&[tr(ids[5], Running, Terminating, 30), Change::Stop { job_id: ids[5], cause: preempt }]).await.unwrap();
    s.apply(&[end(ids[5], Terminating, Cancelled, None, EndCause::Preempted)]).await.unwrap();
    let idle = StopCause::Idle { idle_secs: 600 };
    s.apply(&[tr(ids[6], Running, Terminating, 30), Change::Stop { job_id: ids[6], cause: idle }]).await.unwrap();
    s.apply(&[end(ids[6], Terminating, Timeout, None, EndCause::Idle)]).await.unwrap();
    s.apply(&[end(ids[7], Running, Lost, None, EndCause::NodeLost)]).await.unwrap();
    // A requeue: attempt 1 with kernels of its own.
    let requeue = StopCause::Preempted { by_job: ids[0], action: PreemptAction::Requeue };
    s.apply(&[tr(ids[8], Running, Terminating, 30), Change::Stop { job_id: ids[8], cause: requeue }]).await.unwrap();
    s.apply(&[tr(ids[8], Terminating, Pending, 31)]).await.unwrap();
    s.apply(&[
        tr(ids[8], Pending, Scheduled, 32),
        Change::SetKernels { job_id: ids[8], attempt: 1, bindings: vec![conformance::binding("n2")] },
    ])
    .await
    .unwrap();

    let mut node = conformance::node("n1");
    node.last_heartbeat = Some(at(40));
    s.upsert_node(&node).await.unwrap();
    node.name = "n2".into();
    node.address = None;
    s.upsert_node(&node).await.unwrap();
    s.set_node_drain("n2", Some("disk swap")).await.unwrap();
    s.set_node_state("n2", NodeState::Lost, None).await.unwrap();

    let policy = conformance::policy("fair-share");
    s.put_queue(&QueueRow {
        name: "gpu".into(),
        policy: policy.clone(),
        seed: Some("{\"name\":\"gpu\"}".into()),
        updated_at: at(1),
    })
    .await
    .unwrap();
    s.put_queue(&QueueRow { name: "cpu".into(), policy, seed: None, updated_at: at(2) }).await.unwrap();
    let usage = |kind: &str, name: &str, value| {
        Change::Usage(UsageRow { kind: kind.into(), name: name.into(), value, at: at(45) })
    };
    s.apply(&[usage("user", "bob", 1_234.567_891), usage("project", "vision", 0.1), usage("clock", "flush", 0.0)])
        .await
        .unwrap();

    s.put_cache_node("n1", "http://n1:7171", 1, at(7)).await.unwrap();
    s.put_cache_node("n2", "http://n2:7171", 2, at(7)).await.unwrap();
    s.set_cache_node_removed("n2", true, at(8)).await.unwrap();
    s.set_cache_node_weight("n1", Some(5), at(8)).await.unwrap();
    let bucket = |name: &str, public| CacheBucketRow {
        name: name.into(),
        public,
        quota: Some(100 << 30),
        projects: vec!["vision".into()],
        origin: public.then(|| format!("/shared/{name}")),
        placement: if public { BucketPlacement::Node } else { BucketPlacement::Spread },
        updated_at: at(9),
    };
    s.put_cache_bucket(&bucket("imagenet", false)).await.unwrap();
    s.put_cache_bucket(&bucket("public", true)).await.unwrap();
    s.put_cache_bucket(&bucket("gone", true)).await.unwrap();
    assert!(s.delete_cache_bucket("gone", at(10)).await.unwrap());
    s.meta_set("bootstrapped", "1").await.unwrap();
    s.meta_set("schema-note", "it's \"quoted\"").await.unwrap();

    // Two jobs that ended long ago, archived (retention): the newest ids are archived ones.
    for i in 0..2 {
        let id = s.insert_job(bob.id, &shared, None, at(5)).await.unwrap();
        let kernels = Change::SetKernels { job_id: id, attempt: 0, bindings: vec![conformance::binding("n1")] };
        s.apply(&[tr(id, Pending, Scheduled, 6), kernels, tr(id, Scheduled, Running, 7)]).await.unwrap();
        let code = Some(i);
        let ended = Change::Transition {
            job_id: id,
            from: Running,
            to: Succeeded,
            at: at(8),
            reason: "done".into(),
            exit_code: code,
            end: Some(EndCause::Exited),
            end_signal: None,
        };
        s.apply(&[exit(id, 0, Some(used)), ended]).await.unwrap();
    }
    assert_eq!(s.archive_finished(at(9), 100).await.unwrap(), 2);
    let chat =
        s.create_endpoint("chat", bob.id, submitter, &conformance::endpoint_spec("chat"), 2, at(11)).await.unwrap();
    let mut rolled = chat.clone();
    rolled.previous = Some(chat.spec.clone());
    rolled.revision = 2;
    rolled.rollout = berth_model::endpoint::Rollout::RolledBack;
    rolled.message = Some("revision 2 never got ready".into());
    rolled.updated_at = at(12);
    s.update_endpoint(&rolled).await.unwrap();
    let embed =
        s.create_endpoint("embed", ann.id, None, &conformance::endpoint_spec("embed"), 0, at(11)).await.unwrap();
    s.create_endpoint_token(chat.id, "web", "ee55", at(12)).await.unwrap();
    s.create_endpoint_token(embed.id, "batch", "ff66", at(12)).await.unwrap();
    // two leaders so far: the copy's managers go on from their epoch (agents refuse older ones)
    for holder in ["m1", "m2"] {
        s.lease_acquire(holder, "http://m:7070", std::time::Duration::ZERO, None).await.unwrap().unwrap();
    }
}

/// Everything the API can read back, as one comparable text.
async fn everything(s: &dyn Store) -> String {
    let mut out = String::new();
    let mut add = |what: &str, v: String| out.push_str(&format!("{what}: {v}\n"));
    add("users", format!("{:?}", s.users().await.unwrap()));
    add("tokens", format!("{:?}", s.tokens(None).await.unwrap()));
    add("token", format!("{:?}", s.token("bb22").await.unwrap()));
    add("join tokens", format!("{:?}", s.join_token_hashes().await.unwrap()));
    add("projects", format!("{:?}", s.projects().await.unwrap()));
    add("quotas", format!("{:?}", s.quotas().await.unwrap()));
    add("audit", format!("{:?}", s.audit_log(None, 100).await.unwrap()));
    let jobs = s.jobs(&JobFilter::default()).await.unwrap();
    for j in &jobs {
        add("job", format!("{:?}", s.job_history(j.id).await.unwrap()));
    }
    add("job count", s.job_count().await.unwrap().to_string());
    add("archived count", s.archived_count().await.unwrap().to_string());
    for id in 1..=12 {
        add("archived", format!("{:?}", s.archived_job(id).await.unwrap()));
    }
    add("accounted", format!("{:?}", s.jobs_active_since(at(0)).await.unwrap()));
    add("nodes", format!("{:?}", s.nodes().await.unwrap()));
    add("lease epoch", s.lease().await.unwrap().epoch.to_string());
    add("queues", format!("{:?}", s.queues().await.unwrap()));
    add("usage", format!("{:?}", s.usage().await.unwrap()));
    add("cache nodes", format!("{:?}", s.cache_nodes().await.unwrap()));
    add("cache buckets", format!("{:?}", s.cache_buckets().await.unwrap()));
    add("endpoints", format!("{:?}", s.endpoints().await.unwrap()));
    add("endpoint tokens", format!("{:?}", s.all_endpoint_tokens().await.unwrap()));
    add("tombstones", format!("{:?}", s.deleted_cache_buckets().await.unwrap()));
    for k in ["bootstrapped", "schema-note"] {
        add("meta", format!("{k} = {:?}", s.meta_get(k).await.unwrap()));
    }
    out
}

#[tokio::test]
async fn sqlite_to_postgres_and_back_loses_nothing() {
    let Some(pg) = PgCluster::start("sqlite_to_postgres_and_back_loses_nothing") else { return };
    let dir = tempfile::tempdir().unwrap();
    let from = StoreUrl::Sqlite(dir.path().join("berth.db"));
    let sqlite = SqliteStore::open(dir.path().join("berth.db")).await.unwrap();
    fill(&sqlite).await;
    let before = everything(&sqlite).await;
    assert_eq!(before.matches("job: Some").count(), 10);
    assert!(!before.contains("lease epoch: 0"), "{before}");
    sqlite.close().await;

    let to = StoreUrl::Postgres(pg.create_db("berth").await);
    let report = copy(&from, &to).await.unwrap();
    assert_eq!(report.tables.iter().find(|(t, _)| *t == "jobs").unwrap().1, 10);
    assert_eq!(report.tables.iter().find(|(t, _)| *t == "job_archive").unwrap().1, 2);
    let s = berth_store::open(&to).await.unwrap();
    let after = everything(&*s).await;
    assert_eq!(after, before);
    // Ids count on from the copied ones, archived jobs' included.
    let ann = s.user_by_name("ann").await.unwrap().unwrap();
    assert_eq!(s.insert_job(ann.id, &JobSpec::command(["next"]), None, at(60)).await.unwrap(), 13);
    assert_eq!(s.create_user("dora", "user", at(60)).await.unwrap().id, 4);
    assert_eq!(s.put_cache_node("n3", "http://n3:7171", 1, at(60)).await.unwrap().seq, 3);
    let spec = conformance::endpoint_spec("next");
    assert_eq!(s.create_endpoint("next", ann.id, None, &spec, 1, at(60)).await.unwrap().id, 3);
    s.close().await;

    // A target with rows is refused, and nothing of it changes.
    let e = copy(&from, &to).await.unwrap_err();
    assert!(matches!(e, StoreError::BadUrl(_)), "{e}");
    assert!(e.to_string().contains("is not empty"), "{e}");
    let s = berth_store::open(&to).await.unwrap();
    assert_eq!(s.job_count().await.unwrap(), 11);
    s.close().await;

    // And back, into a new SQLite file: the same again.
    let pg2 = StoreUrl::Postgres(pg.create_db("second").await);
    copy(&from, &pg2).await.unwrap();
    let back = StoreUrl::Sqlite(dir.path().join("back.db"));
    copy(&pg2, &back).await.unwrap();
    let s = berth_store::open(&back).await.unwrap();
    assert_eq!(everything(&*s).await, before);
    let ann = s.user_by_name("ann").await.unwrap().unwrap();
    assert_eq!(s.insert_job(ann.id, &JobSpec::command(["next"]), None, at(60)).await.unwrap(), 13, "on SQLite too");
    s.close().await;
}

#[tokio::test]
async fn a_missing_source_or_the_same_store_twice_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let missing = StoreUrl::Sqlite(dir.path().join("nope.db"));
    let e = copy(&missing, &StoreUrl::Sqlite(dir.path().join("to.db"))).await.unwrap_err().to_string();
    assert!(e.contains("no such store file"), "{e}");
    assert!(!dir.path().join("to.db").exists(), "nothing is created for a copy that cannot start");
    let e = copy(&missing, &missing).await.unwrap_err().to_string();
    assert!(e.contains("copy to another store"), "{e}");
}
