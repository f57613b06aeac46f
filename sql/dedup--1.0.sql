/* sql/dedup--1.0.sql: objects of dedup 1.0 */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION dedup" to load this file. \quit

/*
 * Security notes for this script (PostgreSQL docs, "Security Considerations
 * for Extension Scripts"): every object is created schema-qualified, without
 * IF NOT EXISTS or OR REPLACE, so a pre-existing object with a clashing name
 * makes CREATE EXTENSION fail instead of being adopted; every function and
 * operator used is qualified with pg_catalog; @extschema@ never appears inside
 * a string literal.
 */

/*
 * One row per message a consumer has processed.  The primary key is the
 * deduplication decision; the (consumer_name, processed_at) index serves the
 * retention sweep, which deletes a consumer's oldest rows first.
 */
CREATE TABLE @extschema@.processed_messages (
	consumer_name text NOT NULL,
	message_id text NOT NULL,
	processed_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	CONSTRAINT processed_messages_pkey PRIMARY KEY (consumer_name, message_id)
);
CREATE INDEX processed_messages_consumer_time_idx
	ON @extschema@.processed_messages (consumer_name, processed_at);

COMMENT ON TABLE @extschema@.processed_messages IS
	'dedup: messages each consumer has claimed (written by dedup_claim)';

/*
 * The records are user data: pg_dump must keep them so that a restored
 * database still rejects redeliveries.
 */
SELECT pg_catalog.pg_extension_config_dump(c.oid::pg_catalog.regclass, '')
  FROM pg_catalog.pg_class c
 WHERE c.relnamespace OPERATOR(pg_catalog.=)
	   (SELECT e.extnamespace FROM pg_catalog.pg_extension e
		 WHERE e.extname OPERATOR(pg_catalog.=) 'dedup')
   AND c.relname OPERATOR(pg_catalog.=) 'processed_messages';

/*
 * dedup_claim(consumer, message_id): true when this transaction has just
 * recorded the claim (do the work), false when the message was already
 * processed (skip).  Never NULL: bad input raises an error.
 *
 * SECURITY DEFINER so that callers need only EXECUTE, never INSERT, UPDATE or
 * DELETE on processed_messages.  It runs no search_path-dependent code: the C
 * function reaches its table through the schema of its own pg_proc entry with
 * a fully qualified statement that calls no function or operator.
 */
CREATE FUNCTION @extschema@.dedup_claim(consumer text, message_id text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'dedup_claim'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER;

COMMENT ON FUNCTION @extschema@.dedup_claim(text, text) IS
	'dedup: record a message as processed in this transaction; true = first time, false = duplicate';

/* Least privilege: nothing for PUBLIC; a DBA grants EXECUTE on dedup_claim. */
REVOKE ALL ON TABLE @extschema@.processed_messages FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dedup_claim(text, text) FROM PUBLIC;
