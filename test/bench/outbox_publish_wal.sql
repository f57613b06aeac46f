-- claim + update + dedup_publish to a WAL-mode destination, one transaction
\set id random(1, 1000000000)
\set customer random(1, 10000)
BEGIN;
UPDATE loyalty SET points = points + 120
 WHERE customer_id = :customer AND dedup_claim('work', :id::text);
SELECT dedup_publish('bench_wal', '{"customer": ' || :customer || ', "points": 120}', :customer::text);
COMMIT;
