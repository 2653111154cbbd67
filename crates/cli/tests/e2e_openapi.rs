//! The OpenAPI spec states what the server refuses (issue 40: Schemathesis sent 32 values the
//! spec allowed and the server refused: an empty `project=`, `since=`, `begin_at`, duration,
//! name, signal or array range, a token label with a control character, a bad sha256). For
//! each, through the real binary: the server refuses the value, and the spec it serves at
//! `/openapi.json` refuses it too. Patterns are matched as JSON Schema does (a search), with
//! Python's `re`, which reads these patterns as ECMA 262 does.

mod support;

use serde_json::{Value, json};
use support::Berth;

/// Whether `pattern` matches somewhere in `value` (JSON Schema's `pattern`).
fn matches(pattern: &str, value: &str) -> bool {
    let o = std::process::Command::new("python3")
        .args(["-c", "import re,sys; sys.exit(0 if re.search(sys.argv[1], sys.argv[2]) else 1)", pattern, value])
        .output()
        .expect("python3 runs");
    match o.status.code() {
        Some(0) => true,
        Some(1) => false,
        _ => panic!("bad pattern `{pattern}`: {}", String::from_utf8_lossy(&o.stderr)),
    }
}

/// Whether `schema` (as far as these cases need: `$ref`, `oneOf`, `type`, `pattern`,
/// `minItems`, `items`, `maxLength`) allows `value`.
fn allows(spec: &Value, schema: &Value, value: &Value) -> bool {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.trim_start_matches("#/components/schemas/");
        return allows(spec, &spec["components"]["schemas"][name], value);
    }
    if let Some(any) = schema["oneOf"].as_array() {
        return any.iter().any(|s| allows(spec, s, value));
    }
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    match value {
        Value::Null => types.is_empty() || types.contains(&"null"),
        Value::String(s) => {
            let typed = types.is_empty() || types.contains(&"string");
            let pattern = schema["pattern"].as_str().is_none_or(|p| matches(p, s));
            let length = schema["maxLength"].as_u64().is_none_or(|m| s.chars().count() as u64 <= m);
            typed && pattern && length
        }
        Value::Array(items) => {
            let typed = types.is_empty() || types.contains(&"array");
            let min = schema["minItems"].as_u64().is_none_or(|m| items.len() as u64 >= m);
            typed && min && items.iter().all(|i| allows(spec, &schema["items"], i))
        }
        _ => true,
    }
}

/// The schema of query, path or header parameter `name` of `method path` in the spec.
fn param<'a>(spec: &'a Value, path: &str, method: &str, name: &str) -> &'a Value {
    let ps = spec["paths"][path][method]["parameters"].as_array().unwrap_or_else(|| panic!("{method} {path}"));
    &ps.iter().find(|p| p["name"] == name).unwrap_or_else(|| panic!("no `{name}` in {method} {path}"))["schema"]
}

/// The schema of `property` of component `schema`.
fn property<'a>(spec: &'a Value, schema: &str, property: &str) -> &'a Value {
    &spec["components"]["schemas"][schema]["properties"][property]
}

/// A request: its method, path and query, and JSON body.
type Request = (reqwest::Method, &'static str, Option<Value>);

/// A request to the manager as the admin: its status and body.
async fn send(b: &Berth, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, String) {
    let mut r = reqwest::Client::new().request(method, format!("{}{path}", b.url)).bearer_auth(b.admin_token());
    if let Some(body) = body {
        r = r.json(&body);
    }
    let resp = r.send().await.expect("the manager answers");
    (resp.status().as_u16(), resp.text().await.unwrap_or_default())
}

#[tokio::test(flavor = "current_thread")]
async fn the_spec_refuses_the_values_the_server_refuses() {
    use reqwest::Method;
    let b = Berth::up(&["--no-cache"]);
    let spec: Value = reqwest::get(format!("{}/openapi.json", b.url)).await.unwrap().json().await.unwrap();
    let mut job = serde_json::to_value(berth_model::JobSpec::command(["true"])).unwrap();
    job["begin_at"] = json!("");
    // (request, the schema that must refuse the value, the value)
    let cases: Vec<(Request, &Value, Value)> = vec![
        (
            (Method::GET, "/v1/folders/data?project=", None),
            param(&spec, "/v1/folders/{name}", "get", "project"),
            json!(""),
        ),
        ((Method::GET, "/v1/jobs?since=", None), param(&spec, "/v1/jobs", "get", "since"), json!("")),
        ((Method::GET, "/v1/jobs?until=", None), param(&spec, "/v1/jobs", "get", "until"), json!("")),
        ((Method::GET, "/v1/jobs?ids=", None), param(&spec, "/v1/jobs", "get", "ids"), json!("")),
        ((Method::GET, "/v1/usage?since=x", None), param(&spec, "/v1/usage", "get", "since"), json!("x")),
        ((Method::POST, "/v1/jobs", Some(json!({"spec": job}))), property(&spec, "JobSpec", "begin_at"), json!("")),
        (
            (Method::POST, "/v1/admin/store/purge", Some(json!({"older_than": ""}))),
            property(&spec, "PurgeRequest", "older_than"),
            json!(""),
        ),
        (
            (Method::POST, "/v1/admin/users", Some(json!({"name": ""}))),
            property(&spec, "CreateUserRequest", "name"),
            json!(""),
        ),
        (
            (Method::POST, "/v1/admin/projects", Some(json!({"name": ""}))),
            property(&spec, "CreateProjectRequest", "name"),
            json!(""),
        ),
        ((Method::POST, "/v1/folders", Some(json!({"name": ""}))), property(&spec, "CreateFolder", "name"), json!("")),
        (
            (Method::POST, "/v1/jobs/1/signal", Some(json!({"signal": ""}))),
            property(&spec, "SignalRequest", "signal"),
            json!(""),
        ),
        (
            (Method::POST, "/v1/jobs/1/tasks/cancel", Some(json!({"tasks": ""}))),
            property(&spec, "CancelTasks", "tasks"),
            json!(""),
        ),
        (
            (Method::POST, "/v1/tokens", Some(json!({"label": "a\u{1}b"}))),
            property(&spec, "CreateTokenRequest", "label"),
            json!("a\u{1}b"),
        ),
        // Fuzzing found this one: a label of a vertical tab alone was trimmed to nothing,
        // took the default label and was answered 201.
        (
            (Method::POST, "/v1/tokens", Some(json!({"label": "\u{b}"}))),
            property(&spec, "CreateTokenRequest", "label"),
            json!("\u{b}"),
        ),
        (
            (Method::POST, "/v1/code/missing", Some(json!({"blobs": [""]}))),
            property(&spec, "BlobList", "blobs"),
            json!([""]),
        ),
        (
            (Method::PUT, "/v1/code/blobs/nothex", None),
            param(&spec, "/v1/code/blobs/{sha256}", "put", "sha256"),
            json!("nothex"),
        ),
        (
            (Method::PUT, "/v1/queues/default", Some(json!({"las_thresholds": []}))),
            property(&spec, "QueueUpdate", "las_thresholds"),
            json!([]),
        ),
    ];
    let mut wrong = Vec::new();
    for ((method, path, body), schema, value) in cases {
        let (status, answer) = send(&b, method.clone(), path, body).await;
        if !matches!(status, 400 | 422) {
            wrong.push(format!("{method} {path}: the server answered {status} {answer}"));
        }
        if allows(&spec, schema, &value) {
            wrong.push(format!(
                "{method} {path}: the spec allows {value} ({schema}), which the server refuses: {answer}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
