//! The conformance checks of [`crate::Endpoints`], part of [`crate::conformance`] and run on
//! every adapter through [`conformance_tests!`](crate::conformance_tests).

use berth_model::endpoint::{Autoscale, EndpointSpec, HealthSpec, Rollout};
use berth_model::{JobSpec, UnixId};
use jiff::Timestamp;

use crate::{Store, StoreError};

fn at(secs: i64) -> Timestamp {
    Timestamp::from_microsecond(1_700_000_000_000_000 + secs * 1_000_000 + 7).unwrap()
}

/// An endpoint spec named `name` of two fixed replicas running `serve.py`.
pub fn endpoint_spec(name: &str) -> EndpointSpec {
    EndpointSpec {
        name: name.into(),
        replicas: 2,
        port: None,
        health: HealthSpec::default(),
        autoscale: None,
        public: false,
        job: JobSpec::command(["python", "serve.py"]),
    }
}

/// Endpoints: unique names, every field round-trips through an update, tokens, removal.
pub async fn endpoints(s: &dyn Store) {
    let ann = s.create_user("ann", "user", at(0)).await.unwrap();
    let bob = s.create_user("bob", "user", at(0)).await.unwrap();
    let vouched = Some(UnixId { uid: 1000, gid: u32::MAX });
    let chat = s.create_endpoint("chat", ann.id, vouched, &endpoint_spec("chat"), 2, at(1)).await.unwrap();
    assert_eq!((chat.name.as_str(), chat.owner_id, chat.owner.as_str()), ("chat", ann.id, "ann"));
    assert_eq!(
        (chat.submitter, &chat.spec, chat.revision, &chat.previous),
        (vouched, &endpoint_spec("chat"), 1, &None)
    );
    assert_eq!((chat.desired, chat.rollout, &chat.message), (2, Rollout::Done, &None));
    assert_eq!((chat.created_at, chat.updated_at), (at(1), at(1)));
    let e = s.create_endpoint("chat", bob.id, None, &endpoint_spec("chat"), 1, at(2)).await.unwrap_err();
    assert!(matches!(e, StoreError::Duplicate(_)), "{e}");
    assert_eq!(e.to_string(), "endpoint chat already exists");
    let embed = s.create_endpoint("embed", bob.id, None, &endpoint_spec("embed"), 0, at(3)).await.unwrap();
    assert_eq!(embed.submitter, None);

    // An update writes every field it owns.
    let mut next = endpoint_spec("chat");
    next.replicas = 3;
    next.port = Some(8080);
    next.public = true;
    next.health.ready_path = Some("/ready".into());
    next.autoscale = Some(Autoscale {
        min: 0,
        max: 8,
        target_inflight: Some(2.5),
        target_rps: Some(0.125),
        up_cooldown_secs: 5,
        down_cooldown_secs: 90,
        cold_start_secs: 30,
    });
    let mut updated = chat.clone();
    updated.previous = Some(chat.spec.clone());
    updated.spec = next;
    updated.revision = 2;
    updated.desired = 7;
    updated.rollout = Rollout::Rolling;
    updated.updated_at = at(4);
    s.update_endpoint(&updated).await.unwrap();
    assert_eq!(s.endpoint("chat").await.unwrap().unwrap(), updated);
    updated.rollout = Rollout::RolledBack;
    updated.message = Some("revision 2 never got ready: \"port\" closed".into());
    updated.revision = i64::MAX as u64;
    updated.updated_at = at(5);
    s.update_endpoint(&updated).await.unwrap();
    assert_eq!(s.endpoint("chat").await.unwrap().unwrap(), updated);
    // A revision the column cannot hold is refused, and nothing is written.
    let mut too_far = updated.clone();
    too_far.revision = u64::MAX;
    too_far.desired = 1;
    assert!(matches!(s.update_endpoint(&too_far).await, Err(StoreError::Corrupt(_))));
    assert_eq!(s.endpoint("chat").await.unwrap().unwrap(), updated);
    let mut gone = embed.clone();
    gone.id = 9_999;
    assert!(matches!(s.update_endpoint(&gone).await, Err(StoreError::NotFound(_))));
    assert!(s.endpoint("nope").await.unwrap().is_none());
    let all = s.endpoints().await.unwrap();
    assert_eq!(all, vec![updated.clone(), embed.clone()], "by id");

    // Tokens.
    let t1 = s.create_endpoint_token(chat.id, "web", "aa11", at(6)).await.unwrap();
    let t2 = s.create_endpoint_token(embed.id, "batch", "bb22", at(7)).await.unwrap();
    let t3 = s.create_endpoint_token(chat.id, "cli", "cc33", at(8)).await.unwrap();
    assert_eq!((t1.endpoint_id, t1.label.as_str(), t1.hash.as_str(), t1.created_at), (chat.id, "web", "aa11", at(6)));
    assert!(matches!(s.create_endpoint_token(embed.id, "again", "aa11", at(9)).await, Err(StoreError::Duplicate(_))));
    assert!(matches!(s.create_endpoint_token(9_999, "x", "dd44", at(9)).await, Err(StoreError::NotFound(_))));
    assert_eq!(s.endpoint_tokens(chat.id).await.unwrap(), vec![t1.clone(), t3.clone()]);
    assert_eq!(s.all_endpoint_tokens().await.unwrap(), vec![t1.clone(), t2.clone(), t3.clone()]);
    assert!(!s.delete_endpoint_token(embed.id, t1.id).await.unwrap(), "another endpoint's token stays");
    assert!(s.delete_endpoint_token(chat.id, t1.id).await.unwrap());
    assert!(!s.delete_endpoint_token(chat.id, t1.id).await.unwrap());
    assert_eq!(s.endpoint_tokens(chat.id).await.unwrap(), vec![t3.clone()]);

    // Removing an endpoint removes its tokens; its name is free again, under a new id.
    assert!(s.delete_endpoint(chat.id).await.unwrap());
    assert!(!s.delete_endpoint(chat.id).await.unwrap());
    assert!(s.endpoint("chat").await.unwrap().is_none());
    assert_eq!(s.all_endpoint_tokens().await.unwrap(), vec![t2]);
    let again = s.create_endpoint("chat", bob.id, None, &endpoint_spec("chat"), 1, at(10)).await.unwrap();
    assert!(again.id > embed.id, "ids are never given twice");
    assert!(s.endpoint_tokens(again.id).await.unwrap().is_empty());
    // The token's hash is free again too.
    s.create_endpoint_token(again.id, "web", "aa11", at(11)).await.unwrap();
}
