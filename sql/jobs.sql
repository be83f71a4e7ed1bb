-- Generated from shared/storage/schema.py (jobs_table_ddl, schedules_table_ddl, runs_table_ddl,
-- cursors_table_ddl); do not edit by hand.
CREATE TABLE IF NOT EXISTS `duecast_jobs` (
  `id` BIGINT NOT NULL AUTO_INCREMENT,
  `queue` VARCHAR(48) NOT NULL DEFAULT 'default',
  `task` VARCHAR(191) NOT NULL,
  `payload` LONGTEXT NOT NULL,
  `priority` TINYINT UNSIGNED NOT NULL DEFAULT 0,
  `run_at` DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  `created_at` DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  `max_attempts` SMALLINT UNSIGNED NOT NULL DEFAULT 20,
  `errors` SMALLINT UNSIGNED NOT NULL DEFAULT 0,
  `interruptions` SMALLINT UNSIGNED NOT NULL DEFAULT 0,
  `unique_key` VARCHAR(191) NULL,
  `unique_slot` VARCHAR(191) NULL,
  `schedule` VARCHAR(64) NULL,
  `scheduled_for` DATETIME(6) NULL,
  `started_at` DATETIME(6) NULL,
  `lease_until` DATETIME(6) NULL,
  `worker` VARCHAR(128) NULL,
  `finished_at` DATETIME(6) NULL,
  `last_error` MEDIUMTEXT NULL,
  `meta` TEXT NULL,
  `result` MEDIUMTEXT NULL,
  `concurrency_key` VARCHAR(191) NULL,
  `dc_state` TINYINT UNSIGNED NOT NULL DEFAULT 0,
  `dc_attempt` INT UNSIGNED NOT NULL DEFAULT 0,
  `dc_dispatched_at` DATETIME(6) NULL,
  PRIMARY KEY (`id`),
  KEY `dc_due` (`dc_state`, `queue`, `priority`, `run_at`),
  UNIQUE KEY `dc_unique` (`task`, `unique_slot`),
  UNIQUE KEY `dc_schedule_run` (`schedule`, `scheduled_for`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS `duecast_schedules` (
  `name` VARCHAR(64) NOT NULL,
  `last_run_at` DATETIME(6) NOT NULL,
  `runs` BIGINT UNSIGNED NOT NULL DEFAULT 0,
  PRIMARY KEY (`name`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS `duecast_jobs_runs` (
  `id` BIGINT NOT NULL AUTO_INCREMENT,
  `queue` VARCHAR(48) NOT NULL,
  `priority` TINYINT UNSIGNED NOT NULL,
  `suspects` SMALLINT UNSIGNED NOT NULL DEFAULT 0,
  `jobs` INT UNSIGNED NOT NULL,
  `members` MEDIUMTEXT NOT NULL,
  `dc_state` TINYINT UNSIGNED NOT NULL DEFAULT 0,
  `dc_attempt` INT UNSIGNED NOT NULL DEFAULT 0,
  `dc_dispatched_at` DATETIME(6) NULL,
  `started_at` DATETIME(6) NULL,
  `lease_until` DATETIME(6) NULL,
  `worker` VARCHAR(128) NULL,
  `task` VARCHAR(191) NULL,
  `concurrency_key` VARCHAR(191) NULL,
  PRIMARY KEY (`id`),
  KEY `dc_runs` (`queue`, `dc_state`, `priority`),
  KEY `dc_task` (`task`, `dc_state`),
  KEY `dc_key` (`queue`, `concurrency_key`, `dc_state`)
) ENGINE=InnoDB AUTO_INCREMENT=4611686018427387904 DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS `duecast_jobs_cursors` (
  `queue` VARCHAR(48) NOT NULL,
  `priority` TINYINT UNSIGNED NOT NULL,
  `run_at` DATETIME(6) NOT NULL,
  `id` BIGINT NOT NULL,
  PRIMARY KEY (`queue`, `priority`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
