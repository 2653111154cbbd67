//! A public bucket is readable by everyone, and only that (issue 13, item 7): writes and
//! deletes still need a token of one of the bucket's projects, or an admin token. Over HTTP
//! with the real server.

mod support;

use support::Srv;

#[test]
fn another_projects_token_cannot_write_to_or_delete_from_a_public_bucket() {
    let s = Srv::start(1 << 30);
    let admin = s.token(&[], true);
    let owner = s.token(&["vision"], false);
    let other = s.token(&["speech", "nlp"], false);
    let (st, body) = s.request("PUT", "/v1/buckets/pub", Some(&admin), br#"{"public":true,"projects":["vision"]}"#);
    assert_eq!(st, 200, "{body}");
    let obj = "/v1/objects/pub/img/0001.jpg";

    // the bucket's own project and an admin write
    assert_eq!(s.request("PUT", obj, Some(&owner), b"by-vision").0, 201);
    assert_eq!(s.request("PUT", "/v1/objects/pub/by-admin", Some(&admin), b"by-admin").0, 201);

    // another project's token may neither write nor delete, and nothing changes
    let (st, body) = s.request("PUT", obj, Some(&other), b"overwritten");
    assert_eq!(st, 403, "{body}");
    assert!(body.contains("public to read") && body.contains("[vision]"), "{body}");
    assert_eq!(s.request("PUT", "/v1/objects/pub/new", Some(&other), b"x").0, 403);
    assert_eq!(s.request("DELETE", obj, Some(&other), b"").0, 403);
    // without a token: 401 for writes as before
    assert_eq!(s.request("PUT", obj, None, b"anon").0, 401);
    assert_eq!(s.request("DELETE", obj, None, b"").0, 401);

    // everyone reads, without a token or with any project's
    assert_eq!(s.request("GET", obj, None, b""), (200, "by-vision".to_string()));
    assert_eq!(s.request("GET", obj, Some(&other), b""), (200, "by-vision".to_string()));
    assert_eq!(s.request("GET", "/v1/objects/pub/new", None, b"").0, 404, "the refused PUT stored nothing");

    // the bucket's project and an admin delete
    assert_eq!(s.request("DELETE", obj, Some(&owner), b"").0, 204);
    assert_eq!(s.request("DELETE", "/v1/objects/pub/by-admin", Some(&admin), b"").0, 204);
    assert_eq!(s.request("GET", obj, None, b"").0, 404);

    // a public bucket with no projects: only admins write to it
    assert_eq!(s.request("PUT", "/v1/buckets/open", Some(&admin), br#"{"public":true}"#).0, 200);
    assert_eq!(s.request("PUT", "/v1/objects/open/k", Some(&owner), b"x").0, 403);
    assert_eq!(s.request("PUT", "/v1/objects/open/k", Some(&admin), b"x").0, 201);
    assert_eq!(s.request("GET", "/v1/objects/open/k", None, b""), (200, "x".to_string()));
}
