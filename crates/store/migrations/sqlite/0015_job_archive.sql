-- Retention (issue 18): finished jobs older than the retention period (`--retain`) leave the
-- hot tables (jobs, transitions, kernels) for this compact row each, which keeps what the
-- accounting needs (who, which project, what was asked for, what was used, when) and what
-- `berth show` says of an archived job (final state, cause, exit code). `id` is the job's
-- id: jobs' AUTOINCREMENT never gives it again. The spec (command, environment), the history
-- and the kernels' bindings are gone.
CREATE TABLE job_archive (
    id                      BIGINT  PRIMARY KEY,
    user_id                 BIGINT  NOT NULL REFERENCES users(id),
    project                 TEXT    NOT NULL,
    shared                  BIGINT  NOT NULL,
    queue                   TEXT    NOT NULL,
    name                    TEXT,
    state                   TEXT    NOT NULL,
    end_cause               TEXT,
    exit_code               BIGINT,
    reason                  TEXT,
    attempt                 BIGINT  NOT NULL,
    submitted_at            BIGINT  NOT NULL,
    started_at              BIGINT,
    ended_at                BIGINT  NOT NULL,
    -- the request: per kernel, and how many kernels (nodes x kernels per node)
    node_count              BIGINT  NOT NULL,
    kernels_per_node        BIGINT  NOT NULL,
    cpu_milli               BIGINT  NOT NULL,
    mem_bytes               BIGINT  NOT NULL,
    gpu_milli               BIGINT  NOT NULL,
    -- the nodes of its last attempt, comma-separated (the nodes' timeline)
    nodes                   TEXT    NOT NULL,
    used_cpu_seconds        DOUBLE PRECISION,
    used_memory_peak_bytes  BIGINT,
    used_gpu_seconds        DOUBLE PRECISION
);
-- The usage reports read archived jobs by time.
CREATE INDEX job_archive_ended ON job_archive(ended_at);
CREATE INDEX job_archive_submitted ON job_archive(submitted_at);
-- The retention task finds old finished jobs by their end.
CREATE INDEX jobs_ended ON jobs(ended_at);
