//! The cache checks of the conformance suite (`conformance.rs`): members and buckets the
//! manager keeps for the cache nodes.

use jiff::Timestamp;

use crate::Store;

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + secs).unwrap()
}

/// The dataset cache's nodes and buckets: put replaces (origin and placement too), lists are
/// sorted by name.
pub async fn cache_state(s: &dyn Store) {
    use crate::CacheBucketRow;
    use berth_model::api::BucketPlacement;
    assert!(s.cache_nodes().await.unwrap().is_empty());
    s.put_cache_node("n2", "http://10.0.0.2:7171", 1, at(1)).await.unwrap();
    s.put_cache_node("n1", "http://10.0.0.1:7171", 1, at(2)).await.unwrap();
    s.put_cache_node("n2", "https://n2:7171", 1, at(3)).await.unwrap();
    let nodes: Vec<(String, String)> = s.cache_nodes().await.unwrap().into_iter().map(|r| (r.node, r.url)).collect();
    assert_eq!(nodes, vec![("n1".into(), "http://10.0.0.1:7171".into()), ("n2".into(), "https://n2:7171".into())]);

    let b = CacheBucketRow {
        name: "imagenet".into(),
        public: false,
        quota: Some(100 << 30),
        projects: vec!["vision".into(), "ml".into()],
        origin: Some("/shared/datasets/imagenet".into()),
        placement: BucketPlacement::Node,
        updated_at: at(4),
    };
    // a put replaces every setting, origin and placement too (back to none and spread here)
    let spread = BucketPlacement::Spread;
    let changed =
        CacheBucketRow { public: true, quota: None, projects: vec![], origin: None, placement: spread, ..b.clone() };
    s.put_cache_bucket(&b).await.unwrap();
    let a_public = CacheBucketRow { name: "a-public".into(), updated_at: at(5), ..changed.clone() };
    s.put_cache_bucket(&a_public).await.unwrap();
    assert_eq!(s.cache_buckets().await.unwrap(), vec![a_public, b]);
    let changed = CacheBucketRow { updated_at: at(6), ..changed };
    s.put_cache_bucket(&changed).await.unwrap();
    assert_eq!(s.cache_buckets().await.unwrap()[1], changed);

    assert!(s.deleted_cache_buckets().await.unwrap().is_empty());
    assert!(s.delete_cache_bucket("imagenet", at(7)).await.unwrap());
    assert!(!s.delete_cache_bucket("imagenet", at(8)).await.unwrap(), "deleted twice");
    assert!(!s.delete_cache_bucket("never", at(8)).await.unwrap());
    let names: Vec<String> = s.cache_buckets().await.unwrap().into_iter().map(|b| b.name).collect();
    assert_eq!(names, vec!["a-public"]);
    // a deleted bucket is remembered (the cache nodes are told to delete it), an unknown
    // name is not, and creating the bucket again forgets the deletion
    assert_eq!(s.deleted_cache_buckets().await.unwrap(), vec!["imagenet"]);
    s.put_cache_bucket(&CacheBucketRow { updated_at: at(9), ..changed.clone() }).await.unwrap();
    assert!(s.deleted_cache_buckets().await.unwrap().is_empty());
    assert_eq!(s.cache_buckets().await.unwrap().len(), 2);
}

/// Cache members: weights (the admin's wins over the agent's), sticky removal, and join
/// sequence numbers that only go up and are kept as long as the member's URL is.
pub async fn cache_members(s: &dyn Store) {
    let a = s.put_cache_node("a", "http://a:7171", 2, at(1)).await.unwrap();
    let b = s.put_cache_node("b", "http://b:7171", 1, at(2)).await.unwrap();
    assert_eq!((a.reported_weight, a.weight, a.removed, a.effective_weight()), (2, None, false, 2));
    assert!(b.seq > a.seq, "seq goes up: {} then {}", a.seq, b.seq);

    // the same URL again keeps the seq (a weight change too); another URL is a new member
    let again = s.put_cache_node("a", "http://a:7171", 3, at(3)).await.unwrap();
    assert_eq!((again.seq, again.reported_weight), (a.seq, 3));
    let moved = s.put_cache_node("b", "http://b2:7171", 1, at(4)).await.unwrap();
    assert!(moved.seq > b.seq, "a new URL gets a new seq");

    // the admin's weight wins, is kept across reports, and can be cleared
    let w = s.set_cache_node_weight("a", Some(10), at(5)).await.unwrap().unwrap();
    assert_eq!((w.weight, w.effective_weight()), (Some(10), 10));
    let r = s.put_cache_node("a", "http://a:7171", 4, at(6)).await.unwrap();
    assert_eq!((r.weight, r.reported_weight, r.effective_weight(), r.seq), (Some(10), 4, 10, a.seq));
    assert!(s.set_cache_node_weight("nope", Some(2), at(6)).await.unwrap().is_none());

    // removal is sticky across reports (which still record the URL); adding back keeps the seq
    let gone = s.set_cache_node_removed("a", true, at(7)).await.unwrap().unwrap();
    assert!(gone.removed);
    assert_eq!(gone.seq, a.seq);
    let r = s.put_cache_node("a", "http://a-new:7171", 4, at(8)).await.unwrap();
    assert!(r.removed, "a report does not add a removed member back");
    assert_eq!(r.url, "http://a-new:7171");
    let twice = s.set_cache_node_removed("a", true, at(9)).await.unwrap().unwrap();
    assert_eq!(twice, r, "removing twice changes nothing");
    let back = s.set_cache_node_removed("a", false, at(10)).await.unwrap().unwrap();
    assert!(!back.removed);
    assert_eq!(back.seq, r.seq, "added back: its place in the join order is kept");
    assert_eq!(back.weight, Some(10), "the admin's weight is kept");
    assert!(s.set_cache_node_removed("nope", true, at(10)).await.unwrap().is_none());

    let all = s.cache_nodes().await.unwrap();
    assert_eq!(all.iter().map(|r| r.node.as_str()).collect::<Vec<_>>(), vec!["a", "b"]);
    assert_eq!(all[0], back);
    assert_eq!(all[1], moved);
    let seqs = [a.seq, b.seq, moved.seq, r.seq];
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "every new URL a higher seq: {seqs:?}");
}
