//! `berth ps -o table|wide|json|yaml|name` against a real `berth up`: YAML holds the same
//! objects as JSON, `name` one id per line, `wide` its extra columns; commands that list
//! nothing more refuse the new formats at parse time, naming theirs.

mod support;

use serde_json::Value;
use support::{Berth, text};

#[test]
fn ps_prints_every_format() {
    let b = Berth::up(&["--no-cache"]);
    let done = b.submit(&["--name", "quick", "--", "true"]);
    b.wait_state(done, "SUCCEEDED");
    let running = b.submit(&["--name", "long", "--cpus", "1", "--", "sleep", "60"]);
    b.wait_state(running, "RUNNING");

    let names = b.ok(&["ps", "-a", "-o", "name"]);
    let mut ids: Vec<i64> = names.lines().map(|l| l.parse().expect("one id per line")).collect();
    ids.sort();
    assert_eq!(ids, [done, running], "{names}");
    assert_eq!(b.ok(&["ps", "-o", "name"]).trim(), running.to_string(), "without -a: unfinished jobs only");

    let json = b.json(&["ps", "-a"]);
    let yaml: Value = yaml_serde::from_str(&b.ok(&["ps", "-a", "-o", "yaml"])).expect("valid YAML");
    // The same objects (ages and usage samples may move between the two calls).
    let key = |v: &Value| {
        v.as_array()
            .unwrap()
            .iter()
            .map(|j| (j["id"].clone(), j["name"].clone(), j["state"].clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(key(&yaml), key(&json));
    assert_eq!(yaml[0]["submitted_at"], json[0]["submitted_at"]);

    let wide = b.ok(&["ps", "-a", "-o", "wide"]);
    let header = wide.lines().next().unwrap();
    for col in ["ID", "QUEUE", "PRI", "STATE", "REASON", "CPUS", "MEM LIMIT", "NODES", "SUBMITTED", "STARTED", "EXIT"] {
        assert!(header.contains(col), "{col} missing: {wide}");
    }
    let quick = wide.lines().find(|l| l.contains("quick")).unwrap();
    assert!(quick.contains("default") && quick.contains("SUCCEEDED"), "{wide}");
    let table = b.ok(&["ps", "-a"]);
    assert!(!table.lines().next().unwrap().contains("QUEUE"), "the plain table stays narrow: {table}");

    // Other commands keep `-o table|json` and say so.
    for args in [["nodes", "-o", "yaml"], ["queues", "-o", "name"]] {
        let o = b.cli(&args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("invalid value") && err.contains("possible values: table, json"), "{err}");
    }
    b.ok(&["cancel", &running.to_string()]);
}
