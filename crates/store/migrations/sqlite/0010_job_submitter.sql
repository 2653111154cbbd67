-- The Unix user who submitted a job on the manager's host, when its kernel vouched for it
-- (SO_PEERCRED on the manager's unix socket, issue 14): agents run the job's kernels as it.
-- NULL for jobs submitted with a token over TCP.
ALTER TABLE jobs ADD COLUMN submitter_uid BIGINT;
ALTER TABLE jobs ADD COLUMN submitter_gid BIGINT;
