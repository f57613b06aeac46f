-- test/demo.sql: the hand-driven part of test/demo.sh -- a few claims, a
-- redelivery, claims by offset, the counters, and a retention window the
-- sweeper applies.
-- Runs with psql against a cluster that preloads dedup.
CREATE EXTENSION dedup;
CREATE TABLE loyalty (customer_id text PRIMARY KEY, points int NOT NULL);
INSERT INTO loyalty VALUES ('CUS-291', 0);

-- first delivery of evt-91827: the claim returns true, the work is done
BEGIN;
SELECT dedup_claim('loyalty-service', 'evt-91827') AS first_delivery;
UPDATE loyalty SET points = points + 120 WHERE customer_id = 'CUS-291';
COMMIT;

-- the broker redelivers it: the claim returns false, the work is skipped
BEGIN;
SELECT dedup_claim('loyalty-service', 'evt-91827') AS redelivery;
COMMIT;

-- one statement: the update runs only for a first delivery
UPDATE loyalty SET points = points + 120
 WHERE customer_id = 'CUS-291' AND dedup_claim('loyalty-service', 'evt-91827');

SELECT * FROM loyalty;
SELECT * FROM processed_messages;

-- an ordered stream (Kafka, RabbitMQ streams): one position per partition,
-- not one record per message; a rebalance replays offsets 1 and 2
SELECT dedup_claim_offsets('loyalty-service', 'loyalty-events', 0, ARRAY[0, 1, 2]) AS first_poll,
       dedup_claim_offsets('loyalty-service', 'loyalty-events', 0, ARRAY[1, 2, 3]) AS after_rebalance;
SELECT * FROM dedup_stream_positions('loyalty-service');

-- what dedup counted
SELECT consumer, claims, duplicates, lock_waits, retention FROM dedup_stats;

-- retention: with a one-hour window, records more than an hour older than
-- the consumer's latest claim are swept by the background worker
SELECT dedup_set_retention('loyalty-service', '1 hour');
INSERT INTO processed_messages
SELECT 'loyalty-service', 'evt-old-' || g, now() - interval '2 hours' - g * interval '1 minute'
  FROM generate_series(1, 5) g;
SELECT dedup_sweeper_wake() AS sweeper_woken;
DO $$
BEGIN
	FOR i IN 1 .. 100 LOOP
		EXIT WHEN (SELECT total_rows_deleted >= 5 FROM dedup_sweeper);
		PERFORM pg_sleep(0.1);
	END LOOP;
END $$;
SELECT database_state, last_sweep_outcome, total_rows_deleted FROM dedup_sweeper;
SELECT message_id FROM processed_messages;
