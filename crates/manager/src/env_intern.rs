//! One copy of each exported environment in memory. `berth submit` exports the submitter's
//! environment by default (like sbatch's `--export=ALL`), and a pending job kept its own copy:
//! ~6 KiB of strings and tree nodes for a 1.3 KB environment, four times the rest of the job.
//! The jobs one user submits from one shell carry the same environment, so pending jobs share
//! it (`Arc`); the store keeps each job's own copy, as before.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

/// An exported environment.
pub type Env = BTreeMap<String, String>;

/// The environments in use, by content.
#[derive(Default)]
pub struct EnvInterner {
    set: Mutex<Interned>,
}

#[derive(Default)]
struct Interned {
    envs: HashSet<Arc<Env>>,
    /// The set is swept of environments no job holds when it grows past this.
    sweep_at: usize,
}

impl EnvInterner {
    /// The shared copy of `env` (the empty environment costs nothing).
    pub fn intern(&self, env: Env) -> Arc<Env> {
        let mut s = self.set.lock().expect("env interner lock");
        if let Some(e) = s.envs.get(&env) {
            return e.clone();
        }
        if s.envs.len() >= s.sweep_at {
            s.envs.retain(|e| Arc::strong_count(e) > 1);
            s.sweep_at = (s.envs.len() * 2).max(64);
        }
        let e = Arc::new(env);
        s.envs.insert(e.clone());
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(v: &str) -> Env {
        [("PATH".to_string(), v.to_string())].into()
    }

    #[test]
    fn equal_environments_share_one_copy_and_unused_ones_are_swept() {
        let i = EnvInterner::default();
        let a = i.intern(env("/bin"));
        let b = i.intern(env("/bin"));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &i.intern(env("/usr/bin"))));
        drop((a, b));
        for n in 0..200 {
            i.intern(env(&n.to_string()));
        }
        assert!(i.set.lock().unwrap().envs.len() < 130, "environments no job holds are swept");
    }
}
