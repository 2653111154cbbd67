-- Retention (issue 18), as SQLite's 0015_job_archive.sql: a compact row per archived job,
-- with what the accounting and `berth show` need. `id` is the job's id, never given again
-- by the jobs identity. (0002 is another change's.)
CREATE TABLE job_archive (
    id                      BIGINT  PRIMARY KEY,
    user_id                 BIGINT  NOT NULL REFERENCES users(id),
    project                 TEXT    NOT NULL,
    shared                  BOOLEAN NOT NULL,
    queue                   TEXT    NOT NULL,
    name                    TEXT,
    state                   TEXT    NOT NULL CHECK (state IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'TIMEOUT', 'LOST')),
    end_cause               TEXT CHECK (end_cause IN ('exited', 'launch_failed', 'out_of_memory', 'time_limit',
        'cancelled', 'preempted', 'stopped_by_agent', 'node_lost', 'kernel_lost', 'idle')),
    exit_code               BIGINT,
    reason                  TEXT,
    attempt                 BIGINT  NOT NULL,
    submitted_at            BIGINT  NOT NULL,
    started_at              BIGINT,
    ended_at                BIGINT  NOT NULL,
    node_count              BIGINT  NOT NULL,
    kernels_per_node        BIGINT  NOT NULL,
    cpu_milli               BIGINT  NOT NULL,
    mem_bytes               BIGINT  NOT NULL,
    gpu_milli               BIGINT  NOT NULL,
    nodes                   TEXT    NOT NULL,
    used_cpu_seconds        DOUBLE PRECISION,
    used_memory_peak_bytes  BIGINT,
    used_gpu_seconds        DOUBLE PRECISION
);
CREATE INDEX job_archive_ended ON job_archive(ended_at);
CREATE INDEX job_archive_submitted ON job_archive(submitted_at);
CREATE INDEX jobs_ended ON jobs(ended_at);
