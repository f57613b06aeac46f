-- dedup_claim_many: one statement claims 100 new keys (random, like claim_insert.sql)
SELECT dedup_claim_many('bench',
       ARRAY(SELECT (random() * 1000000000)::bigint::text FROM generate_series(1, 100)));
