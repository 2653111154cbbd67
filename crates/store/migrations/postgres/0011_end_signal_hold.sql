-- The signal that ended a job's main kernel (issue 43: typed, where sacct read it from the
-- reason's text), set with its final state like exit_code. And a pending job's hold (issue 48:
-- `scontrol hold/uhold/release`, `sbatch --hold`): 'user' or 'admin' while held, 'released'
-- once lifted; NULL is as submitted (held by its user when the spec asked `hold`).
ALTER TABLE jobs ADD COLUMN end_signal BIGINT;
ALTER TABLE jobs ADD COLUMN hold TEXT CHECK (hold IN ('user', 'admin', 'released'));
