-- Diagnostics, readable from the stock sqlite3 shell (no extension needed).

CREATE VIEW diag_conflicts AS
SELECT mem_id AS id, count(*) AS files, group_concat(path, ' | ') AS paths
FROM files
WHERE mem_id IS NOT NULL
GROUP BY mem_id
HAVING count(*) > 1;

-- Memories and their chunks lacking a vector for the current model.
CREATE VIEW diag_vectors AS
SELECT m.id, m.path,
       NOT EXISTS (SELECT 1 FROM vectors v WHERE v.kind = 'meta' AND v.hash = m.meta_hash) AS meta_missing,
       (SELECT count(*) FROM chunks c WHERE c.mem_rid = m.rid
          AND NOT EXISTS (SELECT 1 FROM vectors v WHERE v.kind = 'chunk' AND v.hash = c.hash)) AS chunks_missing,
       (SELECT count(*) FROM chunks c WHERE c.mem_rid = m.rid) AS chunks
FROM memory_index m
WHERE m.status = 'active';  -- only active memories are embedded

CREATE VIEW diag_problems AS
SELECT path, kind, detail FROM problems
UNION ALL
SELECT f.path, 'duplicate_id',
       'id ' || f.mem_id || ' is held by ' || c.files || ' files (' || c.paths
       || '); all are left out of search until only one holds it'
FROM files f JOIN diag_conflicts c ON c.id = f.mem_id
UNION ALL
SELECT v.path, 'missing_vector',
       CASE WHEN v.meta_missing THEN 'metadata' ELSE '' END
       || CASE WHEN v.meta_missing AND v.chunks_missing THEN ' and ' ELSE '' END
       || CASE WHEN v.chunks_missing THEN v.chunks_missing || ' of ' || v.chunks || ' chunks' ELSE '' END
       || ' without a vector for model ' || coalesce((SELECT value FROM meta WHERE key = 'model_fingerprint'), '(none)')
       || coalesce(' - ' || (SELECT value FROM meta WHERE key = 'vector_error'), '')
FROM diag_vectors v
WHERE v.meta_missing OR v.chunks_missing > 0
UNION ALL
SELECT c.path, 'contradiction',
       'contradicts ' || c.other_id || ' (' || c.other_path || ', conflicts_with): both are active, '
       || 'and recall marks them when it hints either'
FROM diag_contradictions c
UNION ALL
SELECT path, kind, detail FROM diag_links;  -- sql/003_lifecycle.sql

CREATE VIEW diag_summary AS
SELECT
    (SELECT count(*) FROM files)                                        AS files,
    (SELECT count(*) FROM memory_index)                                 AS memories,
    (SELECT count(*) FROM memory_index WHERE status = 'active')         AS active,
    (SELECT count(*) FROM memory_index WHERE status = 'deprecated')     AS deprecated,
    (SELECT count(*) FROM diag_conflicts)                               AS conflicts,
    (SELECT count(*) FROM diag_problems)                                AS problems,
    (SELECT count(*) FROM chunks)                                       AS chunks,
    (SELECT value FROM meta WHERE key = 'last_sync_at')                 AS last_sync_at,
    (SELECT value FROM meta WHERE key = 'model_fingerprint')            AS model,
    (SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'dim')         AS dim,
    (SELECT count(*) FROM diag_vectors WHERE meta_missing)              AS memories_without_vector,
    (SELECT coalesce(sum(chunks_missing), 0) FROM diag_vectors)         AS chunks_without_vector,
    (SELECT value FROM meta WHERE key = 'vector_error')                 AS vector_error;

-- What the agent was hinted and what it opened (the logs survive rebuilds,
-- marchdb/index/logs.py). Plain SQL: readable from the stock sqlite3 shell. The
-- per-memory lookups use the (mem_id, at) indexes of 003_lifecycle.sql.

-- One row per logged hint: when, which run (its place in the order of runs
-- and its conversation, see runs), which trigger ('user' / 'assistant' injected, 'display' shown only,
-- 'record' recorded at the end of a run), which memory and its score. name
-- and path are NULL for a memory no longer in the index.
CREATE VIEW hint_history AS
SELECT l.seq, l.at, l.run_id, r.seq AS run_seq, r.conversation, l.trigger, l.mem_id AS id, m.name, l.score, m.path
FROM recall_log l
LEFT JOIN runs r ON r.run_id = l.run_id
LEFT JOIN memory_index m ON m.id = l.mem_id;

-- Per memory in the index: how often it was hinted (injected for a user
-- message or an assistant output) and opened, and when last.
CREATE VIEW memory_use AS
SELECT m.id, m.name, m.status,
       (SELECT count(*) FROM recall_log l WHERE l.mem_id = m.id AND l.trigger IN ('user', 'assistant')) AS hinted,
       (SELECT max(l.at) FROM recall_log l WHERE l.mem_id = m.id AND l.trigger IN ('user', 'assistant')) AS last_hinted,
       (SELECT count(*) FROM open_log o WHERE o.mem_id = m.id) AS opened,
       (SELECT max(o.at) FROM open_log o WHERE o.mem_id = m.id) AS last_opened
FROM memory_index m;
