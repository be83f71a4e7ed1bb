-- Least-privilege MySQL/MariaDB accounts for duecast, one per role: migrations, dispatchers (and
-- `duecast sweeper`), workers, applications that enqueue jobs, applications that publish to topics,
-- and a read-only account for `duecast status` and `duecast web`. docs/security.md has the matrix.
--
-- Replace before running:
--   `app`                               the database in mysql.database
--   'duecast_...'@'%'                   account names, and the hosts they connect from
--   user_block_status, account_checks   your sources: copy the block of each source's mode
--   duecast_jobs, duecast_schedules     jobs.table and jobs.schedules_table, if you renamed them
--   duecast_jobs_runs, _cursors         named after jobs.table: <table>_runs, <table>_cursors
--   duecast_jobs_holder, _result        named after jobs.table too: <table>_holder, <table>_result
--   duecast_topics, duecast_messages... topics.table_prefix + topics, messages, groups, deliveries,
--                                       attempts, members (leave the topics blocks out without topics)
--
-- Order: create the accounts; run the migrations GRANT; run `duecast migrate` as duecast_migrate;
-- then run the rest (a table-level GRANT needs its table to exist). For example:
--   CREATE USER 'duecast_migrate'@'%' IDENTIFIED BY '...' REQUIRE X509;
--   CREATE USER 'duecast_dispatcher'@'%' IDENTIFIED BY '...' REQUIRE X509;
--   CREATE USER 'duecast_worker'@'%' IDENTIFIED BY '...' REQUIRE X509;
--   CREATE USER 'duecast_enqueuer'@'%' IDENTIFIED BY '...' REQUIRE X509;   -- your applications
--   CREATE USER 'duecast_publisher'@'%' IDENTIFIED BY '...' REQUIRE X509;  -- your applications
--   CREATE USER 'duecast_dashboard'@'%' IDENTIFIED BY '...' REQUIRE X509;  -- duecast status / web
--   CREATE USER 'duecast_holder'@'localhost' ACCOUNT LOCK;  -- owns one function; never logs in
-- REQUIRE X509 makes the server refuse any client that does not present a certificate your CA
-- signed, which duecast sends only when mysql.tls = true and mysql.tls_cert_file are set: a client
-- configured without TLS is refused. REQUIRE SSL does NOT catch that client: with mysql.tls = false
-- the driver still negotiates TLS when the server offers it (unverified), so the server sees an
-- encrypted session and lets it in. tests/integration/servers/test_grants.py runs this file.

-- Migrations: `duecast migrate` creates the database and duecast's own tables, and adds columns
-- and an index to row-mode sources. DDL only: it cannot read or write a row, or DROP a table or
-- the database. (ALTER still lets it drop a column: use it from deploy jobs, not from app hosts.)
-- REFERENCES is there because information_schema.COLUMNS shows a column only to an account with
-- a column privilege; it gives no access to rows.
GRANT CREATE, ALTER, INDEX, REFERENCES ON `app`.* TO 'duecast_migrate'@'%';

-- duecast's jobs. Dispatcher: claims and requeues (SELECT ... FOR UPDATE, UPDATE), inserts the
-- jobs of recurring schedules, deletes finished jobs past their retention. Worker: starts,
-- leases, retries and finishes jobs (UPDATE), deletes done jobs; it never inserts.
-- The worker may UPDATE duecast's own columns only (state, attempt, lease, errors, result, its name,
-- when the job runs next, the unique slot it frees): never a job's task, payload, queue, priority,
-- unique key or schedule, so a worker's account cannot rewrite a queued job.
GRANT SELECT, INSERT, UPDATE, DELETE ON `app`.`duecast_jobs` TO 'duecast_dispatcher'@'%';
GRANT SELECT, INSERT, UPDATE ON `app`.`duecast_schedules` TO 'duecast_dispatcher'@'%';
GRANT SELECT, DELETE,
  UPDATE (`dc_state`, `dc_attempt`, `run_at`, `lease_until`, `worker`, `errors`, `interruptions`,
    `last_error`, `result`, `finished_at`, `unique_slot`)
  ON `app`.`duecast_jobs` TO 'duecast_worker'@'%';
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
-- Fleet-wide limits (dispatcher.limits_table): dispatchers keep each limit's token bucket there.
GRANT SELECT, INSERT, UPDATE ON `app`.`duecast_limits` TO 'duecast_dispatcher'@'%';
-- The worker registry (worker.registry_table): a worker registers, beats and leaves; the leader
-- dispatcher reads it and removes the dead.
GRANT SELECT, INSERT, UPDATE, DELETE ON `app`.`duecast_workers` TO 'duecast_worker'@'%';
GRANT SELECT, DELETE ON `app`.`duecast_workers` TO 'duecast_dispatcher'@'%';
-- Pauses (`duecast pause` / `resume`, shared.api.pauses): every dispatcher and worker reads
-- them; operators pause and resume as the dispatcher account, as they retry jobs with it.
GRANT SELECT, INSERT, DELETE ON `app`.`duecast_pauses` TO 'duecast_dispatcher'@'%';
GRANT SELECT ON `app`.`duecast_pauses` TO 'duecast_worker'@'%';

