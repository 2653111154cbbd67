-- Interactive sessions ended for being idle (a queue's idle_timeout). idle_stop_secs: set when
-- the manager stopped the job for that, with how long it had been idle (cleared on requeue,
-- like the other stop causes). end_cause gains 'idle': a CHECK cannot be changed in place, so
-- the column is replaced (a column's own CHECK does not keep it from being dropped).
ALTER TABLE jobs ADD COLUMN idle_stop_secs BIGINT;
ALTER TABLE jobs ADD COLUMN end_cause_v2 TEXT CHECK (end_cause_v2 IN ('exited', 'launch_failed', 'out_of_memory',
    'time_limit', 'cancelled', 'preempted', 'stopped_by_agent', 'node_lost', 'kernel_lost', 'idle'));
UPDATE jobs SET end_cause_v2 = end_cause;
ALTER TABLE jobs DROP COLUMN end_cause;
ALTER TABLE jobs RENAME COLUMN end_cause_v2 TO end_cause;
