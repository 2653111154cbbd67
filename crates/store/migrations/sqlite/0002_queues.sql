-- Queue policies (issue 3). `policy` is the JSON of `berth_model::api::QueuePolicy` (what the
-- scheduler uses); `seed` is the JSON of the config file entry the row was last seeded from
-- (NULL for a queue an admin created through the API). An API change keeps `seed`, so a restart
-- can tell "the config file entry changed" (the file wins) from "unchanged" (the admin's
-- change stays).
CREATE TABLE queues (
    name        TEXT    PRIMARY KEY,
    policy      TEXT    NOT NULL,
    seed        TEXT,
    updated_at  BIGINT  NOT NULL
);
