--
-- stream_stats: counters of claims by offset per consumer and stream, the
-- positions' progress, and who may read them
--
CREATE EXTENSION dedup;
SELECT dedup_stats_reset();
CREATE ROLE regress_stream_watch LOGIN IN ROLE pg_monitor;
CREATE ROLE regress_stream_user LOGIN;
GRANT EXECUTE ON FUNCTION dedup_claim_offset(text, text, integer, bigint) TO regress_stream_user;

-- two streams of one consumer, a replay, a batch, a consumer by message id
SELECT dedup_claim_offset('orders-app', 'orders', 0, 1),
       dedup_claim_offset('orders-app', 'orders', 0, 1),
       dedup_claim_offset('orders-app', 'orders', 1, 5);
SELECT dedup_claim_offsets('orders-app', 'payments', 0, ARRAY[0, 1, 2, 1]);
SELECT dedup_claim('orders-app', 'evt-1'), dedup_claim('billing', 'evt-1');

-- per stream: claims and replays, and each stream's partitions
SELECT consumer, stream, partitions, claims, replays,
       last_claim_at IS NOT NULL AS claimed_at_set,
       last_replay_at IS NOT NULL AS replayed_at_set,
       least_recent_move_at <= most_recent_move_at AS moves_ordered,
       lock_waits, serialization_failures, other_errors,
       total_claim_time > 0 AS timed
  FROM dedup_stream_stats ORDER BY consumer, stream;
-- per consumer, the claims by offset count with those by message id
SELECT consumer, claims, duplicates FROM dedup_stats ORDER BY consumer;
-- message-id claims have no stream row
SELECT count(*) AS stream_rows FROM dedup_stream_counters() WHERE consumer = 'billing';

-- positions that no counter has seen (restored from a dump, or counters
-- reset) still show, with their partitions
SELECT dedup_stats_reset('orders-app');
SELECT consumer, stream, partitions, claims, replays
  FROM dedup_stream_stats ORDER BY consumer, stream;

-- progress: each partition's position and how long it has been idle
SELECT consumer, stream, partition, committed_offset, next_offset,
       idle_for >= interval '0' AS idle_measured
  FROM dedup_stream_progress ORDER BY 1, 2, 3;

-- monitoring reads both views; an application role neither
SET ROLE regress_stream_watch;
SELECT count(*) AS monitored_streams FROM dedup_stream_stats;
SELECT count(*) AS monitored_partitions FROM dedup_stream_progress;
RESET ROLE;
SET ROLE regress_stream_user;
SELECT dedup_claim_offset('user-app', 'orders', 0, 1) AS user_claims;
SELECT count(*) FROM dedup_stream_stats;
\echo :SQLSTATE
SELECT count(*) FROM dedup_stream_progress;
\echo :SQLSTATE
SELECT count(*) FROM dedup_stream_counters();
\echo :SQLSTATE
RESET ROLE;

DROP EXTENSION dedup;
DROP ROLE regress_stream_watch, regress_stream_user;
