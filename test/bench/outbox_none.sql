-- the ceiling of O2: the same transaction without any outbox (claim and
-- update only), what no way of publishing can beat
\set id random(1, 1000000000)
\set customer random(1, 10000)
BEGIN;
UPDATE loyalty SET points = points + 120
 WHERE customer_id = :customer AND dedup_claim('work', :id::text);
COMMIT;
