-- Generated from shared/schema.py (jobs_table_ddl); do not edit by hand.
CREATE TABLE IF NOT EXISTS `duecast_jobs` (
  `id` BIGINT NOT NULL AUTO_INCREMENT,
  `queue` VARCHAR(64) NOT NULL DEFAULT 'default',
  `task` VARCHAR(191) NOT NULL,
  `payload` LONGTEXT NOT NULL,
  `run_at` DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  `created_at` DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  `dc_state` TINYINT UNSIGNED NOT NULL DEFAULT 0,
  `dc_attempt` INT UNSIGNED NOT NULL DEFAULT 0,
  `dc_dispatched_at` DATETIME(6) NULL,
  PRIMARY KEY (`id`),
  KEY `dc_due` (`dc_state`, `run_at`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
