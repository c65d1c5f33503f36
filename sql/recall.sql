-- How a passive-recall score is made. marchdb/index/recall.py runs one of these
-- statements (the hybrid one when vectors exist, else the BM25 one), then
-- applies the hint rules (threshold, per-run de-duplication) in Python.
--
-- Signals per candidate memory:
--   meta_cos  cosine(query, metadata vector)            metadata = name + description + tags
--   body_cos  best body chunks' cosines, weighted :body_w1 / :body_w2 / :body_w3 (renormalised when fewer;
--             recall.BODY_TOP1, 0.8, and the rest in the ratio 0.25 / 0.10), an assistant's chunk in a chat
--             :assistant_penalty lower (chunks.role)
--   dense_cos max(meta_cos, body_cos)
--   bm25_raw  FTS5 BM25 (porter-stemmed), metadata column weighted x2, query
--             terms OR-ed (terms in half the memories or more are left out:
--             FTS5 gives them no weight anyway, and they would pull every
--             memory into the match)
--   xbm25_raw the same for the message's words put into the other language
--             (marchdb/bridge.py, CC-CEDICT), read only for a memory in the
--             other script than the message; its share is taken of
--             :xbm25_max (recall.bridge_terms), and the larger share counts
-- Calibration turns raw values into 0..1 values that mean the same for
-- every query, every vault and every model (marchdb/index/calibrate.py):
--   dense = logistic((dense_cos - :dense_bg - :dense_mid) / :dense_scale)
--           :dense_bg is the query's own background: its mean cosine to the
--           probe passages (e5 puts "ok thanks" close to every text, a
--           specific question less so). :dense_mid is where the best of the
--           vault's N texts lands by chance (the expected maximum of N draws,
--           rel_sigma * sqrt(2 ln N)): five short notes give a look-alike few
--           chances, thousands of chat-log chunks give it many.
--   bm25  = 1 - exp(-share / :bm25_tau), share = bm25_raw / :bm25_max * length_factor
--           :bm25_max = what this query would score if every one of its terms
--           matched perfectly (sum of IDF * (k1 + 1)), so the share is the
--           part of the query's information a memory holds — not a share of
--           the best hit, which makes junk look perfect. Words no memory
--           holds carry the largest IDF, so nonsense stays near 0.
--           length_factor discounts bodies longer than :bm25_lref characters:
--           a long chat log holds the words of almost any question somewhere.
--           The share counts at least :cbm25_w times the best body chunk's
--           own share (cbm25_raw, BM25 over fts_chunk, of :cbm25_max, the
--           query's ceiling on chunk statistics): a long memory that answers
--           holds the question's words together, in one chunk, undiscounted.
--   dense_alone = the same curve centred at :alone_mid, for a candidate no
--           informative query word supports.
-- Fusion over the signals present: :w_dense * dense + (1 - :w_dense) * bm25
-- when both are, scaled down when the dense signal calls the pair unrelated
-- (dense below :agree: a rare word alone cannot make a hint); dense_alone or
-- bm25 when a candidate has only one.
-- Small vaults (:few_memories, under recall.SMALL_VAULT memories): word
-- statistics mean nothing there — with five memories "the" held by two is
-- "rare" and "deploy" held by three weighs nothing — so BM25 does not enter
-- the score. Only distinctive words are matched (held by at most one memory
-- in eight, see recall.bm25_terms), and sharing one lets a candidate use the
-- dense curve instead of the dense_alone one (words shared through the
-- dictionary only when their BM25 reaches :agree).
-- Every constant was chosen on the training halves of the benchmark sets
-- with tools/fusion_lab.py and reported on the held-out halves (README).
-- "LIMIT :name" is written into the statement as a number before it runs
-- (recall.inline_limits): SQLite re-prepares a statement at every run whose
-- LIMIT is bound, 3 ms of a 10,000-memory recall.

-- name: hybrid
WITH
-- knn:begin (large indexes swap this block for "knn_coarse", processes
-- holding the vectors in memory for "knn_memory"; see below)
knn_meta AS MATERIALIZED (             -- sqlite-vec: KNN alone in its CTE, joined afterwards
    SELECT rowid AS vid FROM vec_meta WHERE embedding MATCH :qvec AND k = :k_dense
),
knn_chunk AS MATERIALIZED (
    SELECT rowid AS vid FROM vec_chunk WHERE embedding MATCH :qvec AND k = :k_chunk
),
-- knn:end
dense_cand(rid) AS MATERIALIZED (
    SELECT m.rid FROM knn_meta k JOIN vectors v ON v.vid = k.vid JOIN memory_index m ON m.meta_hash = v.hash
    UNION
    SELECT c.mem_rid FROM knn_chunk k JOIN vectors v ON v.vid = k.vid JOIN chunks c ON c.hash = v.hash
),
-- One pass over the memories holding an informative query term, keeping
-- only the dense candidates and the best others: enough for the BM25 top k
-- and for every candidate's BM25, without storing every match (tens of
-- thousands in a large vault; the bounded sort keeps k + |dense| rows).
bm25_hits AS MATERIALIZED (
    SELECT rowid AS rid, -bm25(fts, 2.0, 1.0) AS raw, rowid IN (SELECT rid FROM dense_cand) AS dense_hit
    FROM fts WHERE fts MATCH :match
    ORDER BY dense_hit DESC, raw DESC
    LIMIT :k_bm25 + (SELECT count(*) FROM dense_cand)
),
bm25_top AS MATERIALIZED (
    SELECT rid FROM bm25_hits ORDER BY raw DESC LIMIT :k_bm25
),
-- The message's words in the other language (marchdb/bridge.py: "密码" is
-- "password"), gathered the same way; only a memory in the other script
-- than the message reads them (signals, below).
xbm25_hits AS MATERIALIZED (
    SELECT rowid AS rid, -bm25(fts, 2.0, 1.0) AS raw, rowid IN (SELECT rid FROM dense_cand) AS dense_hit
    FROM fts WHERE fts MATCH :xmatch
    ORDER BY dense_hit DESC, raw DESC
    LIMIT :k_xbm25 + (SELECT count(*) FROM dense_cand)
),
xbm25_top AS MATERIALIZED (
    SELECT rid FROM xbm25_hits ORDER BY raw DESC LIMIT :k_xbm25
),
cand(rid) AS MATERIALIZED (
    SELECT rid FROM dense_cand
    UNION
    SELECT rid FROM bm25_top
    UNION
    SELECT rid FROM xbm25_top
),
-- The same words against each body chunk on its own (fts_chunk): a memory's
-- best chunk, for cbm25 below. Only the candidates' chunks are scored: a
-- message's common words match a large share of a big vault's chunks, and
-- bm25() per match was most of the statement's slowest runs (p95 at 100,000
-- memories). "+rowid" keeps the filter out of FTS5, which would otherwise
-- run the query once per value; the rows it drops are never read below.
cand_chunks(crid) AS MATERIALIZED (
    SELECT c.rid FROM cand CROSS JOIN chunks c ON c.mem_rid = cand.rid
),
cbm25_hits AS MATERIALIZED (
    SELECT rowid AS crid, -bm25(fts_chunk) AS raw FROM fts_chunk
    WHERE fts_chunk MATCH :match AND +rowid IN (SELECT crid FROM cand_chunks)
),
-- cos:begin (processes holding the vectors in memory swap this block for "cos_memory")
-- Cosines across scripts run lower (a Chinese message, an English text):
-- :script_offset (measured per model, see calibrate.py) is added back when
-- one of the two texts is mostly CJK and the other is not.
meta_sig AS MATERIALIZED (
    SELECT m.rid, 1.0 - vec_distance_cosine(vm.embedding, :qvec) + :script_offset * ((:q_cjk >= 0.5) != (m.cjk >= 0.5)) AS cos
    -- CROSS JOIN fixes the order: start from the ~100 candidates, never
    -- from every vector (the planner otherwise scans all of them: 200 ms at 10k).
    FROM cand CROSS JOIN memory_index m ON m.rid = cand.rid
    CROSS JOIN vectors v ON v.kind = 'meta' AND v.hash = m.meta_hash
    CROSS JOIN vec_meta vm ON vm.rowid = v.vid
),
chunk_cos AS MATERIALIZED (
    SELECT c.mem_rid AS rid, c.seq, 1.0 - vec_distance_cosine(vc.embedding, :qvec) + :script_offset * ((:q_cjk >= 0.5) != (c.cjk >= 0.5))
             - :assistant_penalty * (c.role = 'assistant') AS cos,
           c.role = 'assistant' AS by_assistant
    FROM cand CROSS JOIN chunks c ON c.mem_rid = cand.rid
    CROSS JOIN vectors v ON v.kind = 'chunk' AND v.hash = c.hash
    CROSS JOIN vec_chunk vc ON vc.rowid = v.vid
),
chunk_sig AS (
    SELECT rid, seq, cos, row_number() OVER (PARTITION BY rid ORDER BY cos DESC) AS rn FROM chunk_cos
),
-- cos:end
body_sig AS MATERIALIZED (
    SELECT rid,
           sum(cos * (CASE rn WHEN 1 THEN :body_w1 WHEN 2 THEN :body_w2 ELSE :body_w3 END))
             / sum(CASE rn WHEN 1 THEN :body_w1 WHEN 2 THEN :body_w2 ELSE :body_w3 END) AS cos,
           max(CASE rn WHEN 1 THEN seq END) AS passage_seq  -- the passage that matched best (--explain)
    FROM chunk_sig WHERE rn <= 3 GROUP BY rid
),
bm25_sig AS MATERIALIZED (  -- a join, not "rowid IN (...)": FTS5 re-runs the query per value
    SELECT b.rid, b.raw FROM cand JOIN bm25_hits b ON b.rid = cand.rid
),
xbm25_sig AS MATERIALIZED (
    SELECT x.rid, x.raw FROM cand JOIN xbm25_hits x ON x.rid = cand.rid
),
cbm25_sig AS MATERIALIZED (  -- an assistant's chunk counts :assistant_words of its words
    SELECT c.mem_rid AS rid, max(h.raw * (CASE c.role WHEN 'assistant' THEN :assistant_words ELSE 1.0 END)) AS raw
    FROM cbm25_hits h CROSS JOIN chunks c ON c.rid = h.crid
    WHERE c.mem_rid IN (SELECT rid FROM cand) GROUP BY c.mem_rid
),
-- the candidates that are chats with an assistant: "what did I say?" asks
-- what the user told an agent, not what two people said to each other.
-- Read only for a message that asks so (:asks_back > 0), from the chunks
-- chunk_cos has already gathered.
with_assistant AS MATERIALIZED (
    SELECT rid FROM chunk_cos WHERE :asks_back > 0 GROUP BY rid HAVING max(by_assistant)
),
body_len AS MATERIALIZED (  -- only BM25 reads it: the candidates it matched
    SELECT c.mem_rid AS rid, sum(length(c.text)) AS chars
    FROM (SELECT rid FROM bm25_sig UNION SELECT rid FROM xbm25_sig) b
    CROSS JOIN chunks c ON c.mem_rid = b.rid GROUP BY c.mem_rid
),
-- signals and scored are MATERIALIZED: SQLite evaluates a plain CTE's
-- expressions again at every reference (score, rank_score and the ORDER BY
-- each recomputed dense, bm25 and the joins above); stored once for the
-- ~150 candidates, the statement takes ~1 ms less (10.6 -> 9.5 ms p50 inside
-- a warm recall at 10,000 memories, same rows).
signals AS MATERIALIZED (
    SELECT m.rid, m.id, m.name, m.description, m.status, m.path, m.updated_at, m.tags_json, m.cjk AS meta_cjk,
           ms.cos AS meta_cos, bs.cos AS body_cos, bs.passage_seq,
           CASE WHEN ms.cos IS NULL AND bs.cos IS NULL THEN NULL
                ELSE max(coalesce(ms.cos, -1.0), coalesce(bs.cos, -1.0)) END AS dense_cos,
           b.raw AS bm25_raw, cb.raw AS cbm25_raw,
           -- a memory in the other script than the message shares its words
           -- only through the dictionary: their share of the translated
           -- message (:xbm25_max, its ceiling) counts where larger
           CASE WHEN (:q_cjk >= 0.5) != (m.cjk >= 0.5) THEN x.raw END AS xbm25_raw,
           -- a body longer than :bm25_lref characters holds many words by
           -- chance: its share of the query is discounted, (lref/len)^lpen
           min(1.0, pow(:bm25_lref / max(coalesce(bl.chars, 0), 1.0), :bm25_lpen)) AS length_factor,
           wa.rid IS NOT NULL AS with_assistant
    FROM cand JOIN memory_index m ON m.rid = cand.rid
    LEFT JOIN meta_sig ms ON ms.rid = m.rid
    LEFT JOIN body_sig bs ON bs.rid = m.rid
    LEFT JOIN bm25_sig b ON b.rid = m.rid
    LEFT JOIN xbm25_sig x ON x.rid = m.rid
    LEFT JOIN cbm25_sig cb ON cb.rid = m.rid
    LEFT JOIN body_len bl ON bl.rid = m.rid
    LEFT JOIN with_assistant wa ON wa.rid = m.rid
),
shares AS (
    SELECT *,
           CASE WHEN bm25_raw IS NULL AND xbm25_raw IS NULL AND cbm25_raw IS NULL THEN NULL
                ELSE max(max(coalesce(bm25_raw / :bm25_max, 0.0), coalesce(xbm25_raw / :xbm25_max, 0.0)) * length_factor,
                         :cbm25_w * coalesce(cbm25_raw / :cbm25_max, 0.0))
           END AS bm25_ratio
    FROM signals
),
calibrated AS (
    SELECT *,
           -- dense_cos relative to the query's background (:dense_bg, its mean
           -- cosine to the probe passages)
           CASE WHEN dense_cos IS NULL THEN NULL
                ELSE 1.0 / (1.0 + exp(-(dense_cos - :dense_bg - :dense_mid) / :dense_scale)) END AS dense,
           CASE WHEN dense_cos IS NULL THEN NULL
                ELSE 1.0 / (1.0 + exp(-(dense_cos - :dense_bg - :alone_mid) / :dense_scale)) END AS dense_alone,
           CASE WHEN bm25_ratio IS NULL THEN NULL ELSE 1.0 - exp(-bm25_ratio / :bm25_tau) END AS bm25,
           -- the order reads the word share less saturated (:rank_tau): of two
           -- memories holding most of a question's words, the one holding
           -- more stays ahead of a slightly closer cosine
           CASE WHEN bm25_ratio IS NULL THEN NULL ELSE 1.0 - exp(-bm25_ratio / :rank_tau) END AS bm25_rank
    FROM shares
),
scored AS MATERIALIZED (
    SELECT *,
           min(1.0, CASE WHEN dense IS NOT NULL AND bm25 IS NOT NULL
                     THEN CASE WHEN :few_memories THEN
                                    -- words shared only through the dictionary
                                    -- must be a real part of the message: one
                                    -- of a word's many translations is met by
                                    -- chance ("tournament" in a Chinese paragraph)
                                    CASE WHEN bm25_raw IS NULL AND bm25 < :agree THEN dense_alone ELSE dense END
                               -- both signals must agree: a word match cannot lift
                               -- what the dense signal calls unrelated (dense < :agree)
                               ELSE (:w_dense * dense + (1.0 - :w_dense) * bm25)
                                    * min(1.0, dense / max(:agree, 1e-9)) END
                ELSE coalesce(dense_alone, bm25, 0.0) END
           -- a message asking the user's own past back (marchdb/index/asking.py):
           -- a chat with an assistant has its score lifted by :asks_back, the
           -- order ("ranked") left as it is
           + :asks_back * with_assistant) AS score,
           CASE WHEN dense IS NOT NULL AND bm25_rank IS NOT NULL AND NOT :few_memories
                     THEN (:w_dense * dense + (1.0 - :w_dense) * bm25_rank) * min(1.0, dense / max(:agree, 1e-9))
                WHEN dense IS NOT NULL AND bm25_rank IS NOT NULL
                     THEN CASE WHEN bm25_raw IS NULL AND bm25 < :agree THEN dense_alone ELSE dense END
                ELSE coalesce(dense_alone, bm25_rank, 0.0) END AS ranked
    FROM calibrated
)
SELECT *,
       -- The order. A memory in another script than the message (an English
       -- note, a Chinese question) shares words with it only through the
       -- dictionary, which knows few of them, so a missing or small word
       -- share says little: it is ranked by the plain dense curve at least,
       -- not the stricter dense_alone one. Its score, which the threshold
       -- reads, needs the words: across scripts the model's cosines alone do
       -- not tell related from unrelated well enough to hint on them (README).
       CASE WHEN dense IS NOT NULL AND (:q_cjk >= 0.5) != (meta_cjk >= 0.5)
            THEN max(ranked, dense) ELSE ranked END AS rank_score,
       -- project: a ranking bonus for memories tagged with the current
       -- project (or below it), never a filter; the threshold sees score alone.
       CASE WHEN :project_tag IS NOT NULL AND EXISTS (
                SELECT 1 FROM json_each(tags_json) t
                WHERE t.value = :project_tag OR substr(t.value, 1, length(:project_tag) + 1) = :project_tag || '/')
            THEN :project_bonus ELSE 0.0 END AS project_bonus
