-- The lifecycle of a memory: the frontmatter fields temperature
-- and import read, the logs read by memory, and the bounds that keep the logs
-- from growing forever. Readable from the stock sqlite3 shell.

-- Lifecycle fields of a memory's frontmatter; a row only for memories that
-- have one (sync writes it with the memory, marchdb/index/sync.py).
CREATE TABLE memory_attrs (
    rid      INTEGER PRIMARY KEY REFERENCES memory_index(rid) ON DELETE CASCADE,
    priority REAL,   -- `priority:` high 1, normal 0, low -1 (notes.priority_value); a ranking signal
    source   TEXT    -- `source:` where an imported memory came from: import's idempotency key
);
CREATE INDEX memory_attrs_source ON memory_attrs(source) WHERE source IS NOT NULL;

-- `supersedes:` the ids of older memories a memory replaces (notes.supersedes_ids).
-- The target may be any id, known or not: a file indexed later is replaced then.
CREATE TABLE supersedes (
    rid    INTEGER NOT NULL REFERENCES memory_index(rid) ON DELETE CASCADE,
    target TEXT NOT NULL,
    PRIMARY KEY (rid, target)
) WITHOUT ROWID;
CREATE INDEX supersedes_target ON supersedes(target);

-- The memories that another one replaces, and by which: recall leaves them
-- out (temperature.sql), open says so, maintain proposes archiving them.
-- Derived from `supersedes` and the memories' status by sql/superseded.sql,
-- which sync runs after every change of the memories (the walk is too costly
-- to run per recall in a vault where many memories replace many others).
CREATE TABLE superseded (
    id      TEXT PRIMARY KEY,   -- the memory replaced
    by_id   TEXT NOT NULL,      -- the newest active memory that replaces it
    by_path TEXT NOT NULL
) WITHOUT ROWID;

-- `conflicts_with:` the ids of memories a memory contradicts (notes.field_ids). Both are kept
-- for a person to decide; doctor and maintain list them, recall marks them in its answer.
CREATE TABLE conflicts_with (
    rid    INTEGER NOT NULL REFERENCES memory_index(rid) ON DELETE CASCADE,
    target TEXT NOT NULL,
    PRIMARY KEY (rid, target)
) WITHOUT ROWID;
CREATE INDEX conflicts_with_target ON conflicts_with(target);

-- Contradictions not yet decided: both memories active and neither superseded (replacing one
-- settles it, as does retiring one or removing the field). One row per side, whichever of the
-- two named the other, so `WHERE id = ?` finds every memory a memory is disputed by.
CREATE VIEW diag_contradictions AS
WITH named AS (
    SELECT a.id AS id, c.target AS other_id FROM conflicts_with c JOIN memory_index a ON a.rid = c.rid
    WHERE c.target != a.id
),
sides AS (SELECT id, other_id FROM named UNION SELECT other_id, id FROM named)
SELECT s.id, m.path, m.name, s.other_id, o.path AS other_path, o.name AS other_name
FROM sides s JOIN memory_index m ON m.id = s.id JOIN memory_index o ON o.id = s.other_id
WHERE m.status = 'active' AND o.status = 'active'
  AND s.id NOT IN (SELECT id FROM superseded) AND s.other_id NOT IN (SELECT id FROM superseded);

-- What `supersedes:` and `conflicts_with:` name that cannot do what the field says (doctor,
-- through diag_problems): an id no file holds (a typo, or a memory deleted since: one indexed
-- later still counts); both fields naming the same memory (replaced, or undecided?); a ring of
-- memories replacing one another, where none is replaced because which holds cannot be told (the
-- walk of sql/superseded.sql, bounded the same way). A memory naming itself is a problem of its
-- file (notes.parse_note); sync leaves that id out.
CREATE VIEW diag_links AS
WITH RECURSIVE up(start, rid) AS (
    SELECT old.rid, s.rid FROM supersedes s JOIN memory_index old ON old.id = s.target
    UNION
    SELECT up.start, s.rid
    FROM up JOIN memory_index cur ON cur.rid = up.rid JOIN supersedes s ON s.target = cur.id
    LIMIT 50000
),
named(rid, target, field) AS (
    SELECT rid, target, 'supersedes' FROM supersedes
    UNION ALL
    SELECT rid, target, 'conflicts_with' FROM conflicts_with
)
SELECT m.path, 'unknown_id' AS kind, n.field || ' names ' || n.target || ', an id no memory has' AS detail
FROM named n JOIN memory_index m ON m.rid = n.rid
WHERE NOT EXISTS (SELECT 1 FROM files f WHERE f.mem_id = n.target)
UNION ALL
SELECT m.path, 'supersedes_and_conflicts', 'supersedes and conflicts_with both name ' || s.target
FROM supersedes s JOIN conflicts_with c ON c.rid = s.rid AND c.target = s.target
JOIN memory_index m ON m.rid = s.rid
UNION ALL
SELECT m.path, 'supersedes_ring',
       'supersedes leads back to ' || m.id || ' through other memories, so none of them is replaced'
