-- Recompute the superseded table (sql/003_lifecycle.sql) from `supersedes`:
-- run by sync, in its last transaction, after every change of the memories.
--
-- Following `supersedes` upwards from a memory (who names it, who names that
-- one, ...), it is superseded when an active memory with a description is
-- reached, through retired ones too: v3 replaces v2 replaces v1, and retiring
-- v2 does not bring v1 back, while a replacement that can never be a hint (no
-- description) hides nothing. by_id is the newest such memory (what holds
-- now). A memory the walk leads back to (two or more naming each other in a
-- ring) is replaced by none: which one holds cannot be told. The walk visits
-- each (memory, memory above it) pair once and stops after 50,000 of them
-- (a vault where hundreds of memories each replace twenty others).
DELETE FROM superseded;
INSERT INTO superseded(id, by_id, by_path)
WITH RECURSIVE up(start, rid) AS (
    SELECT old.rid, s.rid FROM supersedes s JOIN memory_index old ON old.id = s.target
    UNION
    SELECT up.start, s.rid
    FROM up JOIN memory_index cur ON cur.rid = up.rid JOIN supersedes s ON s.target = cur.id
    LIMIT 50000
),
ring(start) AS (SELECT DISTINCT start FROM up WHERE rid = start),
best AS (
    SELECT up.start, n.id AS by_id, n.path AS by_path,
           row_number() OVER (PARTITION BY up.start
                              ORDER BY coalesce(n.updated_at, n.created_at) DESC, n.id DESC) AS k
    FROM up JOIN memory_index n ON n.rid = up.rid
    WHERE n.status = 'active' AND n.description != '' AND up.start NOT IN (SELECT start FROM ring)
)
SELECT m.id, best.by_id, best.by_path FROM best JOIN memory_index m ON m.rid = best.start WHERE best.k = 1;
