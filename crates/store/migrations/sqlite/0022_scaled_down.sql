-- Serving replicas stopped because their endpoint wants fewer (issue 41) end as CANCELLED with
-- end_cause 'scaled_down', not as a cancel by someone. The stop cause: cancelled_by holds the
-- endpoint's name and scaled_down_to how many replicas it wanted (cleared on requeue, like the
-- other stop causes). A CHECK cannot be changed in place, so end_cause is replaced, as in 0013.
ALTER TABLE jobs ADD COLUMN scaled_down_to BIGINT;
ALTER TABLE jobs ADD COLUMN end_cause_v4 TEXT CHECK (end_cause_v4 IN ('exited', 'launch_failed', 'out_of_memory',
    'time_limit', 'cancelled', 'preempted', 'stopped_by_agent', 'node_lost', 'kernel_lost', 'idle', 'dependency',
    'scaled_down'));
UPDATE jobs SET end_cause_v4 = end_cause;
ALTER TABLE jobs DROP COLUMN end_cause;
ALTER TABLE jobs RENAME COLUMN end_cause_v4 TO end_cause;
