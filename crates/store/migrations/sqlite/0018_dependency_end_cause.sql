-- Job dependencies (issue 20): a pending job whose dependency can never be met is cancelled
-- by the scheduler with end_cause 'dependency'. A CHECK cannot be changed in place, so the
-- column is replaced, as in 0013.
ALTER TABLE jobs ADD COLUMN end_cause_v3 TEXT CHECK (end_cause_v3 IN ('exited', 'launch_failed', 'out_of_memory',
    'time_limit', 'cancelled', 'preempted', 'stopped_by_agent', 'node_lost', 'kernel_lost', 'idle', 'dependency'));
UPDATE jobs SET end_cause_v3 = end_cause;
ALTER TABLE jobs DROP COLUMN end_cause;
ALTER TABLE jobs RENAME COLUMN end_cause_v3 TO end_cause;
