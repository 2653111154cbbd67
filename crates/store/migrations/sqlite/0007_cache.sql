-- Dataset cache (issue 7): the cache node each agent reported (its URL), and bucket settings,
-- which the manager pushes to every cache node, so nodes joining later learn them too.
CREATE TABLE cache_nodes (
    node        TEXT    PRIMARY KEY,
    url         TEXT    NOT NULL,
    updated_at  BIGINT  NOT NULL
);

CREATE TABLE cache_buckets (
    name        TEXT    PRIMARY KEY,
    public      INTEGER NOT NULL,
    quota       BIGINT,
    projects    TEXT    NOT NULL,
    updated_at  BIGINT  NOT NULL
);
