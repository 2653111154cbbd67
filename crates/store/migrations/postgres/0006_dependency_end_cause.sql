-- Job dependencies (issue 20): a pending job whose dependency can never be met is cancelled
-- by the scheduler with end_cause 'dependency', in the hot table and the archive alike.
ALTER TABLE jobs DROP CONSTRAINT jobs_end_cause_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_end_cause_check CHECK (end_cause IN ('exited', 'launch_failed',
    'out_of_memory', 'time_limit', 'cancelled', 'preempted', 'stopped_by_agent', 'node_lost', 'kernel_lost', 'idle',
    'dependency'));
ALTER TABLE job_archive DROP CONSTRAINT job_archive_end_cause_check;
ALTER TABLE job_archive ADD CONSTRAINT job_archive_end_cause_check CHECK (end_cause IN ('exited', 'launch_failed',
    'out_of_memory', 'time_limit', 'cancelled', 'preempted', 'stopped_by_agent', 'node_lost', 'kernel_lost', 'idle',
    'dependency'));
