-- Least-privilege MySQL/MariaDB accounts for duecast: one for migrations, one for dispatchers
-- (and `duecast sweeper`), one for workers, one for applications that enqueue jobs.
-- See docs/security.md.
--
-- Replace before running:
--   `app`                               the database in mysql.database
--   'duecast_...'@'%'                   account names, and the hosts they connect from
--   user_block_status, account_checks   your sources: copy the block of each source's mode
--   duecast_jobs, duecast_schedules     jobs.table and jobs.schedules_table, if you renamed them
--   duecast_jobs_runs, _cursors         named after jobs.table: <table>_runs, <table>_cursors
--
-- Order: create the accounts; run the migrations GRANT; run `duecast migrate` as duecast_migrate;
-- then run the rest (a table-level GRANT needs its table to exist). For example:
--   CREATE USER 'duecast_migrate'@'%' IDENTIFIED BY '...' REQUIRE SSL;
--   CREATE USER 'duecast_dispatcher'@'%' IDENTIFIED BY '...' REQUIRE SSL;
--   CREATE USER 'duecast_worker'@'%' IDENTIFIED BY '...' REQUIRE SSL;
--   CREATE USER 'duecast_enqueuer'@'%' IDENTIFIED BY '...' REQUIRE SSL;  -- your applications
-- REQUIRE SSL (or REQUIRE X509, with mysql.tls_cert_file) makes the server refuse plaintext,
-- whatever a client's settings say. tests/integration/test_grants.py runs this file.

-- Migrations: `duecast migrate` creates the database and duecast's own tables, and adds columns
-- and an index to row-mode sources. DDL only: it cannot read or write a row, or DROP a table or
-- the database. (ALTER still lets it drop a column: use it from deploy jobs, not from app hosts.)
-- REFERENCES is there because information_schema.COLUMNS shows a column only to an account with
-- a column privilege; it gives no access to rows.
GRANT CREATE, ALTER, INDEX, REFERENCES ON `app`.* TO 'duecast_migrate'@'%';

-- duecast's jobs. Dispatcher: claims and requeues (SELECT ... FOR UPDATE, UPDATE), inserts the
-- jobs of recurring schedules, deletes finished jobs past their retention. Worker: starts,
-- leases, retries and finishes jobs (UPDATE), deletes done jobs; it never inserts.
GRANT SELECT, INSERT, UPDATE, DELETE ON `app`.`duecast_jobs` TO 'duecast_dispatcher'@'%';
GRANT SELECT, INSERT, UPDATE ON `app`.`duecast_schedules` TO 'duecast_dispatcher'@'%';
GRANT SELECT, UPDATE, DELETE ON `app`.`duecast_jobs` TO 'duecast_worker'@'%';
-- (Every role's start-up check looks for the schedules table; REFERENCES shows it, not its rows.)
GRANT REFERENCES ON `app`.`duecast_schedules` TO 'duecast_worker'@'%';
-- Job runs (docs/architecture.md, "Job runs"). Dispatcher: inserts runs and moves the cursors,
-- requeues and drops the runs of dead workers. Worker: starts, leases and finishes runs; it never
-- inserts one, and only looks for the cursors table.
GRANT SELECT, INSERT, UPDATE, DELETE ON `app`.`duecast_jobs_runs` TO 'duecast_dispatcher'@'%';
GRANT SELECT, INSERT, UPDATE ON `app`.`duecast_jobs_cursors` TO 'duecast_dispatcher'@'%';
GRANT SELECT, UPDATE, DELETE ON `app`.`duecast_jobs_runs` TO 'duecast_worker'@'%';
GRANT REFERENCES ON `app`.`duecast_jobs_cursors` TO 'duecast_worker'@'%';

-- The leader lease (dispatcher.leases_table): dispatchers take, renew and hand it over.
GRANT SELECT, INSERT, UPDATE ON `app`.`duecast_leases` TO 'duecast_dispatcher'@'%';
-- The worker registry (worker.registry_table): a worker registers, beats and leaves; the leader
-- dispatcher reads it and removes the dead.
GRANT SELECT, INSERT, UPDATE, DELETE ON `app`.`duecast_workers` TO 'duecast_worker'@'%';
GRANT SELECT, DELETE ON `app`.`duecast_workers` TO 'duecast_dispatcher'@'%';

-- Applications that enqueue jobs (Enqueuer, `duecast enqueue`): INSERT of the columns a job is
-- made of, and nothing else: no UPDATE or DELETE, so an enqueuer cannot change a queued job (its
-- task, payload, run_at) or set the dc_* state, errors, leases or a schedule's columns.
-- on_duplicate="keep" merges with a plain INSERT and, after a duplicate-key error, a read of the
-- id of the active job holding the key: SELECT on those columns only (never payloads).
GRANT INSERT (`queue`, `task`, `payload`, `priority`, `max_attempts`, `unique_key`, `unique_slot`, `run_at`),
  SELECT (`id`, `task`, `unique_slot`)
  ON `app`.`duecast_jobs` TO 'duecast_enqueuer'@'%';

-- A row-mode source (mode = "rows"). Dispatcher: claims (SELECT ... FOR UPDATE, UPDATE of the
-- dc_* columns) and requeues. Worker: locks its rows, acks with UPDATE (a touch, and the columns
-- its handler sets) or DELETE; drop DELETE if no handler deletes and on_success = "touch".
GRANT SELECT, UPDATE ON `app`.`user_block_status` TO 'duecast_dispatcher'@'%';
GRANT SELECT, UPDATE, DELETE ON `app`.`user_block_status` TO 'duecast_worker'@'%';

-- A range-mode source (mode = "ranges"): dispatch state lives in dc_ranges_<source name>. The
-- dispatcher only reads the business table (range discovery: INSERT IGNORE ... SELECT); the
-- worker reads it and writes only the rows its handler changes.
GRANT SELECT ON `app`.`account_checks` TO 'duecast_dispatcher'@'%';
GRANT SELECT, INSERT, UPDATE ON `app`.`dc_ranges_account_checks` TO 'duecast_dispatcher'@'%';
GRANT SELECT, UPDATE, DELETE ON `app`.`account_checks` TO 'duecast_worker'@'%';
GRANT SELECT, UPDATE ON `app`.`dc_ranges_account_checks` TO 'duecast_worker'@'%';
