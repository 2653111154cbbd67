//! Folder quotas held by the filesystem: with the folder root on btrfs with quotas enabled,
//! each folder is a subvolume whose qgroup limit is its quota, so a job writing past it gets
//! "Disk quota exceeded" (EDQUOT) from the kernel, and raising the quota lets it write. The
//! btrfs is a loop-mounted image this test makes (btrfs-progs, which scripts/test.sh installs);
//! required on CI.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::{Berth, text};

/// A btrfs image loop-mounted on a dir, with quotas on, for the life of the value.
struct Btrfs {
    mnt: PathBuf,
    _dir: tempfile::TempDir,
}

impl Btrfs {
    fn mount() -> Option<Btrfs> {
        let dir = support::shared_tempdir();
        let img = dir.path().join("fs.img");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let run = |cmd: &str, args: &[&str], path: &Path| {
            Command::new(cmd).args(args).arg(path).output().map_err(|e| e.to_string()).and_then(|o| {
                if o.status.success() { Ok(()) } else { Err(format!("{cmd} {args:?}: {}", text(&o.stderr))) }
            })
        };
        let made = std::fs::File::create(&img)
            .and_then(|f| f.set_len(256 << 20))
            .map_err(|e| e.to_string())
            .and_then(|_| run("mkfs.btrfs", &["-q"], &img))
            .and_then(|_| {
                Command::new("mount").args(["-o", "loop"]).arg(&img).arg(&mnt).output().map_err(|e| e.to_string())
            })
            .and_then(|o| if o.status.success() { Ok(()) } else { Err(text(&o.stderr)) })
            .and_then(|_| run("btrfs", &["quota", "enable"], &mnt));
        match made {
            Ok(()) => Some(Btrfs { mnt, _dir: dir }),
            Err(e) => {
                if std::env::var("CI").as_deref() == Ok("true") {
                    panic!("cannot make a btrfs with quotas on CI ({e}): scripts/test.sh installs btrfs-progs");
                }
                eprintln!("SKIPPED: cannot make a loop-mounted btrfs ({e}); folder quotas are upload-only there");
                let _ = Command::new("umount").arg(&mnt).output();
                None
            }
        }
    }
}

impl Drop for Btrfs {
    fn drop(&mut self) {
        // lazily: the kernel supervisor's mount namespaces may hold it a moment longer
        let _ = Command::new("umount").arg("-l").arg(&self.mnt).output();
    }
}

#[test]
fn a_job_writing_past_its_folders_quota_gets_edquot_and_a_raised_quota_lets_it() {
    let Some(fs) = Btrfs::mount() else { return };
    let root = fs.mnt.join("folders");
    let b = Berth::up(&["--folder-root", root.to_str().unwrap()]);
    b.ok(&["folder", "create", "runs", "--quota", "4MiB"]);
    let show = b.ok(&["folder", "show", "runs"]);
    assert!(show.contains("4MiB (uploads and jobs' writes)"), "{show}");

    let write = "dd if=/dev/zero of=/data/runs/out bs=1M count=8 conv=fsync 2>&1; echo rc=$?";
    let id = b.submit(&["--folder", "runs", "--", "sh", "-c", write]);
    b.wait_state(id, "SUCCEEDED");
    let out = b.ok(&["logs", &id.to_string()]);
    assert!(out.contains("Disk quota exceeded") && !out.contains("rc=0"), "a write past 4MiB went through: {out}");

    // An upload past it is refused by the manager, naming the folder, quota and use.
    let big = b.home.path().join("big.bin");
    std::fs::write(&big, vec![7u8; 6 << 20]).unwrap();
    let up = b.cli(&["upload", "runs", big.to_str().unwrap()]);
    assert!(!up.status.success(), "{}", text(&up.stdout));
    let e = text(&up.stderr);
    assert!(e.contains("folder runs is over its quota") && e.contains("4MiB"), "{e}");

    // Raised: the filesystem lets the job write.
    b.ok(&["folder", "quota", "runs", "64MiB"]);
    let id = b.submit(&["--folder", "runs", "--", "sh", "-c", write]);
    b.wait_state(id, "SUCCEEDED");
    let out = b.ok(&["logs", &id.to_string()]);
    assert!(out.contains("rc=0"), "{out}");
    // Lifted: no limit at all.
    b.ok(&["folder", "quota", "runs", "none"]);
    let show = b.ok(&["folder", "show", "runs"]);
    assert!(show.contains("quota:       none"), "{show}");
    b.ok(&["folder", "rm", "runs", "--yes"]);
}
