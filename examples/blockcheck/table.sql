-- The business table of the example: one row per user, re-checked on a period.
-- 1,000 users, all last checked an hour ago (so all due at once). duecast migrate adds its
-- own columns (dc_state, dc_attempt, dc_dispatched_at) and index later.
CREATE TABLE IF NOT EXISTS user_block_status (
    user_id BIGINT NOT NULL PRIMARY KEY,
    status TINYINT NOT NULL DEFAULT 1,      -- 1 = ok, 2 = blocked
    updated_time DATETIME(6) NOT NULL
);

INSERT IGNORE INTO user_block_status (user_id, status, updated_time)
WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000)
SELECT i, 1, NOW(6) - INTERVAL 1 HOUR FROM n;
