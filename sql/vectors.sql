-- vec0 tables, created once the model and its dimension are known
-- ({dim} is filled in from the model; rowid = vectors.vid).
-- sqlite-vec lessons: query vec0 for KNN in a CTE and join afterwards; never
-- INSERT OR REPLACE into vec0 (delete, then insert); always cap k.
CREATE VIRTUAL TABLE IF NOT EXISTS vec_meta USING vec0(embedding float[{dim}] distance_metric=cosine);
CREATE VIRTUAL TABLE IF NOT EXISTS vec_chunk USING vec0(embedding float[{dim}] distance_metric=cosine);

