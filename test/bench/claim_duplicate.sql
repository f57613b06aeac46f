\set id random(1, 1000)
SELECT dedup_claim('dup', :id::text);
