--
-- retention: per-consumer windows, the retention rule and dedup_sweep()
--
CREATE EXTENSION dedup;

-- the defaults a DBA reads in the README
SELECT name, boot_val, unit, context FROM pg_settings
 WHERE name LIKE 'dedup.%' ORDER BY name;

-- windows: set, keep forever, reset; bad input is an error, never a no-op
SELECT dedup_set_retention('orders', '30 days');
SELECT dedup_set_retention('orders', '2 hours');
SELECT dedup_keep_forever('payments');
SELECT consumer_name, retention FROM dedup_retention ORDER BY 1;
SELECT dedup_set_retention('orders', NULL);
\echo :SQLSTATE
SELECT dedup_set_retention(NULL, '1 day');
\echo :SQLSTATE
SELECT dedup_set_retention('orders', '-1 day');
\echo :SQLSTATE
SELECT dedup_set_retention('orders', '0');
\echo :SQLSTATE
SELECT dedup_keep_forever(NULL);
\echo :SQLSTATE
SELECT dedup_reset_retention(NULL);
\echo :SQLSTATE
SELECT dedup_reset_retention('orders') AS had_own, dedup_reset_retention('orders') AS again;

-- the rule: expired = older than the consumer's latest claim minus its window
SET dedup.retention = '1h';  -- PGC_SIGHUP: refused, even to a superuser
\echo :SQLSTATE
SHOW dedup.retention;
SET dedup.sweep_busy_share = 100;  -- the same for how much a sweep yields
\echo :SQLSTATE
SHOW dedup.sweep_busy_share;
SET dedup.sweep_vacuum_threshold = 0;  -- and for the sweeper's VACUUM
\echo :SQLSTATE
SHOW dedup.sweep_vacuum_threshold;
-- 'default': 7 days; 'orders': 2 hours; 'payments': forever.  Each consumer's
-- latest claim is 30 days old, as after an outage: nothing within a window
-- of it may go.
SELECT dedup_set_retention('orders', '2 hours');
INSERT INTO processed_messages (consumer_name, message_id, processed_at)
SELECT c, c || '-' || h, now() - interval '30 days' - h * interval '1 hour'
  FROM unnest(ARRAY['default', 'orders', 'payments']) AS c,
       generate_series(0, 240) AS h;
BEGIN;
SELECT dedup_sweep('orders') AS orders_deleted;
SELECT dedup_sweep() AS others_deleted;
SELECT consumer_name, count(*) AS kept,
       max(processed_at) - min(processed_at) AS span
  FROM processed_messages GROUP BY 1 ORDER BY 1;
SELECT dedup_sweep() AS nothing_left;
ROLLBACK;
-- the sweep ran in the caller's transaction: rolled back with it
SELECT count(*) FROM processed_messages;
-- claims near the boundary: exactly the rows older than the window go
SELECT dedup_sweep() AS deleted;
SELECT dedup_claim('orders', 'orders-2') AS in_window_redelivery,
       dedup_claim('orders', 'orders-3') AS expired_redelivery;

-- privileges: maintenance is not for PUBLIC; monitoring may read the view
CREATE ROLE regress_dedup_app;
SET ROLE regress_dedup_app;
SELECT dedup_sweep();
\echo :SQLSTATE
SELECT dedup_set_retention('orders', '1 day');
\echo :SQLSTATE
SELECT dedup_sweeper_wake();
\echo :SQLSTATE
SELECT count(*) FROM dedup_sweeper;
\echo :SQLSTATE
SELECT count(*) FROM dedup_retention;
\echo :SQLSTATE
RESET ROLE;
GRANT pg_monitor TO regress_dedup_app;
SET ROLE regress_dedup_app;
SELECT database = current_database() AS this_database, default_retention,
       sweeper_running, sweep_enabled
  FROM dedup_sweeper;
RESET ROLE;
DROP ROLE regress_dedup_app;

DROP EXTENSION dedup;
