--
-- stream_claim: claims by offset in ordered streams (Kafka, RabbitMQ streams)
--
CREATE EXTENSION dedup;
SELECT dedup_stats_reset('orders-app');

-- the first claim of a partition is new; replays of it and before are not;
-- a jump forward (compaction, transaction markers) is new
SELECT dedup_claim_offset('orders-app', 'orders', 0, 500) AS first;
SELECT dedup_claim_offset('orders-app', 'orders', 0, 500) AS same_again,
       dedup_claim_offset('orders-app', 'orders', 0, 499) AS before;
SELECT dedup_claim_offset('orders-app', 'orders', 0, 501) AS next,
       dedup_claim_offset('orders-app', 'orders', 0, 510) AS gap;
-- partitions, streams and consumers are independent; offsets start at 0
SELECT dedup_claim_offset('orders-app', 'orders', 1, 0) AS other_partition,
       dedup_claim_offset('orders-app', 'payments', 0, 7) AS other_stream,
       dedup_claim_offset('audit-app', 'orders', 0, 3) AS other_consumer;

-- where to seek on assignment: next_offset, per stream and partition
SELECT stream, partition, committed_offset, next_offset, updated_at <= now() AS updated
  FROM dedup_stream_positions('orders-app') ORDER BY stream, partition;
SELECT stream, partition, committed_offset, next_offset
  FROM dedup_stream_positions('orders-app', 'orders');
SELECT count(*) AS unknown_consumer FROM dedup_stream_positions('nobody');
BEGIN;
SELECT dedup_claim_offset('audit-app', 'orders', 0, 4);
SELECT updated_at = now() AS moved_at_transaction_start
  FROM dedup_stream_positions('audit-app');
COMMIT;

-- a rollback undoes the move: the offset is new again
BEGIN;
SELECT dedup_claim_offset('orders-app', 'orders', 0, 511) AS in_rolled_back;
ROLLBACK;
SELECT dedup_claim_offset('orders-app', 'orders', 0, 511) AS after_rollback;
-- so does a savepoint; the transaction sees its own moves
BEGIN;
SELECT dedup_claim_offset('orders-app', 'orders', 0, 512) AS first_in_tx;
SAVEPOINT s;
SELECT dedup_claim_offset('orders-app', 'orders', 0, 513);
SELECT dedup_claim_offset('orders-app', 'orders', 0, 513) AS seen_in_tx;
ROLLBACK TO SAVEPOINT s;
SELECT dedup_claim_offset('orders-app', 'orders', 0, 512) AS kept,
       dedup_claim_offset('orders-app', 'orders', 0, 513) AS undone;
COMMIT;

-- one statement may claim a partition many times: each call sees the last
SELECT o, dedup_claim_offset('orders-app', 'orders', 2, o) AS claimed
  FROM unnest(ARRAY[5, 6, 6, 4, 8]::bigint[]) WITH ORDINALITY AS t(o, n)
 ORDER BY n;

-- a batch: what claiming each offset in order answers, in one write
SELECT dedup_claim_offsets('orders-app', 'orders', 0, ARRAY[512, 513, 514, 514, 510, 520]);
SELECT dedup_claim_offsets('orders-app', 'orders', 0, ARRAY[519, 520]) AS replayed;
SELECT dedup_claim_offsets('orders-app', 'orders', 3, ARRAY[0, 1, 2]) AS new_partition;
SELECT dedup_claim_offsets('orders-app', 'orders', 0, '{}') AS empty;
SELECT dedup_claim_offsets('orders-app', 'orders', 0, '[0:1]={521,522}') AS lower_bound_kept;
SELECT o, claimed
  FROM unnest(ARRAY[522, 523, 524]::bigint[],
              dedup_claim_offsets('orders-app', 'orders', 0, ARRAY[522, 523, 524])) AS t(o, claimed);
SELECT partition, committed_offset, next_offset
  FROM dedup_stream_positions('orders-app', 'orders') ORDER BY partition;

-- counted with dedup_claim's counters: each offset a claim or a duplicate
SELECT consumer, claims, duplicates, lock_waits, other_errors
  FROM dedup_stats WHERE consumer = 'orders-app';

