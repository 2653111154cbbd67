-- HOT job moves (issue 42). A job's row is updated five or six times between submit and end
-- (PENDING -> SCHEDULED, its kernels' node list, -> RUNNING, its usage, -> SUCCEEDED). An update
-- that changes no indexed column and finds room on the row's page is HOT: PostgreSQL writes no
-- new index entries and prunes the old version in place. `jobs_state` made every move a full
-- update (a new entry in all six indexes, and vacuum work later); without it only the end
-- (`ended_at`, indexed by `jobs_ended` for retention) still is. Replayed in a scratch cluster this
-- saved ~28% of the moves' server time (docs/perf.md).
--
-- What the index served is kept: a job is unfinished exactly when its `ended_at` is NULL (a
-- terminal state sets it and is final), so the recovery load at failover finds the unfinished
-- jobs through `jobs_ended` (`ended_at IS NULL`, sql_store.rs) instead of scanning every job;
-- listing by state walks the primary key newest first, as it mostly did.
DROP INDEX jobs_state;
-- Room on each page for the next versions of its rows (the default, 100, fills the pages at
-- insert, so a move's new version would go to another page, which is not HOT). It applies to
-- pages written from now on: those of new jobs, the ones that move.
ALTER TABLE jobs SET (fillfactor = 70);
