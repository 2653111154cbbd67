//! `berth ps -o table|wide|json|yaml|name` against a real `berth up`: YAML holds the same
//! objects as JSON, `name` one id per line, `wide` its extra columns; commands that list
//! nothing more refuse the new formats at parse time, naming theirs. `ps --watch` prints each
//! change as the manager stores it.

mod support;

use std::io::BufRead;
use std::process::Stdio;

use serde_json::Value;
use support::{Berth, PATIENCE, base_cmd, text};

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

#[test]
fn ps_watch_prints_each_change_as_it_is_stored() {
    let b = Berth::up(&["--no-cache"]);
    let mut watch = base_cmd(b.home.path()).args(["ps", "--watch"]).stdout(Stdio::piped()).spawn().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let out = watch.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    // the (empty) table first; the stream opens right after it, well within the job's 2 s
    let header = rx.recv_timeout(PATIENCE).expect("the table's header");
    assert!(header.contains("ID"), "{header}");
    let id = b.submit(&["--name", "watched", "--", "sleep", "2"]).to_string();
    let mut seen = Vec::new();
    let t0 = std::time::Instant::now();
    while !seen.iter().any(|l: &String| l.contains(&format!("  {id}  watched  SUCCEEDED"))) {
        assert!(t0.elapsed() < PATIENCE, "no SUCCEEDED line for job {id}: {seen:?}");
        if let Ok(l) = rx.recv_timeout(std::time::Duration::from_millis(200)) {
            seen.push(l);
        }
    }
    let _ = watch.kill();
    let _ = watch.wait();
    // a format --watch cannot draw is refused
    let o = b.cli(&["ps", "--watch", "-o", "json"]);
    assert!(!o.status.success() && text(&o.stderr).contains("--watch draws a table"), "{}", text(&o.stderr));
}
