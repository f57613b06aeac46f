--
-- stats: claim counters, storage figures and who may read them
--
CREATE EXTENSION dedup;
-- counters are kept per database, across DROP/CREATE EXTENSION: start clean
SELECT dedup_stats_reset();
-- an empty table: zeros, not NULLs
SELECT consumers, expired_backlog FROM dedup_storage;

-- first deliveries, redeliveries, a rolled back claim (counted: its
-- redelivery will be counted again), a claim in a failed transaction
SELECT dedup_claim('orders', 'o-' || g) FROM generate_series(1, 3) g;
SELECT dedup_claim('orders', 'o-1'), dedup_claim('orders', 'o-2');
BEGIN;
SELECT dedup_claim('orders', 'o-rolled-back');
ROLLBACK;
SELECT dedup_claim('billing', 'b-1');
SELECT consumer, claims, duplicates, lock_waits, serialization_failures,
       last_claim_at IS NOT NULL AS claimed_at_set,
       last_duplicate_at IS NOT NULL AS duplicate_at_set,
       counters, counters_since <= now() AS since_ok
  FROM dedup_stats ORDER BY consumer;

-- bad input is not a claim
SELECT dedup_claim('orders', NULL);
SELECT claims, duplicates FROM dedup_stats WHERE consumer = 'orders';

-- a superuser may stop counting (to measure its cost); an application may not
SET dedup.track_claims = off;
SELECT dedup_claim('orders', 'o-uncounted');
SELECT consumer, claims, counters FROM dedup_stats ORDER BY consumer;
RESET dedup.track_claims;
SELECT claims FROM dedup_stats WHERE consumer = 'orders';
CREATE ROLE regress_dedup_app;
SET ROLE regress_dedup_app;
SET dedup.track_claims = off;
\echo :SQLSTATE
RESET ROLE;

-- storage: estimates from the planner statistics, the expired backlog, the
-- window; consumers with only a window are listed too
SELECT dedup_keep_forever('audit');
INSERT INTO processed_messages (consumer_name, message_id, processed_at)
SELECT 'old', 'm-' || g, now() - g * interval '1 day'
  FROM generate_series(0, 19) g;
SELECT consumer, records_estimate, retention, expired_backlog,
       oldest_record_age > interval '18 days' AS old_enough, counters
  FROM dedup_stats ORDER BY consumer;
ANALYZE processed_messages;
SELECT consumer, records_estimate FROM dedup_stats ORDER BY consumer;
SELECT table_bytes > 0 AS has_table, index_bytes > 0 AS has_indexes,
       total_bytes >= table_bytes + index_bytes AS total_ok,
       rows_estimate, consumers, expired_backlog
  FROM dedup_storage;

-- resets: one consumer, then all
SELECT dedup_stats_reset('orders');
SELECT consumer, claims, counters FROM dedup_stats ORDER BY consumer;
SELECT dedup_stats_reset();
SELECT count(*) AS counted FROM dedup_stats WHERE claims IS NOT NULL;

-- monitoring roles read the views, never the records; PUBLIC reads nothing
SET ROLE regress_dedup_app;
SELECT count(*) FROM dedup_stats;
\echo :SQLSTATE
SELECT count(*) FROM dedup_storage;
\echo :SQLSTATE
SELECT dedup_stats_reset();
\echo :SQLSTATE
RESET ROLE;
GRANT pg_monitor TO regress_dedup_app;
SET ROLE regress_dedup_app;
SELECT count(*) AS consumers FROM dedup_stats;
SELECT consumers FROM dedup_storage;
SELECT count(*) FROM processed_messages;
\echo :SQLSTATE
SELECT dedup_stats_reset();
\echo :SQLSTATE
RESET ROLE;
-- no column of either view can carry a message id
SELECT attrelid::regclass AS view, attname
  FROM pg_attribute
 WHERE attrelid IN ('dedup_stats'::regclass, 'dedup_storage'::regclass)
   AND attnum > 0 AND atttypid = 'text'::regtype
 ORDER BY 1, 2;
DROP ROLE regress_dedup_app;
DROP EXTENSION dedup;
