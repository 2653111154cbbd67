//! The conformance checks of [`crate::Tenancy`] (users, API tokens, join tokens, projects and
//! quotas), part of [`crate::conformance`] and run on every adapter through
//! [`conformance_tests!`](crate::conformance_tests).

use jiff::Timestamp;

use berth_model::JobSpec;

use crate::{JobFilter, Store, StoreError};

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + secs).unwrap()
}

/// Users, API tokens and join tokens.
pub async fn users_and_tokens(s: &dyn Store) {
    let alice = s.create_user("alice", "admin", at(0)).await.unwrap();
    assert_eq!(alice.name, "alice");
    assert_eq!(alice.role, "admin");
    assert!(!alice.disabled);
    assert!(matches!(s.create_user("alice", "user", at(1)).await, Err(StoreError::Duplicate(_))));
    assert_eq!(s.user_by_name("alice").await.unwrap().unwrap().id, alice.id);
    assert!(s.user_by_name("nobody").await.unwrap().is_none());

    s.add_api_token(alice.id, "abc123", "bootstrap", at(2)).await.unwrap();
    assert_eq!(s.user_by_token_hash("abc123").await.unwrap().unwrap().name, "alice");
    assert!(s.user_by_token_hash("nope").await.unwrap().is_none());

    assert!(!s.join_token_exists("j1").await.unwrap());
    s.add_join_token("j1", at(3)).await.unwrap();
    s.add_join_token("j1", at(4)).await.unwrap();
    assert!(s.join_token_exists("j1").await.unwrap());
    assert_eq!(s.join_token_hashes().await.unwrap(), vec!["j1".to_string()]);

    // A user and its first token go in together, or not at all.
    let bob = s.create_user_with_token("bob", "user", "bobhash", "created by admin", at(5)).await.unwrap();
    assert_eq!(s.user_by_token_hash("bobhash").await.unwrap().unwrap().id, bob.id);
    let dup = s.create_user_with_token("carol", "user", "bobhash", "created by admin", at(6)).await;
    assert!(matches!(dup, Err(StoreError::Duplicate(_))), "{dup:?}");
    assert!(s.user_by_name("carol").await.unwrap().is_none(), "a user whose token failed was kept");
}

/// Tokens with lifetimes, projects and members, the job visibility filter, the audit log.
pub async fn tenancy(s: &dyn Store) {
    let bob = s.create_user("bob", "user", at(0)).await.unwrap();
    let carol = s.create_user("carol", "user", at(0)).await.unwrap();
    let hash = "ab".repeat(32);
    s.add_token(bob.id, &hash, "laptop", at(1), Some(at(100)), None).await.unwrap();
    let (t, u) = s.token(&hash).await.unwrap().unwrap();
    assert_eq!((t.id(), t.label.as_str(), u.name.as_str()), (&hash[..12], "laptop", "bob"));
    assert!(t.usable(at(99)) && !t.usable(at(100)), "expiry is exclusive");
    s.touch_token(&hash, at(5)).await.unwrap();
    assert_eq!(s.token(&hash).await.unwrap().unwrap().0.last_used_at, Some(at(5)));
    assert!(matches!(s.revoke_token(Some(carol.id), &hash[..12], at(6)).await, Err(StoreError::NotFound(_))));
    assert!(matches!(s.revoke_token(Some(bob.id), "abab", at(6)).await, Err(StoreError::NotFound(_))), "too short");
    let r = s.revoke_token(Some(bob.id), &hash[..12], at(6)).await.unwrap();
    assert_eq!(r.revoked_at, Some(at(6)));
    assert!(!s.token(&hash).await.unwrap().unwrap().0.usable(at(7)));
    assert_eq!(s.tokens(Some(bob.id)).await.unwrap().len(), 1);
    assert!(s.tokens(Some(carol.id)).await.unwrap().is_empty());

    assert!(s.set_user_disabled("bob", true).await.unwrap().disabled);
    assert!(matches!(s.set_user_disabled("zed", true).await, Err(StoreError::NotFound(_))));
    assert_eq!(s.users().await.unwrap().len(), 2);

    s.create_project("vision", at(0)).await.unwrap();
    assert!(matches!(s.create_project("vision", at(0)).await, Err(StoreError::Duplicate(_))));
    s.add_member("vision", "bob", at(1)).await.unwrap();
    s.add_member("vision", "bob", at(2)).await.unwrap();
    assert!(matches!(s.add_member("nope", "bob", at(1)).await, Err(StoreError::NotFound(_))));
    assert!(matches!(s.add_member("vision", "zed", at(1)).await, Err(StoreError::NotFound(_))));
    assert_eq!(s.memberships(bob.id).await.unwrap(), vec!["vision".to_string()]);
    assert_eq!(s.projects().await.unwrap()[0].members, vec!["bob".to_string()]);

    let mut shared = JobSpec::command(["true"]);
    shared.project = Some("vision".into());
    shared.shared = true;
    let mut private = shared.clone();
    private.shared = false;
    let a = s.insert_job(carol.id, &shared, None, at(10)).await.unwrap();
    let _b = s.insert_job(carol.id, &private, None, at(11)).await.unwrap();
    let filter = JobFilter { user_id: Some(bob.id), projects: vec!["vision".into()], ..Default::default() };
    let seen = s.jobs(&filter).await.unwrap();
    assert_eq!(seen.iter().map(|j| j.id).collect::<Vec<_>>(), vec![a]);
    assert!(s.jobs(&JobFilter { user_id: Some(bob.id), ..Default::default() }).await.unwrap().is_empty());
    s.remove_member("vision", "bob").await.unwrap();
    assert!(matches!(s.remove_member("vision", "bob").await, Err(StoreError::NotFound(_))));

    let l = berth_model::QuotaLimits { gpu_milli: Some(8000), pending_jobs: Some(10), ..Default::default() };
    s.set_quota(berth_model::QuotaKind::Project, "vision", Some(&l), at(1)).await.unwrap();
    let l2 = berth_model::QuotaLimits { running_jobs: Some(2), ..l };
    s.set_quota(berth_model::QuotaKind::Project, "vision", Some(&l2), at(2)).await.unwrap();
    assert_eq!(s.quotas().await.unwrap(), vec![(berth_model::QuotaKind::Project, "vision".to_string(), l2)]);
    s.set_quota(berth_model::QuotaKind::Project, "vision", None, at(3)).await.unwrap();
    assert!(s.quotas().await.unwrap().is_empty());
    assert!(matches!(
        s.set_quota(berth_model::QuotaKind::User, "bob", None, at(3)).await,
        Err(StoreError::NotFound(_))
    ));

    s.audit(at(1), "alice", "user.create", "bob", "").await.unwrap();
    s.audit(at(2), "alice", "token.revoke", "abab", "").await.unwrap();
    let log = s.audit_log(None, 10).await.unwrap();
    assert_eq!(log.iter().map(|e| e.action.as_str()).collect::<Vec<_>>(), ["token.revoke", "user.create"]);
    assert_eq!(s.audit_log(Some(at(2)), 10).await.unwrap().len(), 1);
    assert_eq!(s.audit_log(None, 1).await.unwrap().len(), 1);
}
