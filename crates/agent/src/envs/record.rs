//! What a built environment holds, recorded in its `.berth/meta.json` so that anyone can check
//! it: each installed distribution's name, version and the sha256 of its `RECORD` (which lists
//! the sha256 of every file the wheel installed). `sha256sum <env>/lib/python*/site-packages/
//! *.dist-info/RECORD` then compares with the record, and each file with its `RECORD` line.

use std::path::Path;

use berth_model::environment::sha256_hex;
use serde::{Deserialize, Serialize};

/// One installed distribution.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Installed {
    pub name: String,
    pub version: String,
    /// Relative to the environment: `lib/python3.11/site-packages/six-1.16.0.dist-info/RECORD`.
    pub record: String,
    /// Hex sha256 of that file.
    pub record_sha256: String,
}

/// The distributions installed in `env`, sorted by name; a `.dist-info` without a readable
/// `RECORD` is listed with an empty hash (it cannot be verified, and says so).
pub(crate) fn installed(env: &Path) -> Vec<Installed> {
    let mut out = Vec::new();
    for lib in ["lib", "lib64"] {
        for py in std::fs::read_dir(env.join(lib)).into_iter().flatten().flatten() {
            let site = py.path().join("site-packages");
            for d in std::fs::read_dir(&site).into_iter().flatten().flatten() {
                let file = d.file_name().to_string_lossy().into_owned();
                let Some(stem) = file.strip_suffix(".dist-info") else { continue };
                let (name, version) = stem.rsplit_once('-').unwrap_or((stem, ""));
                let record = d.path().join("RECORD");
                let sha = std::fs::read(&record).map(|b| sha256_hex(&b)).unwrap_or_default();
                let rel = record.strip_prefix(env).unwrap_or(&record).to_string_lossy().into_owned();
                out.push(Installed { name: name.into(), version: version.into(), record: rel, record_sha256: sha });
            }
        }
        if !out.is_empty() {
            break;
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_distribution_is_listed_with_its_records_hash() {
        let env = tempfile::tempdir().unwrap();
        let site = env.path().join("lib/python3.11/site-packages");
        std::fs::create_dir_all(site.join("six-1.16.0.dist-info")).unwrap();
        std::fs::write(site.join("six-1.16.0.dist-info/RECORD"), b"six.py,sha256=abc,10\n").unwrap();
        std::fs::create_dir_all(site.join("idna-3.7.dist-info")).unwrap();
        std::fs::create_dir_all(site.join("six")).unwrap();
        let got = installed(env.path());
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].name.as_str(), got[0].version.as_str(), got[0].record_sha256.as_str()), ("idna", "3.7", ""));
        assert_eq!(got[1].record, "lib/python3.11/site-packages/six-1.16.0.dist-info/RECORD");
        let want = sha256_hex(b"six.py,sha256=abc,10\n");
        assert_eq!(got[1].record_sha256, want);
    }
}
