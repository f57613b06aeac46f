--
-- dedup_claim_many: a broker batch in one call
--
CREATE EXTENSION dedup;
SELECT dedup_stats_reset('batch');
SELECT dedup_stats_reset('payments');

-- element i tells whether message_ids[i] is new; the first of equal ids wins
SELECT dedup_claim('batch', 'o-2') AS claimed_before;
SELECT dedup_claim_many('batch', ARRAY['o-1', 'o-2', 'o-3', 'o-1', 'o-4', 'o-3']);
SELECT dedup_claim_many('batch', ARRAY['o-4', 'o-5']) AS again;
-- the same rows a single claim writes, in the caller's transaction
SELECT consumer_name, message_id FROM processed_messages ORDER BY 2;
BEGIN;
SELECT dedup_claim_many('batch', ARRAY['rolled-back-1', 'rolled-back-2']);
ROLLBACK;
SELECT dedup_claim_many('batch', ARRAY['rolled-back-2', 'rolled-back-1']) AS after_rollback;
-- savepoints undo part of a transaction's batches
BEGIN;
SELECT dedup_claim_many('batch', ARRAY['sp-1']);
SAVEPOINT s;
SELECT dedup_claim_many('batch', ARRAY['sp-1', 'sp-2']);
ROLLBACK TO SAVEPOINT s;
SELECT dedup_claim_many('batch', ARRAY['sp-1', 'sp-2']) AS after_savepoint;
COMMIT;

-- shapes: empty, other lower bounds, one element; unnest pairs ids with answers
SELECT dedup_claim_many('batch', '{}') AS empty;
SELECT dedup_claim_many('batch', '[0:1]={lb-0,lb-1}') AS lower_bound_kept;
SELECT id, claimed
  FROM unnest(ARRAY['u-1', 'o-1', 'u-1'],
              dedup_claim_many('batch', ARRAY['u-1', 'o-1', 'u-1'])) AS t(id, claimed);

-- bad input: an error naming the element, and nothing claimed
SELECT dedup_claim_many('batch', ARRAY['bad-1', NULL]);
\echo :SQLSTATE
SELECT dedup_claim_many('batch', ARRAY['bad-1', '']);
\echo :SQLSTATE
SELECT dedup_claim_many('batch', ARRAY['bad-1', repeat('x', 1025)]);
\echo :SQLSTATE
SELECT dedup_claim_many('batch', NULL);
\echo :SQLSTATE
SELECT dedup_claim_many(NULL, ARRAY['bad-1']);
\echo :SQLSTATE
SELECT dedup_claim_many('', ARRAY['bad-1']);
\echo :SQLSTATE
SELECT dedup_claim_many('batch', ARRAY[ARRAY['bad-1', 'bad-2']]);
\echo :SQLSTATE
SELECT dedup_claim_many('batch', array_agg('big-' || i)) FROM generate_series(1, 10001) i;
\echo :SQLSTATE
SELECT count(*) AS nothing_claimed FROM processed_messages
 WHERE message_id LIKE 'bad-%' OR message_id LIKE 'big-%';
-- the limit itself is fine
SELECT cardinality(r) AS claimed, true = ALL (r) AS all_new
  FROM (SELECT dedup_claim_many('batch', array_agg('big-' || i)) AS r
          FROM generate_series(1, 10000) i) s;
SELECT count(*) FROM processed_messages WHERE message_id LIKE 'big-%';
SELECT bool_or(c) AS any_new
  FROM unnest(dedup_claim_many('batch', (SELECT array_agg('big-' || i) FROM generate_series(1, 10000) i))) c;

-- a read-only transaction cannot claim
BEGIN READ ONLY;
SELECT dedup_claim_many('batch', ARRAY['ro']);
\echo :SQLSTATE
ROLLBACK;
-- not even an empty batch: it is checked as any other before it answers
BEGIN READ ONLY;
SELECT dedup_claim_many('batch', '{}');
\echo :SQLSTATE
ROLLBACK;

-- privileges: like dedup_claim, granted explicitly, and bound by claimants
CREATE ROLE regress_batch LOGIN;
SET ROLE regress_batch;
SELECT dedup_claim_many('batch', ARRAY['x']);
\echo :SQLSTATE
RESET ROLE;
GRANT EXECUTE ON FUNCTION dedup_claim_many(text, text[]) TO regress_batch;
SELECT dedup_allow_claimant('batch', current_user::regrole);
SET ROLE regress_batch;
SELECT dedup_claim_many('batch', ARRAY['x']);
\echo :SQLSTATE
SELECT dedup_claim_many('batch', '{}');
\echo :SQLSTATE
SELECT dedup_claim_many('payments', ARRAY['x']) AS unmapped;
RESET ROLE;

-- counted like single claims
SELECT consumer, claims, duplicates FROM dedup_stats WHERE consumer IN ('batch', 'payments') ORDER BY 1;

DROP EXTENSION dedup;
DROP ROLE regress_batch;
