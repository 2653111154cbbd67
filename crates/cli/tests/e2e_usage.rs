//! Measured usage through the real binary (issue 16), on the process and the docker runtime:
//! a job that keeps two CPUs busy for 3 s reports the CPU time it used (checked against what
//! the job's own shell counts with `times`), and its CPU rate while it runs; one that writes
//! 200 MiB to its `/dev/shm` reports a peak of at least that; `berth eff`, `show`, `ps` and
//! `usage` print the figures beside what the jobs were given.

mod support;

use support::Berth;

const IMAGE: &str = "berth-test/busybox:1";

/// Two loops that each keep a CPU busy for 3 s (until a timer removes their flag file; `[` is a
/// builtin: no forks), then the CPU time the shell's children used, as the shell itself counts
/// it (`times`, 2nd line). A finished `sleep` would stay a zombie, which `kill -0` still finds.
const BURN: &str = "burn() { f=/tmp/burn.$1; touch $f; (sleep 3; rm -f $f) & while [ -e $f ]; do :; done; }; \
                    burn 1 & burn 2 & wait; times";

/// 200 MiB into the kernel's private `/dev/shm` (tmpfs pages are charged to its memory cgroup),
/// held for a moment.
const FILL: &str = "dd if=/dev/zero of=/dev/shm/fill bs=1M count=200 2>/dev/null && sleep 1 && echo filled";

/// `0m5.93s 0m0.01s` (user, system) → seconds.
fn times_line(line: &str) -> f64 {
    line.split_whitespace()
        .map(|t| {
            let (m, s) = t.trim_end_matches('s').split_once('m').unwrap_or_else(|| panic!("`{t}` in `{line}`"));
            m.parse::<f64>().unwrap() * 60.0 + s.parse::<f64>().unwrap()
        })
        .sum()
}

/// Runs the two jobs (with `extra` submit flags: an image or nothing) and checks every figure.
fn measured_like_the_job_itself_counts(b: &Berth, extra: &[&str]) {
    let mut args: Vec<&str> = vec!["--cpus", "2", "--mem", "512MiB"];
    args.extend(extra);
    let burn = b.submit(&[&args[..], &["--", "sh", "-c", BURN]].concat());
    // While it runs: a CPU rate from two heartbeats, in `show` and in `ps`. Any rate: on a
    // loaded machine (CI runs tests side by side) the loops get far less than their 2 CPUs.
    let live = b.wait_job(burn, "a CPU rate", |j| j["job"]["usage"]["cpu_percent"].as_f64().is_some_and(|p| p > 1.0));
    assert!(live["job"]["usage"]["cpu_percent"].as_f64().unwrap() <= 210.0, "two CPUs at most: {live:#}");
    let ps = b.ok(&["ps"]);
    assert!(ps.contains("CPU%") && ps.contains("MEM"), "{ps}");
    let d = b.wait_state(burn, "SUCCEEDED");
    let out = b.ok(&["logs", &burn.to_string()]);
    let own = times_line(out.lines().nth(1).unwrap_or_else(|| panic!("no `times` output: {out}")));
    let cpu = d["job"]["usage"]["cpu_seconds"].as_f64().unwrap_or_else(|| panic!("no cpu_seconds: {d:#}"));
    // The shell counts its children's time; the cgroup counts it too, plus the shell's own
    // and `sleep`'s (and, for containers, up to a sampling interval less at the end).
    eprintln!("{extra:?}: measured {cpu:.2} CPU-seconds, the job's shell counted {own:.2}");
    assert!(own > 1.0, "the loops ran: {out}");
    assert!((cpu - own).abs() <= 0.6 + 0.1 * own, "measured {cpu} s, the job counted {own} s: {d:#}");
    let wall = 6.0 + 2.0 * 3.0; // 2 CPUs × a run of at most a few seconds more than 3
    assert!(cpu <= wall, "{cpu} s on 2 CPUs: {d:#}");
    assert_eq!(d["kernels"][0]["usage"]["cpu_seconds"].as_f64(), Some(cpu), "{d:#}");
    let eff = b.json(&["eff", &burn.to_string()]);
    assert_eq!(eff["cpus"], 2.0);
    let e = eff["efficiency"]["cpu"].as_f64().unwrap();
    let expect = cpu / (2.0 * eff["wall_secs"].as_f64().unwrap());
    assert!((e - expect).abs() < 1e-6 && e > 0.0, "{eff:#}");
    let text = b.ok(&["eff", &burn.to_string()]);
    assert!(text.contains("cpu efficiency:") && text.contains("core-walltime"), "{text}");
    let show = b.ok(&["show", &burn.to_string()]);
    assert!(show.contains("used:") && show.contains("cpu "), "{show}");

    let fill = b.submit(&[&args[..], &["--", "sh", "-c", FILL]].concat());
    let d = b.wait_state(fill, "SUCCEEDED");
    let peak = d["job"]["usage"]["memory_peak_bytes"].as_u64().unwrap_or_else(|| panic!("no peak: {d:#}"));
    eprintln!("{extra:?}: peak memory {} MiB after writing 200 MiB", peak >> 20);
    assert!(peak >= 200 << 20, "a peak of {peak} bytes after writing 200 MiB: {d:#}");
    assert!(peak <= 512 << 20, "within its limit: {d:#}");

    // `berth usage`: CPU-hours used beside those allocated.
    let lines = b.json(&["usage", "--since", "1h"]);
    let used = lines[0]["cpu_hours_used"].as_f64().unwrap_or_else(|| panic!("{lines:#}"));
    assert!(used * 3600.0 >= cpu - 1e-6, "the burn's {cpu} s are in {used} h: {lines:#}");
    assert!(lines[0]["cpu_hours"].as_f64().unwrap() * 3600.0 >= used * 3600.0, "{lines:#}");
    let table = b.ok(&["usage", "--since", "1h"]);
    assert!(table.contains("CPU-H USED"), "{table}");
}

#[test]
fn process_jobs_report_what_they_used() {
    if !support::cgroups_usable() {
        return;
    }
    // Samples every second: the 3 s job shows a rate while it runs (the default is 5 s).
    let b = Berth::up(&["--usage-interval", "1s"]);
    measured_like_the_job_itself_counts(&b, &[]);
}

#[test]
fn container_jobs_report_what_they_used() {
    if !support::docker_ready("container_jobs_report_what_they_used") {
        return;
    }
    let node = format!("us{}", std::process::id());
    let b = Berth::cluster("", &[(&node, &["--usage-interval", "1s"])]);
    measured_like_the_job_itself_counts(&b, &["--image", IMAGE]);
    support::remove_containers(&node);
}
