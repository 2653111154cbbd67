//! Tenancy through the real binary (issue 6): projects and shared jobs, `berth login`,
//! `berth token create|list|revoke` taking effect at once, disabled users, the audit log;
//! a shared job's `--env` values stay its owner's.

mod support;

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;
use support::{BIN, Berth, text};

fn ids(out: &[u8]) -> Vec<i64> {
    let v: Value = serde_json::from_slice(out).unwrap();
    v.as_array().unwrap().iter().map(|j| j["id"].as_i64().unwrap()).collect()
}

#[test]
fn projects_share_jobs_with_members_only() {
    let b = Berth::up(&[]);
    let bob = b.create_user("bob");
    let carol = b.create_user("carol");
    let dave = b.create_user("dave");
    assert_eq!(b.ok(&["admin", "project", "create", "vision"]).trim(), "created project vision");
    for u in ["bob", "carol"] {
        b.ok(&["admin", "project", "add-member", "vision", u]);
    }
    let list = b.ok(&["admin", "project", "list"]);
    assert!(list.contains("vision") && list.contains("bob,carol"), "{list}");
    let who = b.cli_as(&bob, &["whoami"]);
    assert!(text(&who.stdout).contains("projects vision"), "{}", text(&who.stdout));

    let shared = b.submit_as(&bob, &["--project", "vision", "--share", "--", "sleep", "30"]);
    let private = b.submit_as(&bob, &["--project", "vision", "--", "sleep", "30"]);
    assert_eq!(ids(&b.cli_as(&carol, &["ps", "-o", "json"]).stdout), vec![shared]);
    assert!(b.cli_as(&carol, &["show", &shared.to_string()]).status.success());
    let o = b.cli_as(&carol, &["show", &private.to_string()]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains(&format!("job {private} not found")), "{}", text(&o.stderr));
    let o = b.cli_as(&carol, &["cancel", &shared.to_string()]);
    assert!(!o.status.success(), "members see shared jobs but only the owner cancels");
    assert!(ids(&b.cli_as(&dave, &["ps", "-o", "json"]).stdout).is_empty());

    // dave is not in the project; --share needs a project; an unknown project is refused.
    let o = b.cli_as(&dave, &["submit", "--project", "vision", "--", "true"]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("not a member of project `vision`"), "{}", text(&o.stderr));
    let o = b.cli_as(&bob, &["submit", "--share", "--", "true"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    b.ok(&["cancel", &shared.to_string(), &private.to_string()]);

    // Slurm's --account is the project.
    let script = b.home.path().join("job.sh");
    std::fs::write(&script, "#!/bin/sh\n#SBATCH --account=vision\ntrue\n").unwrap();
    let id = b.submit_as(&bob, &[script.to_str().unwrap()]);
    let o = b.cli_as(&bob, &["show", "-o", "json", &id.to_string()]);
    let detail: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(detail["spec"]["project"], "vision");
}

#[test]
fn env_values_of_a_shared_job_are_hidden_from_project_members() {
    let b = Berth::up(&[]);
    let bob = b.create_user("bob");
    let carol = b.create_user("carol");
    b.ok(&["admin", "project", "create", "vision"]);
    for u in ["bob", "carol"] {
        b.ok(&["admin", "project", "add-member", "vision", u]);
    }
    let secret = "sk-s3cret-of-bob";
    let key = format!("API_KEY={secret}");
    let id = b.submit_as(&bob, &["--project", "vision", "--share", "--env", &key, "--", "sleep", "30"]);
    let id = id.to_string();
    // carol sees the job and the variable's name, never its value, in any read.
    let o = b.cli_as(&carol, &["show", "-o", "json", &id]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let detail: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(detail["spec"]["env"]["API_KEY"], "<hidden>", "{detail:#}");
    for args in [vec!["show", "-o", "json", &id], vec!["show", &id], vec!["ps", "-o", "json"], vec!["ps", "-a"]] {
        let o = b.cli_as(&carol, &args);
        assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
        assert!(!text(&o.stdout).contains(secret), "{args:?} shows bob's secret to carol: {}", text(&o.stdout));
    }
    // The owner and the admin see it.
    let own: Value = serde_json::from_slice(&b.cli_as(&bob, &["show", "-o", "json", &id]).stdout).unwrap();
    assert_eq!(own["spec"]["env"]["API_KEY"], secret);
    assert_eq!(b.job(id.parse().unwrap())["spec"]["env"]["API_KEY"], secret);
    b.ok(&["cancel", &id]);
}

#[test]
fn login_tokens_revoke_and_disable_take_effect_at_once() {
    let b = Berth::up(&[]);
    let bob = b.create_user("bob");

    // `berth login` with the token on stdin writes bob's own credentials file.
    let home = tempfile::tempdir().unwrap();
    let berth_as_bob = |args: &[&str], stdin: Option<&str>| {
        let mut c = Command::new(BIN);
        c.env("HOME", home.path()).env_remove("XDG_CONFIG_HOME").env_remove("BERTH_URL").env_remove("BERTH_TOKEN");
        c.env_remove("BERTH_CA_FILE").args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        let mut input = child.stdin.take().unwrap();
        if let Some(s) = stdin {
            input.write_all(s.as_bytes()).unwrap();
        }
        drop(input);
        child.wait_with_output().unwrap()
    };
    let o = berth_as_bob(&["login", &b.url, "--token-stdin"], Some("not-a-token\n"));
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("invalid API token"), "{}", text(&o.stderr));
    let o = berth_as_bob(&["login", &b.url, "--token-stdin"], Some(&format!("{bob}\n")));
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("as bob (user)"), "{}", text(&o.stdout));
    assert!(berth_as_bob(&["whoami"], None).status.success());

    // Issue 41: `berth admin user create carol | berth login URL` works: the token alone on
    // stdout, the rest for people on stderr.
    let o = b.cli(&["admin", "user", "create", "carol"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("created user carol (user)"), "{}", text(&o.stderr));
    let piped = text(&o.stdout);
    assert_eq!(piped.lines().count(), 1, "only the token on stdout: {piped}");
    let o = berth_as_bob(&["login", &b.url, "--token-stdin"], Some(&piped));
    assert!(text(&o.stdout).contains("as carol (user)"), "{} {}", text(&o.stdout), text(&o.stderr));
    let o = berth_as_bob(&["login", &b.url, "--token-stdin"], Some(&format!("{bob}\n")));
    assert!(o.status.success(), "{}", text(&o.stderr));

    // A second token with an expiry; list shows both, never a secret.
    let o = berth_as_bob(&["token", "create", "--label", "ci", "--expires", "30d", "-o", "json"], None);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let created: Value = serde_json::from_slice(&o.stdout).unwrap();
    let ci = created["token"].as_str().unwrap().to_string();
    assert!(b.cli_as(&ci, &["whoami"]).status.success());
    let o = berth_as_bob(&["token", "list"], None);
    let table = text(&o.stdout);
    assert!(table.contains("ci") && table.contains("active (this one)"), "{table}");
    assert!(!table.contains(&ci) && !table.contains(&bob));

    // Revoke: the very next command with it fails.
    let id = created["id"].as_str().unwrap();
    let o = berth_as_bob(&["token", "revoke", id], None);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = b.cli_as(&ci, &["whoami"]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("invalid API token"), "{}", text(&o.stderr));
    let o = berth_as_bob(&["token", "revoke", "0123456789ab"], None);
    assert!(!o.status.success());

    // Disabling bob stops his login at once; non-admins cannot disable anyone.
    assert!(!b.cli_as(&bob, &["admin", "user", "disable", "alice"]).status.success());
    b.ok(&["admin", "user", "disable", "bob"]);
    let o = berth_as_bob(&["whoami"], None);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("disabled"), "{}", text(&o.stderr));
    let users = b.ok(&["admin", "user", "list"]);
    assert!(users.lines().any(|l| l.starts_with("bob") && l.contains("disabled")), "{users}");
    b.ok(&["admin", "user", "enable", "bob"]);
    assert!(berth_as_bob(&["whoami"], None).status.success());

    let audit: Value = b.json(&["admin", "audit", "--since", "1h"]);
    let actions: Vec<&str> = audit.as_array().unwrap().iter().map(|a| a["action"].as_str().unwrap()).collect();
    for a in ["user.create", "token.create", "token.revoke", "auth.revoked-token", "user.disable", "user.enable"] {
        assert!(actions.contains(&a), "{a} not in {actions:?}");
    }
    assert!(!b.cli_as(&bob, &["admin", "audit"]).status.success(), "users cannot read the audit log");
}

#[test]
fn quotas_from_the_cli_hold_jobs_with_a_reason() {
    let b = Berth::up(&["--fake-gpus", "2"]);
    let bob = b.create_user("bob");
    let o = b.cli(&["admin", "quota", "set", "--user", "bob"]);
    assert_eq!(o.status.code(), Some(2), "no limit given: {}", text(&o.stderr));
    b.ok(&["admin", "quota", "set", "--user", "bob", "--gpus", "1", "--pending", "10"]);
    let first = b.submit_as(&bob, &["--gpus", "1", "--", "sleep", "30"]);
    let second = b.submit_as(&bob, &["--gpus", "1", "--", "sleep", "30"]);
    b.wait_state(first, "RUNNING");
    let j = b.wait_job(second, "a quota reason", |j| j["job"]["pending_reason"]["kind"] == "quota");
    assert_eq!(j["job"]["pending_reason"]["message"], "quota: user bob gpu 1/1 in use");
    let mine = text(&b.cli_as(&bob, &["quotas"]).stdout);
    assert!(mine.contains("bob") && mine.contains("1/1") && mine.contains("1/10"), "{mine}");
    let o = b.cli_as(&bob, &["submit", "--gpus", "2", "--", "true"]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("could never start within the quota"), "{}", text(&o.stderr));
    b.ok(&["admin", "quota", "rm", "--user", "bob"]);
    b.wait_state(second, "RUNNING");
    b.ok(&["cancel", &first.to_string(), &second.to_string()]);
}

#[test]
fn usage_reports_per_user_and_project_as_table_json_and_csv() {
    let b = Berth::up(&[]);
    let bob = b.create_user("bob");
    b.ok(&["admin", "project", "create", "vision"]);
    b.ok(&["admin", "project", "add-member", "vision", "bob"]);
    let ok = b.submit_as(&bob, &["--project", "vision", "--cpus", "2", "--", "sleep", "0.2"]);
    let bad = b.submit_as(&bob, &["--", "false"]);
    let mine = b.submit(&["--", "true"]);
    b.wait_state(ok, "SUCCEEDED");
    b.wait_state(bad, "FAILED");
    b.wait_state(mine, "SUCCEEDED");

    let o = b.cli(&["usage", "-o", "csv"]);
    let csv = text(&o.stdout);
    let mut lines = csv.lines();
    assert!(lines.next().unwrap().starts_with("user,jobs,succeeded,failed,"), "{csv}");
    let bob_line = csv.lines().find(|l| l.starts_with("bob,")).unwrap_or_else(|| panic!("{csv}"));
    let f: Vec<&str> = bob_line.split(',').collect();
    assert_eq!(&f[1..4], ["2", "1", "1"], "{bob_line}");
    assert!(f[9].parse::<f64>().unwrap() > 0.0, "cpu-hours: {bob_line}");

    let by_project: Value = b.json(&["usage", "--by", "project", "--since", "1h"]);
    let vision = by_project.as_array().unwrap().iter().find(|l| l["name"] == "vision").unwrap();
    assert_eq!((vision["jobs"].as_u64(), vision["succeeded"].as_u64()), (Some(1), Some(1)));

    // bob sees only himself.
    let o = b.cli_as(&bob, &["usage", "-o", "json"]);
    let lines: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(lines.as_array().unwrap().iter().map(|l| l["name"].as_str().unwrap()).collect::<Vec<_>>(), ["bob"]);
    let o = b.cli(&["usage", "--since", "soon"]);
    assert!(!o.status.success());
}

#[test]
fn admin_queue_create_and_update_with_projects_and_a_maximum() {
    let b = Berth::up(&[]);
    b.ok(&["admin", "project", "create", "vision"]);
    b.ok(&["admin", "queue", "create", "gpu", "--projects", "vision", "--max-time-limit", "24h"]);
    let o = b.cli(&["admin", "queue", "create", "gpu"]);
    assert!(!o.status.success() && text(&o.stderr).contains("already exists"), "{}", text(&o.stderr));
    let o = b.cli(&["admin", "queue", "update", "nope", "--ordering", "lifo"]);
    assert!(!o.status.success() && text(&o.stderr).contains("does not exist"), "{}", text(&o.stderr));
    let table = b.ok(&["queues"]);
    let row = table.lines().find(|l| l.starts_with("gpu")).unwrap_or_else(|| panic!("{table}"));
    assert!(row.contains("vision") && (row.contains("24h") || row.contains("1d")), "{row}");
    b.ok(&["admin", "queue", "update", "gpu", "--projects", "all", "--max-time-limit", "none"]);
    let q: Value = b.json(&["queues"]);
    let gpu = q.as_array().unwrap().iter().find(|q| q["name"] == "gpu").unwrap();
    assert!(gpu["policy"].get("projects").is_none() && gpu["policy"].get("max_time_limit_secs").is_none(), "{gpu}");
}
