-- Seed for deploy/compose.yaml: the demo's business table (sql/user_block_status.sql) with 10,000 users,
-- last checked spread over one 10 s period, so the re-scan starts in a steady state.
-- MariaDB runs it once, on an empty data directory, in MARIADB_DATABASE; the compose `migrate`
-- service then adds duecast's columns and index (`duecast migrate`).
CREATE TABLE IF NOT EXISTS `user_block_status` (
  `user_id` BIGINT NOT NULL PRIMARY KEY,
  `status` INT NOT NULL DEFAULT 1,           -- 1 ok, 2 blocked
  `updated_time` DATETIME(6) NOT NULL        -- last check; due when older than the period
) ENGINE=InnoDB;

-- seq_1_to_N is MariaDB's Sequence engine: no helper table needed.
INSERT IGNORE INTO `user_block_status` (`user_id`, `status`, `updated_time`)
SELECT seq, 1, NOW(6) - INTERVAL seq * 1000 MICROSECOND FROM seq_1_to_10000;  -- 1 ms apart
