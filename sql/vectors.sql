-- vec0 tables, created once the model and its dimension are known
-- ({dim} is filled in from the model; rowid = vectors.vid).
-- sqlite-vec lessons: query vec0 for KNN in a CTE and join afterwards; never
-- INSERT OR REPLACE into vec0 (delete, then insert); always cap k.
-- chunk_size 128: a rowid lookup (exact re-ranking, per-candidate cosines)
-- reads a whole vec0 chunk; 1024 vectors a chunk made 400 lookups cost ~95 ms
-- at 100k vectors, 128 makes them ~20 ms for ~15% slower full scans.
CREATE VIRTUAL TABLE IF NOT EXISTS vec_meta USING vec0(embedding float[{dim}] distance_metric=cosine, chunk_size=128);
CREATE VIRTUAL TABLE IF NOT EXISTS vec_chunk USING vec0(embedding float[{dim}] distance_metric=cosine, chunk_size=128);