FROM scored
ORDER BY rank_score + project_bonus DESC, dense_cos DESC
LIMIT :limit;

-- name: knn_coarse
-- For indexes past a size (recall.COARSE_FROM vectors): KNN on the sign bits
-- of the centred vectors (Hamming distance, 48 bytes a vector), then the
-- coarse candidates re-ranked by exact cosine from the float tables.
knn_meta_bits AS MATERIALIZED (
    SELECT rowid AS vid FROM vec_meta_bits
    WHERE embedding MATCH vec_quantize_binary(vec_sub(:qvec, :center)) AND k = :k_coarse
),
knn_meta AS MATERIALIZED (
    SELECT b.vid FROM knn_meta_bits b CROSS JOIN vec_meta vm ON vm.rowid = b.vid
    ORDER BY vec_distance_cosine(vm.embedding, :qvec) LIMIT :k_dense
),
knn_chunk_bits AS MATERIALIZED (
    SELECT rowid AS vid FROM vec_chunk_bits
    WHERE embedding MATCH vec_quantize_binary(vec_sub(:qvec, :center)) AND k = :k_coarse
),
knn_chunk AS MATERIALIZED (
    SELECT b.vid FROM knn_chunk_bits b CROSS JOIN vec_chunk vc ON vc.rowid = b.vid
    ORDER BY vec_distance_cosine(vc.embedding, :qvec) LIMIT :k_chunk
),