FROM (SELECT DISTINCT start FROM up WHERE rid = start) r JOIN memory_index m ON m.rid = r.start;

-- Temperature, maintenance and the memory_use view read the logs per memory
-- (and time).
CREATE INDEX recall_log_mem_at ON recall_log(mem_id, at);
CREATE INDEX open_log_mem_at ON open_log(mem_id, at);

-- How many rows of each log are kept. Every 1000th insert drops the rows
-- older than the last keep_rows, inside the writer's own transaction: a range
-- delete on the primary key, ~1000 rows at a time, so a log never grows past
-- keep_rows + 1000 and no process has to remember to prune.
-- recall_log: ~3 rows per message, so ~30,000 messages; open_log: 50,000
-- opens; runs: 20,000 agent runs, all conversations together (suppression
-- needs only each conversation's last 11: one idle for 20,000 runs of the
-- others starts with an empty window).
CREATE TABLE log_bounds (
    log       TEXT PRIMARY KEY,
    keep_rows INTEGER NOT NULL
);
INSERT INTO log_bounds(log, keep_rows) VALUES ('recall_log', 100000), ('open_log', 50000), ('runs', 20000);

CREATE TRIGGER recall_log_bound AFTER INSERT ON recall_log WHEN new.seq % 1000 = 0 BEGIN
    DELETE FROM recall_log WHERE seq <= new.seq - (SELECT keep_rows FROM log_bounds WHERE log = 'recall_log');
END;
CREATE TRIGGER open_log_bound AFTER INSERT ON open_log WHEN new.seq % 1000 = 0 BEGIN
    DELETE FROM open_log WHERE seq <= new.seq - (SELECT keep_rows FROM log_bounds WHERE log = 'open_log');
END;
CREATE TRIGGER runs_bound AFTER INSERT ON runs WHEN new.seq % 1000 = 0 BEGIN
    DELETE FROM runs WHERE seq <= new.seq - (SELECT keep_rows FROM log_bounds WHERE log = 'runs');
END;

-- Size of each log (doctor reports it).
CREATE VIEW diag_logs AS
SELECT 'recall_log' AS log, count(*) AS rows, (SELECT keep_rows FROM log_bounds WHERE log = 'recall_log') AS keep_rows,
       min(at) AS oldest, max(at) AS newest
FROM recall_log
UNION ALL
SELECT 'open_log', count(*), (SELECT keep_rows FROM log_bounds WHERE log = 'open_log'), min(at), max(at) FROM open_log
UNION ALL
SELECT 'runs', count(*), (SELECT keep_rows FROM log_bounds WHERE log = 'runs'), min(at), max(at) FROM runs;

-- How each memory has been used, as far as the kept logs remember: hinted
-- (injected for a user message or an assistant output: what an agent saw),
-- recalled (any row: hinted, shown for display, or recorded at the end of a
-- run, which no agent sees), opened.
CREATE VIEW diag_usage AS
SELECT m.id, m.path, m.status, m.updated_at,
       (SELECT count(*) FROM recall_log l WHERE l.mem_id = m.id AND l.trigger IN ('user', 'assistant')) AS hinted,
       (SELECT count(*) FROM recall_log l WHERE l.mem_id = m.id) AS recalled,
       (SELECT count(*) FROM open_log o WHERE o.mem_id = m.id) AS opened,
       (SELECT max(at) FROM recall_log l WHERE l.mem_id = m.id AND l.trigger IN ('user', 'assistant')) AS last_hinted,
       (SELECT max(at) FROM recall_log l WHERE l.mem_id = m.id) AS last_recalled,
       (SELECT max(at) FROM open_log o WHERE o.mem_id = m.id) AS last_opened,
       a.priority, a.source
FROM memory_index m LEFT JOIN memory_attrs a ON a.rid = m.rid;

-- The lifecycle at a glance (status shows it next to diag_summary).
CREATE VIEW diag_lifecycle AS
SELECT
    (SELECT count(*) FROM memory_index WHERE status = 'archived')                   AS archived,
    (SELECT count(*) FROM memory_index m
       WHERE EXISTS (SELECT 1 FROM json_each(m.tags_json) WHERE value = 'daily-log')) AS daily_logs,
    (SELECT count(*) FROM memory_attrs WHERE source IS NOT NULL)                    AS imported;
