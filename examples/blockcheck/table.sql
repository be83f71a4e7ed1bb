-- The business table of the example: one row per user, re-checked on a period.
-- 1,000 users, all last checked an hour ago (so all due at once). duecast migrate adds its
-- own columns (dc_state, dc_attempt, dc_dispatched_at) and index later.
CREATE TABLE IF NOT EXISTS user_block_status (
    user_id BIGINT NOT NULL PRIMARY KEY,
    status TINYINT NOT NULL DEFAULT 1,      -- 1 = ok, 2 = blocked
    updated_time DATETIME(6) NOT NULL
);

-- How many users (1 to 1,000,000): change this number to try a bigger table.
SET @users = 1000;

-- Ids 1..@users from six digit columns (0-999,999), not a WITH RECURSIVE counter: MariaDB stops
-- a recursive CTE at max_recursive_iterations (1,000 by default) without an error, and MySQL 8 at
-- cte_max_recursion_depth (with one), so a counter to 50,000 would make 1,001 rows here.
INSERT IGNORE INTO user_block_status (user_id, status, updated_time)
WITH d (n) AS (SELECT 0 UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
               UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)
SELECT 1 + ones.n + 10 * tens.n + 100 * hundreds.n + 1000 * thousands.n
         + 10000 * tens_of_thousands.n + 100000 * hundreds_of_thousands.n,
       1, NOW(6) - INTERVAL 1 HOUR
FROM d AS ones, d AS tens, d AS hundreds, d AS thousands, d AS tens_of_thousands, d AS hundreds_of_thousands
WHERE ones.n + 10 * tens.n + 100 * hundreds.n + 1000 * thousands.n
      + 10000 * tens_of_thousands.n + 100000 * hundreds_of_thousands.n < @users;
