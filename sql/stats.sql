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

-- claim times, in ms, per key: mean = total / answered claims, max >= mean;
-- no lock wait, no failed claim (every class)
SELECT dedup_claim_many('batch', ARRAY['k-1', 'k-2', 'k-1']);
SELECT consumer, claims, duplicates,
       total_claim_time > 0 AS timed,
       mean_claim_time = total_claim_time / (claims + duplicates) AS mean_ok,
       max_claim_time >= mean_claim_time AS max_ok,
       max_claim_time <= total_claim_time AS max_in_total,
       total_lock_wait_time, lock_waits, serialization_failures, deadlocks,
       lock_timeouts, cancels, other_errors
  FROM dedup_stats ORDER BY consumer;
SELECT pg_typeof(total_claim_time) AS claim_time_type,
       pg_typeof(mean_claim_time) AS mean_type,
       pg_typeof(max_claim_time) AS max_type,
       pg_typeof(total_lock_wait_time) AS wait_type
  FROM dedup_stats LIMIT 1;
-- the new columns follow those of 1.0, in this order
SELECT array_agg(attname ORDER BY attnum) FILTER (WHERE attnum > 16) AS added
  FROM pg_attribute WHERE attrelid = 'dedup_stats'::regclass AND attnum > 0;

-- a message id reused with another fingerprint (UD001) fails inside the
-- claim: another error
SELECT dedup_claim('reused', 'r-1', '\x01'::bytea);
SELECT dedup_claim('reused', 'r-1', '\x02'::bytea);
SELECT claims, duplicates, other_errors, serialization_failures, deadlocks,
       lock_timeouts, cancels
  FROM dedup_stats WHERE consumer = 'reused';

-- bad input is not a claim
SELECT dedup_claim('orders', NULL);
SELECT claims, duplicates FROM dedup_stats WHERE consumer = 'orders';

-- a superuser may stop counting (to measure its cost); an application may not
SET dedup.track_claims = off;
SELECT total_claim_time AS before_uncounted FROM dedup_stats WHERE consumer = 'orders' \gset
SELECT dedup_claim('orders', 'o-uncounted');
SELECT consumer, claims, counters FROM dedup_stats ORDER BY consumer;
SELECT total_claim_time = :before_uncounted AS not_timed
  FROM dedup_stats WHERE consumer = 'orders';
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
SELECT consumer, claims, counters, total_claim_time IS NULL AS no_time,
       mean_claim_time IS NULL AS no_mean, max_claim_time IS NULL AS no_max,
       total_lock_wait_time IS NULL AS no_wait, deadlocks, other_errors
  FROM dedup_stats ORDER BY consumer;
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
RESET ROLE;
SELECT dedup_claim('orders', 'o-monitored');
SET ROLE regress_dedup_app;
SELECT consumer, total_claim_time > 0 AS timed, mean_claim_time > 0 AS mean_seen,
       max_claim_time > 0 AS max_seen, total_lock_wait_time, deadlocks,
       lock_timeouts, cancels, other_errors
  FROM dedup_stats WHERE consumer = 'orders';
SELECT count(*) AS counter_rows FROM dedup_claim_counters();
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
 ORDER BY attrelid::regclass::text, attname;
DROP ROLE regress_dedup_app;
DROP EXTENSION dedup;
