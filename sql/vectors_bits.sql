-- Created when the dimension is a multiple of 8 (binary quantisation needs it).
-- Sign bits of (vector - centre) for a coarse KNN on large indexes: 48 bytes a
-- vector instead of 1,536, scanned ~4x faster; the candidates it finds are
-- re-ranked by exact cosine from the float tables (see sql/recall.sql).
-- Centring matters: e5 vectors share a large common direction, and raw
-- sign bits found only a quarter to a half of the true top 40.
CREATE VIRTUAL TABLE IF NOT EXISTS vec_meta_bits USING vec0(embedding bit[{dim}]);
CREATE VIRTUAL TABLE IF NOT EXISTS vec_chunk_bits USING vec0(embedding bit[{dim}]);
