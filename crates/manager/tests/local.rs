//! The manager's unix socket (issue 14): the kernel vouches for the caller, so a job submitted
//! over it records its Unix submitter and the agent is told to run it as that user; over TCP
//! nothing a client says can claim one.

mod common;

use std::os::unix::fs::PermissionsExt;

use berth_model::Topology;
use berth_model::protocol::ManagerMessage;
use common::*;
use serde_json::json;

fn over_socket(e: &Env, token: &str) -> Client {
    let socket = e.m.socket.clone().expect("the manager serves its socket");
    let http = reqwest::Client::builder().unix_socket(socket).build().unwrap();
    Client { url: "http://localhost".into(), token: token.into(), http }
}

#[tokio::test]
async fn a_job_submitted_over_the_socket_runs_as_its_unix_submitter() {
    let e = start().await;
    let socket = e.m.socket.clone().unwrap();
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "a socket not meant for everyone is the manager user's alone");
    let mut a = Agent::connect(&e.m, "n1", Topology::synthetic(1, 4, 16 << 30, 0), vec![]).await;

    // No token: the manager's own Unix user is the admin.
    let local = over_socket(&e, "");
    let (code, me) = local.get("/v1/whoami").await;
    assert_eq!((code, me["user"].as_str()), (200, Some("alice")), "{me}");

    let me_uid = nix::unistd::geteuid().as_raw();
    let me_gid = nix::unistd::getegid().as_raw();
    let id = local.submit_ok(&spec(1.0, 0.0)).await;
    let start = a.expect_start().await;
    let ManagerMessage::StartKernel { submitter, key, .. } = &start else { unreachable!() };
    assert_eq!(key.job_id, id);
    assert_eq!(submitter.map(|s| (s.uid, s.gid)), Some((me_uid, me_gid)), "the kernel's word, not the client's");
    let detail = e.admin.job(id).await;
    assert_eq!(detail["submitter"], json!({"uid": me_uid, "gid": me_gid}), "{detail}");

    // Over TCP with a token: no submitter, whatever the body claims.
    let mut body = serde_json::to_value(spec(1.0, 0.0)).unwrap();
    body["submitter"] = json!({"uid": 0, "gid": 0});
    let (code, v) = e.admin.post("/v1/jobs", json!({ "spec": body })).await;
    assert_eq!(code, 201, "{v}");
    let tcp = v["id"].as_i64().unwrap();
    let start = a.expect_start().await;
    let ManagerMessage::StartKernel { submitter, .. } = &start else { unreachable!() };
    assert_eq!(*submitter, None);
    assert!(e.admin.job(tcp).await.get("submitter").is_none());

    // A token over the socket acts as its user, and the job still records who sent it.
    let (code, u) = e.admin.post("/v1/admin/users", json!({"name": "bob"})).await;
    assert_eq!(code, 201, "{u}");
    let bob = over_socket(&e, u["token"].as_str().unwrap());
    let (_, me) = bob.get("/v1/whoami").await;
    assert_eq!(me["user"], "bob");
    let id = bob.submit_ok(&spec(1.0, 0.0)).await;
    assert_eq!(e.admin.job(id).await["submitter"]["uid"], me_uid);
    assert_eq!(e.admin.job(id).await["job"]["user"], "bob");
}

#[tokio::test]
async fn the_exported_environment_is_shown_to_the_owner_and_admins_only() {
    let e = start().await;
    let (_, u) = e.admin.post("/v1/admin/users", json!({"name": "carol"})).await;
    let carol = Client::new(&e.m.url, u["token"].as_str().unwrap());
    let (_, u) = e.admin.post("/v1/admin/users", json!({"name": "dave"})).await;
    let dave = Client::new(&e.m.url, u["token"].as_str().unwrap());
    e.admin.post("/v1/admin/projects", json!({"name": "vision"})).await;
    for who in ["carol", "dave"] {
        let (code, v) = e.admin.post("/v1/admin/projects/vision/members", json!({"user": who})).await;
        assert!(code == 200 || code == 201 || code == 204, "{code} {v}");
    }
    let mut s = spec(1.0, 0.0);
    s.project = Some("vision".into());
    s.shared = true;
    s.submit_env.insert("AWS_SECRET_ACCESS_KEY".into(), "s3cr3t".into());
    let id = carol.submit_ok(&s).await;
    assert_eq!(carol.job(id).await["spec"]["submit_env"]["AWS_SECRET_ACCESS_KEY"], "s3cr3t");
    assert_eq!(e.admin.job(id).await["spec"]["submit_env"]["AWS_SECRET_ACCESS_KEY"], "s3cr3t");
    let seen = dave.job(id).await;
    assert_eq!(seen["job"]["id"], id, "a project member sees the shared job");
    assert!(seen["spec"].get("submit_env").is_none(), "but not its owner's environment: {seen}");
}