-- name: knn_memory
-- A process that recalls repeatedly keeps the vectors in memory
-- (marchdb/index/vecindex.py) and finds the nearest ones itself — the same top k
-- by cosine as the vec0 KNN above, ~5x faster; their vids arrive as JSON.
knn_meta AS MATERIALIZED (SELECT value AS vid FROM json_each(:knn_meta)),
knn_chunk AS MATERIALIZED (SELECT value AS vid FROM json_each(:knn_chunk)),

-- name: cos_memory
-- ... and the candidates' cosines come from the same in-memory vectors:
-- query_cosine(kind, vid) is a function that process registers. NULL means a
-- vector written after the process last refreshed its copy; it is skipped.
meta_sig AS MATERIALIZED (
    SELECT m.rid, query_cosine('meta', v.vid) + :script_offset * ((:q_cjk >= 0.5) != (m.cjk >= 0.5)) AS cos
    FROM cand CROSS JOIN memory_index m ON m.rid = cand.rid
    CROSS JOIN vectors v ON v.kind = 'meta' AND v.hash = m.meta_hash
),
chunk_cos AS MATERIALIZED (
    SELECT c.mem_rid AS rid, c.seq, query_cosine('chunk', v.vid) + :script_offset * ((:q_cjk >= 0.5) != (c.cjk >= 0.5))
             - :assistant_penalty * (c.role = 'assistant') AS cos,
           c.role = 'assistant' AS by_assistant
    FROM cand CROSS JOIN chunks c ON c.mem_rid = cand.rid
    CROSS JOIN vectors v ON v.kind = 'chunk' AND v.hash = c.hash
),
chunk_sig AS (
    SELECT rid, seq, cos, row_number() OVER (PARTITION BY rid ORDER BY cos DESC) AS rn
    FROM chunk_cos WHERE cos IS NOT NULL
),

