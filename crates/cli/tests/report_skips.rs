//! scripts/report-skips.py, which scripts/test.sh runs on nextest's JUnit report so that tests
//! that printed `SKIPPED:` are listed instead of counted as passes (and fail on CI unless they
//! need an NVIDIA GPU).

use std::path::PathBuf;
use std::process::{Command, Output};

const REPORT: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="nextest-run" tests="4">
  <testsuite name="berth-cli::e2e_docker" tests="1">
    <testcase name="runs_an_image" classname="berth-cli::e2e_docker">
      <system-out>running 1 test</system-out>
      <system-err>SKIPPED: runs_an_image: no &quot;docker&quot; here &amp; no busybox
</system-err>
    </testcase>
    <testcase name="plain" classname="berth-cli::e2e_docker"><system-err>all fine</system-err></testcase>
  </testsuite>
  <testsuite name="berth-agent" tests="2">
    <testcase name="gpu_a" classname="berth-agent"><system-err>SKIPPED: no NVIDIA GPU: nvml is not available</system-err></testcase>
    <testcase name="gpu_b" classname="berth-agent"><system-err>SKIPPED: no NVIDIA GPU: nvml sees no devices</system-err></testcase>
  </testsuite>
</testsuites>
"#;

fn report(ci: bool, xml: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("junit.xml");
    std::fs::write(&path, xml).unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/report-skips.py");
    let mut cmd = Command::new("python3");
    cmd.arg(script);
    if ci {
        cmd.arg("--ci");
    }
    cmd.arg(&path).output().expect("python3 runs (scripts/test.sh installs it)")
}

#[test]
fn skipped_tests_are_listed_and_gpu_ones_counted() {
    let out = report(false, REPORT);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 test skipped (they passed"), "{text}");
    assert!(
        text.contains(r#"berth-cli::e2e_docker runs_an_image: SKIPPED: runs_an_image: no "docker" here & no busybox"#),
        "{text}"
    );
    assert!(text.contains("2 tests skipped: no NVIDIA GPU"), "{text}");
    assert!(!text.contains("plain"), "{text}");
}

#[test]
fn on_ci_a_skip_other_than_a_missing_gpu_fails() {
    let out = report(true, REPORT);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stderr).contains("CI=true: 1 test skipped"));

    let gpu_only = REPORT.replace("SKIPPED: runs_an_image", "ran");
    let out = report(true, &gpu_only);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "missing GPUs alone pass on CI: {text}");
    assert!(text.contains("2 tests skipped: no NVIDIA GPU"), "{text}");
}

#[test]
fn an_unreadable_report_is_an_error_not_a_clean_run() {
    let out = report(false, "<testsuites><testcase");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read the test report"));
}
