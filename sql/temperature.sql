-- Temperature (marchdb/index/temperature.py): what the ranking adjustment of a
-- recall needs about its candidates (:ids, a JSON array of memory ids).
--   hinted  times hinted (injected for a user message or an assistant output) since :since
--   opened  opens since :since that followed a hint of the same memory within a day
--   superseded_by  the memory that replaces this one (table superseded, sql/superseded.sql)
-- Both come from the kept logs (bounded, sql/003_lifecycle.sql).
WITH ids(id) AS (SELECT DISTINCT value FROM json_each(:ids)),
-- CROSS JOIN: from the ~60 candidates into the logs' (mem_id, at) indexes. With a
-- plain JOIN the planner scanned the whole log instead (up to 100,000 rows).
hints AS (
    SELECT l.mem_id, count(*) AS n
    FROM ids CROSS JOIN recall_log l ON l.mem_id = ids.id
    WHERE l.trigger IN ('user', 'assistant') AND l.at >= :since
    GROUP BY l.mem_id
),
opens AS (
    SELECT o.mem_id, count(*) AS n
    FROM ids CROSS JOIN open_log o ON o.mem_id = ids.id
    WHERE o.at >= :since AND EXISTS (
        SELECT 1 FROM recall_log l
        WHERE l.mem_id = o.mem_id AND l.trigger IN ('user', 'assistant')
          AND l.at <= o.at AND l.at >= strftime('%Y-%m-%dT%H:%M:%fZ', o.at, '-1 day'))
    GROUP BY o.mem_id
)
SELECT ids.id, m.created_at, m.updated_at, a.priority,
       coalesce(h.n, 0) AS hinted, coalesce(op.n, 0) AS opened,
       sup.by_id AS superseded_by
FROM ids
JOIN memory_index m ON m.id = ids.id
LEFT JOIN memory_attrs a ON a.rid = m.rid
LEFT JOIN hints h ON h.mem_id = ids.id
LEFT JOIN opens op ON op.mem_id = ids.id
LEFT JOIN superseded sup ON sup.id = ids.id;
