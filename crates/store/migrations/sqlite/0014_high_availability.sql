-- The leader lease (several managers on one store, one leads): one row. `epoch` grows at every
-- takeover and fences the store and the agents against an older leader; `expires_ms` is on the
-- database's clock (milliseconds since the Unix epoch), so managers' clocks need not agree.
CREATE TABLE leader_lease (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    holder TEXT NOT NULL,
    url TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    expires_ms INTEGER NOT NULL
);
INSERT INTO leader_lease (id, holder, url, epoch, expires_ms) VALUES (1, '', '', 0, 0);

-- Idempotent submits: a client that did not hear the answer to a submit (its manager died,
-- a takeover) sends it again with the same key and gets the job the first one made.
CREATE TABLE submit_keys (
    user_id INTEGER NOT NULL,
    key TEXT NOT NULL,
    job_id INTEGER NOT NULL,
    at INTEGER NOT NULL,
    PRIMARY KEY (user_id, key)
);