-- bad input: an error, never NULL, and nothing claimed
SELECT dedup_claim_offset(NULL, 'orders', 0, 1);
\echo :SQLSTATE
SELECT dedup_claim_offset('orders-app', NULL, 0, 1);
\echo :SQLSTATE
SELECT dedup_claim_offset('orders-app', 'orders', NULL, 1);
\echo :SQLSTATE
SELECT dedup_claim_offset('orders-app', 'orders', 0, NULL);
\echo :SQLSTATE
SELECT dedup_claim_offset('', 'orders', 0, 1);
\echo :SQLSTATE
SELECT dedup_claim_offset('orders-app', '', 0, 1);
\echo :SQLSTATE
SELECT dedup_claim_offset('orders-app', 'orders', -1, 1);
\echo :SQLSTATE
SELECT dedup_claim_offset('orders-app', 'orders', 0, -1);
\echo :SQLSTATE
SELECT dedup_claim_offset('orders-app', 'orders', 0, 9223372036854775807);
\echo :SQLSTATE
SELECT dedup_claim_offset(repeat('c', 257), 'orders', 0, 1);
\echo :SQLSTATE
SELECT dedup_claim_offset('orders-app', repeat('s', 257), 0, 1);
\echo :SQLSTATE
SELECT dedup_claim_offsets('orders-app', 'orders', 0, NULL);
\echo :SQLSTATE
SELECT dedup_claim_offsets('orders-app', 'orders', 0, ARRAY[600, NULL]);
\echo :SQLSTATE
SELECT dedup_claim_offsets('orders-app', 'orders', 0, ARRAY[600, -2]);
\echo :SQLSTATE
SELECT dedup_claim_offsets('orders-app', 'orders', 0, ARRAY[ARRAY[600, 601]]);
\echo :SQLSTATE
SELECT dedup_claim_offsets('orders-app', 'orders', 0, array_agg(g)) FROM generate_series(1, 10001) g;
\echo :SQLSTATE
SELECT dedup_stream_positions(NULL);
\echo :SQLSTATE
SELECT dedup_stream_positions('orders-app', '');
\echo :SQLSTATE
SELECT committed_offset FROM dedup_stream_positions('orders-app', 'orders') WHERE partition = 0;

-- claims write: not in a read-only transaction
BEGIN READ ONLY;
SELECT dedup_claim_offset('orders-app', 'orders', 0, 700);
\echo :SQLSTATE
ROLLBACK;
-- not even an empty batch: it is checked as any other before it answers
BEGIN READ ONLY;
SELECT dedup_claim_offsets('orders-app', 'orders', 0, '{}');
\echo :SQLSTATE
ROLLBACK;
-- reading is fine there
BEGIN READ ONLY;
SELECT count(*) AS positions FROM dedup_stream_positions('orders-app');
ROLLBACK;

-- moving a position on purpose: back to replay, forward to skip (each call
-- is in the server log: TAP test 050)
SELECT dedup_set_stream_position('orders-app', 'orders', 0, 100) AS was_next;
SELECT dedup_claim_offset('orders-app', 'orders', 0, 99) AS before_seek,
       dedup_claim_offset('orders-app', 'orders', 0, 100) AS replayed_on_purpose;
SELECT dedup_set_stream_position('orders-app', 'orders', 0, 0) AS was_next;
SELECT committed_offset, next_offset FROM dedup_stream_positions('orders-app', 'orders') WHERE partition = 0;
SELECT dedup_claim_offset('orders-app', 'orders', 0, 0) AS from_the_start;
SELECT dedup_set_stream_position('orders-app', 'poison', 4, 1000) AS had_none;
SELECT dedup_claim_offset('orders-app', 'poison', 4, 999) AS skipped,
       dedup_claim_offset('orders-app', 'poison', 4, 1000) AS after_skip;
SELECT dedup_set_stream_position('orders-app', 'orders', 0, -1);
\echo :SQLSTATE
SELECT dedup_set_stream_position('orders-app', 'orders', 0, NULL);
\echo :SQLSTATE

-- forgetting positions: one stream, then all, then nothing left
SELECT dedup_forget_stream_positions('orders-app', 'payments') AS forgot_payments;
SELECT stream, count(*) FROM dedup_stream_positions('orders-app') GROUP BY stream ORDER BY stream;
SELECT dedup_forget_stream_positions('orders-app') AS forgot_all;
SELECT dedup_forget_stream_positions('orders-app') AS nothing_left;
SELECT dedup_claim_offset('orders-app', 'orders', 0, 0) AS new_again;
-- a retired consumer loses its positions too
SELECT dedup_claim('audit-app', 'evt-1');
SELECT dedup_retire_consumer('audit-app') AS records_retired;
SELECT count(*) AS audit_positions FROM dedup_stream_positions('audit-app');

-- one row per partition, updated in place (HOT): 8000 claims, each in its
-- own transaction as a consumer makes them, and the table keeps its page
-- (a version per claim would take some 80 pages)
SELECT dedup_claim_offset('size', 'big', p, 0) FROM generate_series(0, 3) p;
DO $$
BEGIN
	FOR o IN 1..2000 LOOP
		PERFORM dedup_claim_offset('size', 'big', p, o) FROM generate_series(0, 3) p;
		COMMIT;
	END LOOP;
END
$$;
SELECT partition, next_offset FROM dedup_stream_positions('size') ORDER BY 1;
SELECT pg_relation_size('stream_positions') <= 2 * 8192 AS table_small,
       pg_relation_size('stream_positions_pkey') <= 2 * 8192 AS index_small;

DROP EXTENSION dedup;
