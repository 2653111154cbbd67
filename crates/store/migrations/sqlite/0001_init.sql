-- berth schema, version 1. Plain types only (BIGINT ids, TEXT, JSON as TEXT, timestamps as
-- BIGINT microseconds since the Unix epoch) so the PostgreSQL adapter mirrors it line by line.

CREATE TABLE users (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT    NOT NULL UNIQUE,
    role        TEXT    NOT NULL,
    disabled    BIGINT  NOT NULL DEFAULT 0,
    created_at  BIGINT  NOT NULL
);

CREATE TABLE api_tokens (
    hash        TEXT    PRIMARY KEY,
    user_id     BIGINT  NOT NULL REFERENCES users(id),
    label       TEXT    NOT NULL,
    created_at  BIGINT  NOT NULL
);
CREATE INDEX api_tokens_user ON api_tokens(user_id);

CREATE TABLE join_tokens (
    hash        TEXT    PRIMARY KEY,
    created_at  BIGINT  NOT NULL
);

CREATE TABLE jobs (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id         BIGINT  NOT NULL REFERENCES users(id),
    spec            TEXT    NOT NULL,
    queue           TEXT    NOT NULL,
    priority        BIGINT  NOT NULL,
    state           TEXT    NOT NULL,
    attempt         BIGINT  NOT NULL DEFAULT 0,
    submitted_at    BIGINT  NOT NULL,
    started_at      BIGINT,
    ended_at        BIGINT,
    exit_code       BIGINT,
    reason          TEXT,
    pending_reason  TEXT,
    -- comma-separated node names of the latest attempt's kernels, so lists need no join
    nodes           TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX jobs_state ON jobs(state);
CREATE INDEX jobs_user ON jobs(user_id, id);

CREATE TABLE kernels (
    job_id      BIGINT  NOT NULL REFERENCES jobs(id),
    attempt     BIGINT  NOT NULL,
    idx         BIGINT  NOT NULL,
    node        TEXT    NOT NULL,
    binding     TEXT    NOT NULL,
    exit_code   BIGINT,
    PRIMARY KEY (job_id, attempt, idx)
);

CREATE TABLE transitions (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id      BIGINT  NOT NULL REFERENCES jobs(id),
    at          BIGINT  NOT NULL,
    from_state  TEXT,
    to_state    TEXT    NOT NULL,
    reason      TEXT    NOT NULL
);
CREATE INDEX transitions_job ON transitions(job_id, seq);

CREATE TABLE nodes (
    name            TEXT    PRIMARY KEY,
    queue           TEXT    NOT NULL,
    topology        TEXT    NOT NULL,
    version         TEXT    NOT NULL,
    state           TEXT    NOT NULL,
    last_heartbeat  BIGINT
);

CREATE TABLE meta (
    key     TEXT    PRIMARY KEY,
    value   TEXT    NOT NULL
);
