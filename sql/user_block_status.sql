-- The motivating business table (from the design documents): one row per user, re-checked every 10 s.
CREATE TABLE IF NOT EXISTS `user_block_status` (
  `user_id` BIGINT NOT NULL PRIMARY KEY,
  `status` INT NOT NULL DEFAULT 1,           -- 1 ok, 2 blocked
  `updated_time` DATETIME(6) NOT NULL        -- last check; due when older than the period
) ENGINE=InnoDB;

-- Generated from shared/storage/schema.py (source_migration); what `duecast migrate` applies to it.
ALTER TABLE `user_block_status` ADD COLUMN `dc_state` TINYINT UNSIGNED NOT NULL DEFAULT 0, ADD COLUMN `dc_attempt` INT UNSIGNED NOT NULL DEFAULT 0, ADD COLUMN `dc_dispatched_at` DATETIME(6) NULL;
ALTER TABLE `user_block_status` ADD INDEX `dc_due` (`dc_state`, `updated_time`);
