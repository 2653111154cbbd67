-- Tenancy (issue 6): projects and their members, token lifetimes, an audit log, and the
-- project a job is accounted to (and whether its members may see it).

CREATE TABLE projects (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT    NOT NULL UNIQUE,
    created_at  BIGINT  NOT NULL
);

CREATE TABLE project_members (
    project_id  BIGINT  NOT NULL REFERENCES projects(id),
    user_id     BIGINT  NOT NULL REFERENCES users(id),
    added_at    BIGINT  NOT NULL,
    PRIMARY KEY (project_id, user_id)
);
CREATE INDEX project_members_user ON project_members(user_id);

-- NULL: never expires / not revoked / never used.
ALTER TABLE api_tokens ADD COLUMN expires_at BIGINT;
ALTER TABLE api_tokens ADD COLUMN revoked_at BIGINT;
ALTER TABLE api_tokens ADD COLUMN last_used_at BIGINT;

CREATE TABLE audit (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    at      BIGINT  NOT NULL,
    actor   TEXT    NOT NULL,
    action  TEXT    NOT NULL,
    target  TEXT    NOT NULL,
    detail  TEXT    NOT NULL
);
CREATE INDEX audit_at ON audit(at);

-- '' for jobs of no project (accounted to their user).
ALTER TABLE jobs ADD COLUMN project TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN shared BIGINT NOT NULL DEFAULT 0;
CREATE INDEX jobs_project ON jobs(project, id);
