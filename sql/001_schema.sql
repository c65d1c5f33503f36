-- marchdb index schema. The index is a cache of the Markdown files: on a
-- schema change it is deleted and rebuilt from them, never migrated.
-- Plain tables and diag_* views stay readable from the stock sqlite3 shell;
-- only the vec0 tables (sql/vectors.sql) need the sqlite-vec extension.

CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT
);

-- Every .md file seen under the memory root, memory or not.
CREATE TABLE files (
    path         TEXT PRIMARY KEY,   -- relative to the memory root, '/'-separated
    mtime_ns     INTEGER NOT NULL,
    size         INTEGER NOT NULL,
    content_hash TEXT,               -- NULL until the file was read successfully
    mem_id       TEXT,               -- the id its frontmatter declares, if valid
    parse_status TEXT NOT NULL,      -- 'ok' | 'problem' | 'error'
    error        TEXT                -- first problem, for a quick look
);
CREATE INDEX files_mem_id ON files(mem_id) WHERE mem_id IS NOT NULL;

-- Problems found when a file was last read (duplicate ids are derived, see views).
CREATE TABLE problems (
    path   TEXT NOT NULL,
    kind   TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX problems_path ON problems(path);

-- The memory index, one row per id held by exactly one file.
CREATE TABLE memory_index (
    rid          INTEGER PRIMARY KEY,  -- stable key for fts/chunks joins
    id           TEXT NOT NULL UNIQUE,
    path         TEXT NOT NULL,
    name         TEXT NOT NULL,
    description  TEXT NOT NULL,
    tags_json    TEXT NOT NULL,
    status       TEXT NOT NULL,
    created_at   TEXT,
    updated_at   TEXT,
    mtime_ms     INTEGER NOT NULL,
    size         INTEGER NOT NULL,
    content_hash TEXT NOT NULL,
    meta_hash    TEXT NOT NULL,        -- hash of name + description + tags (its vector key)
    cjk          REAL NOT NULL DEFAULT 0  -- how much of that text is CJK (fts.cjk_share; recall: script)
);
CREATE INDEX memory_index_path ON memory_index(path);
CREATE INDEX memory_index_meta_hash ON memory_index(meta_hash);

-- Body chunks: paragraphs packed to a bounded length, body text only. In a
-- chat (a body of "**user**: ..." / "**assistant**: ..." turns, chunks.chat_turns)
-- a person's turns and an assistant's are chunked apart, and role says which:
-- 'user' (a person: the user, or either of two people talking), 'assistant',
-- '' (not a chat). Recall weighs what the user said above what was answered.
CREATE TABLE chunks (
    rid     INTEGER PRIMARY KEY,
    mem_rid INTEGER NOT NULL REFERENCES memory_index(rid) ON DELETE CASCADE,
    seq     INTEGER NOT NULL,
    text    TEXT NOT NULL,
    hash    TEXT NOT NULL,             -- its vector key
    cjk     REAL NOT NULL DEFAULT 0,   -- how much of it is CJK (fts.cjk_share; recall: script)
    role    TEXT NOT NULL DEFAULT ''   -- 'user' | 'assistant' | '' (chunks.body_chunks)
);
CREATE INDEX chunks_mem ON chunks(mem_rid);
CREATE INDEX chunks_hash ON chunks(hash);

-- BM25 over metadata (weighted x2 at query time) and body of ACTIVE memories
-- (an inactive one must not shape the term statistics of the others);
-- rowid = memory_index.rid. Text arrives with CJK runs rewritten as bigrams
-- (marchdb/fts.py); English words are stemmed by FTS5's porter tokenizer
-- ("releases" and "release" are one term), built into every SQLite.
-- Contentless (content = ''): FTS5 keeps the terms, not a copy of the text
-- (that copy was a third of the index); the texts are in memory_index and
-- chunks. Reading fts.meta or fts.body gives NULL; MATCH, bm25() and
-- fts_vocab work as before. contentless_delete = 1 (SQLite 3.43+) lets a row
-- be deleted by its rowid alone, without the text it was indexed with.
-- Not external content: that needs the text exactly as FTS5 was given it
-- (CJK as bigrams), which no table holds, and the old text for every delete.
CREATE VIRTUAL TABLE fts USING fts5(
    meta, body, content = '', contentless_delete = 1, tokenize = 'porter unicode61 remove_diacritics 2'
);

CREATE TRIGGER memory_index_delete AFTER DELETE ON memory_index BEGIN
    DELETE FROM fts WHERE rowid = old.rid;
END;

-- BM25 over each body chunk of an active memory on its own; rowid =
-- chunks.rid. A long memory (a chat session of 11,000 characters) holds the
-- words of almost any question somewhere, spread over it; the one it answers
-- holds them together, in one chunk (sql/recall.sql: cbm25). Same text form
-- and tokenizer as fts, contentless too (the text is chunks.text).
CREATE VIRTUAL TABLE fts_chunk USING fts5(
    body, content = '', contentless_delete = 1, tokenize = 'porter unicode61 remove_diacritics 2'
);

CREATE TRIGGER chunks_delete AFTER DELETE ON chunks BEGIN
    DELETE FROM fts_chunk WHERE rowid = old.rid;
END;

-- Which texts have a vector for the current model (meta.model_fingerprint).
-- The vectors themselves live in vec0 tables keyed by vid; keying by content
-- hash means a moved or renamed file is never embedded again. AUTOINCREMENT:
-- a vid is never reused, so a process holding vectors in memory
-- (marchdb/index/vecindex.py) can tell new vectors from old ones by vid alone.
CREATE TABLE vectors (
    vid  INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL CHECK (kind IN ('meta', 'chunk')),
    hash TEXT NOT NULL,
    UNIQUE (kind, hash)
);

-- Passive recall log: which memory was hinted in which agent run, shared by
-- every process (CLI, MCP server, agent loop) through the index.
CREATE TABLE recall_log (
    seq     INTEGER PRIMARY KEY,
    run_id  TEXT NOT NULL,
    trigger TEXT NOT NULL,             -- 'user' | 'assistant' (injected) | 'display' (shown only)
                                       -- | 'record' (end of a run: recorded, never injected)
    mem_id  TEXT NOT NULL,
    score   REAL NOT NULL,
    at      TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX recall_log_run ON recall_log(run_id);

-- Agent runs in the order they first asked for recall (rolling suppression).
-- conversation: what the run belongs to, given with its first recall (a chat,
-- a host's session: "cc:SESSION" for the Claude Code hook's run "cc:SESSION:7"),
-- NULL when none was given. The 10-run window is counted among the runs of
-- one conversation (runs without one share a window): a hint shown in one
-- session is not in another session's context, so it is not held back there.
CREATE TABLE runs (
    seq          INTEGER PRIMARY KEY,
    run_id       TEXT NOT NULL UNIQUE,
    at           TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    conversation TEXT
);
CREATE INDEX runs_conversation ON runs(conversation, seq);

CREATE TABLE open_log (
    seq    INTEGER PRIMARY KEY,
    mem_id TEXT NOT NULL,
    at     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

-- Document frequency of every FTS term: the IDFs that turn a BM25 score into
-- "share of the query's information matched" (see sql/recall.sql).
CREATE VIRTUAL TABLE fts_vocab USING fts5vocab(fts, 'row');
-- The same for chunks (the IDFs of a message's words among chunks).
CREATE VIRTUAL TABLE fts_chunk_vocab USING fts5vocab(fts_chunk, 'row');