-- name: bm25
WITH
bm25_sig AS MATERIALIZED (
    SELECT rowid AS rid, -bm25(fts, 2.0, 1.0) AS raw
    FROM fts WHERE fts MATCH :match ORDER BY bm25(fts, 2.0, 1.0) LIMIT :k_bm25
),
cbm25_hits AS MATERIALIZED (  -- the chunks of bm25_sig's memories only (see the hybrid statement)
    SELECT rowid AS crid, -bm25(fts_chunk) AS raw FROM fts_chunk
    WHERE fts_chunk MATCH :match
      AND +rowid IN (SELECT c.rid FROM bm25_sig b CROSS JOIN chunks c ON c.mem_rid = b.rid)
),
cbm25_sig AS MATERIALIZED (
    SELECT c.mem_rid AS rid, max(h.raw * (CASE c.role WHEN 'assistant' THEN :assistant_words ELSE 1.0 END)) AS raw
    FROM cbm25_hits h CROSS JOIN chunks c ON c.rid = h.crid
    WHERE c.mem_rid IN (SELECT rid FROM bm25_sig) GROUP BY c.mem_rid
)
SELECT *, 1.0 - exp(-bm25_ratio / :bm25_tau) AS bm25, 1.0 - exp(-bm25_ratio / :bm25_tau) AS score,
       1.0 - exp(-bm25_ratio / :bm25_tau) AS rank_score,
       CASE WHEN :project_tag IS NOT NULL AND EXISTS (
                SELECT 1 FROM json_each(tags_json) t
                WHERE t.value = :project_tag OR substr(t.value, 1, length(:project_tag) + 1) = :project_tag || '/')
            THEN :project_bonus ELSE 0.0 END AS project_bonus
