-- baseline, batches: 100 new keys in one INSERT ... ON CONFLICT DO NOTHING,
-- the keys built exactly as in claim_many.sql and passed as one text[] parameter
INSERT INTO plain_messages (consumer_name, message_id)
SELECT 'bench', k
  FROM unnest(ARRAY(SELECT (random() * 1000000000)::bigint::text FROM generate_series(1, 100))::text[]) k
    ON CONFLICT DO NOTHING RETURNING message_id;
