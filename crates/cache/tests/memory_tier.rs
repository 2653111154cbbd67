//! The store's memory tier ([`berth_cache::hot`]) through the store's API: what a GET keeps in
//! memory leaves it when the object is replaced, deleted or evicted (by capacity or by a
//! quota change), a fill that raced with a PUT is refused, and the bytes held stay bounded.

use berth_cache::store::Found;
use berth_cache::{BucketConfig, Store};

fn bucket(store: &Store, name: &str, quota: Option<u64>) {
    store
        .put_bucket(BucketConfig { name: name.into(), public: false, quota, projects: vec![], ..Default::default() })
        .unwrap();
}

fn put(store: &Store, bucket: &str, key: &str, data: &[u8]) {
    let mut p = store.begin_put(bucket, key.as_bytes(), data.len() as u64).unwrap();
    p.write(data).unwrap();
    store.commit(p).unwrap();
}

/// What a GET does: look up, read the file when memory does not hold it, keep it in memory.
fn get(store: &Store, bucket: &str, key: &str) -> Option<(Vec<u8>, bool)> {
    let found = store.lookup(bucket, key.as_bytes(), true)?;
    if let Some(h) = &found.hot {
        return Some((h.data.to_vec(), true));
    }
    let opened = store.open_object(bucket, key.as_bytes(), &found, 1 << 20).unwrap()?;
    store.keep_in_memory(&found, &opened);
    Some((opened.data.expect("small objects are read whole").to_vec(), false))
}

fn hot(store: &Store, bucket: &str, key: &str) -> Option<Vec<u8>> {
    store.lookup(bucket, key.as_bytes(), false).and_then(|f: Found| f.hot).map(|h| h.data.to_vec())
}

#[test]
fn replaced_and_deleted_objects_leave_memory() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), 1 << 20).unwrap();
    bucket(&store, "ds", None);
    put(&store, "ds", "k", b"version 1");
    assert_eq!(get(&store, "ds", "k"), Some((b"version 1".to_vec(), false)), "the first GET reads the file");
    assert_eq!(get(&store, "ds", "k"), Some((b"version 1".to_vec(), true)), "the second is served from memory");
    assert_eq!(store.memory_used(), 9);

    put(&store, "ds", "k", b"version two");
    assert_eq!(hot(&store, "ds", "k"), None, "a PUT over the object drops the old copy");
    assert_eq!(get(&store, "ds", "k"), Some((b"version two".to_vec(), false)));
    assert_eq!(get(&store, "ds", "k"), Some((b"version two".to_vec(), true)));

    assert!(store.delete("ds", b"k"));
    assert_eq!(store.lookup("ds", b"k", false).map(|f| f.size), None);
    assert_eq!(store.memory_used(), 0, "a deleted object is gone from memory");
    put(&store, "ds", "k", b"3");
    assert_eq!(get(&store, "ds", "k"), Some((b"3".to_vec(), false)), "a new object is read from its file");
}

#[test]
fn a_fill_that_raced_with_a_put_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), 1 << 20).unwrap();
    bucket(&store, "ds", None);
    put(&store, "ds", "k", b"old");
    // a GET looks up and reads the old file...
    let found = store.lookup("ds", b"k", true).unwrap();
    let opened = store.open_object("ds", b"k", &found, 1 << 20).unwrap().unwrap();
    // ...a PUT commits a new version before the GET keeps what it read
    put(&store, "ds", "k", b"new");
    store.keep_in_memory(&found, &opened);
    assert_eq!(hot(&store, "ds", "k"), None, "the old data must not be kept");
    assert_eq!(get(&store, "ds", "k"), Some((b"new".to_vec(), false)));
    assert_eq!(get(&store, "ds", "k"), Some((b"new".to_vec(), true)));
}

#[test]
fn evicted_objects_leave_memory() {
    let dir = tempfile::tempdir().unwrap();
    // room for three 1000-byte objects
    let store = Store::open(dir.path(), 3000).unwrap();
    store.set_memory_limit(1 << 20);
    bucket(&store, "ds", None);
    for k in ["a", "b", "c"] {
        put(&store, "ds", k, &[k.as_bytes()[0]; 1000]);
        get(&store, "ds", k);
        assert!(hot(&store, "ds", k).is_some());
    }
    put(&store, "ds", "d", &[b'd'; 1000]);
    let gone: Vec<_> =
        ["a", "b", "c"].into_iter().filter(|k| store.lookup("ds", k.as_bytes(), false).is_none()).collect();
    assert_eq!(gone.len(), 1, "one object was evicted for d");
    assert_eq!(hot(&store, "ds", gone[0]), None);
    assert_eq!(store.memory_used(), 2000, "only the two objects still stored are in memory");

    // a quota lowered under the bucket's usage evicts, from memory too
    bucket(&store, "ds", Some(1000));
    let left: Vec<_> =
        ["a", "b", "c", "d"].into_iter().filter(|k| store.lookup("ds", k.as_bytes(), false).is_some()).collect();
    assert_eq!(left.len(), 1);
    assert!(store.memory_used() <= 1000, "{} bytes in memory for one 1000-byte object", store.memory_used());
    let s = &store.stats()[0];
    assert_eq!((s.evictions, s.evicted_bytes), (3, 3000), "evictions are counted as before");
}

#[test]
fn memory_stays_within_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), 1 << 20).unwrap();
    store.set_memory_limit(4000);
    bucket(&store, "ds", None);
    for i in 0..20 {
        let k = format!("k{i}");
        put(&store, "ds", &k, &[i as u8; 1000]);
        assert_eq!(get(&store, "ds", &k).unwrap().0, vec![i as u8; 1000]);
        assert!(store.memory_used() <= 4000, "{} bytes in memory past a 4000-byte limit", store.memory_used());
    }
    assert_eq!(get(&store, "ds", "k19"), Some((vec![19; 1000], true)), "the newest stays");
    // every object is still served, from memory or from its file
    for i in 0..20 {
        assert_eq!(get(&store, "ds", &format!("k{i}")).unwrap().0, vec![i as u8; 1000]);
    }
    store.set_memory_limit(0);
    assert_eq!(store.memory_used(), 0);
    assert_eq!(get(&store, "ds", "k3"), Some((vec![3; 1000], false)), "with no memory, files are read");
    assert_eq!(store.memory_used(), 0);
}
