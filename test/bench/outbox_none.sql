-- the ceiling of O2: the same transaction, statement for statement, with
-- the publish replaced by a statement that writes nothing -- what no way of
-- publishing can beat
\set id random(1, 1000000000)
\set customer random(1, 10000)
BEGIN;
UPDATE loyalty SET points = points + 120
 WHERE customer_id = :customer AND dedup_claim('work', :id::text);
SELECT NULL::text;
COMMIT;
