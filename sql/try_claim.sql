--
-- dedup_try_claim and payload fingerprints
--
CREATE EXTENSION dedup;

-- without contention: claimed, then duplicate
SELECT dedup_try_claim('svc', 'evt-1') AS first, dedup_try_claim('svc', 'evt-1') AS again;
SELECT dedup_claim('svc', 'evt-2') AS claimed, dedup_try_claim('svc', 'evt-2') AS try_after_claim;
SELECT pg_typeof(dedup_try_claim('svc', 'evt-3'));
-- in the caller's transaction, like dedup_claim
BEGIN;
SELECT dedup_try_claim('svc', 'rolled-back');
ROLLBACK;
SELECT dedup_try_claim('svc', 'rolled-back') AS after_rollback;
-- the same errors as dedup_claim
SELECT dedup_try_claim(NULL, 'x');
\echo :SQLSTATE
SELECT dedup_try_claim('svc', '');
\echo :SQLSTATE
SELECT dedup_try_claim('svc', repeat('x', 1025));
\echo :SQLSTATE
BEGIN READ ONLY;
SELECT dedup_try_claim('svc', 'ro');
\echo :SQLSTATE
ROLLBACK;

-- fingerprints: the same message again is a duplicate ...
SELECT dedup_claim('pay', 'p-1', sha256('{"amount": 120}')) AS first,
       dedup_claim('pay', 'p-1', sha256('{"amount": 120}')) AS same_payload;
-- ... a reused id with another payload is an error, never a silent duplicate
SELECT dedup_claim('pay', 'p-1', sha256('{"amount": 999}'));
\echo :SQLSTATE
SELECT dedup_try_claim('pay', 'p-1', sha256('{"amount": 999}'));
\echo :SQLSTATE
-- a claim without a fingerprint matches any, and so does a record without one
SELECT dedup_claim('pay', 'p-1') AS no_fingerprint_given;
SELECT dedup_claim('pay', 'p-2') AS recorded_without,
       dedup_claim('pay', 'p-2', sha256('anything')) AS checked_against_none;
-- a NULL fingerprint is none; fingerprints are 1 to 64 bytes
SELECT dedup_claim('pay', 'p-3', NULL) AS null_is_none;
SELECT dedup_claim('pay', 'p-4', ''::bytea);
\echo :SQLSTATE
SELECT dedup_claim('pay', 'p-4', decode(repeat('ab', 65), 'hex'));
\echo :SQLSTATE
SELECT dedup_claim('pay', 'p-4', sha512('x')) AS sha512_fits;
-- stored only when given
SELECT message_id, fingerprint IS NOT NULL AS has_fingerprint
  FROM processed_messages WHERE consumer_name = 'pay' ORDER BY 1;
-- in one transaction, the second claim with another fingerprint fails too
BEGIN;
SELECT dedup_claim('pay', 'p-5', '\x01');
SELECT dedup_claim('pay', 'p-5', '\x02');
\echo :SQLSTATE
ROLLBACK;

-- privileges: explicit grants only
CREATE ROLE regress_try LOGIN;
SET ROLE regress_try;
SELECT dedup_try_claim('svc', 'x');
\echo :SQLSTATE
SELECT dedup_claim('svc', 'x', '\x01');
\echo :SQLSTATE
RESET ROLE;

-- a unique index a DBA added across consumers: a conflict through it is a
-- duplicate, as for ON CONFLICT; the other consumer's fingerprint is not
-- compared and its record is never shown.  A reused id of the same key
-- names the caller's own consumer and id.
CREATE UNIQUE INDEX processed_messages_id_once ON processed_messages (message_id);
SELECT dedup_claim('one', 'shared-id', '\x01') AS first;
SELECT dedup_claim('two', 'shared-id', '\x02') AS duplicate_through_the_index,
	   dedup_try_claim('two', 'shared-id', '\x02') AS try;
SELECT dedup_claim('one', 'shared-id', '\x03');
\echo :SQLSTATE
DROP INDEX processed_messages_id_once;

DROP EXTENSION dedup;
DROP ROLE regress_try;
