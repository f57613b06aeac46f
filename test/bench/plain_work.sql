-- baseline, the whole pattern: record the message and do the work in one transaction
\set id random(1, 1000000000)
\set customer random(1, 10000)
BEGIN;
WITH claimed AS (
  INSERT INTO plain_messages (consumer_name, message_id)
  VALUES ('work', :id::text) ON CONFLICT DO NOTHING RETURNING 1)
UPDATE loyalty SET points = points + 120
 WHERE customer_id = :customer AND EXISTS (SELECT FROM claimed);
COMMIT;