FROM (
    SELECT m.rid, m.id, m.name, m.description, m.status, m.path, m.updated_at, m.tags_json,
           NULL AS meta_cos, NULL AS body_cos, NULL AS dense_cos, NULL AS dense, NULL AS dense_alone,
           b.raw AS bm25_raw, cb.raw AS cbm25_raw,
           max(b.raw / :bm25_max * min(1.0, pow(:bm25_lref / max(coalesce(
               (SELECT sum(length(c.text)) FROM chunks c WHERE c.mem_rid = m.rid), 0), 1.0), :bm25_lpen)),
               :cbm25_w * coalesce(cb.raw / :cbm25_max, 0.0)) AS bm25_ratio
    FROM bm25_sig b JOIN memory_index m ON m.rid = b.rid
    LEFT JOIN cbm25_sig cb ON cb.rid = b.rid
)
ORDER BY score + project_bonus DESC
LIMIT :limit;

-- name: idf
-- Document frequencies of the query's terms, and the collection size, for
-- the BM25 ceiling of a query (FTS5 computes IDF the same way).
SELECT term, doc FROM fts_vocab WHERE term IN (SELECT value FROM json_each(:terms));

-- name: chunk_idf
-- The same among body chunks (fts_chunk), for the ceiling of cbm25.
SELECT term, doc FROM fts_chunk_vocab WHERE term IN (SELECT value FROM json_each(:terms));
