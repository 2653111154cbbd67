-- Dataset cache administration (issue 7): each member's weight (the one its agent reports,
-- and the one an admin set, which wins), a sticky `removed` flag (the member stays out of
-- the list whatever its agent reports, until an admin adds it back), and a join sequence
-- number `seq`, given when a URL is first seen and never reused, which the cache nodes order
-- their members by. Members known before get 1, 2, ... in node-name order.
ALTER TABLE cache_nodes ADD COLUMN reported_weight BIGINT NOT NULL DEFAULT 1;
ALTER TABLE cache_nodes ADD COLUMN weight BIGINT;
ALTER TABLE cache_nodes ADD COLUMN removed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cache_nodes ADD COLUMN seq BIGINT NOT NULL DEFAULT 0;
UPDATE cache_nodes SET seq = (SELECT COUNT(*) FROM cache_nodes c WHERE c.node <= cache_nodes.node);

-- The last seq given (one row).
CREATE TABLE cache_seq (
    last BIGINT NOT NULL
);
INSERT INTO cache_seq (last) SELECT COUNT(*) FROM cache_nodes;
