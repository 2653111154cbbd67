-- Job arrays (issue 20): the task jobs an array makes name it and their index, so that `12_7`
-- finds its job and a restarted manager knows which tasks it made. One job per (array, index):
-- a task made twice (a retry after a lost answer) is refused by the index.
ALTER TABLE jobs ADD COLUMN array_id BIGINT;
ALTER TABLE jobs ADD COLUMN array_index BIGINT;
CREATE UNIQUE INDEX jobs_array_task ON jobs(array_id, array_index);
