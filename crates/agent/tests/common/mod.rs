//! Shared by the runtime test binaries: kernel keys and bindings on node `n`.

use berth_model::Binding;
use berth_model::protocol::KernelKey;

/// Attempt 0, kernel 0 of `job`.
pub fn key(job: i64) -> KernelKey {
    KernelKey { job_id: job, attempt: 0, index: 0 }
}

/// One CPU's worth of time on `cpus` (none: unpinned), memory node 0, `mem` bytes.
pub fn binding(cpus: &[u32], mem: u64) -> Binding {
    Binding {
        node: "n".into(),
        cpus: cpus.to_vec(),
        cpu_milli: 1000,
        mems: vec![0],
        mem_bytes: mem,
        gpus: vec![],
        port: None,
    }
}
