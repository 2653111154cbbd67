//! Deleting a bucket through the store's API: its objects leave the index, the memory tier,
//! the counters and the disk; a PUT begun before the deletion does not bring one back (even
//! when the bucket is created again meanwhile); and a deletion a crash cut short (the bucket
//! named in `deleting.json`, its files still there) is finished by the next start, without
//! the objects ever being served or their bucket coming back.

use std::path::Path;

use berth_cache::store::BucketDeleted;
use berth_cache::{BucketConfig, Store, StoreError};

fn bucket(store: &Store, name: &str) {
    store
        .put_bucket(BucketConfig {
            name: name.into(),
            public: false,
            quota: None,
            projects: vec![],
            ..Default::default()
        })
        .unwrap();
}

fn put(store: &Store, bucket: &str, key: &str, data: &[u8]) {
    let mut p = store.begin_put(bucket, key.as_bytes(), data.len() as u64).unwrap();
    p.write(data).unwrap();
    store.commit(p).unwrap();
}

/// Object files on disk (every file under `objects/`).
fn object_files(root: &Path) -> usize {
    std::fs::read_dir(root.join("objects"))
        .unwrap()
        .flatten()
        .map(|d| std::fs::read_dir(d.path()).map(|f| f.count()).unwrap_or(0))
        .sum()
}

fn names(store: &Store) -> Vec<String> {
    store.buckets().into_iter().map(|b| b.name).collect()
}

/// Two buckets, `gone` with 20 objects (some read into memory) and `kept` with 5.
fn filled(root: &Path) -> Store {
    let store = Store::open(root, 1 << 20).unwrap();
    bucket(&store, "gone");
    bucket(&store, "kept");
    for i in 0..20 {
        put(&store, "gone", &format!("s3://host/gone/{i}"), format!("data {i}").as_bytes());
    }
    for i in 0..5 {
        put(&store, "kept", &format!("k{i}"), b"kept data");
    }
    for i in 0..3 {
        let key = format!("s3://host/gone/{i}");
        let f = store.lookup("gone", key.as_bytes(), true).unwrap();
        let o = store.open_object("gone", key.as_bytes(), &f, 1 << 20).unwrap().unwrap();
        store.keep_in_memory(&f, &o);
    }
    assert!(store.memory_used() > 0);
    assert_eq!(object_files(root), 25);
    store
}

fn assert_only_kept(store: &Store, root: &Path) {
    assert_eq!(names(store), vec!["kept"]);
    assert_eq!(object_files(root), 5, "the deleted bucket's files are gone, the other's stay");
    assert_eq!(store.used(), 5 * 9);
    assert!(store.lookup("gone", b"s3://host/gone/0", true).is_none());
    assert!(matches!(store.begin_put("gone", b"k", 1), Err(StoreError::NoBucket(_))));
    assert!(store.lookup("kept", b"k0", true).is_some());
    let stats = store.stats();
    assert_eq!(stats.iter().map(|s| s.bucket.as_str()).collect::<Vec<_>>(), vec!["kept"], "no counters of it left");
    let deleting: Vec<String> = serde_json::from_slice(&std::fs::read(root.join("deleting.json")).unwrap()).unwrap();
    assert!(deleting.is_empty(), "{deleting:?}");
}

#[test]
fn a_deleted_bucket_leaves_index_memory_counters_and_disk() {
    let dir = tempfile::tempdir().unwrap();
    let store = filled(dir.path());
    let bytes: u64 = (0..20).map(|i| format!("data {i}").len() as u64).sum();
    assert_eq!(store.delete_bucket("gone").unwrap(), BucketDeleted { objects: 20, bytes });
    assert_eq!(store.memory_used(), 0, "its objects left the memory tier");
    assert_only_kept(&store, dir.path());
    assert!(matches!(store.delete_bucket("gone"), Err(StoreError::NoBucket(_))), "deleting twice");
    let msg = store.delete_bucket("nope").unwrap_err().to_string();
    assert!(msg.contains("berth cache bucket create nope"), "{msg}");

    // a restart does not bring it back, and it can be created again, empty
    drop(store);
    let store = Store::open(dir.path(), 1 << 20).unwrap();
    assert_only_kept(&store, dir.path());
    bucket(&store, "gone");
    assert!(store.lookup("gone", b"s3://host/gone/0", true).is_none());
    put(&store, "gone", "new", b"new");
    assert_eq!(store.lookup("gone", b"new", false).map(|f| f.size), Some(3));
}

#[test]
fn a_put_begun_before_the_deletion_does_not_bring_an_object_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), 1 << 20).unwrap();
    bucket(&store, "ds");
    let mut early = store.begin_put("ds", b"k", 4).unwrap();
    early.write(b"old!").unwrap();
    let mut late = store.begin_put("ds", b"j", 4).unwrap();
    late.write(b"old!").unwrap();
    store.delete_bucket("ds").unwrap();
    assert!(matches!(store.commit(early), Err(StoreError::NoBucket(_))), "committed into a deleted bucket");
    // created again before the other PUT finishes: still the old bucket's object
    bucket(&store, "ds");
    assert!(matches!(store.commit(late), Err(StoreError::NoBucket(_))), "committed into the new bucket");
    assert!(store.lookup("ds", b"j", false).is_none());
    assert_eq!(object_files(dir.path()), 0);
    assert_eq!(std::fs::read_dir(dir.path().join("tmp")).unwrap().count(), 0, "temp files left behind");
    put(&store, "ds", "k", b"new");
    assert_eq!(store.lookup("ds", b"k", false).map(|f| f.size), Some(3));
}

/// The state a crash right after the first step leaves: the bucket named in `deleting.json`,
/// its settings and files still there.
#[test]
fn a_start_finishes_a_deletion_cut_short_after_it_was_marked() {
    let dir = tempfile::tempdir().unwrap();
    drop(filled(dir.path()));
    std::fs::write(dir.path().join("deleting.json"), br#"["gone"]"#).unwrap();
    let store = Store::open(dir.path(), 1 << 20).unwrap();
    assert_only_kept(&store, dir.path());
    drop(store);
    let store = Store::open(dir.path(), 1 << 20).unwrap();
    assert_only_kept(&store, dir.path());
}

/// Later: the settings saved without the bucket and some files unlinked. Without the mark,
/// the start would index the rest into a private bucket of that name (what it does for
/// objects whose settings were lost).
#[test]
fn a_start_finishes_a_deletion_cut_short_midway_through_the_unlinks() {
    let dir = tempfile::tempdir().unwrap();
    let store = filled(dir.path());
    for i in 0..7 {
        let f = store.lookup("gone", format!("s3://host/gone/{i}").as_bytes(), false).unwrap();
        std::fs::remove_file(store.path_of(&f)).unwrap();
    }
    drop(store);
    std::fs::write(dir.path().join("deleting.json"), br#"["gone"]"#).unwrap();
    std::fs::write(dir.path().join("buckets.json"), br#"[{"name": "kept"}]"#).unwrap();
    let store = Store::open(dir.path(), 1 << 20).unwrap();
    assert_only_kept(&store, dir.path());
}
