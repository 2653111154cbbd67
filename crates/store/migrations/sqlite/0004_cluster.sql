-- Cluster mode (issue 4): where other nodes reach a node (MASTER_ADDR of multi-node jobs), and
-- an admin's drain, which survives agent re-registration and manager restarts (NULL: not drained).
ALTER TABLE nodes ADD COLUMN address TEXT;
ALTER TABLE nodes ADD COLUMN drain_reason TEXT;
