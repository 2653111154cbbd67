-- Serving endpoints (issue 21): a named HTTP service made of replica jobs. `spec` and
-- `previous` (the spec before the last update, for a rollback) are EndpointSpec JSON, like a
-- job's spec; `revision` grows with every new spec; `desired` is the replica count wanted now;
-- `rollout` is done, rolling or rolled-back. The submitter is the Unix user vouched for at
-- creation (both columns or neither), like a job's.
CREATE TABLE endpoints (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    name          TEXT    NOT NULL UNIQUE,
    owner_id      BIGINT  NOT NULL REFERENCES users(id),
    submitter_uid BIGINT,
    submitter_gid BIGINT,
    spec          TEXT    NOT NULL,
    revision      BIGINT  NOT NULL,
    previous      TEXT,
    desired       BIGINT  NOT NULL,
    rollout       TEXT    NOT NULL,
    message       TEXT,
    created_at    BIGINT  NOT NULL,
    updated_at    BIGINT  NOT NULL
);

-- Tokens that may call an endpoint: the sha256 (hex) of each secret, never the secret.
CREATE TABLE endpoint_tokens (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    endpoint_id BIGINT  NOT NULL REFERENCES endpoints(id) ON DELETE CASCADE,
    label       TEXT    NOT NULL,
    hash        TEXT    NOT NULL UNIQUE,
    created_at  BIGINT  NOT NULL
);
CREATE INDEX endpoint_tokens_endpoint ON endpoint_tokens(endpoint_id);
