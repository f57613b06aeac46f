--
-- dedup_claim: every bad input is an error with its SQLSTATE, never a NULL,
-- and nothing is written
--
CREATE EXTENSION dedup;
\set VERBOSITY default

SELECT dedup_claim(NULL, 'evt-1');
\echo :SQLSTATE
SELECT dedup_claim('consumer', NULL);
\echo :SQLSTATE
SELECT dedup_claim(NULL, NULL);
\echo :SQLSTATE
SELECT dedup_claim('', 'evt-1');
\echo :SQLSTATE
SELECT dedup_claim('consumer', '');
\echo :SQLSTATE
SELECT dedup_claim(repeat('c', 257), 'evt-1');
\echo :SQLSTATE
SELECT dedup_claim('consumer', repeat('k', 1025));
\echo :SQLSTATE
SELECT dedup_claim('consumer', repeat('é', 513));
\echo :SQLSTATE
-- an oversized, compressed (toasted) value is rejected by its raw size
CREATE TABLE big_keys (k text);
INSERT INTO big_keys VALUES (repeat('k', 100000));
SELECT pg_column_size(k) < 100000 AS stored_compressed FROM big_keys;
SELECT dedup_claim('consumer', k) FROM big_keys;
\echo :SQLSTATE
DROP TABLE big_keys;

-- read-only transactions cannot claim
BEGIN READ ONLY;
SELECT dedup_claim('consumer', 'evt-ro');
\echo :SQLSTATE
ROLLBACK;
SET default_transaction_read_only = on;
SELECT dedup_claim('consumer', 'evt-ro');
\echo :SQLSTATE
RESET default_transaction_read_only;

-- a caller that branches on the result never sees NULL
DO $$
BEGIN
	IF dedup_claim('consumer', NULL) IS NULL THEN
		RAISE NOTICE 'NULL claim: this message would have been dropped';
	END IF;
END
$$;
\echo :SQLSTATE

-- nothing above was written
SELECT count(*) FROM processed_messages;
DROP EXTENSION dedup;
