-- Dataset origins (issue 19), as SQLite's 0017_bucket_origin.sql.
ALTER TABLE cache_buckets ADD COLUMN origin TEXT;
ALTER TABLE cache_buckets ADD COLUMN placement TEXT NOT NULL DEFAULT 'spread';
