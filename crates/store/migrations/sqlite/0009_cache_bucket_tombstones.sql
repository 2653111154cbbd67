-- Deleted dataset-cache buckets (issue 7). The manager pushes their names to the cache nodes,
-- which delete a bucket only when it is named here: a bucket the manager merely does not
-- know (a manager started on a fresh database, a bucket made on a node alone) is kept.
-- Creating a bucket of the same name again drops its tombstone.
CREATE TABLE cache_bucket_tombstones (
    name TEXT PRIMARY KEY,
    deleted_at TEXT NOT NULL
);
