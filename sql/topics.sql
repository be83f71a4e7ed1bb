-- Generated from shared/storage/topic_schema.py (topic_table_ddl); do not edit by hand.
CREATE TABLE IF NOT EXISTS `duecast_topics` (
  `id` INT UNSIGNED NOT NULL AUTO_INCREMENT,
  `name` VARCHAR(32) NOT NULL,
  `last_seq` BIGINT UNSIGNED NOT NULL DEFAULT 0,
  `created_at` DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (`id`),
  UNIQUE KEY `dc_name` (`name`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS `duecast_messages` (
  `topic_id` INT UNSIGNED NOT NULL,
  `seq` BIGINT UNSIGNED NOT NULL,
  `msg_key` VARCHAR(191) NULL,
  `payload` LONGTEXT NOT NULL,
  `created_at` DATETIME(6) NOT NULL,
  PRIMARY KEY (`topic_id`, `seq`),
  KEY `dc_key` (`topic_id`, `msg_key`),
  KEY `dc_time` (`topic_id`, `created_at`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS `duecast_groups` (
  `id` INT UNSIGNED NOT NULL AUTO_INCREMENT,
  `topic_id` INT UNSIGNED NOT NULL,
  `name` VARCHAR(32) NOT NULL,
  `mode` VARCHAR(16) NOT NULL,
  `position` BIGINT UNSIGNED NOT NULL,
  `skipped` BIGINT UNSIGNED NOT NULL DEFAULT 0,
  `created_at` DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  `reset_at` DATETIME(6) NULL,
  PRIMARY KEY (`id`),
  UNIQUE KEY `dc_name` (`topic_id`, `name`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS `duecast_deliveries` (
  `group_id` INT UNSIGNED NOT NULL,
  `seq` BIGINT UNSIGNED NOT NULL,
  `run_at` DATETIME(6) NOT NULL,
  `errors` SMALLINT UNSIGNED NOT NULL DEFAULT 0,
  `interruptions` SMALLINT UNSIGNED NOT NULL DEFAULT 0,
  `replays` INT UNSIGNED NOT NULL DEFAULT 0,
  `started_at` DATETIME(6) NULL,
  `lease_until` DATETIME(6) NULL,
  `worker` VARCHAR(128) NULL,
  `finished_at` DATETIME(6) NULL,
  `last_error` MEDIUMTEXT NULL,
  `dc_state` TINYINT UNSIGNED NOT NULL DEFAULT 0,
  `dc_attempt` INT UNSIGNED NOT NULL DEFAULT 0,
  `dc_dispatched_at` DATETIME(6) NULL,
  PRIMARY KEY (`group_id`, `seq`),
  KEY `dc_due` (`dc_state`, `group_id`, `run_at`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS `duecast_attempts` (
  `group_id` INT UNSIGNED NOT NULL,
  `seq` BIGINT UNSIGNED NOT NULL,
  `attempt` INT UNSIGNED NOT NULL,
  `outcome` VARCHAR(16) NOT NULL,
  `worker` VARCHAR(128) NULL,
  `dispatched_at` DATETIME(6) NULL,
  `started_at` DATETIME(6) NULL,
  `ended_at` DATETIME(6) NULL,
  `error` MEDIUMTEXT NULL,
  PRIMARY KEY (`group_id`, `seq`, `attempt`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS `duecast_members` (
  `group_id` INT UNSIGNED NOT NULL,
  `name` VARCHAR(100) NOT NULL,
  `position` BIGINT UNSIGNED NOT NULL,
  `owner` VARCHAR(128) NULL,
  `heartbeat_at` DATETIME(6) NOT NULL,
  `joined_at` DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  `handled` BIGINT UNSIGNED NOT NULL DEFAULT 0,
  `failed` BIGINT UNSIGNED NOT NULL DEFAULT 0,
  `skipped` BIGINT UNSIGNED NOT NULL DEFAULT 0,
  PRIMARY KEY (`group_id`, `name`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
