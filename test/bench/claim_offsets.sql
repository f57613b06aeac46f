-- dedup_claim_offsets: one statement claims a poll of 100 in-order records of
-- one partition (the client's own), each batch past the last: all new
WITH poll AS (SELECT nextval('bench_offsets') * 100 AS first)
SELECT dedup_claim_offsets('bench', 'topic', :client_id,
       ARRAY(SELECT poll.first + g FROM poll, generate_series(0, 99) g));
