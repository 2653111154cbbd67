-- What kernels used, as their agents measured it (issue 16): each kernel's totals when it
-- ended, and per job their sum over every kernel and attempt, so lists, `berth eff` and
-- `berth usage` need no join. NULL: not measured (no cgroups, no NVML, or not ended yet).
ALTER TABLE kernels ADD COLUMN cpu_seconds DOUBLE PRECISION;
ALTER TABLE kernels ADD COLUMN memory_peak_bytes BIGINT;
ALTER TABLE kernels ADD COLUMN gpu_seconds DOUBLE PRECISION;
ALTER TABLE jobs ADD COLUMN used_cpu_seconds DOUBLE PRECISION;
ALTER TABLE jobs ADD COLUMN used_memory_peak_bytes BIGINT;
ALTER TABLE jobs ADD COLUMN used_gpu_seconds DOUBLE PRECISION;
