-- Vectors carried across a rebuild of the schema (marchdb/index/carry.py).
-- They are keyed by what was embedded (kind and content hash) and by the
-- model (meta.model_fingerprint), never by a file or a row of the old
-- schema, so a new schema can take them as they are: a schema change then
-- costs a scan of the files, not hours of embedding. The vec0 tables are
-- read in their own order (one pass over their chunks) and joined to
-- `vectors` by its primary key.

-- name: stash
CREATE TEMP TABLE carried_vectors (kind TEXT NOT NULL, hash TEXT NOT NULL, embedding BLOB NOT NULL);
INSERT INTO temp.carried_vectors(kind, hash, embedding)
    SELECT v.kind, v.hash, e.embedding FROM vec_meta AS e CROSS JOIN vectors AS v ON v.vid = e.rowid
    WHERE v.kind = 'meta';
INSERT INTO temp.carried_vectors(kind, hash, embedding)
    SELECT v.kind, v.hash, e.embedding FROM vec_chunk AS e CROSS JOIN vectors AS v ON v.vid = e.rowid
    WHERE v.kind = 'chunk';

-- name: restore_keys
INSERT INTO vectors(kind, hash) SELECT kind, hash FROM temp.carried_vectors ORDER BY rowid
    ON CONFLICT DO NOTHING;

-- name: restore_meta
INSERT INTO vec_meta(rowid, embedding)
    SELECT v.vid, c.embedding FROM temp.carried_vectors AS c JOIN vectors AS v ON v.kind = c.kind AND v.hash = c.hash
    WHERE c.kind = 'meta' ORDER BY v.vid;

-- name: restore_chunk
INSERT INTO vec_chunk(rowid, embedding)
    SELECT v.vid, c.embedding FROM temp.carried_vectors AS c JOIN vectors AS v ON v.kind = c.kind AND v.hash = c.hash
    WHERE c.kind = 'chunk' ORDER BY v.vid;

-- name: drop
DROP TABLE IF EXISTS temp.carried_vectors;
