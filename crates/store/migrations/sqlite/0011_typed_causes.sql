-- Who asked a job to stop, and how it ended, as typed columns: a restarted manager finishes a
-- cancel or a preemption from these, never from the reason text (which is for people).
-- cancelled_by: the berth user who cancelled. preempted_by: the job that preempted it, and
-- preempt_action what then happens to it. Cleared when the job is requeued (a new attempt).
ALTER TABLE jobs ADD COLUMN cancelled_by TEXT;
ALTER TABLE jobs ADD COLUMN preempted_by BIGINT;
ALTER TABLE jobs ADD COLUMN preempt_action TEXT CHECK (preempt_action IN ('requeue', 'cancel'));
-- Set with the final state: exited, launch_failed, out_of_memory, time_limit, cancelled,
-- preempted, stopped_by_agent, node_lost, kernel_lost.
ALTER TABLE jobs ADD COLUMN end_cause TEXT CHECK (end_cause IN ('exited', 'launch_failed', 'out_of_memory',
    'time_limit', 'cancelled', 'preempted', 'stopped_by_agent', 'node_lost', 'kernel_lost'));

-- Rows written before: what the reasons said, converted once. The reason formats are those
-- the manager wrote until now (a job never had two of them).
UPDATE jobs SET cancelled_by = substr(reason, length('cancel requested by ') + 1)
    WHERE state = 'TERMINATING' AND reason LIKE 'cancel requested by %';
-- A preemption victim still stopping: the queue's policy of today says what happens next
-- (what a restarted manager did before).
UPDATE jobs SET preempted_by = CAST(substr(reason, length('preempted by job ') + 1) AS INTEGER),
    preempt_action = COALESCE((SELECT CASE json_extract(q.policy, '$.preemption') WHEN 'cancel' THEN 'cancel'
        ELSE 'requeue' END FROM queues q WHERE q.name = jobs.queue), 'requeue')
    WHERE state = 'TERMINATING' AND reason LIKE 'preempted by job %';
UPDATE jobs SET end_cause = 'preempted', preempt_action = 'cancel',
    preempted_by = CAST(substr(reason, length('cancelled: preempted by job ') + 1) AS INTEGER)
    WHERE state = 'CANCELLED' AND reason LIKE 'cancelled: preempted by job %';
-- `cancelled by NAME` or `cancelled by NAME (why the node went)`; names have no spaces.
UPDATE jobs SET end_cause = 'cancelled',
    cancelled_by = CASE WHEN instr(substr(reason, 14), ' ') > 0
        THEN substr(reason, 14, instr(substr(reason, 14), ' ') - 1) ELSE substr(reason, 14) END
    WHERE state = 'CANCELLED' AND reason LIKE 'cancelled by %';
UPDATE jobs SET end_cause = 'stopped_by_agent' WHERE state = 'CANCELLED' AND end_cause IS NULL;
UPDATE jobs SET end_cause = 'time_limit' WHERE state = 'TIMEOUT';
UPDATE jobs SET end_cause = 'node_lost' WHERE state = 'LOST';
UPDATE jobs SET end_cause = CASE
        WHEN reason LIKE 'launch failed%' THEN 'launch_failed'
        WHEN reason = 'out of memory' THEN 'out_of_memory'
        WHEN reason LIKE 'kernel lost%' THEN 'kernel_lost'
        WHEN reason LIKE 'node % lost%' THEN 'node_lost'
        ELSE 'exited' END
    WHERE state = 'FAILED';
UPDATE jobs SET end_cause = 'exited' WHERE state = 'SUCCEEDED';
