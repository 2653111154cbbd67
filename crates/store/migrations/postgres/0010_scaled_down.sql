-- Serving replicas stopped because their endpoint wants fewer (issue 41) end as CANCELLED with
-- end_cause 'scaled_down', not as a cancel by someone, in the hot table and the archive alike.
-- The stop cause: cancelled_by holds the endpoint's name and scaled_down_to how many replicas
-- it wanted (cleared on requeue, like the other stop causes).
ALTER TABLE jobs ADD COLUMN scaled_down_to BIGINT;
ALTER TABLE jobs DROP CONSTRAINT jobs_end_cause_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_end_cause_check CHECK (end_cause IN ('exited', 'launch_failed',
    'out_of_memory', 'time_limit', 'cancelled', 'preempted', 'stopped_by_agent', 'node_lost', 'kernel_lost', 'idle',
    'dependency', 'scaled_down'));
ALTER TABLE job_archive DROP CONSTRAINT job_archive_end_cause_check;
ALTER TABLE job_archive ADD CONSTRAINT job_archive_end_cause_check CHECK (end_cause IN ('exited', 'launch_failed',
    'out_of_memory', 'time_limit', 'cancelled', 'preempted', 'stopped_by_agent', 'node_lost', 'kernel_lost', 'idle',
    'dependency', 'scaled_down'));
