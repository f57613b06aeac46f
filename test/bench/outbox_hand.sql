-- baseline: the same transaction with an outbox table written by hand (the
-- columns and indexes of dedup_outbox, a random message id)
\set id random(1, 1000000000)
\set customer random(1, 10000)
BEGIN;
UPDATE loyalty SET points = points + 120
 WHERE customer_id = :customer AND dedup_claim('work', :id::text);
INSERT INTO plain_outbox (message_id, destination, key, payload)
VALUES (gen_random_uuid()::text, 'bench_table', :customer::text, '{"customer": ' || :customer || ', "points": 120}');
COMMIT;
