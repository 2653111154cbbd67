//! The conformance checks of [`crate::Folders`], part of [`crate::conformance`] and run on
//! every adapter through [`conformance_tests!`](crate::conformance_tests).

use jiff::Timestamp;

use crate::{Store, StoreError};

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + secs).unwrap()
}

/// Folders: unique names per owner and per project, shares, quotas, removal.
pub async fn folders(s: &dyn Store) {
    let ann = s.create_user("ann", "user", at(0)).await.unwrap();
    let bob = s.create_user("bob", "user", at(0)).await.unwrap();
    let data = s.create_folder("data", ann.id, None, Some(10 << 30), at(1)).await.unwrap();
    assert_eq!((data.name.as_str(), data.owner.as_str(), data.project.as_deref()), ("data", "ann", None));
    assert_eq!((data.quota_bytes, data.created_at), (Some(10 << 30), at(1)));
    // Another user, or a project, may have a folder of the same name; the same owner may not.
    let bobs = s.create_folder("data", bob.id, None, None, at(2)).await.unwrap();
    let vision = s.create_folder("data", ann.id, Some("vision"), None, at(3)).await.unwrap();
    assert!(matches!(s.create_folder("data", ann.id, None, None, at(4)).await, Err(StoreError::Duplicate(_))));
    assert!(matches!(
        s.create_folder("data", bob.id, Some("vision"), None, at(4)).await,
        Err(StoreError::Duplicate(_))
    ));
    assert_eq!(vision.project.as_deref(), Some("vision"));

    s.share_folder(data.id, "vision", true, at(5)).await.unwrap();
    s.share_folder(data.id, "nlp", false, at(5)).await.unwrap();
    s.share_folder(data.id, "vision", false, at(6)).await.unwrap();
    let got = s.folder(data.id).await.unwrap().unwrap();
    assert_eq!(got.shares, vec![("nlp".to_string(), false), ("vision".to_string(), false)], "a share again replaces");
    s.unshare_folder(data.id, "nlp").await.unwrap();
    assert!(matches!(s.unshare_folder(data.id, "nlp").await, Err(StoreError::NotFound(_))));
    s.set_folder_quota(data.id, None).await.unwrap();
    s.set_folder_quota(bobs.id, Some(1 << 20)).await.unwrap();
    assert!(matches!(s.set_folder_quota(9_999, None).await, Err(StoreError::NotFound(_))));

    let all = s.folders().await.unwrap();
    assert_eq!(all.iter().map(|f| f.id).collect::<Vec<_>>(), vec![data.id, bobs.id, vision.id]);
    assert_eq!((all[0].quota_bytes, &all[0].shares), (None, &vec![("vision".to_string(), false)]));
    assert_eq!(all[1].quota_bytes, Some(1 << 20));

    s.delete_folder(data.id).await.unwrap();
    assert!(s.folder(data.id).await.unwrap().is_none());
    assert!(matches!(s.delete_folder(data.id).await, Err(StoreError::NotFound(_))));
    // Its name is free again, under a new id.
    let again = s.create_folder("data", ann.id, None, None, at(7)).await.unwrap();
    assert!(again.id > vision.id, "ids are never given twice");
    assert!(again.shares.is_empty());
}
