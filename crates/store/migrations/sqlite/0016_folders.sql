-- Data folders (issue 19): named directories on the manager's storage backend. A folder is
-- personal (project '') or a project's; names are unique per owner among personal folders and
-- per project among project folders. `quota` is in bytes, NULL for none.
CREATE TABLE folders (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT    NOT NULL,
    owner_id    BIGINT  NOT NULL REFERENCES users(id),
    project     TEXT    NOT NULL DEFAULT '',
    quota       BIGINT,
    created_at  BIGINT  NOT NULL
);
CREATE UNIQUE INDEX folders_personal_name ON folders(owner_id, name) WHERE project = '';
CREATE UNIQUE INDEX folders_project_name ON folders(project, name) WHERE project <> '';

-- Projects a folder is shared with (their members may mount it; read-only if `read_only`).
CREATE TABLE folder_shares (
    folder_id   BIGINT  NOT NULL REFERENCES folders(id),
    project     TEXT    NOT NULL,
    read_only   INTEGER NOT NULL,
    shared_at   BIGINT  NOT NULL,
    PRIMARY KEY (folder_id, project)
);
