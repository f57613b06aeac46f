\set id random(1, 1000000000)
SELECT dedup_claim('bench', :id::text);
