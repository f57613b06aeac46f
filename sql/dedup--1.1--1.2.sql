/* sql/dedup--1.1--1.2.sql: from dedup 1.1 to 1.2 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION dedup UPDATE TO '1.2'" to load this file. \quit

/*
 * The same rules as the earlier scripts, and one more: every literal in a
 * function body or view is cast to its type with a schema-qualified cast,
 * so that overload resolution can never prefer a look-alike planted in the
 * extension's schema before CREATE EXTENSION or ALTER EXTENSION UPDATE.
 */

/*
 * dedup_retire_consumer: 1.1 called dedup_forget_since(consumer,
 * '-infinity') with an untyped literal, which a dedup_forget_since(text,
 * text) planted beside the real one would have won.  Bound again here.
 */
CREATE OR REPLACE FUNCTION @extschema@.dedup_retire_consumer(consumer text)
RETURNS bigint
LANGUAGE sql VOLATILE SECURITY DEFINER
BEGIN ATOMIC
	SELECT @extschema@.dedup_valid_consumer(consumer, 'dedup_retire_consumer'::pg_catalog.text);
	DELETE FROM @extschema@.dedup_retention r
	 WHERE r.consumer_name OPERATOR(pg_catalog.=) consumer;
	DELETE FROM @extschema@.dedup_consumer_roles r
	 WHERE r.consumer_name OPERATOR(pg_catalog.=) consumer;
	SELECT @extschema@.dedup_forget_since(consumer, '-infinity'::pg_catalog.timestamptz);
END;