-- Applications that enqueue jobs (Enqueuer, `duecast enqueue`): INSERT of the columns a job is
-- made of, and nothing else: no UPDATE or DELETE, so an enqueuer cannot change a queued job (its
-- task, payload, run_at) or set the dc_* state, errors, leases or a schedule's columns; and no
-- SELECT on any table, so it cannot lock rows (on MariaDB a SELECT grant, even of one column,
-- allows SELECT ... FOR UPDATE of the whole table, which stalls every ack and lease renewal).
-- on_duplicate="keep" merges with a plain INSERT and, after a duplicate-key error, asks the
-- function below for the id of the active job of that task holding the key: it reads that one row
-- with its definer's rights (a locked account that cannot log in) and returns only the id.
-- `duecast enqueue`'s default task check reads the worker registry: this account skips it with a
-- one-line warning; give it --app (or worker.app) to check task names without the database.
GRANT INSERT (`queue`, `task`, `payload`, `priority`, `max_attempts`, `unique_key`, `unique_slot`, `run_at`,
    `meta`, `concurrency_key`)
  ON `app`.`duecast_jobs` TO 'duecast_enqueuer'@'%';
GRANT SELECT (`id`, `task`, `unique_slot`) ON `app`.`duecast_jobs` TO 'duecast_holder'@'localhost';
CREATE DEFINER = 'duecast_holder'@'localhost' FUNCTION `app`.`duecast_jobs_holder`(
    p_task VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    p_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
  RETURNS BIGINT READS SQL DATA SQL SECURITY DEFINER
  RETURN (SELECT `id` FROM `app`.`duecast_jobs` WHERE `task` = p_task AND `unique_slot` = p_key
    LOCK IN SHARE MODE);
-- (Creating it for another DEFINER takes a DBA account: SET USER or SUPER, and CREATE ROUTINE.
-- MariaDB checks EXECUTE for the definer too.)
GRANT EXECUTE ON FUNCTION `app`.`duecast_jobs_holder` TO 'duecast_holder'@'localhost';
GRANT EXECUTE ON FUNCTION `app`.`duecast_jobs_holder` TO 'duecast_enqueuer'@'%';
-- Enqueuer.result(id) (docs/jobs.md, "Results"): with no SELECT, the application reads one job's
-- outcome through the same locked account's second function: by primary key, without a lock, only
-- the outcome's columns (never the payload), as one JSON array.
GRANT SELECT (`id`, `dc_state`, `result`, `last_error`, `errors`, `dc_attempt`, `created_at`, `finished_at`)
  ON `app`.`duecast_jobs` TO 'duecast_holder'@'localhost';
CREATE DEFINER = 'duecast_holder'@'localhost' FUNCTION `app`.`duecast_jobs_result`(p_id BIGINT)
  RETURNS MEDIUMTEXT CHARACTER SET utf8mb4 READS SQL DATA SQL SECURITY DEFINER
  RETURN (SELECT JSON_ARRAY(`dc_state`, `result`, `last_error`, `errors`, `dc_attempt`, `created_at`,
    `finished_at`) FROM `app`.`duecast_jobs` WHERE `id` = p_id);
GRANT EXECUTE ON FUNCTION `app`.`duecast_jobs_result` TO 'duecast_holder'@'localhost';
GRANT EXECUTE ON FUNCTION `app`.`duecast_jobs_result` TO 'duecast_enqueuer'@'%';

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

-- Topics (docs/topics.md), tables named topics.table_prefix + kind. Dispatcher: makes topic and
-- group rows, hands new messages to cluster groups (deliveries), retries and requeues them, keeps
-- the trace of failed attempts, and deletes what retention lets go. Worker: starts, leases and
-- finishes deliveries (recording failed attempts), reads messages, makes its group's rows at
-- start, and keeps its broadcast members' positions.
GRANT SELECT, INSERT ON `app`.`duecast_topics` TO 'duecast_dispatcher'@'%';
GRANT SELECT, DELETE ON `app`.`duecast_messages` TO 'duecast_dispatcher'@'%';
GRANT SELECT, INSERT, UPDATE ON `app`.`duecast_groups` TO 'duecast_dispatcher'@'%';
GRANT SELECT, INSERT, UPDATE, DELETE ON `app`.`duecast_deliveries` TO 'duecast_dispatcher'@'%';
GRANT SELECT, INSERT, DELETE ON `app`.`duecast_attempts` TO 'duecast_dispatcher'@'%';
GRANT SELECT ON `app`.`duecast_members` TO 'duecast_dispatcher'@'%';
GRANT SELECT, INSERT ON `app`.`duecast_topics` TO 'duecast_worker'@'%';
GRANT SELECT ON `app`.`duecast_messages` TO 'duecast_worker'@'%';
GRANT SELECT, INSERT ON `app`.`duecast_groups` TO 'duecast_worker'@'%';
GRANT SELECT, UPDATE ON `app`.`duecast_deliveries` TO 'duecast_worker'@'%';
GRANT INSERT ON `app`.`duecast_attempts` TO 'duecast_worker'@'%';
GRANT SELECT, INSERT, UPDATE ON `app`.`duecast_members` TO 'duecast_worker'@'%';

-- Applications that publish to topics (Publisher): a topic's row made on first use and its last id
-- moved on (that row lock is what keeps a topic's ids in commit order), and INSERT of a message's
-- columns. It cannot read, change or delete a message, a group or a delivery.
GRANT INSERT (`name`), SELECT (`id`, `name`, `last_seq`), UPDATE (`last_seq`)
  ON `app`.`duecast_topics` TO 'duecast_publisher'@'%';
GRANT INSERT (`topic_id`, `seq`, `msg_key`, `payload`, `created_at`)
  ON `app`.`duecast_messages` TO 'duecast_publisher'@'%';

-- Read-only: `duecast status` and `duecast web` (every page; the retry and discard buttons answer
-- 403 "read-only"). SELECT only, on what they read. On MariaDB a SELECT grant also allows locking
-- reads (SELECT ... FOR UPDATE): give this account to operators, never to an application.
GRANT SELECT ON `app`.`duecast_jobs` TO 'duecast_dashboard'@'%';
GRANT SELECT ON `app`.`duecast_jobs_runs` TO 'duecast_dashboard'@'%';
GRANT SELECT ON `app`.`duecast_jobs_cursors` TO 'duecast_dashboard'@'%';
GRANT SELECT ON `app`.`duecast_schedules` TO 'duecast_dashboard'@'%';
GRANT SELECT ON `app`.`duecast_workers` TO 'duecast_dashboard'@'%';
GRANT SELECT ON `app`.`duecast_leases` TO 'duecast_dashboard'@'%';
GRANT SELECT ON `app`.`duecast_limits` TO 'duecast_dashboard'@'%';
GRANT SELECT ON `app`.`duecast_pauses` TO 'duecast_dashboard'@'%';
GRANT SELECT ON `app`.`user_block_status` TO 'duecast_dashboard'@'%';
GRANT SELECT ON `app`.`account_checks` TO 'duecast_dashboard'@'%';
GRANT SELECT ON `app`.`dc_ranges_account_checks` TO 'duecast_dashboard'@'%';
GRANT SELECT ON `app`.`duecast_topics` TO 'duecast_dashboard'@'%';
GRANT SELECT ON `app`.`duecast_messages` TO 'duecast_dashboard'@'%';
GRANT SELECT ON `app`.`duecast_groups` TO 'duecast_dashboard'@'%';
GRANT SELECT ON `app`.`duecast_deliveries` TO 'duecast_dashboard'@'%';
GRANT SELECT ON `app`.`duecast_attempts` TO 'duecast_dashboard'@'%';
GRANT SELECT ON `app`.`duecast_members` TO 'duecast_dashboard'@'%';
