-- Dataset origins (issue 19): a bucket may name the shared directory its datasets come from
-- (`origin`, an absolute path, NULL: none), and how its objects are spread over the cache
-- nodes (`placement`: 'spread', one Maglev-routed copy, or 'node', a copy per node).
ALTER TABLE cache_buckets ADD COLUMN origin TEXT;
ALTER TABLE cache_buckets ADD COLUMN placement TEXT NOT NULL DEFAULT 'spread';
